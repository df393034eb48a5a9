"""A data-parallel job under torchrun that checkpoints its data pipeline and resumes it.

Run from the repository root after `make demo` (which writes demo_data/), on CPU with gloo:

    torchrun --standalone --nproc-per-node 2 examples/torchrun_demo.py --data demo_data --out ckpt
    torchrun --standalone --nproc-per-node 2 examples/torchrun_demo.py --data demo_data --out ckpt --resume

The first command draws `--steps` packed batches on every rank and saves each rank's loader
and data-metrics states after `--save-at` of them (one file per rank: the loader's state
holds that rank's workers' streams), plus what the batches after that point were and the
metrics logged with them. The second is the restarted job: it loads each rank's states and
checks that it draws exactly those batches again and logs the same metrics (the wait for
data aside). In a trainer, save `loader.state_dict()` and `metrics.state_dict()` beside the
model's checkpoint and load them the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from bagel_data import add_special_tokens, build_dataloader, load_tokenizer, make_bagel_multimodal_dataset
from bagel_data.metrics import DataMetrics

PACKING = {  # the demo's small packs; BAGEL's trainer uses 32768 / 36864 / 16384 / 16384
    "expected_num_tokens": 7680,
    "max_num_tokens": 8192,
    "max_num_tokens_per_sample": 4096,
    "prefer_buffer_before": 4096,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("demo_data"), help="the demo dataset folder")
    parser.add_argument("--out", type=Path, default=Path("ckpt"), help="where the loader states go")
    parser.add_argument("--steps", type=int, default=6, help="batches the first run draws")
    parser.add_argument("--save-at", type=int, default=3, help="batches drawn before the state is saved")
    parser.add_argument("--num-workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--resume", action="store_true", help="load the saved states and check the batches")
    args = parser.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; gloo runs on CPU (use nccl on GPUs).
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
        grouped = yaml.safe_load((args.data / "grouped_datasets.yaml").read_text())
        dataset = make_bagel_multimodal_dataset(  # rank and world size come from the process group
            tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=grouped,
            dataset_info=str(args.data / "dataset_info.yaml"), num_workers=args.num_workers, **PACKING,
        )  # fmt: skip
        loader = build_dataloader(dataset, num_workers=args.num_workers)
        metrics = DataMetrics(loader, window=2)  # a window shorter than the run: it spans the restart
        state_path = args.out / f"loader_rank{rank}.pt"
        expected_path = args.out / f"batches_rank{rank}.json"
        logged_path = args.out / f"metrics_rank{rank}.json"
        if args.resume:
            state = torch.load(state_path, weights_only=False)
            loader.load_state_dict(state["loader"])
            metrics.load_state_dict(state["metrics"])
            expected = json.loads(expected_path.read_text())
            drawn, logged = [], []
            for _, batch in zip(expected, metrics.timed(loader)):
                metrics.update(batch)
                drawn.append(describe(batch))
                logged.append(untimed(metrics.as_dict()))
            same = drawn == expected
            print(f"rank {rank}: resumed, {len(drawn)} batches {'equal' if same else 'DIFFER FROM'} the first run's")
            same_metrics = logged == json.loads(logged_path.read_text())
            print(f"rank {rank}: resumed metrics {'equal' if same_metrics else 'DIFFER FROM'} the first run's")
            dist.barrier()
            return 0 if same and same_metrics else 1
        args.out.mkdir(parents=True, exist_ok=True)
        after, logged = [], []
        for step, batch in enumerate(metrics.timed(loader)):  # `step + 1` batches drawn so far
            metrics.update(batch)
            if step >= args.save_at:
                after.append(describe(batch))
                logged.append(untimed(metrics.as_dict()))
            if step + 1 == args.save_at:  # a trainer saves these states with the model's checkpoint
                torch.save({"loader": loader.state_dict(), "metrics": metrics.state_dict()}, state_path)
            if step + 1 == args.steps:
                break
        expected_path.write_text(json.dumps(after))
        logged_path.write_text(json.dumps(logged))
        print(f"rank {rank}: {args.steps} batches, loader state saved after {args.save_at} in {state_path}")
        dist.barrier()
        return 0
    finally:
        dist.destroy_process_group()


def untimed(figures: dict) -> dict:
    """The logged metrics but the wait for data, the one figure a restart changes."""
    return {key: value for key, value in figures.items() if not key.startswith("data/wait_seconds")}


def describe(batch) -> dict:
    """What identifies a packed batch: its length and where each of its samples came from."""
    return {
        "sequence_length": int(batch.sequence_length),
        "samples": json.loads(json.dumps(batch.batch_data_indexes, default=str)),
        "text_ids": int(batch.packed_text_ids.sum()),
    }


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # two ranks on a few cores: no thread oversubscription
    sys.exit(main())
