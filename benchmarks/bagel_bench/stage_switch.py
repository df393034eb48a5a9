"""Token shares per training step across a mixture schedule's change point.

`measure_switch` gives the run config's groups a Stage 1 -> Stage 2 schedule (Stage 1: the
VLM group alone; from step `switch` on: the `STAGE_2` weights), builds one packed dataset
per rank with `mix_by: tokens`, and takes each rank's packs through a real DataLoader with
`num_workers` worker processes, as a `torchrun` job's ranks would: the step is the index of
the batch on its rank. It reports, per step, each group's share of the tokens packed on all
ranks at that step, and the shares over the window `switch + 5 .. switch + 15`: what the
issue's acceptance measures (each within 3 points of its new target). The images keep
their exact target size but are not resampled (the resize is not what is measured; see
`mixing.py`).

    python -m bagel_bench.stage_switch RUN.yaml [--switch 20] [--out FILE]
    bagel-data bench mixing RUN.yaml --switch 20 --out benchmarks/stage_switch.json
"""

from __future__ import annotations

import argparse
import collections
import copy
import itertools
import json
import sys
from pathlib import Path

from bagel_data.instruments import attached

from .mixing import _blank_resize

STAGE_1 = {"vlm_sft": 1.0, "t2i_pretrain": 0.0, "unified_edit": 0.0}
STAGE_2 = {"vlm_sft": 0.2, "t2i_pretrain": 0.5, "unified_edit": 0.3}
STRATEGIES = ("greedy", "best_fit")
WINDOW = (5, 15)  # steps after the switch the acceptance window covers, inclusive


def staged_groups(grouped_datasets: dict, switch: int, workers: int) -> dict:
    """The run config's groups with the Stage 1 -> Stage 2 schedule, none mandatory (a
    mandatory group would open every Stage 1 pack), each with at least `workers` units
    (ranks x DataLoader workers; files repeat to fill them)."""
    staged = copy.deepcopy(grouped_datasets)
    for name, group in staged.items():
        group["weight"] = [[0, STAGE_1.get(name, 0.0)], [switch, STAGE_2.get(name, 0.0)]]
        group["is_mandatory"] = False
        group["num_used_data"] = [max(int(n), workers) for n in group.get("num_used_data", [])] or None
    return staged


def pack_tokens(batch, use_flex: bool) -> collections.Counter:
    """Tokens per group in one pack (a `SimpleCustomBatch` or a batch dict)."""
    fields = batch if isinstance(batch, dict) else vars(batch)
    lengths = fields["sample_lens"][:-1] if use_flex else fields["sample_lens"]
    tokens: collections.Counter = collections.Counter()
    for where, length in zip(fields["batch_data_indexes"], lengths):
        tokens[where["dataset_name"]] += int(length)
    return tokens


def step_tokens(packs_per_rank: list[list[collections.Counter]]) -> list[collections.Counter]:
    """Tokens per group at each step, summed over the ranks (`pack_tokens` of each pack)."""
    return [sum(packs, collections.Counter()) for packs in zip(*packs_per_rank)]


def shares(tokens: collections.Counter, names) -> dict[str, float]:
    total = sum(tokens.values()) or 1
    return {name: round(tokens[name] / total, 4) for name in names}


def window_figures(steps: list[collections.Counter], switch: int, names) -> dict:
    """The shares over `switch + WINDOW`, and the worst distance from the Stage 2 targets."""
    window = sum(steps[switch + WINDOW[0] : switch + WINDOW[1] + 1], collections.Counter())
    window_shares = shares(window, names)
    total_weight = sum(STAGE_2.get(name, 0.0) for name in names)
    targets = {name: round(STAGE_2.get(name, 0.0) / total_weight, 4) for name in names}
    error = max(abs(window_shares[name] - targets[name]) for name in names)
    return {"shares": window_shares, "targets": targets, "max_error_points": round(100 * error, 2)}


def measure_switch(
    run_config: str,
    switch: int = 20,
    after: int = 16,
    world_size: int = 2,
    num_workers: int = 2,
    strategies=STRATEGIES,
    dataset_info: str | None = None,
    progress=None,
) -> dict:
    """Per-step token shares of `switch + after` steps on `world_size` ranks."""
    with attached({"resize": _blank_resize}):
        return _measure(run_config, switch, after, world_size, num_workers, strategies, dataset_info, progress)


def _measure(run_config, switch, after, world_size, num_workers, strategies, dataset_info, progress) -> dict:
    from bagel_data import build_dataloader
    from bagel_data.datasets import make_bagel_multimodal_dataset
    from bagel_data.tokenizer import add_special_tokens, load_tokenizer
    from bagel_data.tools.run import load_run_config

    run = load_run_config(run_config, dataset_info)
    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
    groups = staged_groups(run.grouped_datasets, switch, world_size * num_workers)
    names = list(groups)
    results: dict = {"switch": switch, "world_size": world_size, "num_workers": num_workers, "modes": {}}
    for strategy in strategies:
        per_rank, use_flex = [], True
        for rank in range(world_size):
            dataset = make_bagel_multimodal_dataset(
                tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=groups,
                dataset_info=run.dataset_info, local_rank=rank, world_size=world_size, num_workers=num_workers,
                compat=run.compat, **{**run.packing, "mix_by": "tokens", "pack_strategy": strategy},
            )  # fmt: skip
            use_flex = dataset.config.use_flex
            results["max_buffer_size"] = dataset.config.max_buffer_size
            loader = build_dataloader(dataset, num_workers=num_workers)
            batches = itertools.islice(iter(loader), switch + after)
            per_rank.append([pack_tokens(batch, use_flex) for batch in batches])
        steps = step_tokens(per_rank)
        budget = dataset.config.max_num_tokens * world_size  # one pack per rank and step
        results["modes"][f"tokens/{strategy}"] = {
            "per_step": [shares(tokens, names) for tokens in steps],
            "window": window_figures(steps, switch, names),
            "mean_fill_after_switch": round(sum(sum(t.values()) for t in steps[switch:]) / budget / after, 4),
        }
        if progress is not None:
            progress(f"tokens/{strategy}: {len(steps)} steps x {world_size} ranks")
    return results


def print_switch(results: dict) -> None:
    switch = results["switch"]
    for mode, figures in results["modes"].items():
        names = list(figures["window"]["shares"])
        print(f"{mode}: token shares per step ({', '.join(names)}); the change is at step {switch}")
        for step, step_shares in enumerate(figures["per_step"]):
            if step >= switch - 2:
                print(f"  step {step:>3}: " + " / ".join(f"{step_shares[n]:.3f}" for n in names))
        window = figures["window"]
        shown = " / ".join(f"{window['shares'][n]:.3f} ({window['targets'][n]:.3f})" for n in names)
        print(
            f"  steps {switch + WINDOW[0]}-{switch + WINDOW[1]}: {shown}; "
            f"worst {window['max_error_points']:.2f} points off; mean fill after the switch "
            f"{figures.get('mean_fill_after_switch', float('nan')):.4f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_config")
    parser.add_argument("--switch", type=int, default=20)
    parser.add_argument("--after", type=int, default=16, help="steps taken after the switch")
    parser.add_argument("--out", help="write the JSON here too")
    args = parser.parse_args(argv)
    results = measure_switch(args.run_config, args.switch, args.after, progress=print)
    print_switch(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
