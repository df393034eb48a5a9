"""Command-line faces of the tools: `bagel-data prepare t2i|edit|vlm` and `bagel-data inspect`.

`cli/main.py` registers them with `app.add_typer(prepare_app, name="prepare")` and
`app.command("inspect")(inspect_command)`; `prepare_run.py` runs a prepare and prints its
summary. Parameters use `Annotated`, so the functions can
also be called from Python with plain defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from ..tools.drops import DEFAULT_MAX_DROP_FRACTION
from .errors import guarded
from .options import (
    DEFAULT_NUM_WORKERS,
    AllowDropsOption,
    DatasetInfoOption,
    MaxDropFractionOption,
    NumWorkersOption,
    RankOption,
    TokenizerOption,
    WorldSizeOption,
    check_rank,
)
from .prepare_run import console, run_prepare

prepare_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Write raw data in the BAGEL formats (T2I, edit, VLM SFT)."
)

ReportOption = Annotated[Path | None, typer.Option(help="Also write the full report (every dropped row) as JSON.")]
OverwriteOption = Annotated[bool, typer.Option(help="Replace parquet files already in OUT_DIR.")]
EngineOption = Annotated[
    str,
    typer.Option(help=r"local (this process) or ray (Ray Data; the extra: pip install 'bagel-data\[ray]')."),
]
AddressOption = Annotated[str | None, typer.Option(help="With --engine ray: a running cluster (default: start one).")]
ResumeOption = Annotated[bool, typer.Option(help="Finish an interrupted run into OUT: skip the shards it wrote.")]
NumCpusOption = Annotated[int | None, typer.Option(help="With --engine ray: CPUs of the local cluster (default: all).")]
SplitOption = Annotated[
    str | None,
    typer.Option(help="Parquet tables in Hub splits ({split}-NNNNN-of-NNNNN.parquet, {split}/): the split to read "
                 "[default: train]."),
]  # fmt: skip
_DROPS = DEFAULT_MAX_DROP_FRACTION


@prepare_app.command("t2i")
@guarded
def t2i_command(
    source: Annotated[
        Path,
        typer.Argument(
            help="Folder of images with .txt/.json captions, a CSV/JSONL manifest, .tar shards, or parquet tables."
        ),
    ],
    out_dir: Annotated[Path, typer.Argument(help="Folder for part-NNNNN.parquet shards.")],
    rows_per_group: Annotated[int, typer.Option(help="Rows per parquet row group.")] = 100,
    rows_per_shard: Annotated[int, typer.Option(help="Rows per parquet file (T2I shards by file).")] = 1000,
    reencode: Annotated[str | None, typer.Option(help="Re-encode every image, e.g. JPEG, PNG, WEBP.")] = None,
    max_side: Annotated[int | None, typer.Option(help="Downscale so the longest side is at most this.")] = None,
    image_root: Annotated[Path | None, typer.Option(help="Base of manifest paths (default: its folder).")] = None,
    image_column: Annotated[
        str | None, typer.Option(help="Parquet input: the image column (default: image, img, jpg, png or webp).")
    ] = None,
    caption_column: Annotated[
        list[str] | None,
        typer.Option(
            help="Table input: the caption column (default: text, caption, captions, ...); repeat it to read "
            "several columns as one sample's caption choices."
        ),
    ] = None,
    class_names: Annotated[
        Path | None,
        typer.Option(help="Tar input labelled by .cls members: a file of class names, one a line, label 0 first."),
    ] = None,
    split: SplitOption = None,
    overwrite: OverwriteOption = False,
    report: ReportOption = None,
    resume: ResumeOption = False,
    engine: EngineOption = "local",
    address: AddressOption = None,
    num_cpus: NumCpusOption = None,
    max_drop_fraction: MaxDropFractionOption = _DROPS,
    allow_drops: AllowDropsOption = False,
) -> None:
    """Text-to-image parquet shards: columns image (bytes) and captions (JSON object).

    SOURCE may also be a WebDataset / img2dataset .tar shard or a folder of them, or parquet
    tables (a Hugging Face datasets export: a .parquet file or a folder of them) whose image
    cells are bytes, {bytes, path} structs or paths and caption cells texts or lists of texts.
    """
    try:
        _prepare_t2i(source, out_dir, report, max_drop_fraction, allow_drops, rows_per_group=rows_per_group,
                     rows_per_shard=rows_per_shard, reencode=reencode, max_side=max_side, image_root=image_root,
                     image_column=image_column, caption_column=caption_column or None, split=split, overwrite=overwrite,
                     resume=resume, engine=engine, address=address, num_cpus=num_cpus,
                     class_names=str(class_names) if class_names else None)  # fmt: skip
    except ConfigError as error:  # said with this command's options, not the config keys
        from ..sources.hub_tables import in_cli_words

        raise in_cli_words(error) from None


def _prepare_t2i(source, out_dir, report, max_drop_fraction, allow_drops, **options) -> None:
    run_prepare("t2i", source, out_dir, report, max_drop_fraction, allow_drops, **options)


@prepare_app.command("edit")
@guarded
def edit_command(
    manifest: Annotated[
        Path,
        typer.Argument(
            help='JSONL chains {"images": [...], "instructions": [[...], ...]}, or (source, instruction, target) '
            "triples as JSONL, CSV or parquet (a file or a folder of them)."
        ),
    ],
    out_dir: Annotated[Path, typer.Argument(help="Folder for the shards and parquet_info.json.")],
    rows_per_group: Annotated[int, typer.Option(help="Rows per row group (the edit family's shard unit).")] = 16,
    rows_per_shard: Annotated[int, typer.Option(help="Rows per parquet file.")] = 1024,
    image_root: Annotated[Path | None, typer.Option(help="Base of image paths (default: manifest folder).")] = None,
    data_dir: Annotated[
        str | None,
        typer.Option(help="The data_dir training will use; parquet_info keys join it (default: OUT_DIR, absolute)."),
    ] = None,
    source_column: Annotated[
        str | None, typer.Option(help="Triples: the source image column (default: source, input_image, ...).")
    ] = None,
    instruction_column: Annotated[
        str | None, typer.Option(help="Triples: the instruction column (default: instruction, edit_prompt, ...).")
    ] = None,
    target_column: Annotated[
        str | None, typer.Option(help="Triples: the target image column (default: target, edited_image, ...).")
    ] = None,
    split: SplitOption = None,
    overwrite: OverwriteOption = False,
    report: ReportOption = None,
    resume: ResumeOption = False,
    engine: EngineOption = "local",
    address: AddressOption = None,
    num_cpus: NumCpusOption = None,
    max_drop_fraction: MaxDropFractionOption = _DROPS,
    allow_drops: AllowDropsOption = False,
) -> None:
    """Image-editing parquet shards (image_list, instruction_list) plus parquet_info.json.

    Image cells of triples are paths under --image-root, or in parquet bytes or datasets.Image structs.
    """
    from ..tools.prepare.edit import TripleColumns

    run_prepare(
        "edit",
        manifest,
        out_dir,
        report,
        max_drop_fraction,
        allow_drops,
        rows_per_group=rows_per_group,
        rows_per_shard=rows_per_shard,
        image_root=image_root,
        overwrite=overwrite,
        data_dir=data_dir,
        columns=TripleColumns(source_column, instruction_column, target_column),
        split=split,
        resume=resume,
        engine=engine,
        address=address,
        num_cpus=num_cpus,
    )


@prepare_app.command("vlm")
@guarded
def vlm_command(
    source: Annotated[Path, typer.Argument(help="LLaVA-style JSON (a list of rows) or JSONL.")],
    out_jsonl: Annotated[Path, typer.Argument(help="The SFT JSONL to write.")],
    image_root: Annotated[Path, typer.Option(help="Folder the image/video paths are relative to.")],
    report: ReportOption = None,
    decode_check: Annotated[
        bool, typer.Option(help="Decode every image and drop those that fail (--no-decode-check: faster).")
    ] = True,
    resume: ResumeOption = False,
    engine: EngineOption = "local",
    address: AddressOption = None,
    num_cpus: NumCpusOption = None,
    max_drop_fraction: MaxDropFractionOption = _DROPS,
    allow_drops: AllowDropsOption = False,
) -> None:
    """Checked VLM SFT JSONL: roles and lone placeholders repaired, unusable rows dropped."""
    run_prepare(
        "vlm",
        source,
        out_jsonl,
        report,
        max_drop_fraction,
        allow_drops,
        image_root=image_root,
        decode_check=decode_check,
        resume=resume,
        engine=engine,
        address=address,
        num_cpus=num_cpus,
    )


@prepare_app.command("interleaved")
@guarded
def interleaved_command(
    docs: Annotated[Path, typer.Argument(help='JSONL documents {"texts": [...], "images": [...]} (OBELICS layout).')],
    out_dir: Annotated[Path, typer.Argument(help="Folder for the shards, parquet_info.json and run.yaml.")],
    image_root: Annotated[Path | None, typer.Option(help="Base of image paths (default: the DOCS folder).")] = None,
    rows_per_group: Annotated[int, typer.Option(help="Documents per row group (the shard unit).")] = 64,
    rows_per_shard: Annotated[int, typer.Option(help="Documents per parquet file.")] = 1024,
    overwrite: OverwriteOption = False,
    report: ReportOption = None,
    resume: ResumeOption = False,
    engine: EngineOption = "local",
    address: AddressOption = None,
    num_cpus: NumCpusOption = None,
    max_drop_fraction: MaxDropFractionOption = _DROPS,
    allow_drops: AllowDropsOption = False,
) -> None:
    """Interleaved parquet shards (one `segments` column) plus parquet_info.json and run.yaml."""
    run_prepare(
        "interleaved",
        docs,
        out_dir,
        report,
        max_drop_fraction,
        allow_drops,
        image_root=image_root,
        rows_per_group=rows_per_group,
        rows_per_shard=rows_per_shard,
        overwrite=overwrite,
        resume=resume,
        engine=engine,
        address=address,
        num_cpus=num_cpus,
    )


@prepare_app.command("tar-counts")
@guarded
def tar_counts_command(
    folder: Annotated[str, typer.Argument(help="Folder (or s3://, gs://, ... URI) of WebDataset .tar shards.")],
) -> None:
    """Count each tar's samples once and write them beside the tars as wids-index.json:
    tars on an object store are then walked by rows (every sample equally often)."""
    from ..tools.prepare.tar_counts import write_counts

    target, counts = write_counts(folder)
    console.print(f"{len(counts)} tars, {sum(counts.values())} samples: wrote {target}")


def inspect_command(
    config: Annotated[Path, typer.Argument(help="Run config YAML, or a grouped-datasets YAML with --dataset-info.")],
    out: Annotated[Path, typer.Option(help="Folder for the PNGs and packs.txt.")] = Path("inspect_out"),
    html: Annotated[
        Path | None,
        typer.Option(help="Also write the packs as one self-contained HTML page (images inline) to this file."),
    ] = None,
    batches: Annotated[int, typer.Option(min=1, help="Packs to draw.")] = 4,
    dataset_info: DatasetInfoOption = None,
    tokenizer: TokenizerOption = None,
    num_workers: NumWorkersOption = DEFAULT_NUM_WORKERS,
    world_size: WorldSizeOption = 1,
    rank: RankOption = 0,
    step: Annotated[
        int, typer.Option(min=0, help="Pack with the group weights of this training step (a staged config's stage).")
    ] = 0,
) -> None:
    """Draw packs: position kinds, attention, sample lengths and fill, and a text rendering.

    The packs are those of worker 0 of rank RANK when the job runs with NUM_WORKERS workers;
    with --step N, under the weights the mixture schedule gives at step N.
    """
    check_rank(rank, world_size)
    from ..tools.inspect.packs import (
        inspect_packs,  # keeps matplotlib off the import path of `prepare`
    )

    try:
        with console.status(f"packing {batches} batch(es)"):
            report = inspect_packs(
                config,
                out,
                num_batches=batches,
                dataset_info=dataset_info,
                tokenizer=tokenizer,
                num_workers=max(num_workers, 1),
                world_size=world_size,
                rank=rank,
                step=step,
                html=html,
            )
    except OSError as error:  # an unwritable --out or --html
        console.print(f"[red]error:[/red] {type(error).__name__}: {error}")
        raise typer.Exit(2) from None
    if report.pack_texts:
        console.print(report.pack_texts[0], markup=False, highlight=False, soft_wrap=True)
    # Plain lines, never wrapped or cut, so the paths can be copied.
    for pack, (strip, attention) in enumerate(zip(report.strip_paths, report.attention_paths)):
        _print_path(f"pack {pack} ({report.fill_ratios[pack]:.1%} full)", strip, attention)
    if report.histogram_path is not None:
        _print_path("sample lengths and pack fill", report.histogram_path)
    _print_path("every pack as text", report.text_path)
    if report.html_path is not None:
        _print_path("the packs as a page (open it in a browser)", report.html_path)
    if report.plots_missing:
        console.print(report.plots_missing, soft_wrap=True, highlight=False, markup=False)


def _print_path(label: str, *paths: Path) -> None:
    console.print(f"{label}: " + "  ".join(map(str, paths)), soft_wrap=True, highlight=False, markup=False)
