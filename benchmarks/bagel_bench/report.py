"""The benchmark's headline numbers as a rich table (`print_report`), one group of rows per
section of the results."""

from __future__ import annotations

Rows = list[tuple[str, str]]  # (what was measured, the figures)


def print_report(res: dict) -> None:
    """The headline numbers as a rich table."""
    from rich.console import Console
    from rich.table import Table

    rows = [
        *_pipeline_rows(res),
        *_loader_rows(res["loader"]),
        *_mask_rows(res["nested_mask"]),
        ("checkpoint", f"{res['checkpoint']['bytes']:,} bytes"),
        _jsonl_row(res["jsonl_index"]),
        *_fast_decode_rows(res["fast_decode"]),
    ]
    table = Table(title=f"bagel-data benchmark ({res['config']['batches']} packs)", show_header=False)
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _pipeline_rows(res: dict) -> Rows:
    """Warm-up, the pipeline in one process against the floor, the move to shared memory,
    and the time per stage."""
    pipe, flo = res["pipeline"], res["floor"]
    fresh = flo["fresh_start"]
    warm = res["config"]["warm_memory"]
    rows = [
        ("memory warmed first", f"{warm['megabytes']} MiB in {warm['seconds']:.2f} s ({warm['mb_per_second']:,.0f} MiB/s)"),
        ("pipeline, 1 process", (f"{pipe['tokens_per_second']:,.0f} tok/s, {pipe['samples_per_second']:.1f} samples/s, "
                                 f"first batch {pipe['first_batch_seconds']:.2f} s "
                                 f"(cold {pipe['cold_first_batch_seconds']:.2f} s)")),
        ("floor: Pillow decode + resize", (f"{flo['seconds']:.2f} s for {flo['images']} images vs pipeline "
                                           f"{pipe['seconds']:.2f} s (packs {pipe['warmup_packs'] + 1}-"
                                           f"{pipe['warmup_packs'] + len(pipe['pack_seconds'])} of an iterator)")),
        ("pipeline / floor", (f"{flo['pipeline_over_floor']:.3f} (previous path {flo['previous_path_over_floor']:.3f}, "
                              f"x{flo['speedup_over_previous_path']:.2f} faster now)")),
        ("  from a new iterator", (f"{fresh['pipeline_over_floor']:.3f}: first {len(pipe['pack_seconds'])} packs "
                                   f"{fresh['pipeline_seconds']:.2f} s, their floor {fresh['floor_seconds']:.2f} s")),
        ("  page faults in the timed packs", f"{pipe['page_faults']:,} ({pipe['system_seconds']:.2f} s system time)"),
    ]  # fmt: skip
    if "pixel_format" in res:  # formats.py: uint8 beside float32, and the float write as the pipeline does it
        rows += _format_rows(res)
    for mode, t in res["transfer"].items():
        rows.append((f"to shared memory, {mode}", f"build {t['build_seconds']:.2f} s + move {t['share_seconds']:.3f} s "
                                                  f"({t['bytes'] / 2**20:,.0f} MiB)"))  # fmt: skip
    rows += [
        (f"  stage {k}", f"{v['seconds']:.2f} s ({v['share']:.0%}), {v['calls']} calls")
        for k, v in res["stages"].items()
    ]
    return rows


def _loader_rows(loader: dict) -> Rows:
    """Each DataLoader run: steady throughput, scaling, first batch and peak memory."""
    rows = []
    for run in (v for k, v in loader.items() if k.startswith("workers_")):
        workers = [w.get("VmHWM_mb", 0) for w in run["peak_rss"]["workers"]]
        main = run["peak_rss"]["main"].get("VmHWM_mb", 0)
        rows.append(
            (
                f"DataLoader, {run['workers']} worker(s)",
                (
                    f"{run['steady_tokens_per_second']:,.0f} tok/s after {run['warmup_batches']} warm-up batches"
                    + (
                        f" (scaling {run['scaling']:.2f} of {run['workers']} x 0 workers;"
                        f" machine ceiling {run['machine_ceiling']:.2f}; main process busy"
                        f" {run['main_process_cpu_share']:.0%} receiving), "
                        if run["workers"]
                        else ", "
                    )
                    + f"first batch {run['first_batch_seconds']:.2f} s, peak RSS main {main:.0f} MB, workers {workers} MB"
                ),
            )
        )
    return rows


def _mask_rows(nest: dict) -> Rows:
    """The nested-mask mode, and its masks rebuilt in warm memory, against the image work."""
    every, warm = nest["by_group"]["all"], nest["warm_rebuild"]["by_group"]["all"]
    return [
        (
            "nested masks",
            (
                f"{nest['tokens_per_second']:,.0f} tok/s; mask < image work in "
                f"{every['mask_cheaper_than_images']}/{every['samples']} samples, "
                f"max ratio {every['max_mask_to_image_ratio']:.2f}"
            ),
        ),
        (
            "nested masks rebuilt in warm memory",
            (
                f"mask < image work in {warm['mask_cheaper_than_images']}/"
                f"{warm['samples']} samples, max ratio {warm['max_mask_to_image_ratio']:.2f}"
            ),
        ),
    ]


def _jsonl_row(jl: dict) -> tuple[str, str]:
    return (
        "JSONL index",
        (
            f"{jl['bytes_per_line']:.1f} B/line held ({jl['lines']:,} lines), "
            f"peak RSS +{jl['peak_rss_delta_mb']:.0f} MB while building"
        ),
    )


def _fast_decode_rows(fd: dict) -> Rows:
    """`fast_decode: true` in the pipeline, on each image set, and simplejpeg's exactness."""
    fp, sj = fd["pipeline"], fd["simplejpeg"]
    rows = [
        (
            "pipeline with fast_decode: true",
            (
                f"{fp['tokens_per_second']:,.0f} tok/s "
                f"(x{fp['relative_to_exact']:.2f} of exact), same packs {fp['same_packs']}"
            ),
        )
    ]
    for name, v in fd.items():
        if name not in ("simplejpeg", "pipeline"):
            psnr = "identical" if v["psnr_db"] is None else f"PSNR {v['psnr_db']:.1f} dB"
            rows.append(
                (
                    f"fast_decode, {name}",
                    (
                        f"x{v['speedup']:.2f}, {v['drafted']}/{v['images']} drafted, "
                        f"mean |diff| {v['mean_abs_diff']:.4f}, max {v['max_abs_diff']:.3f}, {psnr}"
                    ),
                )
            )
    if not sj["available"]:
        return rows + [("simplejpeg (not used)", "not installed")]
    modes = {m: (e["identical_full_scale"], e["identical_half_scale"], e["images"]) for m, e in sj["by_mode"].items()}
    return rows + [
        (
            "simplejpeg (not used)",
            (
                f"identical to Pillow (full, half scale, of) by mode {modes}; against Pillow's decode: "
                f"x{sj['decode_speedup']:.2f} alone, x{sj['into_pillow_speedup']:.2f} into a Pillow image"
            ),
        )
    ]


def _format_rows(res: dict) -> Rows:
    formats, write = res["pixel_format"], res["float32_write"]
    rows = [
        (f"pixel_format {fmt}", (f"{formats[fmt]['tokens_per_second']:,.0f} tok/s, "
                                 f"{formats[fmt]['tokens_per_cpu_second']:,.0f} tok per CPU s, "
                                 f"pipeline / floor {formats[fmt]['pipeline_over_floor']:.3f}"))
        for fmt in ("float32", "uint8")
    ]  # fmt: skip
    ratio = formats["uint8_over_float32"]
    rows.append(
        (
            "  uint8 / float32",
            f"x{ratio['tokens_per_second']:.2f} tok/s, x{ratio['tokens_per_cpu_second']:.2f} per CPU s",
        )
    )
    rows.append(("float32 write as the pipeline does it", (
        f"cast copy {write['cast_write_seconds']:.3f} s ({write['cast_write_bytes_per_second'] / 2**30:.2f} GiB/s), "
        f"conversion {write['conversion_seconds']:.3f} s (x{write['conversion_over_cast_write']:.2f}); "
        f"pipeline / (floor + cast copy) {formats['float32']['pipeline_over_floor_plus_cast_write']:.3f}")))  # fmt: skip
    return rows
