"""Packing and mixing measured on a run config's real sample lengths, without decoding.

`measure_mixing` draws some samples of every group through the real families (decode,
resize, tokenize) to learn their packed lengths, then replays those lengths through the
real mixing loop for many packs with text-only stand-in samples, once per mode:
`mix_by` samples / tokens x `pack_strategy` greedy / best_fit. It reports each mode's fill
(sequence length / max_num_tokens), realized token shares against the weight targets, and
the spread of attention cost (sum of sample_len**2) between the packs that `world_size`
ranks would train on in one step.

    python -m bagel_data.bench.mixing RUN.yaml [--packs 1000] [--per-group 150] [--out FILE] [--plot PNG]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch

from ..packing.config import PackingConfig
from ..packing.packed_dataset import PackedDataset
from ..sample import sample_length

MODES = [("samples", "greedy"), ("samples", "best_fit"), ("tokens", "greedy"), ("tokens", "best_fit")]


class LengthGroup(torch.utils.data.IterableDataset):
    """A group that yields text-only samples with the packed lengths of a real group, in a
    cycle: what the mixing loop sees of a family, without the pixels."""

    def __init__(self, name: str, lengths: list[int]):
        super().__init__()
        self.name, self.lengths = name, lengths
        self.strict, self.max_consecutive_failures, self.data_status = False, 100, None

    def set_epoch(self, seed: int) -> None:
        self.seed = seed

    def resume_cursor(self, worker_id: int):
        return None

    def sample_at(self, cursor, rng_state=None, log=None) -> dict:
        length = self.lengths[cursor[0] % len(self.lengths)]
        return {
            "text_ids_list": [[1000] * (length - 2)],
            "image_tensor_list": [],
            "sequence_plan": [
                {"type": "text", "enable_cfg": 0, "loss": 1, "special_token_loss": 0, "special_token_label": None}
            ],
            "num_tokens": length - 2,
            "data_indexes": {"data_indexes": cursor[0], "worker_id": 0, "dataset_name": self.name},
        }

    def iter_samples(self, after=None, log=None):
        for i in itertools.count(0 if after is None else after[0] + 1):
            yield (i,), self.sample_at((i,))

    def __iter__(self):
        return (sample for _, sample in self.iter_samples())


def real_lengths(dataset, per_group: int) -> dict[str, list[int]]:
    """Packed lengths of the first `per_group` good samples of each group of a built
    packed dataset (`make_bagel_multimodal_dataset`)."""
    out = {}
    for name, family in zip(dataset.group_names, dataset.grouped_datasets):
        samples = itertools.islice(family.iter_samples(), per_group)
        out[name] = [max(2, sample_length(sample)) for _, sample in samples]
    return out


def simulate(lengths: dict, weights: dict, mandatory: dict, config: PackingConfig, packs: int, world_size: int) -> dict:
    groups = {name: LengthGroup(name, values) for name, values in lengths.items()}
    tokens = {"bos_token_id": 1, "eos_token_id": 2, "start_of_image": 3, "end_of_image": 4}
    dataset = PackedDataset.from_groups(
        groups,
        config,
        tokens,
        weights=weights,
        mandatory=mandatory,
        local_rank=0,
        world_size=1,
        num_workers=1,
        data_seed=0,
    )
    dataset.set_epoch(0)
    fills, costs, shares = [], [], dict.fromkeys(lengths, 0)
    for batch in itertools.islice(iter(dataset), packs):
        real = batch["sample_lens"][:-1] if config.use_flex else batch["sample_lens"]
        fills.append(sum(real) / config.max_num_tokens)
        costs.append(sum(length**2 for length in real))
        for where, length in zip(batch["batch_data_indexes"], real):
            shares[where["dataset_name"]] += length
    total = sum(shares.values())
    weight_total = sum(weights.values())
    steps = np.asarray(costs[: len(costs) // world_size * world_size], dtype=float).reshape(-1, world_size)
    spread = (steps.max(axis=1) - steps.min(axis=1)) / steps.mean(axis=1)
    return {
        "mean_fill": round(float(np.mean(fills)), 4),
        "p5_fill": round(float(np.percentile(fills, 5)), 4),
        "padding_fraction": round(1 - float(np.mean(fills)), 4),
        "token_share": {name: round(count / total, 4) for name, count in shares.items()},
        "target_share": {name: round(w / weight_total, 4) for name, w in weights.items()},
        "attention_cost_spread_per_step": round(float(np.mean(spread)), 4),
        "fills": [round(f, 4) for f in fills],
    }


def measure_mixing(run_config: str, packs: int = 1000, per_group: int = 150, world_size: int = 8) -> dict:
    from ..tools.run import load_run_config

    run = load_run_config(run_config)
    from ..datasets import make_bagel_multimodal_dataset
    from ..tokenizer import add_special_tokens, load_tokenizer

    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=run.grouped_datasets,
        dataset_info=run.dataset_info,
        num_workers=1,
        **run.packing,
    )
    lengths = real_lengths(dataset, per_group)
    weights = dict(zip(dataset.group_names, dataset.grouped_weights))
    mandatory = dict(zip(dataset.group_names, dataset.is_mandatory))
    modes = {}
    for mix_by, strategy in MODES:
        config = dataclasses.replace(dataset.config, mix_by=mix_by, pack_strategy=strategy)
        modes[f"{mix_by}/{strategy}"] = simulate(lengths, weights, mandatory, config, packs, world_size)
    return {"packs": packs, "world_size": world_size, "samples_per_group": per_group, "modes": modes}


def print_mixing(results: dict) -> None:
    print(f"{results['packs']} packs per mode; attention-cost spread over {results['world_size']} ranks per step")
    print(f"{'mode':<20} {'mean fill':>9} {'p5 fill':>8} {'padding':>8} {'cost spread':>11}  token share (target)")
    for mode, res in results["modes"].items():
        shares = ", ".join(
            f"{g} {res['token_share'][g]:.3f} ({res['target_share'][g]:.3f})" for g in res["token_share"]
        )
        print(
            f"{mode:<20} {res['mean_fill']:>9.4f} {res['p5_fill']:>8.4f} {res['padding_fraction']:>8.4f} "
            f"{res['attention_cost_spread_per_step']:>11.3f}  {shares}"
        )


def plot_mixing(results: dict, path: str) -> None:
    """Fill distribution per mode (left) and realized token shares against the targets (right)."""
    import matplotlib

    matplotlib.use("Agg")  # only in this function: no global backend change at import
    import matplotlib.pyplot as plt

    modes = results["modes"]
    fig, (fills, shares) = plt.subplots(1, 2, figsize=(12, 4))
    for mode, res in modes.items():
        fills.hist(res["fills"], bins=40, range=(0.8, 1.0), histtype="step", label=mode)
    fills.set(xlabel="sequence length / max_num_tokens", ylabel="packs", title="pack fill")
    fills.legend(loc="upper left")
    groups = list(next(iter(modes.values()))["token_share"])
    width = 0.8 / (len(modes) + 1)
    for k, (mode, res) in enumerate(modes.items()):
        shares.bar(
            [g + k * width for g in range(len(groups))], [res["token_share"][n] for n in groups], width, label=mode
        )
    targets = next(iter(modes.values()))["target_share"]
    shares.bar([g + len(modes) * width for g in range(len(groups))], [targets[n] for n in groups], width,
               label="target", color="black")  # fmt: skip
    shares.set_xticks([g + 0.4 for g in range(len(groups))], groups)
    shares.set(ylabel="share of packed tokens", title="token shares")
    shares.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_config")
    parser.add_argument("--packs", type=int, default=1000)
    parser.add_argument("--per-group", type=int, default=150)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--out", help="write the JSON here too")
    parser.add_argument("--plot", help="write the fill and share plot (PNG) here")
    args = parser.parse_args(argv)
    results = measure_mixing(args.run_config, args.packs, args.per_group, args.world_size)
    print_mixing(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot_mixing(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
