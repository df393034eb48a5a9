"""Packing and mixing measured on real packs of a run config, once per mode.

`measure_mixing` builds the run config's packed dataset once per mode (`mix_by` samples /
tokens x `pack_strategy` greedy / best_fit) and takes `packs` packs from it: the real
families (decode, resize, tokenize), the real mixing loop, and the CFG dropout the run
config sets (BAGEL's 0.1 / 0.4 / 0.1 when it sets none), exactly what training sees. It
reports each mode's fill (sequence length / max_num_tokens), realized token and sample
shares against the weight targets, and the spread of attention cost (sum of sample_len**2)
between the packs that `world_size` ranks would train on in one step.

By default the resize itself is left out (`pixels=False`): each image is decoded (a bad one
is still a counted skip) and given its exact target size, but as a blank image of that
size, not a resampled one. Nothing this measures depends on pixel values, and the resize
is most of the pipeline's time; `pixels=True` (`--pixels`) does the real resize, and
`tests/tools/test_bench_mixing.py` checks that both give the same packs.

    python -m bagel_bench.mixing RUN.yaml [--packs 1000] [--pixels] [--out FILE] [--plot PNG]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from bagel_data.instruments import attached

MODES = [("samples", "greedy"), ("samples", "best_fit"), ("tokens", "greedy"), ("tokens", "best_fit")]
DROPOUT_KEYS = ("text_cond_dropout_prob", "vit_cond_dropout_prob", "vae_cond_dropout_prob")


def pack_figures(batches, weights: dict[str, float], max_num_tokens: int, use_flex: bool, world_size: int) -> dict:
    """Fill, shares and attention-cost spread of `batches` (an iterable of batch dicts)."""
    fills, costs = [], []
    tokens: collections.Counter[str] = collections.Counter()
    samples: collections.Counter[str] = collections.Counter()
    for batch in batches:
        real = batch["sample_lens"][:-1] if use_flex else batch["sample_lens"]
        fills.append(sum(real) / max_num_tokens)
        costs.append(sum(length**2 for length in real))
        for where, length in zip(batch["batch_data_indexes"], real):
            tokens[where["dataset_name"]] += length
            samples[where["dataset_name"]] += 1
    weight_total = sum(weights.values())
    target = {name: weight / weight_total for name, weight in weights.items()}
    token_total, sample_total = sum(tokens.values()) or 1, sum(samples.values()) or 1
    token_share = {name: tokens[name] / token_total for name in weights}
    usable = len(costs) // world_size * world_size
    steps = np.asarray(costs[:usable], dtype=float).reshape(-1, world_size)
    spread = float(np.mean((steps.max(axis=1) - steps.min(axis=1)) / steps.mean(axis=1))) if usable else 0.0
    return {
        "mean_fill": round(float(np.mean(fills)), 4),
        "p5_fill": round(float(np.percentile(fills, 5)), 4),
        "padding_fraction": round(1 - float(np.mean(fills)), 4),
        "token_share": {name: round(share, 4) for name, share in token_share.items()},
        "sample_share": {name: round(samples[name] / sample_total, 4) for name in weights},
        "target_share": {name: round(share, 4) for name, share in target.items()},
        "max_token_share_error_points": round(100 * max(abs(token_share[n] - target[n]) for n in weights), 2),
        "attention_cost_spread_per_step": round(spread, 4),
        "fills": [round(f, 4) for f in fills],
    }


def _blank_resize(call, args, kwargs):
    """At the `resize` seam: the exact target size as a blank image (no resampling)."""
    from PIL import Image

    transform, image = args[:2]
    img_num = kwargs.get("img_num", args[2] if len(args) > 2 else 1)
    original = image.info.get("bagel_original_size", image.size)
    size = transform.target_size(*original, img_num=img_num)
    return image if size == image.size else Image.new("RGB", size)


def measure_mixing(
    run_config: str,
    packs: int = 1000,
    world_size: int = 8,
    modes=MODES,
    dataset_info: str | None = None,
    progress=None,
    pixels: bool = False,
) -> dict:
    """Real packs of every mode of `modes`; the dropouts are the run config's."""
    with attached({} if pixels else {"resize": _blank_resize}):
        return _measure(run_config, packs, world_size, modes, dataset_info, progress, pixels)


def _measure(run_config, packs, world_size, modes, dataset_info, progress, pixels) -> dict:
    from bagel_data.datasets import make_bagel_multimodal_dataset
    from bagel_data.tokenizer import add_special_tokens, load_tokenizer
    from bagel_data.tools.run import load_run_config

    run = load_run_config(run_config, dataset_info)
    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
    results: dict = {"packs": packs, "world_size": world_size, "compat": run.compat, "pixels": pixels, "modes": {}}
    for mix_by, strategy in modes:
        packing = {**run.packing, "mix_by": mix_by, "pack_strategy": strategy}
        dataset = make_bagel_multimodal_dataset(
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            grouped_datasets=run.grouped_datasets,
            dataset_info=run.dataset_info,
            local_rank=0,
            world_size=1,
            num_workers=1,
            compat=run.compat,
            **packing,
        )
        cfg = dataset.config
        results["dropouts"] = {key: getattr(cfg, key) for key in DROPOUT_KEYS}
        results["budgets"] = {"expected_num_tokens": cfg.expected_num_tokens, "max_num_tokens": cfg.max_num_tokens}
        weights = dict(zip(dataset.group_names, dataset.grouped_weights))
        started = time.perf_counter()
        figures = pack_figures(
            itertools.islice(iter(dataset), packs), weights, cfg.max_num_tokens, cfg.use_flex, world_size
        )
        figures["seconds"] = round(time.perf_counter() - started, 1)
        results["modes"][f"{mix_by}/{strategy}"] = figures
        if progress is not None:
            progress(f"{mix_by}/{strategy}: {packs} packs in {figures['seconds']} s")
    return results


def print_mixing(results: dict) -> None:
    drops = results.get("dropouts", {})
    print(
        f"{results['packs']} real packs per mode; CFG dropout text {drops.get('text_cond_dropout_prob')}, "
        f"vit {drops.get('vit_cond_dropout_prob')}, vae {drops.get('vae_cond_dropout_prob')}; "
        f"attention-cost spread over {results['world_size']} ranks per step"
    )
    print(
        f"{'mode':<20} {'mean fill':>9} {'p5 fill':>8} {'padding':>8} {'cost spread':>11} {'share err':>9}"
        "  token share (target)"
    )
    for mode, res in results["modes"].items():
        shares = ", ".join(
            f"{g} {res['token_share'][g]:.3f} ({res['target_share'][g]:.3f})" for g in res["token_share"]
        )
        print(
            f"{mode:<20} {res['mean_fill']:>9.4f} {res['p5_fill']:>8.4f} {res['padding_fraction']:>8.4f} "
            f"{res['attention_cost_spread_per_step']:>11.3f} {res['max_token_share_error_points']:>8.2f}p  {shares}"
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
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--modes", default=",".join(f"{m}/{s}" for m, s in MODES), help="e.g. tokens/best_fit")
    parser.add_argument("--pixels", action="store_true", help="resize the images too (same packs, slower)")
    parser.add_argument("--out", help="write the JSON here too")
    parser.add_argument("--plot", help="write the fill and share plot (PNG) here")
    args = parser.parse_args(argv)
    modes = [tuple(mode.split("/")) for mode in args.modes.split(",")]
    results = measure_mixing(args.run_config, args.packs, args.world_size, modes, progress=print, pixels=args.pixels)
    print_mixing(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot_mixing(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
