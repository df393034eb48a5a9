"""Looking at packs: what each position is, who attends to whom, and how full packs are.

`inspect_packs` builds the packed dataset of a run config in this process and writes the
first packs as text (`packs.txt`), optionally as one HTML page (`page.py`) and, where
matplotlib is installed, as PNG pictures (`plots.py`). The pure functions
(`position_kinds`, `attention_fraction`, `render_pack_text`) work on one batch dict; the
pack is read back into samples and pieces by `pieces.py`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...packing.layout import attention_allowed
from ..run import RunConfig, build_from_run_config, load_run_config
from .page import PackView, SampleView, Share, write_page
from .pieces import PackReader, as_dict, loss_mask, position_kinds, render_pack_text, sample_spans
from .plots import KIND_STYLE, PositionKind, draw_attention, draw_histograms, draw_strip
from .steps import config_at_step

__all__ = [
    "KIND_STYLE", "InspectReport", "PositionKind", "attention_fraction", "draw_histograms", "draw_strip",
    "inspect_packs", "position_kinds", "render_pack_text", "sample_spans",
]  # fmt: skip

# What `inspect` says when the PNG pictures cannot be drawn: the text and the page still are.
PLOTS_MISSING = (
    "PNG plots skipped: matplotlib is not installed. Get them with: pip install 'bagel-data[plots]' "
    "(in a checkout made with `make demo`: .venv/bin/pip install -e '.[plots]')"
)


def plotting_available() -> bool:
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class InspectReport:
    out_dir: Path
    strip_paths: tuple[Path, ...]  # empty without matplotlib (`plots_missing` says why)
    attention_paths: tuple[Path, ...]
    histogram_path: Path | None
    text_path: Path
    text: str
    pack_texts: tuple[str, ...]
    fill_ratios: tuple[float, ...]
    sample_lengths: Mapping[str, tuple[int, ...]]
    html_path: Path | None = None
    locations: tuple[tuple[str | None, ...], ...] = ()  # per pack, each sample's file and row
    plots_missing: str | None = None

    @property
    def num_packs(self) -> int:
        return len(self.fill_ratios)


def _sample_masks(batch: dict):
    """(start, allowed L x L) per sample, from the dense masks or rebuilt from the flex splits."""
    spans = sample_spans(batch)
    if "nested_attention_masks" in batch:
        for (start, _), mask in zip(spans, batch["nested_attention_masks"]):
            yield start, (mask == 0).cpu().numpy()
        return
    splits = iter(zip(batch["split_lens"], batch["attn_modes"]))
    for start, end in spans:
        if end == start:  # a zero-length sample has no splits (and no attention to draw)
            continue
        lens, modes, total = [], [], 0
        while total < end - start:
            length, mode = next(splits)
            lens.append(int(length))
            modes.append(mode)
            total += int(length)
        yield start, attention_allowed(lens, modes)


def attention_fraction(batch, max_side: int = 512) -> np.ndarray:
    """The pack's attention pattern downsampled to at most `max_side` square: per cell, the
    fraction of (query, key) pairs allowed. Padding after `sequence_length` is left out.

    Only one sample's mask exists at a time, so long packs do not need an L x L matrix.
    """
    batch = as_dict(batch)
    length = int(batch["sequence_length"])
    side = max(1, min(max_side, length))
    edges = np.arange(side + 1) * length // side
    cell_of = np.repeat(np.arange(side), np.diff(edges))
    allowed_pairs = np.zeros((side, side), dtype=np.float64)
    for start, allowed in _sample_masks(batch):
        if not len(allowed):  # a zero-length sample: nothing to add (reduceat needs one cell)
            continue
        cells = cell_of[start : start + len(allowed)]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(cells)) + 1])
        summed = np.add.reduceat(np.add.reduceat(allowed, cuts, axis=0, dtype=np.int64), cuts, axis=1)
        allowed_pairs[np.ix_(cells[cuts], cells[cuts])] += summed
    sizes = np.diff(edges).astype(np.float64)
    return allowed_pairs / np.outer(sizes, sizes)


# -- the whole run -------------------------------------------------------------------------
def _resolve_config(run_config, dataset_info) -> RunConfig:
    if isinstance(run_config, RunConfig):
        return dataclasses.replace(run_config, dataset_info=os.fspath(dataset_info)) if dataset_info else run_config
    return load_run_config(os.fspath(run_config), os.fspath(dataset_info) if dataset_info else None)


def _index_key(group: str, where) -> tuple[str, str]:
    """A packed sample's key: its `batch_data_indexes` entry (group, position, worker)."""
    return group, json.dumps(where, sort_keys=True, default=str)


def record_locations(dataset) -> dict[tuple[str, str], str]:
    """A map, filled as `dataset` is iterated in this process, from (group, data_indexes) to
    the file and row (or tar member, or line) each sample was read from."""
    seen: dict[tuple[str, str], str] = {}
    for group in dataset.groups:
        samples = group.samples

        def recording(after, log, read_ahead, group=group, samples=samples):
            for cursor, sample in samples(after, log, read_ahead):
                key = _index_key(group.name, sample.get("data_indexes"))
                seen.setdefault(key, group.where(sample.get("row_key"), cursor))
                yield cursor, sample

        group.samples = recording  # this process's dataset only: inspect never hands it on
    return seen


def _shares(dataset, packs: list[dict]) -> list[Share]:
    samples: Counter = Counter()
    tokens: Counter = Counter()
    for batch in packs:
        for (start, end), where in zip(sample_spans(batch), batch["batch_data_indexes"]):
            samples[where["dataset_name"]] += 1
            tokens[where["dataset_name"]] += end - start
    weights = dict(zip(dataset.group_names, dataset.grouped_weights))
    total_weight, total_samples, total_tokens = (
        sum(weights.values()) or 1.0,
        sum(samples.values()) or 1,
        sum(tokens.values()) or 1,
    )
    return [Share(name, weight / total_weight, samples[name] / total_samples, tokens[name] / total_tokens)
            for name, weight in weights.items()]  # fmt: skip


def _skips(dataset) -> dict[str, dict[str, tuple[int, str]]]:
    live = getattr(dataset, "_live", None)
    logs = live.logs if live is not None else []
    return {log.dataset_name: {reason: (count, log.examples.get(reason, "")) for reason, count in log.counts.items()}
            for log in logs if log.counts}  # fmt: skip


def inspect_packs(
    run_config: str | os.PathLike | RunConfig,
    out_dir: str | os.PathLike,
    *,
    num_batches: int = 4,
    dataset_info: str | os.PathLike | None = None,
    tokenizer=None,
    num_workers: int = 1,
    world_size: int = 1,
    rank: int = 0,
    step: int = 0,
    html: str | os.PathLike | None = None,
    pictures: bool = True,
) -> InspectReport:
    """Show the first `num_batches` packs of a run config in `out_dir`: those of worker 0
    of `rank` in a job of `world_size` ranks x `num_workers` workers, with the groups'
    weights of training step `step` (`steps.py`: a staged config's later stage).

    `tokenizer` is None / "qwen2" / a local HF tokenizer folder, or a tokenizer object.
    `html`: also write the packs as one self-contained page there. `pictures`: draw the
    PNGs (skipped, `plots_missing` saying how to get them, where matplotlib is absent).
    """
    config = _resolve_config(run_config, dataset_info)
    if step:
        config = config_at_step(config, step)
    dataset, tok, special_tokens = build_from_run_config(
        config, rank=rank, world_size=world_size, num_workers=num_workers, tokenizer=tokenizer
    )
    plots_missing = None if not pictures or plotting_available() else PLOTS_MISSING
    draw = pictures and plots_missing is None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seen = record_locations(dataset)
    batches = [as_dict(batch) for batch in itertools.islice(iter(dataset), num_batches)]
    locations = [
        tuple(seen.get(_index_key(w["dataset_name"], w)) for w in batch["batch_data_indexes"]) for batch in batches
    ]
    packs = [
        _draw_pack(out, index, batch, dataset.config, tok, special_tokens, list(where), draw)
        for index, (batch, where) in enumerate(zip(batches, locations))
    ]
    lengths: dict[str, list[int]] = defaultdict(list)
    for pack in packs:
        for group, length in pack.lengths:
            lengths[group].append(length)
    fills = [pack.fill for pack in packs]
    texts = [pack.text for pack in packs]
    histogram = draw_histograms(out / "histograms.png", lengths, fills) if draw else None
    text_path = out / "packs.txt"
    text_path.write_text("\n".join(texts), encoding="utf-8")
    html_path = None
    if html is not None:
        views = [_pack_view(i, b, dataset.config, tok, special_tokens, list(w)) for i, (b, w) in
                 enumerate(zip(batches, locations))]  # fmt: skip
        title = f"bagel-data inspect: {num_batches} pack(s)" + (f" at step {step}" if step else "")
        html_path = write_page(
            Path(html), title, views, _shares(dataset, batches), _skips(dataset), dataset.config.mix_by
        )
    return InspectReport(
        out,
        tuple(pack.strip for pack in packs if pack.strip is not None),
        tuple(pack.attention for pack in packs if pack.attention is not None),
        histogram,
        text_path,
        "\n".join(texts),
        tuple(texts),
        tuple(fills),
        {group: tuple(values) for group, values in lengths.items()},
        html_path,
        tuple(locations),
        plots_missing,
    )


@dataclasses.dataclass(frozen=True)
class _DrawnPack:
    """One pack as `inspect_packs` drew it: its pictures (None undrawn), text, fill and sample lengths."""

    strip: Path | None
    attention: Path | None
    text: str
    fill: float
    lengths: list[tuple[str, int]]  # (group, tokens) of each sample, in pack order


def _draw_pack(out: Path, index: int, batch: dict, config, tok, special_tokens, locations, draw: bool) -> _DrawnPack:
    """Pack `index`'s strip of position kinds and attention picture under `out`, and its text."""
    spans = sample_spans(batch)
    groups = [where["dataset_name"] for where in batch["batch_data_indexes"]]
    fill = batch["sequence_length"] / config.max_num_tokens
    strip = attention = None
    if draw:
        title = f"pack {index}: {batch['sequence_length']} tokens ({fill:.1%} of max_num_tokens), {len(spans)} samples"
        kinds = position_kinds(batch, special_tokens)
        strip = draw_strip(out / f"pack_{index}_strip.png", kinds, spans, groups, title)
        fraction = attention_fraction(batch)
        attention = draw_attention(out / f"pack_{index}_attention.png", fraction, batch["sequence_length"], title)
    text = render_pack_text(batch, tok, special_tokens, max_num_patch_per_side=config.max_num_patch_per_side,
                            locations=locations)  # fmt: skip
    lengths = [(group, end - start) for (start, end), group in zip(spans, groups)]
    return _DrawnPack(strip, attention, f"=== pack {index} ===\n{text}", fill, lengths)


def _pack_view(index: int, batch: dict, config, tok, special_tokens, locations) -> PackView:
    """Pack `index` for the page: each sample's pieces with pixels, kinds and loss mask."""
    reader = PackReader(batch, tok, special_tokens, config.max_num_patch_per_side,
                        config.vit_patch_size, config.vae_image_downsample)  # fmt: skip
    kinds, loss = position_kinds(batch, special_tokens), loss_mask(batch)
    samples = [
        SampleView(
            where["dataset_name"],
            where["data_indexes"],
            where["worker_id"],
            (start, end),
            location,
            reader.pieces(start, end),
            kinds[start:end],
            loss[start:end],
        )
        for (start, end), where, location in zip(sample_spans(batch), batch["batch_data_indexes"], locations)
    ]
    fill = batch["sequence_length"] / config.max_num_tokens
    return PackView(index, int(batch["sequence_length"]), fill, samples)
