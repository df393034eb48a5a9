"""Smoke test of the benchmark: every section is there with sane values (nothing timed)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from bagel_bench.main import SECTIONS, default_paths
from bagel_data.families import media
from bagel_data.instruments import SEAMS
from bagel_data.media import images
from bagel_data.packing import buffers, pack
from bagel_data.sample import SampleBuilder


def test_quick_benchmark_writes_every_section(tmp_path):
    """`bagel-data bench --quick`, the command docs/performance.md shows (at 2 batches)."""
    from typer.testing import CliRunner

    from bagel_data.cli.main import app

    originals = (images.ImageTransform.prepare, images.ImageTransform.to_tensor, media.decode_image,
                 pack.PackBuilder.add, pack.pad_images, pack.stack_patches, buffers.in_worker,
                 pack.prepare_attention_mask_per_sample, SampleBuilder.build)  # fmt: skip
    threads = torch.get_num_threads()
    out = tmp_path / "results.json"
    args = ["bench", "--quick", "--root", str(tmp_path / "data"), "--out", str(out), "--batches", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert set(SECTIONS) <= set(saved)
    assert "pipeline / floor" in result.output  # the report was printed

    # the instruments detached, and left the library's functions as they were
    assert all(point.instrument is None for point in SEAMS.values())
    assert (images.ImageTransform.prepare, images.ImageTransform.to_tensor, media.decode_image,
            pack.PackBuilder.add, pack.pad_images, pack.stack_patches, buffers.in_worker,
            pack.prepare_attention_mask_per_sample, SampleBuilder.build) == originals  # fmt: skip
    assert media.decode_image is images.decode_image  # the one decode of every family
    assert torch.get_num_threads() == threads

    pipeline, floor = saved["pipeline"], saved["floor"]
    assert pipeline["tokens"] > 0 and pipeline["samples"] > 0 and pipeline["tokens_per_second"] > 0
    assert pipeline["deterministic"] is True
    assert 0 < pipeline["first_batch_seconds"] <= pipeline["seconds"]
    assert floor["images"] > 0 and floor["transform_calls"] >= floor["images"]
    assert floor["seconds"] > 0 and 0 < floor["pipeline_over_floor"] < 20
    assert 0 < floor["previous_path_over_floor"] < 20  # the same-run baseline ran
    assert floor["identical_to_previous_path"] is True
    # timed in steady state (after the warm-up packs), and also from a new iterator
    assert pipeline["warmup_packs"] == 1 and len(pipeline["pack_seconds"]) == 2
    fresh = floor["fresh_start"]
    assert fresh["images"] > 0 and fresh["floor_seconds"] > 0 and 0 < fresh["pipeline_over_floor"] < 20
    assert fresh["pipeline_over_floor"] == fresh["pipeline_seconds"] / fresh["floor_seconds"]
    assert pipeline["page_faults"] >= 0 and pipeline["system_seconds"] >= 0
    assert floor["float32_bytes"] >= 12 * floor["images"] and "write_bandwidth" not in floor  # no memset figure
    assert set(saved["transfer"]) == {"copied_at_send", "shared_at_birth", "recycled"}
    for mode in saved["transfer"].values():  # the same packs each way
        assert mode["bytes"] == saved["transfer"]["copied_at_send"]["bytes"] > 0 and mode["share_seconds"] >= 0
    assert saved["config"]["warm_memory"]["megabytes"] == 256 and saved["config"]["warm_memory"]["seconds"] > 0
    stages = {"read", "decode", "resize", "to_uint8", "convert_vae", "convert_vit", "tokenize", "pack", "to_batch"}
    assert stages | {"collate", "other"} <= set(saved["stages"])
    assert saved["stages"]["tensorize"]["calls"] == 0  # floats are written into the batch, not made per image
    assert saved["stages"]["decode"]["calls"] > 0 and saved["stages"]["collate"]["calls"] == 2

    assert saved["loader"]["one_process_steady_tokens_per_second"] == pipeline["tokens_per_second"]
    for workers in (1, 2):  # --quick: no 0-worker child, the in-process rate instead
        run = saved["loader"][f"workers_{workers}"]
        assert run["workers"] == workers and run["tokens"] > 0 and run["steady_tokens_per_second"] > 0
        assert run["warmup_batches"] == workers and run["batches"] == workers + 4  # 1 per worker, then 2 x 2
        assert run["main_process_cpu_seconds"] >= 0 and 0 <= run["main_process_cpu_share"] < 2
        assert run["peak_rss"]["main"]["VmHWM_mb"] > 0
        assert len(run["peak_rss"]["workers"]) >= workers
        assert workers == 0 or run["scaling"] > 0
        assert 0 < run["machine_ceiling"] <= 1.5  # K processes at once, each against one alone
        assert all(w["VmHWM_mb"] > 0 for w in run["peak_rss"]["workers"])
        assert run["checkpoint_bytes"] < 2**20

    formats, write = saved["pixel_format"], saved["float32_write"]  # uint8 beside float32, same rounds
    for fmt in ("float32", "uint8"):
        assert formats[fmt]["tokens_per_second"] > 0 and formats[fmt]["tokens_per_cpu_second"] > 0
        assert 0 < formats[fmt]["pipeline_over_floor"] < 20
    assert formats["float32"]["seconds"] == pipeline["seconds"]
    assert write["float32_bytes"] == floor["float32_bytes"] and write["cast_write_seconds"] > 0
    assert write["conversion_seconds"] > 0 and write["uint8_seconds"] > 0

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


def test_quick_defaults_to_a_temporary_folder_never_the_committed_results(tmp_path):
    root, out = default_paths(None, None, quick=True)
    assert out.parent.name.startswith("bagel-bench-quick-") and not out.exists()
    assert Path.cwd() not in out.parents and Path.cwd() not in root.parents and root != Path.cwd()
    assert default_paths(None, tmp_path / "x.json", quick=True)[1] == tmp_path / "x.json"
    assert default_paths(tmp_path, None, quick=False) == (tmp_path, Path("benchmarks/results.json"))
    out.parent.rmdir()


def test_bench_config_reports_both_pixel_formats_on_a_run_config(tmp_path, demo_root):
    from typer.testing import CliRunner

    from bagel_data.cli.main import app

    run = tmp_path / "run.yaml"
    run.write_text(
        f"grouped_datasets: {demo_root / 'grouped_datasets.yaml'}\ndataset_info: {demo_root / 'dataset_info.yaml'}\n"
        "packing: {expected_num_tokens: 4096, max_num_tokens: 4608, max_num_tokens_per_sample: 4096, "
        "prefer_buffer_before: 2048, use_flex: true, max_latent_size: 64}\n"
    )
    out = tmp_path / "config.json"
    result = CliRunner().invoke(app, ["bench", "config", str(run), "--quick", "--batches", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["config"]["run_config"] == str(run) and saved["images"] > 0
    for fmt in ("float32", "uint8"):
        assert saved["formats"][fmt]["tokens_per_second"] > 0 and saved["formats"][fmt]["pipeline_over_floor"] > 0
        assert saved["formats"][fmt]["profiled_pipeline_over_decode_resize"] >= 1
        shares = saved["stages"][fmt]
        assert shares["decode"]["calls"] > 0 and abs(sum(v["share"] for v in shares.values()) - 1) < 1e-6
    pixels = saved["pixel_bytes"]
    assert pixels["uint8"]["pixel_bytes_per_pack"] * 4 == pixels["float32"]["pixel_bytes_per_pack"] > 0
    assert saved["write"]["float32_bytes"] > 0 and saved["write"]["cast_write_seconds"] > 0
    assert "pixel_format uint8" in result.output
    approx = saved["approximate"]
    groups = set(yaml.safe_load((demo_root / "grouped_datasets.yaml").read_text()))
    assert set(approx["pixel_error"]) == groups  # every group's images are compared
    for error in approx["pixel_error"].values():
        assert error["images"] > 0 and 0 < error["worst_image_psnr_db"] <= error["psnr_db"]
        assert error["max_abs_levels"] > 0  # bilinear is not bicubic: some pixel moved
    assert approx["floor"]["speedup"] > 0 and approx["same_packs_shape"]
    assert "faster floor" in result.output


def test_approximate_grouped_sets_both_options_in_every_transform_and_leaves_the_input_alone():
    from bagel_bench.approximate import approximate, approximate_grouped
    from bagel_data.media.images import ImageTransform

    grouped = {
        "t2i": {"image_transform_args": {"max_image_size": 64}},
        "vlm": {"vit_image_transform_args": {}},
        "x": {},
    }
    out = approximate_grouped(grouped)
    options = {"resize_backend": "torch", "fast_decode": True}
    assert out["t2i"]["image_transform_args"] == {"max_image_size": 64, **options}
    assert out["vlm"]["vit_image_transform_args"] == options
    assert out["x"] == {} and grouped["t2i"]["image_transform_args"] == {"max_image_size": 64}
    exact = ImageTransform(96, 32, 16, 5000, (0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    fast = approximate(exact)
    assert (fast.rule, fast.image_mean, fast.image_std) == (exact.rule, exact.image_mean, exact.image_std)
    assert (fast.resample, fast.resize_backend, fast.fast_decode) == ("bicubic", "torch", True)
