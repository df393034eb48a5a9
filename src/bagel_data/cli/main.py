"""The `bagel-data` command line: demo, run (and the tools built on them)."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..tools.drops import DEFAULT_MAX_DROP_FRACTION
from . import options
from .errors import ClearingProgress, guarded, print_whole, set_debug
from .options import (
    DEFAULT_NUM_WORKERS,
    AllowDropsOption,
    ConfigArgument,
    DatasetInfoOption,
    MaxDropFractionOption,
    NumWorkersOption,
    RankOption,
    TokenizerOption,
    WorkersAlias,
    WorldSizeOption,
    fail_on_losses,
)
from .tools import inspect_command, prepare_app

if TYPE_CHECKING:
    from ..tools.run import RunConfig, RunSummary

# Heavy modules (torch, pyarrow, PIL, via ..tools.run) are imported inside the commands, so
# that `bagel-data --help` answers at once.

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Read, pack and check BAGEL training data.")
app.add_typer(prepare_app, name="prepare", help="Turn your own data into the BAGEL formats.")
app.command("inspect", help="Draw packed batches to PNG and print a text rendering.")(guarded(inspect_command))
console = Console()

DEMO_PACKING = {
    "expected_num_tokens": 7680,
    "max_num_tokens": 8192,
    "max_num_tokens_per_sample": 4096,
    "prefer_buffer_before": 4096,
    "max_buffer_size": 50,
    "use_flex": True,
}


def _run_with_progress(config: RunConfig, batches: int, **kwargs) -> RunSummary:
    from ..tools.run import run_pipeline

    columns = [TextColumn("packing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with ClearingProgress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("packs", total=batches)
        return run_pipeline(config, num_batches=batches, on_batch=lambda i, b: progress.advance(task), **kwargs)


def _print_summary(summary: RunSummary) -> None:
    table = Table(title="bagel-data run summary", show_header=False)
    table.add_row("batches", str(summary.batches))
    table.add_row("tokens", f"{summary.tokens:,}")
    table.add_row("fill ratio (tokens / max_num_tokens)", f"{summary.fill_ratio:.3f}")
    table.add_row("packed tokens / s", f"{summary.tokens / max(summary.seconds, 1e-9):,.0f}")
    table.add_row("time to first batch", f"{summary.first_batch_seconds:.2f} s")
    table.add_row("checkpoint size per worker", f"{summary.state_bytes:,} bytes")
    for group, count in sorted(summary.samples.items()):
        table.add_row(f"samples: {group}", str(count))
    if not summary.skips:
        table.add_row("skipped", "none")
    for group, counts in sorted(summary.skips.items()):
        for reason, count in sorted(counts.items()):
            table.add_row(f"skipped: {group} / {reason}", str(count))
    if summary.skips:
        table.add_row("note", "skips count each read of a row (once per pass); `validate` counts a row once")
        table.add_row("where", "--verbose logs each skipped row with its file and row; `validate` names them too")
    print_whole(console, table)
    _print_metrics(summary.metrics)


def _print_metrics(metrics: dict) -> None:
    """The figures `bagel_data.metrics.DataMetrics` gives a training loop, over this run."""
    if not metrics:
        return
    table = Table(title="data metrics (DataMetrics.as_dict(), as a training loop logs them)", show_header=False)
    for key, value in metrics.items():
        if "/since_start" in key and key.replace("/since_start", "") in metrics and "wait" not in key:
            continue  # one window covering the whole run: the same figure twice
        table.add_row(key, f"{value:,.0f}" if key.endswith(("steps", "total")) or "/skips/" in key else f"{value:.4f}")
    print_whole(console, table)


@app.callback()
def main_options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every skipped row."),
    debug: bool = typer.Option(False, "--debug", help="On an error, also print the full traceback."),
) -> None:
    set_debug(debug)
    logging.basicConfig(level=logging.WARNING if verbose else logging.ERROR, format="%(levelname)s %(message)s")

    def show(message, category, filename, lineno, file=None, line=None):
        console.print(f"[yellow]{category.__name__}:[/yellow] {message}")

    warnings.showwarning = show  # this process is the CLI: its warnings are for the user


@app.command()
@guarded
def demo(
    root: Path = typer.Option(Path("demo_data"), help="Folder for the generated demo dataset."),
    batches: int = typer.Option(20, min=1, help="Packed batches to draw."),
    num_workers: NumWorkersOption = DEFAULT_NUM_WORKERS,
    workers: WorkersAlias = None,
    seed: int = typer.Option(0, help="Seed of the generated dataset."),
) -> None:
    """Generate a small dataset of all three families and run the packed pipeline on it."""
    from ..synthetic.dataset import write_demo_dataset
    from ..tools.run import load_run_config

    with console.status("writing the demo dataset"):
        paths = write_demo_dataset(root, seed=seed)
    run_config_path = paths.root / "run.yaml"
    run_config_path.write_text(
        yaml.safe_dump(
            {"grouped_datasets": "grouped_datasets.yaml", "dataset_info": "dataset_info.yaml", "packing": DEMO_PACKING}
        )
    )
    # Whole lines, never wrapped at the terminal's width (a path with a space would be cut there).
    console.print(f"demo dataset in {paths.root}", soft_wrap=True, highlight=False, markup=False)
    console.print(f"run config {run_config_path}", soft_wrap=True, highlight=False, markup=False)
    config = load_run_config(str(run_config_path))
    summary = _run_with_progress(config, batches, num_workers=options.workers(num_workers, workers))
    _print_summary(summary)


@app.command()
@guarded
def run(
    config: ConfigArgument,
    dataset_info: DatasetInfoOption = None,
    batches: int = typer.Option(20, min=1, help="Packed batches to draw."),
    num_workers: NumWorkersOption = DEFAULT_NUM_WORKERS,
    workers: WorkersAlias = None,
    rank: RankOption = 0,
    world_size: WorldSizeOption = 1,
    tokenizer: TokenizerOption = None,
    strict: bool = typer.Option(False, help="Stop at the first bad row, naming where it is."),
    max_consecutive_failures: int = typer.Option(100, min=0, help="Bad rows in a row before the run stops."),
    max_drop_fraction: MaxDropFractionOption = DEFAULT_MAX_DROP_FRACTION,
    allow_drops: AllowDropsOption = False,
) -> None:
    """Run the packed pipeline on your config and print what it produced and skipped.

    Exits 1 when a group lost more than --max-drop-fraction of its rows (skipped rows against
    skipped plus packed ones), unless --allow-drops is given.
    """
    from ..tools.drops import group_losses
    from ..tools.run import load_run_config

    options.check_rank(rank, world_size)
    run_config = load_run_config(str(config), os.fspath(dataset_info) if dataset_info else None)
    run_config.packing.update(strict=strict, max_consecutive_failures=max_consecutive_failures)
    summary = _run_with_progress(
        run_config, batches, num_workers=options.workers(num_workers, workers), rank=rank,
        world_size=world_size, tokenizer=tokenizer,
    )  # fmt: skip
    _print_summary(summary)
    losses = group_losses(summary.samples, summary.skips, summary.unit_rows)
    fail_on_losses(losses, max_drop_fraction, allow_drops, console,
                   "fix the data or the config (`bagel-data validate` names every row), or pass --allow-drops")  # fmt: skip


@app.command()
@guarded
def validate(
    config: ConfigArgument,
    dataset_info: DatasetInfoOption = None,
    num_workers: NumWorkersOption = DEFAULT_NUM_WORKERS,
    world_size: WorldSizeOption = 1,
    sample: int | None = typer.Option(None, min=1, help="Check only the first N rows of each group."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    tokenizer: TokenizerOption = None,
) -> None:
    """Preflight a config for every rank: schemas, decodes, placeholders, worst-case lengths vs budgets, shard split."""
    import json

    from ..tools.run import load_run_config
    from ..tools.validate import validate_config

    run_config = load_run_config(str(config), os.fspath(dataset_info) if dataset_info else None)
    with console.status("checking every row" if sample is None else f"checking {sample} rows per group"):
        report = validate_config(
            run_config, world_size=world_size, num_workers=num_workers, sample=sample, tokenizer=tokenizer
        )
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_validation(report)
    raise typer.Exit(0 if report.ok else 1)


def _print_validation(report) -> None:
    if report.groups:  # a configuration error leaves no group to show
        _print_group_table(report)
    if len(report.phases) > 1:
        _print_phases(report.phases)
    for lag in report.lags:
        console.print(f"[cyan]change point:[/cyan] {lag['note']}")
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for error in report.errors:
        console.print(f"[red]problem:[/red] {error}")
    console.print("[green]OK: the run would neither fail nor drop data[/green]" if report.ok else "[red]NOT OK[/red]")


def _print_phases(phases: list[dict]) -> None:
    """The mixture schedule: each phase's first step (the pack index on a rank) and weights."""
    table = Table(title="mixture schedule (weights from each step on; a step is a pack on a rank)")
    groups = list(phases[0]["weights"])
    for column in ("from step", *groups):
        table.add_column(column)
    for phase in phases:
        table.add_row(f"{phase['from_step']:,}", *(f"{phase['weights'][g]:g}" for g in groups))
    console.print(table)


def _print_group_table(report) -> None:
    table = Table(title="bagel-data validate")
    for column in ("group", "units", "rows checked", "samples", "skipped", "length min/median/max", "units per worker"):
        table.add_column(column)
    for group in report.groups.values():
        lengths = "/".join(str(group.lengths.get(k, "-")) for k in ("min", "median", "max"))
        workers = "; ".join(",".join(map(str, per_rank)) for per_rank in group.units_per_worker)
        table.add_row(
            group.name, str(group.units), str(group.rows_checked), str(group.samples),
            str(sum(group.skips.values())), lengths, workers,
        )  # fmt: skip
    print_whole(console, table)


# The benchmark is a package of its own (benchmarks/, not in this wheel): mounted here as
# `bagel-data bench` where it is installed, otherwise a command that says how to install it.
BENCH_INSTALL = "pip install -e ./benchmarks (from a checkout of bagel-data; `make bench` does it)"


def bench_missing(ctx: typer.Context) -> None:
    """Measure the pipeline: needs the benchmark package, not installed here."""
    typer.echo(f"bagel-data bench: the benchmark package (bagel_bench) is not installed: {BENCH_INSTALL}", err=True)
    raise typer.Exit(2)


def mount_bench(cli: typer.Typer) -> None:
    """`bench` on `cli`: the benchmark's app, or `bench_missing` where it is not installed."""
    try:
        from bagel_bench.cli import mount
    except ModuleNotFoundError as error:
        if error.name not in ("bagel_bench", "bagel_bench.cli"):  # installed, but broken: let that show
            raise
        settings = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
        cli.command("bench", context_settings=settings, add_help_option=False)(bench_missing)
    else:
        cli.add_typer(mount(guarded), name="bench")


mount_bench(app)


def main() -> None:
    app()
