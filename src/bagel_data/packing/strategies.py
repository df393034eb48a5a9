"""The two opt-in packing modes: mixing by token share, and filling packs before they close.

`mix_by="samples"` (the default, the reference's rule) draws a group with probability
proportional to its weight, so a weight is a share of *samples*. `mix_by="tokens"` treats
the weights as target shares of the *packed tokens* (every position a sample takes in the
pack: text, ViT and VAE tokens and their begin/end markers) and draws the group that is
furthest below its target; ties are broken by the worker's own generator. Over a run every
group's share of tokens converges to its target whatever its samples' lengths.

`pack_strategy="greedy"` (the default) emits a pack as soon as it reaches
`expected_num_tokens`, or when the next sample does not fit and cannot wait in the buffer.
`pack_strategy="best_fit"` first fills what is left of `max_num_tokens`: it draws samples
into the buffer while the buffer has room (a look-ahead bounded by `max_buffer_size`), then
adds the subset of buffered samples whose total comes closest to the room left without
exceeding it, and emits. The buffer keeps its bound, so the stream is reordered no further
than in greedy mode, and nothing is lost or duplicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..compat import RandomSource
from ..schema.settings import MIX_BY, PACK_STRATEGIES  # noqa: F401  (the modes, named once)


def cumulative_shares(weights: Sequence[float]) -> list[float]:
    total = sum(weights)
    running, shares = 0.0, []
    for weight in weights:
        running += weight
        shares.append(running / total)
    return shares


def choose_by_weight(cumulative: Sequence[float], u: float) -> int:
    """The reference's rule: the first group whose cumulative share exceeds `u`."""
    for group, share in enumerate(cumulative):
        if u < share:
            return group
    return 0


def choose_by_deficit(weights: Sequence[float], tokens: Sequence[int], rng: RandomSource) -> int:
    """The group furthest below its target share of `sum(tokens)`. Ties (every group at its
    target, as at the start) go to a random one among them, weighted, so that the order
    within a run is not fixed by the config order.

    Only groups of positive weight are candidates at all. Giving a zero-weight group a
    deficit (`0 * total - count`) would not do: at large counts the float rounding of the
    others' targets can leave every positive group's deficit a little below 0 (e.g. -2.4e-4
    at 1.8e12 tokens), and a zero-weight group never drawn (deficit exactly 0) would win.
    """
    candidates = [group for group, weight in enumerate(weights) if weight > 0]
    total_weight = sum(weights[group] for group in candidates)
    total_tokens = sum(tokens)
    deficits = [(weights[group] / total_weight) * total_tokens - tokens[group] for group in candidates]
    best = max(deficits)
    tied = [group for group, deficit in zip(candidates, deficits) if deficit >= best - 1e-9]
    if len(tied) == 1:
        return tied[0]
    return tied[choose_by_weight(cumulative_shares([weights[g] for g in tied]), rng.random())]


def best_subset(lengths: Sequence[int], room: int) -> list[int]:
    """Indices (ascending) of a subset of `lengths` whose sum is the largest that is
    `<= room`: an exact subset-sum over at most `max_buffer_size` items, done with one
    big-integer bitset per item (bit t set: a total of t tokens is reachable)."""
    if room <= 0 or not lengths:
        return []
    mask = (1 << (room + 1)) - 1
    reachable = [1]  # reachable[k]: totals reachable with the first k items
    for length in lengths:
        before = reachable[-1]
        reachable.append((before | (before << length)) & mask if 0 < length <= room else before)
    total = reachable[-1].bit_length() - 1
    chosen = []
    for k in range(len(lengths), 0, -1):
        if not (reachable[k - 1] >> total) & 1:  # `total` needs item k-1
            chosen.append(k - 1)
            total -= lengths[k - 1]
    return sorted(chosen)
