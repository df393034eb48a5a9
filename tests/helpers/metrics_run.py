"""A training loop's data side, run as a process by tests/test_metrics_resume.py.

It draws packed batches of the golden three groups (whose T2I and VLM files hold bad rows,
so skips count in two groups) through two DataLoader workers, writes `DataMetrics.as_dict()`
after every step as one JSON line, saves the loader's and the metrics' states together
after `--save-at` steps (written aside, then renamed: a kill never leaves half a file), and
with `--kill-after` sends itself SIGKILL after that step, as an out-of-memory kill would.
`--resume` loads the checkpoint and continues to `--steps`.

    python -m helpers.metrics_run --out DIR --steps 10 --save-at 4 --kill-after 6
    python -m helpers.metrics_run --out DIR --steps 10 --resume
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import torch

from bagel_data import add_special_tokens, build_dataloader, load_tokenizer, make_bagel_multimodal_dataset
from bagel_data.metrics import DataMetrics
from helpers.three_groups import three_groups_config, three_groups_info

PACKING = {"expected_num_tokens": 1490, "max_num_tokens": 1500, "max_num_tokens_per_sample": 900}
PACKING.update(prefer_buffer_before=600, max_buffer_size=8, use_flex=True)
WORKERS = 2
WINDOW = 3  # shorter than the run: the window slides across the checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--kill-after", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
    dataset = make_bagel_multimodal_dataset(
        tokenizer, special_tokens, three_groups_config(), dataset_info=three_groups_info(), local_rank=0,
        world_size=1, num_workers=WORKERS, **PACKING,
    )  # fmt: skip
    loader = build_dataloader(dataset, num_workers=WORKERS)
    metrics = DataMetrics(loader, window=WINDOW)
    checkpoint = args.out / "checkpoint.pt"
    if args.resume:
        state = torch.load(checkpoint, weights_only=False)
        loader.load_state_dict(state["loader"])
        metrics.load_state_dict(state["metrics"])
    log_path = args.out / ("resumed.jsonl" if args.resume else "run.jsonl")
    with log_path.open("w", encoding="utf-8") as log:
        for batch in metrics.timed(loader):
            metrics.update(batch)
            log.write(json.dumps(metrics.as_dict()) + "\n")
            log.flush()
            if metrics.steps == args.save_at:
                aside = checkpoint.with_suffix(".partial")
                torch.save({"loader": loader.state_dict(), "metrics": metrics.state_dict()}, aside)
                os.replace(aside, checkpoint)
            if metrics.steps == args.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if metrics.steps >= args.steps:
                break
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
