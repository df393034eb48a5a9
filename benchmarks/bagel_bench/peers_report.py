"""`bench peers`' summary of its rounds: medians and ranges, ratios paired within a round, and
the markdown table it prints (docs/performance.md shows it)."""

from __future__ import annotations

import statistics

LOADERS = ("ours_tars", "ours_parquet", "energon_tars", "streaming_mds")


def summarize(rounds: list[dict], loaders, workers_list, delays) -> dict:
    """Medians (and ranges) over rounds: samples/s, each to its own local rate, ours to the peers."""
    summary: dict = {}

    def rate(found: dict, key: str) -> float | None:
        return found.get(key, {}).get("samples_per_second")

    for workers in workers_list:
        for delay in ["local", *delays]:
            where = "local" if delay == "local" else f"+{delay}ms"
            for loader in loaders:
                key = f"{loader} w{workers} {where}"
                values = [rate(found, key) for found in rounds]
                local = [rate(found, f"{loader} w{workers} local") for found in rounds]
                row: dict = _spread(values)
                cpu = [found.get(key, {}).get("main_cpu_seconds_per_sample") for found in rounds]
                row["main_cpu_ms_per_sample"] = _spread([1000 * value if value else None for value in cpu])
                row["vs_own_local"] = _spread([v / lo if v and lo else None for v, lo in zip(values, local)])
                if loader.startswith("ours"):
                    for other in loaders:
                        if not other.startswith("ours"):
                            theirs = [rate(found, f"{other} w{workers} {where}") for found in rounds]
                            row[f"vs_{other}"] = _spread([v / t if v and t else None for v, t in zip(values, theirs)])
                summary[key] = row
    return summary


def table(summary: dict) -> list[str]:
    """The summary as a markdown table: a row per loader and worker count, a column per storage."""
    wheres = sorted({key.rsplit(" ", 1)[1] for key in summary}, key=lambda where: (where != "local", len(where), where))
    rows = sorted(
        {key.rsplit(" ", 1)[0] for key in summary}, key=lambda row: (row.split()[1], LOADERS.index(row.split()[0]))
    )
    lines = ["| loader | " + " | ".join(wheres) + " |", "| --- |" + " --- |" * len(wheres)]
    for row in rows:
        cells = []
        for where in wheres:
            found = summary.get(f"{row} {where}", {})
            if found.get("median") is None:
                cells.append("")
                continue
            text = f"{found['median']:.1f} ({found['min']:.1f}-{found['max']:.1f})"
            ratios = [f"{found['vs_own_local']['median']:.2f}x local"] if where != "local" else []
            ratios += [f"{found[key]['median']:.2f}x {key[3:].split('_')[0]}" for key in found
                       if key.startswith("vs_") and key != "vs_own_local" and found[key]["median"]]  # fmt: skip
            if where == "local" and found["main_cpu_ms_per_sample"]["median"]:
                ratios.append(f"{found['main_cpu_ms_per_sample']['median']:.1f} CPU ms")
            cells.append(text + (f"; {', '.join(ratios)}" if ratios else ""))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def _spread(values: list) -> dict:
    found = [value for value in values if value]
    if not found:
        return {"median": None}
    return {"median": round(statistics.median(found), 3), "min": round(min(found), 3), "max": round(max(found), 3)}
