"""The benchmark's headline numbers as a rich table (`print_report`)."""

from __future__ import annotations


def print_report(res: dict) -> None:
    """The headline numbers as a rich table."""
    from rich.console import Console
    from rich.table import Table

    pipe, flo, nest, jl, fd = res["pipeline"], res["floor"], res["nested_mask"], res["jsonl_index"], res["fast_decode"]
    sj = fd["simplejpeg"]
    warm = res["config"]["warm_memory"]
    rows = [
        ("memory warmed first", f"{warm['megabytes']} MiB in {warm['seconds']:.2f} s ({warm['mb_per_second']:,.0f} MiB/s)"),
        ("pipeline, 1 process", (f"{pipe['tokens_per_second']:,.0f} tok/s, {pipe['samples_per_second']:.1f} samples/s, "
                                 f"first batch {pipe['first_batch_seconds']:.2f} s "
                                 f"(cold {pipe['cold_first_batch_seconds']:.2f} s)")),
        ("floor: Pillow decode + resize", f"{flo['seconds']:.2f} s for {flo['images']} images vs pipeline {pipe['seconds']:.2f} s"),
        ("pipeline / floor", (f"{flo['pipeline_over_floor']:.3f} (previous path {flo['previous_path_over_floor']:.3f}, "
                              f"x{flo['speedup_over_previous_path']:.2f} faster now)")),
        ("writing the floats once", (f"{flo['float32_bytes'] / 2**20:,.0f} MiB at "
                                     f"{flo['write_bandwidth']['bytes_per_second'] / 2**30:.1f} GiB/s = "
                                     f"{flo['float32_write_seconds']:.3f} s; pipeline / (floor + that) "
                                     f"{flo['pipeline_over_floor_plus_write']:.3f}")),
    ]  # fmt: skip
    for mode, t in res["transfer"].items():
        rows.append((f"to shared memory, {mode}", f"build {t['build_seconds']:.2f} s + move {t['share_seconds']:.3f} s "
                                                  f"({t['bytes'] / 2**20:,.0f} MiB)"))  # fmt: skip
    rows += [
        (f"  stage {k}", f"{v['seconds']:.2f} s ({v['share']:.0%}), {v['calls']} calls")
        for k, v in res["stages"].items()
    ]
    for run in (v for v in res["loader"].values() if isinstance(v, dict)):
        workers = [w.get("VmHWM_mb", 0) for w in run["peak_rss"]["workers"]]
        main = run["peak_rss"]["main"].get("VmHWM_mb", 0)
        rows.append(
            (
                f"DataLoader, {run['workers']} worker(s)",
                (
                    f"{run['steady_tokens_per_second']:,.0f} tok/s after the first batch"
                    + (f" (scaling {run['scaling']:.2f} of {run['workers']} x 0 workers), " if run["workers"] else ", ")
                    + f"first batch {run['first_batch_seconds']:.2f} s, peak RSS main {main:.0f} MB, workers {workers} MB"
                ),
            )
        )
    for label, n in (("", nest),):
        m = n["by_group"]["all"]
        rows.append(
            (
                f"nested masks{label}",
                (
                    f"{n['tokens_per_second']:,.0f} tok/s; mask < image work in "
                    f"{m['mask_cheaper_than_images']}/{m['samples']} samples, "
                    f"max ratio {m['max_mask_to_image_ratio']:.2f}"
                ),
            )
        )
    m = nest["warm_rebuild"]["by_group"]["all"]
    rows.append(
        (
            "nested masks rebuilt in warm memory",
            (
                f"mask < image work in {m['mask_cheaper_than_images']}/"
                f"{m['samples']} samples, max ratio {m['max_mask_to_image_ratio']:.2f}"
            ),
        )
    )
    rows.append(("checkpoint", f"{res['checkpoint']['bytes']:,} bytes"))
    rows.append(
        (
            "JSONL index",
            (
                f"{jl['bytes_per_line']:.1f} B/line held ({jl['lines']:,} lines), "
                f"peak RSS +{jl['peak_rss_delta_mb']:.0f} MB while building"
            ),
        )
    )
    fp = fd["pipeline"]
    rows.append(
        (
            "pipeline with fast_decode: true",
            (
                f"{fp['tokens_per_second']:,.0f} tok/s "
                f"(x{fp['relative_to_exact']:.2f} of exact), same packs {fp['same_packs']}"
            ),
        )
    )
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
    if sj["available"]:
        modes = {
            m: (e["identical_full_scale"], e["identical_half_scale"], e["images"]) for m, e in sj["by_mode"].items()
        }
        rows.append(
            (
                "simplejpeg",
                f"identical to Pillow (full, half scale, of) by mode {modes}, decode x{sj['decode_speedup']:.2f}",
            )
        )
    else:
        rows.append(("simplejpeg", "not installed"))
    table = Table(title=f"bagel-data benchmark ({res['config']['batches']} packs)", show_header=False)
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
