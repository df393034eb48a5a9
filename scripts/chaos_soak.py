"""A chaos soak: a training-like loop killed by SIGKILL at random, resumed from its last
checkpoint each time, must give the batch sequence of an uninterrupted run: 0 lost, 0
duplicated, the same order.

    PYTHONPATH=src python scripts/chaos_soak.py --root soak_data --steps 60 --kills 4

The loop (`--child`, one process with its DataLoader workers, read-ahead on and the resumed
buffer rebuilt on threads) draws `--steps` batches and every `--every` steps writes one
checkpoint file atomically: the loader's `state_dict()` and the digest of every batch it has
trained on. The parent first runs it once uninterrupted, then starts it again and again,
each time killing its whole process group (workers included) at a random moment `--kill-min`
to `--kill-max` seconds after the start, but never before the loop has trained `--min-steps`
steps since that start. A killed run's batches after its last checkpoint are lost as a real trainer's
are, and redone after the resume. At the end the committed digests must equal the
uninterrupted run's, and each batch's samples (group, position) are counted: any sample
packed more or fewer times than in the uninterrupted run is lost or duplicated.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

CHECKPOINT = "checkpoint.pkl"
PROGRESS = "progress.txt"


def batch_record(batch) -> tuple[str, list]:
    """A batch's digest (every tensor and index, bit for bit) and its samples."""
    import torch

    digest = hashlib.sha256()
    data = batch.to_dict()
    for key in sorted(data):
        value = data[key]
        values = value if isinstance(value, list) and value and isinstance(value[0], torch.Tensor) else [value]
        for item in values:
            if isinstance(item, torch.Tensor):
                digest.update(item.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
            else:
                digest.update(repr(item).encode())
    samples = [[where["dataset_name"], json.dumps(where["data_indexes"])] for where in batch.batch_data_indexes]
    return digest.hexdigest(), samples


def write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def child(args) -> None:
    """The training-like loop: resume from the checkpoint file if there is one."""
    import torch

    from bagel_data import build_dataloader
    from bagel_data.tools.run import build_from_run_config, load_run_config

    torch.set_num_threads(1)
    run = load_run_config(str(args.root / "run.yaml"))
    dataset = build_from_run_config(run, num_workers=args.workers).dataset
    loader = build_dataloader(dataset, num_workers=args.workers)
    out = Path(args.out)
    committed: dict = {"step": 0, "digests": [], "samples": []}
    if (out / CHECKPOINT).exists():
        committed = pickle.loads((out / CHECKPOINT).read_bytes())
        loader.load_state_dict(committed["state"])
    step, digests, samples = committed["step"], list(committed["digests"]), list(committed["samples"])
    if step >= args.steps:  # killed after its last checkpoint, before it exited: nothing left to train
        return
    progress = open(out / PROGRESS, "a")  # noqa: SIM115 (one line a step, until killed)
    for batch in loader:
        digest, members = batch_record(batch)
        time.sleep(args.step_seconds)  # the training step this batch feeds
        step += 1
        digests.append(digest)
        samples.append(members)
        progress.write(f"{os.getpid()} {step}\n")
        progress.flush()
        if step % args.every == 0 or step == args.steps:
            state = {"step": step, "digests": digests, "samples": samples, "state": loader.state_dict()}
            write_atomic(out / CHECKPOINT, pickle.dumps(state))
        if step >= args.steps:
            break
    progress.close()


def start(args, out: Path) -> subprocess.Popen:
    command = [sys.executable, __file__, "--child", "--root", str(args.root), "--out", str(out)]
    command += ["--steps", str(args.steps), "--every", str(args.every), "--workers", str(args.workers)]
    command += ["--step-seconds", str(args.step_seconds)]
    return subprocess.Popen(command, start_new_session=True)  # its own group: workers die with it


def steps_since(out: Path, pid: int) -> int:
    path = out / PROGRESS
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.split()[0] == str(pid))


def run_with_kills(args, out: Path, rng: random.Random) -> int:
    """Start, kill and resume until the loop finishes; the number of kills."""
    kills = 0
    while True:
        process = start(args, out)
        started = time.monotonic()
        deadline = started + rng.uniform(args.kill_min, args.kill_max) if kills < args.kills else None
        while process.poll() is None:
            if deadline and time.monotonic() >= deadline and steps_since(out, process.pid) >= args.min_steps:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                kills += 1
                print(
                    f"killed after {time.monotonic() - started:.1f} s, {steps_since(out, process.pid)} steps",
                    flush=True,
                )
                break
            time.sleep(0.05)
        else:
            if process.returncode != 0:
                raise SystemExit(f"the loop failed with exit status {process.returncode}")
            return kills


def compare(reference: dict, resumed: dict) -> dict:
    """Lost and duplicated samples (against the uninterrupted run's counts) and whether the
    batch sequence is the same."""
    want = collections.Counter(tuple(s) for batch in reference["samples"] for s in batch)
    got = collections.Counter(tuple(s) for batch in resumed["samples"] for s in batch)
    return {
        "steps": resumed["step"],
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
        "same_sequence": reference["digests"] == resumed["digests"],
    }


def soak(args) -> dict:
    from bagel_data.cli.main import DEMO_PACKING
    from bagel_data.synthetic.dataset import write_demo_dataset

    args.root.mkdir(parents=True, exist_ok=True)
    paths = write_demo_dataset(args.root)
    # read-ahead set: its default reads local files inline, and the soak must run its threads
    packing = {**DEMO_PACKING, "rebuild_threads": 2, "text_cond_dropout_prob": 0.1, "read_ahead_bytes": 32 << 20}
    run = {"grouped_datasets": str(paths.grouped_datasets), "dataset_info": str(paths.dataset_info), "packing": packing}
    (args.root / "run.yaml").write_text(json.dumps(run))  # JSON is YAML
    results = {}
    for name in ("uninterrupted", "killed"):
        out = args.root / name
        for stale in (CHECKPOINT, PROGRESS):
            (out / stale).unlink(missing_ok=True)
        out.mkdir(exist_ok=True)
        begun = time.monotonic()
        kills = run_with_kills(args, out, random.Random(args.seed)) if name == "killed" else 0
        if name == "uninterrupted":
            process = start(args, out)
            if process.wait() != 0:
                raise SystemExit("the uninterrupted loop failed")
        results[name] = pickle.loads((out / CHECKPOINT).read_bytes())
        results[f"{name}_seconds"] = round(time.monotonic() - begun, 1)
        results[f"{name}_kills"] = kills
    report = compare(results["uninterrupted"], results["killed"])
    report.update(kills=results["killed_kills"], seconds=results["killed_seconds"],
                  uninterrupted_seconds=results["uninterrupted_seconds"])  # fmt: skip
    return report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("soak_data"), help="demo data and run folders")
    parser.add_argument("--steps", type=int, default=60, help="batches the loop trains on")
    parser.add_argument("--every", type=int, default=5, help="steps between checkpoints")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--step-seconds", type=float, default=0.5, help="time one training step takes")
    parser.add_argument("--kills", type=int, default=4, help="SIGKILLs before the loop is let finish")
    parser.add_argument("--kill-min", type=float, default=15.0, help="earliest kill, seconds after a start")
    parser.add_argument("--kill-max", type=float, default=40.0, help="latest kill, seconds after a start")
    parser.add_argument("--min-steps", type=int, default=1, help="steps trained since a start before a kill")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child(args)
        return 0
    report = soak(args)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    ok = report["lost"] == 0 and report["duplicated"] == 0 and report["same_sequence"] and report["kills"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
