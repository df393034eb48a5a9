"""The lag `validate` states at each change point of a mixture schedule (tools/lag.py).

The figures are worked out by hand from the config: a full buffer of `max_buffer_size`
samples in the old weights' sample proportions, drained at the new share of each pack
(paced) or packed first (not paced); a worker's pack is `num_workers` steps.
"""

from __future__ import annotations

import pytest

from bagel_data.tools.lag import change_lags

STAGE_1 = {"from_step": 0, "weights": {"vlm": 1.0, "t2i": 0.0, "edit": 0.0}}
STAGE_2 = {"from_step": 20, "weights": {"vlm": 0.2, "t2i": 0.5, "edit": 0.3}}
LENGTHS = {"vlm": 400, "t2i": 300, "edit": 600}


def _lags(phases=(STAGE_1, STAGE_2), lengths=LENGTHS, *, paced=True, mix_by="tokens", workers=2, buffer=50):
    return change_lags(
        list(phases), lengths, max_buffer_size=buffer, max_num_tokens=8192, num_workers=workers,
        paced=paced, mix_by=mix_by,
    )  # fmt: skip


def test_a_paced_backlog_drains_at_its_groups_new_share():
    """50 VLM samples x 400 tokens = 20,000 tokens at 0.2 x 8,192 a pack: 13 packs of a
    worker, 26 steps on 2 workers; the shares hold from the first pack."""
    (lag,) = _lags()
    assert (lag["phase"], lag["step"], lag["target_steps"]) == (2, 20, 0)
    assert lag["waiting"] == {"vlm": 50} and lag["waiting_tokens"] == {"vlm": 20_000}
    assert lag["drain_steps"] == {"vlm": 26}
    assert lag["note"] == (
        "stage 2 at step 20: the new token shares hold from its first pack (mix_by: tokens paces the buffer); "
        "up to 50 buffered samples of vlm (~20,000 tokens per worker) drain at its new share 0.2 within ~26 steps"
    )


def test_without_pacing_the_buffer_goes_out_first():
    """mix_by: samples: 20,000 buffered tokens are 3 packs of 8,192, 6 steps on 2 workers."""
    (lag,) = _lags(paced=False, mix_by="samples")
    assert lag["target_steps"] == 6 and lag["drain_steps"] == {"vlm": 6}
    assert "reached within ~6 steps" in lag["note"] and "mix_by: samples" in lag["note"]
    (bagel,) = _lags(paced=False, mix_by="tokens", workers=1)
    assert bagel["target_steps"] == 3 and "compat: bagel" in bagel["note"]


def test_a_group_dropped_to_weight_0_drains_at_the_floor():
    stage_2 = {"from_step": 20, "weights": {"vlm": 0.0, "t2i": 0.5, "edit": 0.5}}
    (lag,) = _lags((STAGE_1, stage_2))
    assert lag["drain_steps"] == {"vlm": 246}  # ceil(20,000 / (0.02 x 8,192)) = 123 packs x 2
    assert "new share 0.02" in lag["note"]


def test_only_the_groups_whose_share_falls_are_named():
    """Old tokens 0.5 / 0.5 of 400- and 100-token samples: a buffer of 50 holds 10 VLM and 40
    T2I samples; only VLM (0.5 -> 0.2) lags."""
    old = {"from_step": 0, "weights": {"vlm": 0.5, "t2i": 0.5}}
    new = {"from_step": 7, "weights": {"vlm": 0.2, "t2i": 0.8}}
    (lag,) = _lags((old, new), {"vlm": 400, "t2i": 100}, workers=1)
    assert lag["waiting"] == {"vlm": 10} and lag["drain_steps"] == {"vlm": 3}  # ceil(4,000 / 1,638.4)


@pytest.mark.parametrize("phases", [(STAGE_1,), ()])
def test_no_change_point_no_lag(phases):
    assert _lags(phases) == []


def test_a_later_change_point_is_numbered_and_a_rising_group_not_named():
    stage_3 = {"from_step": 90, "weights": {"vlm": 0.6, "t2i": 0.2, "edit": 0.2}}
    lags = _lags((STAGE_1, STAGE_2, stage_3))
    assert [lag["phase"] for lag in lags] == [2, 3] and lags[1]["step"] == 90
    assert "vlm" not in lags[1]["waiting"] and set(lags[1]["waiting"]) == {"t2i", "edit"}
