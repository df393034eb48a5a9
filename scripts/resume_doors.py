"""Resume under the users' conditions, through each public door: a run config's checkpoint
restored with its buffered samples rebuilt in order (`rebuild_threads: 0`) and on threads
(the default), the packs compared value for value and the first pack after the restore timed.

    PYTHONPATH=src python scripts/resume_doors.py --config benchmarks/bagel_run.yaml

`benchmarks/bagel_run.yaml` is BAGEL's kind of run (1024-px VAE transforms, CFG dropouts on,
T2I + edit + VLM with video; `bagel-data bench --root bench_data` writes its data). Each door
builds the dataset as its users do (`tests/helpers/doors.py`, which the conformance tests use
too; NeMo's recipe names its dataset_info file). One process, one intra-op thread, as in a
DataLoader worker; the two ways alternate, `--rounds` times each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the doors as the tests build them

from bagel_data import BagelDatasetConfig
from bagel_data.tokenizer import add_special_tokens, load_tokenizer
from bagel_data.tools.run import load_run_config
from helpers.doors import build_through

DOORS = ("make_bagel_multimodal_dataset", "PackedDataset(DataConfig)", "BagelDatasetConfig.build")


def same(a, b, where: str) -> None:
    """`a` and `b` equal value for value (tensors bit for bit, dtypes included)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a run config (RUN.yaml)")
    parser.add_argument("--strategies", default="greedy,best_fit")
    parser.add_argument("--cut", type=int, default=3, help="packs drawn before the checkpoint")
    parser.add_argument("--packs", type=int, default=3, help="packs compared after the restore")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run = load_run_config(str(args.config))
    tokenizer, special, _ = add_special_tokens(load_tokenizer())

    def make(door: str, **settings):
        settings = {**run.packing, **settings}
        if door == "BagelDatasetConfig.build" and not isinstance(run.dataset_info, dict):
            config = BagelDatasetConfig(
                grouped_datasets=run.grouped_datasets, dataset_info_path=run.dataset_info, **settings
            )
            return config.build(
                tokenizer=tokenizer, special_tokens=special, rank=0, world_size=1, num_workers=1,
                global_seed=None, data_status=None,
            )  # fmt: skip
        return build_through(
            door, tokenizer=tokenizer, special_tokens=special, grouped=run.grouped_datasets,
            info=run.dataset_info, settings=settings,
        )  # fmt: skip

    rows = []
    for strategy in args.strategies.split(","):
        for door in DOORS:
            filled = make(door, pack_strategy=strategy)
            stream = iter(filled)
            for _ in range(args.cut):
                next(stream)
            state = filled.state_dict()
            stream.close()
            seconds: dict[str, list[float]] = {"in order": [], "on threads": []}
            packs: dict[str, list] = {}
            for _ in range(args.rounds):
                for way, threads in (("in order", 0), ("on threads", None)):
                    resumed = make(door, pack_strategy=strategy, rebuild_threads=threads)
                    resumed.load_state_dict(state)
                    start = time.perf_counter()
                    stream = iter(resumed)
                    got = [next(stream)]
                    seconds[way].append(time.perf_counter() - start)
                    got += [next(stream) for _ in range(args.packs - 1)]
                    stream.close()
                    packs.setdefault(way, got)
                    same(got, packs["in order"], f"{door}, {strategy}, {way}")
            row = {
                "strategy": strategy,
                "door": door,
                "buffered": len(state["stages"]["overflow"]["buffer"]),
                "first_pack_seconds": seconds,
            }
            rows.append(row)
            print(
                f"{strategy:8s} {door:30s} {row['buffered']:3d} buffered; first pack in order "
                f"{[round(s, 2) for s in seconds['in order']]} s, on threads "
                f"{[round(s, 2) for s in seconds['on threads']]} s; the same packs",
                flush=True,
            )
    if args.out is not None:
        args.out.write_text(json.dumps({"config": str(args.config), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
