"""`bench seams`: how often a pack passes each seam, and what an unattached seam costs."""

from __future__ import annotations

from bagel_bench.seams import call_overhead_seconds, seam_calls_per_pack
from bagel_data.instruments import SEAMS, STAGES


def test_a_pack_passes_the_seams_of_its_stages_and_they_detach_after(demo_root):
    paths = {"grouped": str(demo_root / "grouped_datasets.yaml"), "info": str(demo_root / "dataset_info.yaml")}
    calls = seam_calls_per_pack(paths, packs=1)
    assert set(calls) == set(STAGES)
    assert calls["to_batch"] == calls["collate"] == 1  # one pack, one batch
    for stage in ("read", "decode", "resize", "prepare", "tokenize", "build", "pack"):
        assert calls[stage] > 0, stage
    assert calls["prepare"] == calls["to_uint8"] and calls["build"] >= calls["pack"] > 0
    assert calls["mask"] == 0  # flex attention: no dense mask
    assert all(point.instrument is None for point in SEAMS.values())


def test_the_overhead_of_an_unattached_seam_is_a_small_non_negative_time():
    assert 0 <= call_overhead_seconds(number=2000, repeat=3) < 1e-4
