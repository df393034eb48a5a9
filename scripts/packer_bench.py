"""The packer's own throughput, side by side for two source trees, on in-memory groups.

    python scripts/packer_bench.py --tree before=/tmp/base/src --tree after=src \
        --rounds 5 --packs 300 --out packer_bench.json

What is timed is the packing loop alone: three stand-in groups whose samples are made in
memory (text ids and small image tensors, so no decode or read), mixed by weight, with CFG
dropout on, in each packing mode (greedy / best_fit x mix_by samples / tokens, and
`compat: bagel` greedy). Each measurement runs in a fresh child process with one thread,
the trees alternating and their order reversed every other round; per mode the ratio of
packs per second (after / before) is taken within each round and its median reported, with
each tree's median packs per second. Prints a table and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

MODES = {
    "greedy": {},
    "greedy_tokens": {"mix_by": "tokens"},
    "best_fit": {"pack_strategy": "best_fit"},
    "best_fit_tokens": {"pack_strategy": "best_fit", "mix_by": "tokens"},
    "compat_greedy": {"compat": "bagel"},
}
TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "start_of_image": 3, "end_of_image": 4}


class MemoryGroup:
    """A group of the cursor protocol whose sample `i` is made from `i` alone."""

    def __init__(self, name: str, kind: str):
        import numpy as np
        import torch

        self.name, self.kind, self.torch = name, kind, torch
        self.sizes = np.random.default_rng(len(name)).integers(2, 9, size=(200_000, 3))
        self.strict, self.max_consecutive_failures, self.data_status = False, 100, None

    def set_epoch(self, seed: int) -> None:
        pass

    def resume_cursor(self, worker_id: int):
        return None

    def sample_at(self, cursor, rng_state=None, log=None) -> dict:
        a, b, c = (int(v) for v in self.sizes[cursor[0] % len(self.sizes)])
        text = {"type": "text", "enable_cfg": 1, "loss": self.kind == "vlm", "special_token_loss": 0}
        text["special_token_label"] = None
        image = {"type": "vae_image", "enable_cfg": 0, "loss": 1, "special_token_loss": 0, "special_token_label": None}
        cond = {**image, "type": "vit_image", "enable_cfg": 1, "loss": 0}
        ids = list(range(8 * a))
        plan, tensors = [text], []
        if self.kind in ("t2i", "edit"):
            plan.append(image)
            tensors.append(self.torch.zeros(3, 4 * b, 4 * c))
        if self.kind in ("edit", "vlm"):
            plan.insert(0, cond)
            tensors.insert(0, self.torch.zeros(3, 4 * c, 4 * b))
        num_tokens = len(ids) + sum(t.shape[1] * t.shape[2] // 4 for t in tensors)
        return {
            "sequence_plan": plan,
            "text_ids_list": [ids],
            "image_tensor_list": tensors,
            "num_tokens": num_tokens,
            "data_indexes": {"data_indexes": cursor[0], "worker_id": 0, "dataset_name": self.name},
        }

    def iter_samples(self, after=None, log=None):
        for i in itertools.count(0 if after is None else after[0] + 1):
            yield (i,), self.sample_at((i,))


def child(mode: str, packs: int) -> float:
    """Packs per second of `mode` in this process (the tree is whatever `bagel_data` is)."""
    import torch

    from bagel_data.compat import CompatPolicy
    from bagel_data.packing.config import PackingConfig
    from bagel_data.packing.packed_dataset import PackedDataset

    torch.set_num_threads(1)
    changes = dict(MODES[mode])
    policy = CompatPolicy(changes.pop("compat", None), seed=0)
    config = PackingConfig(
        expected_num_tokens=3800,
        max_num_tokens=4096,
        max_num_tokens_per_sample=2048,
        prefer_buffer_before=2048,
        max_buffer_size=50,
        vae_image_downsample=2,
        vit_patch_size=2,
        max_latent_size=64,
        max_num_patch_per_side=64,
        text_cond_dropout_prob=0.1,
        vit_cond_dropout_prob=0.3,
        vae_cond_dropout_prob=0.1,
        **changes,
    )
    groups = {name: MemoryGroup(name, name) for name in ("t2i", "edit", "vlm")}
    dataset = PackedDataset.from_groups(
        groups,
        config,
        TOKENS,
        weights={"t2i": 0.5, "edit": 0.3, "vlm": 0.2},
        mandatory=dict.fromkeys(groups, False),
        local_rank=0,
        world_size=1,
        num_workers=0,
        data_seed=7,
        policy=policy,
    )
    stream = iter(dataset)
    for _ in range(20):  # warm up
        next(stream)
    start = time.process_time()
    for _ in range(packs):
        next(stream)
    return packs / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH to a src folder (two)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--packs", type=int, default=300)
    parser.add_argument("--out", default="packer_bench.json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(child(args.child[0], int(args.child[1])))
        return
    trees = [tree.split("=", 1) for tree in args.tree]
    (before, _), (after, _) = trees
    results: dict = {mode: {label: [] for label, _ in trees} for mode in MODES}
    for round_index in range(args.rounds):
        for mode in MODES:
            for label, path in trees if round_index % 2 == 0 else trees[::-1]:
                env = {**os.environ, "PYTHONPATH": path}
                out = subprocess.run(
                    [sys.executable, __file__, "--tree", "x=y", "--tree", "x=y", "--child", mode, str(args.packs)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results[mode][label].append(float(out.stdout.strip().splitlines()[-1]))
    summary = {}
    for mode, runs in results.items():
        ratios = [a / b for a, b in zip(runs[after], runs[before])]
        summary[mode] = {
            f"{before}_packs_per_cpu_s": statistics.median(runs[before]),
            f"{after}_packs_per_cpu_s": statistics.median(runs[after]),
            "ratio_median": statistics.median(ratios),
            "ratios": ratios,
        }
        print(
            f"{mode:16s} {before} {summary[mode][f'{before}_packs_per_cpu_s']:8.1f}  "
            f"{after} {summary[mode][f'{after}_packs_per_cpu_s']:8.1f}  ratio x{summary[mode]['ratio_median']:.3f}"
        )
    with open(args.out, "w") as handle:
        json.dump({"rounds": args.rounds, "packs": args.packs, "modes": summary, "runs": results}, handle, indent=1)


if __name__ == "__main__":
    main()
