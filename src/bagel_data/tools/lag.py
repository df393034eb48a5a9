"""What `validate` says about each change point of a mixture schedule: the lag to expect.

At a change point each DataLoader worker's overflow buffer still holds up to
`max_buffer_size` samples drawn for the old weights, in the old weights' proportions of
samples. From the config (buffer size, pack budget) and each group's median sample length
(the walk's), `change_lags` estimates, per change point and per worker:

- which groups' buffered samples are over-represented for the new weights, and how many;
- in the default mode with `mix_by: tokens`, those samples are paced (`packing/pacing.py`):
  the new token shares hold from the first pack on, and the over-represented samples drain
  at their group's new share (at least `DRAIN_FLOOR`) of each pack, within the steps given;
- otherwise (`mix_by: samples`, or `compat: bagel`) the buffer goes out first: the new
  shares are reached once a buffer's worth of tokens has been packed.

A step is a pack on a rank; a worker makes every `num_workers`-th one, so a worker's packs
count `num_workers` steps each. These are estimates (median lengths, a full buffer), meant
as the order of magnitude, hence "~".
"""

from __future__ import annotations

import itertools
import math

from ..packing.pacing import DRAIN_FLOOR


def _token_shares(weights: dict[str, float], lengths: dict[str, float], mix_by: str) -> dict[str, float]:
    """Each group's expected share of the packed tokens under `weights`."""
    raw = {g: w if mix_by == "tokens" else w * lengths[g] for g, w in weights.items()}
    total = sum(raw.values()) or 1.0
    return {g: value / total for g, value in raw.items()}


def change_lags(
    phases: list[dict],
    lengths: dict[str, float],
    *,
    max_buffer_size: int,
    max_num_tokens: int,
    num_workers: int,
    paced: bool,
    mix_by: str,
) -> list[dict]:
    """One entry per change point of `phases` (`validate.schedule_phases`): the step, the
    groups whose buffered samples lag (samples and tokens per worker), the steps until the
    new shares hold and until those samples are packed, and the sentence `validate` prints.
    `lengths`: each group's median sample length (groups without one are left out)."""
    stride = max(num_workers, 1)
    lags = []
    for number, (old, new) in enumerate(itertools.pairwise(phases), start=2):
        known = {g: float(lengths[g]) for g in new["weights"] if lengths.get(g)}
        if not known:
            continue
        before = _token_shares({g: old["weights"][g] for g in known}, known, mix_by)
        after = _token_shares({g: new["weights"][g] for g in known}, known, mix_by)
        per_sample = {g: before[g] / known[g] for g in known}
        total = sum(per_sample.values()) or 1.0
        waiting = {g: max_buffer_size * per_sample[g] / total for g in known}  # samples of a full buffer
        behind = {g: round(n) for g, n in waiting.items() if round(n) > 0 and after[g] < before[g]}
        tokens = {g: round(behind[g] * known[g]) for g in behind}
        if paced:
            drain = {g: math.ceil(tokens[g] / (max(after[g], DRAIN_FLOOR) * max_num_tokens)) * stride for g in behind}
            target_steps = 0
        else:
            buffered = sum(waiting[g] * known[g] for g in known)
            target_steps = math.ceil(buffered / max_num_tokens) * stride
            drain = dict.fromkeys(behind, target_steps)
        lags.append(
            {
                "phase": number,
                "step": new["from_step"],
                "target_steps": target_steps,
                "waiting": behind,
                "waiting_tokens": tokens,
                "drain_steps": drain,
                "note": _note(number, new["from_step"], target_steps, behind, tokens, drain, after, paced, mix_by),
            }
        )
    return lags


def _note(number, step, target_steps, behind, tokens, drain, after, paced, mix_by) -> str:
    head = f"stage {number} at step {step:,}: "
    if paced:
        head += "the new token shares hold from its first pack (mix_by: tokens paces the buffer)"
    else:
        why = "compat: bagel" if mix_by == "tokens" else "mix_by: samples"
        head += f"the new shares are reached within ~{target_steps} steps (the buffer goes out first; {why})"
    if not behind:
        return head + "; no group's buffered samples lag"
    parts = []
    for group in sorted(behind, key=lambda g: -tokens[g]):
        part = f"up to {behind[group]} buffered samples of {group} (~{tokens[group]:,} tokens per worker)"
        if paced:
            part += f" drain at its new share {max(after[group], DRAIN_FLOOR):.2g} within ~{drain[group]} steps"
        parts.append(part)
    return head + "; " + "; ".join(parts)
