"""`bench seams`: what the library's seams (`bagel_data.instruments`) cost while nothing is
attached.

Two figures, both from one run:

* **Side by side.** The same packs built by this tree's pipeline and by a tree without the
  seams (`--baseline SRC`, e.g. a `git archive` of the commit before them), each in a fresh
  interpreter at one torch thread, the two alternating round after round; the median
  seconds of each and their ratio. On a shared machine this figure is as noisy as the
  machine: read it with the second one.
* **Bound.** How many times a pack passes a seam (counted with an instrument attached), times
  the cost of one unattached seam call over the plain call (best of `timeit` repeats): an
  upper estimate of the seams' share of a pack's time that no neighbour's load can blur.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

from bagel_data.instruments import STAGES, attached, seam
from bagel_data.synthetic.dataset import DemoSizes, write_demo_dataset

from . import child_env
from .main import QUICK_PACKING

# The pipeline through the public door only, so that an older tree runs it unchanged.
_CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
from bagel_data.batch import collate_wrapper
from bagel_data.datasets import make_bagel_multimodal_dataset
from bagel_data.tokenizer import add_special_tokens, load_tokenizer
paths, packing, warmup, packs = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tok, special, _ = add_special_tokens(load_tokenizer(None))
tok.encode("warm up")
dataset = make_bagel_multimodal_dataset(tokenizer=tok, special_tokens=special, grouped_datasets=paths["grouped"],
                                        dataset_info=paths["info"], num_workers=1, **packing)
iterator, collate = iter(dataset), collate_wrapper()
for _ in range(warmup):
    collate([next(iterator)])
start = time.perf_counter()
for _ in range(packs):
    collate([next(iterator)])
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def _time_tree(src: str | None, paths: dict, warmup: int, packs: int) -> float:
    args = [json.dumps(paths), json.dumps(QUICK_PACKING), str(warmup), str(packs)]
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=900,
                          check=False, env=child_env(src))  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"seams child ({src or 'this tree'}) failed:\n{proc.stderr[-3000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def side_by_side(baseline_src: str, paths: dict, rounds: int, warmup: int, packs: int) -> dict:
    """Median seconds of `packs` packs, this tree and `baseline_src`, alternating."""
    seconds: dict[str, list[float]] = {"seams": [], "baseline": []}
    for index in range(rounds):
        order = [("seams", None), ("baseline", baseline_src)]
        for name, src in order if index % 2 == 0 else order[::-1]:  # neither always goes first
            seconds[name].append(_time_tree(src, paths, warmup, packs))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {"rounds": seconds, "median_seconds": medians, "seams_over_baseline": medians["seams"] / medians["baseline"]}


def seam_calls_per_pack(paths: dict, packs: int) -> dict[str, float]:
    """How many times a pack passes each stage's seam (this tree, in this process)."""
    from bagel_data.batch import collate_wrapper

    from .runs import build, load_tokenizer_once

    tok, special = load_tokenizer_once()
    counts: collections.Counter[str] = collections.Counter()

    def counting(stage: str):
        def count(call, args, kwargs):
            counts[stage] += 1
            return call(*args, **kwargs)

        return count

    iterator, collate = iter(build(paths, tok, special, QUICK_PACKING)), collate_wrapper()
    with attached({stage: counting(stage) for stage in STAGES}):
        for _ in range(packs):
            collate([next(iterator)])
    return {stage: counts[stage] / packs for stage in STAGES}


def call_overhead_seconds(number: int = 200_000, repeat: int = 7) -> float:
    """One unattached seam call over the plain call, best of `repeat` (seconds)."""

    def plain(value):
        return value

    marked = seam("tokenize")(plain)

    def best(function) -> float:
        return min(timeit.repeat(functools.partial(function, 1), number=number, repeat=repeat)) / number

    return max(0.0, best(marked) - best(plain))


def run(baseline_src: str | None, rounds: int, warmup: int, packs: int) -> dict:
    root = Path(tempfile.gettempdir()) / "bagel-data-bench-quick"
    made = write_demo_dataset(root, DemoSizes.demo(), seed=0)  # returns at once when already there
    paths = {"grouped": str(made.grouped_datasets), "info": str(made.dataset_info)}
    calls = seam_calls_per_pack(paths, packs)
    overhead = call_overhead_seconds()
    res: dict = {"packs": packs, "warmup": warmup, "calls_per_pack": calls, "seam_call_overhead_ns": overhead * 1e9}
    if baseline_src is not None:
        res["side_by_side"] = side_by_side(baseline_src, paths, rounds, warmup, packs)
        pack_seconds = res["side_by_side"]["median_seconds"]["baseline"] / packs
        res["bound_share_of_pack"] = sum(calls.values()) * overhead / pack_seconds
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=None, help="src folder of a tree without the seams (for side by side)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of each tree")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--packs", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    res = run(args.baseline, args.rounds, args.warmup, args.packs)
    print(json.dumps(res, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(res, indent=1))
    return 0
