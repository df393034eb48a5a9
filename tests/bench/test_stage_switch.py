"""`bagel-data bench mixing --switch`: per-step token shares across a change point
(bagel_bench/stage_switch.py). The measurement itself runs real DataLoader workers on the
demo data (`docs/performance.md`); here, what turns its packs into figures."""

from __future__ import annotations

import collections

from bagel_bench.stage_switch import STAGE_2, pack_tokens, staged_groups, step_tokens, window_figures


def test_the_staged_groups_switch_at_the_step_and_give_every_worker_a_unit():
    groups = {
        "vlm_sft": {"weight": 0.2, "num_used_data": [40], "is_mandatory": False},
        "t2i_pretrain": {"weight": 0.5, "num_used_data": [3], "is_mandatory": True},
    }
    staged = staged_groups(groups, switch=20, workers=4)
    assert staged["vlm_sft"]["weight"] == [[0, 1.0], [20, 0.2]]
    assert staged["t2i_pretrain"] == {"weight": [[0, 0.0], [20, 0.5]], "num_used_data": [4], "is_mandatory": False}
    assert staged["vlm_sft"]["num_used_data"] == [40] and groups["t2i_pretrain"]["num_used_data"] == [3]


def test_a_packs_tokens_leave_the_flex_padding_out():
    batch = {
        "sample_lens": [30, 50, 12],  # the last: padding up to the budget (use_flex)
        "batch_data_indexes": [{"dataset_name": "vlm_sft"}, {"dataset_name": "t2i_pretrain"}],
    }
    assert pack_tokens(batch, use_flex=True) == {"vlm_sft": 30, "t2i_pretrain": 50}
    no_flex = {**batch, "sample_lens": [30, 50]}
    assert pack_tokens(no_flex, use_flex=False) == {"vlm_sft": 30, "t2i_pretrain": 50}


def test_the_window_is_steps_switch_plus_5_to_15_over_both_ranks():
    names = list(STAGE_2)
    on_target = collections.Counter({name: int(1000 * share) for name, share in STAGE_2.items()})
    lagging = collections.Counter({"vlm_sft": 1000})
    rank_0 = [lagging] * 25 + [on_target] * 11 + [lagging] * 3  # steps 20..24 lag, 25..35 on target
    steps = step_tokens([rank_0, rank_0])
    assert len(steps) == 39 and steps[30] == on_target + on_target
    figures = window_figures(steps, switch=20, names=names)
    assert figures["max_error_points"] == 0.0 and figures["targets"]["vlm_sft"] == 0.2
    late = window_figures(steps, switch=19, names=names)  # the window takes in step 24, all VLM
    assert late["shares"]["vlm_sft"] > 0.25 and late["max_error_points"] > 5
