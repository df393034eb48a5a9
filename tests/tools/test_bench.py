"""Smoke test of the benchmark: every section is there with sane values (nothing timed)."""

from __future__ import annotations

import json

import pytest
import torch

from bagel_data.bench.main import SECTIONS, run_benchmark
from bagel_data.families import edit, t2i, vlm
from bagel_data.media import images
from bagel_data.packing import pack
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.sample import SampleBuilder


@pytest.mark.slow
def test_quick_benchmark_writes_every_section(tmp_path):
    originals = (images.ImageTransform.__call__, t2i.decode_image, pack.PackBuilder.add, PackedDataset.pad_pool_factory,
                 pack.prepare_attention_mask_per_sample, SampleBuilder.build)  # fmt: skip
    threads = torch.get_num_threads()
    out = tmp_path / "results.json"
    result = run_benchmark(tmp_path / "data", out, batches=2, quick=True)
    saved = json.loads(out.read_text())
    assert set(SECTIONS) <= set(saved) and set(saved) == set(result)

    # the instruments put everything back
    assert (images.ImageTransform.__call__, t2i.decode_image, pack.PackBuilder.add, PackedDataset.pad_pool_factory,
            pack.prepare_attention_mask_per_sample, SampleBuilder.build) == originals  # fmt: skip
    assert edit.decode_image is vlm.decode_image is images.decode_image
    assert torch.get_num_threads() == threads

    pipeline, floor = saved["pipeline"], saved["floor"]
    assert pipeline["tokens"] > 0 and pipeline["samples"] > 0 and pipeline["tokens_per_second"] > 0
    assert pipeline["deterministic"] is True
    assert 0 < pipeline["first_batch_seconds"] <= pipeline["seconds"]
    assert floor["images"] > 0 and floor["transform_calls"] >= floor["images"]
    assert floor["seconds"] > 0 and 0 < floor["efficiency"] < 5
    assert 0 < floor["efficiency_without_pad_pool"] < 5  # the same-run baseline ran
    assert saved["config"]["warm_memory"]["megabytes"] == 256 and saved["config"]["warm_memory"]["seconds"] > 0
    assert {"read", "decode", "resize", "tensorize", "tokenize", "pack", "to_batch", "collate", "other"} <= set(
        saved["stages"]
    )
    assert saved["stages"]["decode"]["calls"] > 0 and saved["stages"]["collate"]["calls"] == 2

    for workers in (1, 2):
        run = saved["loader"][f"workers_{workers}"]
        assert run["workers"] == workers and run["tokens"] > 0 and run["samples_per_second"] > 0
        assert run["peak_rss"]["main"]["VmHWM_mb"] > 0
        assert len(run["peak_rss"]["workers"]) >= workers
        assert all(w["VmHWM_mb"] > 0 for w in run["peak_rss"]["workers"])
        assert run["checkpoint_bytes"] < 2**20

    nested = saved["nested_mask"]
    assert nested["tokens_per_second"] > 0 and nested["mask_build_seconds"] > 0
    assert nested["by_group"]["all"]["samples"] > 0
    assert 0 < saved["checkpoint"]["bytes"] < 2**20

    index = saved["jsonl_index"]
    assert index["lines"] == 10_000 and index["bytes_per_line"] <= 16

    fast = saved["fast_decode"]
    twice = fast["twice_target"]
    assert twice["same_shapes"] is True and twice["drafted"] > 0
    assert twice["mean_abs_diff"] < 0.02 and twice["psnr_db"] > 40
    assert fast["bench_images"]["same_shapes"] is True
    assert "available" in fast["simplejpeg"]
