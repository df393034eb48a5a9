"""`bagel-data bench --config RUN.yaml`: the stage shares, float32 against uint8 pixels and
the float write's cost, measured on a user's own run config (formats.py) in one process with
one intra-op thread, as a DataLoader worker runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from bagel_data.tools.run import build_from_run_config, load_run_config

from .approximate import approximate_grouped
from .formats import FORMATS, measure_formats
from .in_process import _run_packs
from .runs import load_tokenizer_once


def measure_run_config(
    path: str, *, batches: int, repeats: int = 2, warmup: int = 2, dataset_info: str | None = None
) -> dict:
    run = load_run_config(path, dataset_info)
    tok, _ = load_tokenizer_once()

    def build(grouped: dict | None = None, **override):
        config = dataclasses.replace(
            run, packing={**run.packing, **override}, grouped_datasets=grouped or run.grouped_datasets
        )
        return build_from_run_config(config, rank=0, world_size=1, num_workers=1, tokenizer=tok).dataset

    def build_approximate(**override):
        return build(approximate_grouped(run.grouped_datasets), **override)

    vit_patch = build().config.vit_patch_size
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = measure_formats(
            build, tok, batches, warmup, repeats, vit_patch, run_packs=_run_packs, build_approximate=build_approximate
        )
    finally:
        torch.set_num_threads(threads)
    res["config"] = {"run_config": str(path), "batches": batches, "warmup_packs": warmup, "repeats": repeats,
                     "packing": run.packing}  # fmt: skip
    return res


def format_rows(res: dict) -> list[tuple[str, str]]:
    """The headline rows of a `measure_formats` result."""
    formats, write, rows = res["formats"], res["write"], []
    for fmt in FORMATS:
        f = formats[fmt]
        pixels = res["pixel_bytes"][fmt]["pixel_bytes_per_pack"] / 2**20
        rows.append((f"pixel_format {fmt}", (
            f"{f['tokens_per_second']:,.0f} tok/s, {f['tokens_per_cpu_second']:,.0f} tok per CPU s, "
            f"pipeline / (decode + resize) {f['pipeline_over_floor']:.2f} (in the profiled run "
            f"{f['profiled_pipeline_over_decode_resize']:.2f}), {pixels:,.1f} MiB of pixels a pack")))  # fmt: skip
    ratio = formats["uint8_over_float32"]
    rows.append(
        ("uint8 / float32", f"{ratio['tokens_per_second']:.2f}x tok/s, {ratio['tokens_per_cpu_second']:.2f}x per CPU s")
    )
    rows.append(("float32 write, as the pipeline does it", (
        f"cast copy {write['cast_write_seconds']:.2f} s for {write['float32_bytes'] / 2**20:,.0f} MiB "
        f"({write['cast_write_bytes_per_second'] / 2**30:.2f} GiB/s); conversion {write['conversion_seconds']:.2f} s "
        f"({write['conversion_over_cast_write']:.2f}x the cast copy); uint8 bytes {write['uint8_seconds']:.2f} s")))  # fmt: skip
    rows.append(("float32 pipeline / (decode + resize + cast write)",
                 f"{formats['float32']['pipeline_over_floor_plus_cast_write']:.2f}"))  # fmt: skip
    if "approximate" in res:
        approx = res["approximate"]
        psnr = ", ".join(
            f"{name} {e['psnr_db']:.1f} dB (worst image {e['worst_image_psnr_db']:.1f})"
            for name, e in approx["pixel_error"].items()
        )
        rows.append(("faster floor: bilinear + fast_decode (opt-in)", (
            f"decode + resize x{approx['floor']['speedup']:.2f}; uint8 pipeline "
            f"{approx['uint8_tokens_per_cpu_second']:,.0f} tok per CPU s (x{approx['over_exact_uint8_per_cpu_second']:.2f} "
            f"the exact uint8); PSNR {psnr}")))  # fmt: skip
    for fmt in FORMATS:
        stages = res["stages"][fmt]
        shares = sorted(((s, v["share"]) for s, v in stages.items() if v["share"] >= 0.01), key=lambda x: -x[1])
        rows.append((f"stage shares ({fmt})", ", ".join(f"{s} {share:.0%}" for s, share in shares)))
    return rows


def print_run_config_report(res: dict, out_json: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"bagel-data bench --config {res['config']['run_config']} ({res['config']['batches']} packs, {res['images']} images)"
    table = Table(title=title, show_header=False)
    for name, value in format_rows(res):
        table.add_row(name, value)
    Console().print(table)
    if out_json is not None:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(res, indent=2, default=float))
