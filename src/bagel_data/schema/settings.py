"""The pipeline's settings, written once: name, type, default, range and meaning.

`Settings` is the one definition every entrance reads. The signatures of
`make_bagel_multimodal_dataset` and `PackedDataset`, the fields of `BagelDatasetConfig` and
`DataConfig`, the `packing:` section of a run config, the schema tables and the generated
`docs/formats/run_config.md` all come from its fields, so a new setting or a changed default
is one line here (`tests/dropin/test_entrances.py` checks that every door agrees).

Each field carries its schema kind, its meaning and its *role*, which says where the
reference's signatures put it:

* `budget`: the packing budgets, positional in both reference signatures;
* `seed`: `data_seed`, positional in `make_bagel_multimodal_dataset` after `data_status`;
* `data_config`: dropouts and image-geometry sizes, which BAGEL's `DataConfig` holds
  (positional there, and after `data_seed` in `make_bagel_multimodal_dataset`);
* `option`: everything newer, keyword-only at every door.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .kinds import Bool, Field, Int, Number, Str, check_section

COMPAT_MODES = ("bagel",)  # besides None, the default mode (compat.py holds the policy)
MIX_BY = ["samples", "tokens"]  # packing/choosers.py (`register_group_choice` adds a rule)
PACK_STRATEGIES = ("greedy", "best_fit")
PIXEL_FORMATS = ("float32", "uint8")  # media/pixels.py
ROLES = ("budget", "seed", "data_config", "option")


def check_compat(value, key: str = "compat"):
    """`value` if it is a known compat mode (None: the default mode), else a ConfigError
    naming key, value and fix."""
    if value is not None and value not in COMPAT_MODES:
        raise ConfigError(
            key,
            value,
            'use compat="bagel" to reproduce the reference pipeline exactly, or leave it unset (None) '
            "for the default mode (docs/compat.md lists the differences)",
        )
    return value


SEED_LIMIT = 2**32 - 1  # numpy's RandomState takes seeds in [0, SEED_LIMIT]
MAX_FLEX_TOKENS = 1 << 24
# `shuffle_buffer_size`'s default, from benchmarks/bench_shuffle.py (docs/performance.md).
SHUFFLE_BUFFER_SIZE = 1024
# `read_ahead_bytes` where it is not set: a group on remote storage, and a resume's prefetch.
READ_AHEAD_BYTES = 32 << 20  # a flex pack's arrays have max_num_tokens entries: 16.8 M, 450x BAGEL's


def _check_seeds(compat: str | None, data_seed: int, compat_seed: int | None) -> None:
    """compat="bagel" seeds numpy's RandomState (and the reference's `set_epoch`) with the
    seeds, which takes 0 to 2**32 - 1. The default mode keys its own generators by the whole
    of data_seed (`compat.streams.seed_tail`): any integer, negative ones included, runs (and
    resumes), and two seeds give two streams."""
    if compat_seed is not None and not 0 <= compat_seed <= SEED_LIMIT:
        raise ConfigError(
            "compat_seed",
            compat_seed,
            f"must be between 0 and 2**32 - 1 = {SEED_LIMIT} (it seeds numpy's RandomState as the "
            "reference's np.random.seed does); use a seed in that range, or leave it unset for data_seed",
        )
    if compat is not None and not 0 <= data_seed <= SEED_LIMIT:
        raise ConfigError(
            "data_seed",
            data_seed,
            f'with compat="{compat}" it must be between 0 and 2**32 - 1 = {SEED_LIMIT} (the reference seeds '
            "numpy's RandomState with it); use a seed in that range, or the default mode, which takes any integer",
        )


def _setting(default: Any, kind: Any, meaning: str, role: str, *, nullable: bool = False, run: bool = True) -> Any:
    """A field of `Settings`: its default plus what the schema, the docs and the doors need.
    `run=False`: not a key of a run config's `packing:` section (it has a key of its own)."""
    assert role in ROLES, role
    metadata = {"schema": Field(kind, meaning, default, nullable=nullable), "role": role, "run": run}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting of a packed dataset, checked by type and range at construction."""

    # -- budgets (the reference's positional packing arguments) --------------------------
    expected_num_tokens: int = _setting(
        32768, Int(1), "a pack is emitted once it holds at least this many tokens", "budget"
    )
    max_num_tokens_per_sample: int = _setting(
        16384, Int(1), "samples this long or longer are skipped (counted)", "budget"
    )
    max_num_tokens: int = _setting(36864, Int(1), "hard cap of tokens in one pack", "budget")
    prefer_buffer_before: int = _setting(
        16384, Int(0), "below this pack length, buffered (left-over) samples are used first", "budget"
    )
    max_buffer_size: int = _setting(50, Int(0), "most samples held back for a later pack", "budget")
    interpolate_pos: bool = _setting(False, Bool(), "interpolated instead of extrapolated 2D position ids", "budget")
    use_flex: bool = _setting(False, Bool(), "flex-attention layout: packs are padded to max_num_tokens", "budget")
    # -- the seed -------------------------------------------------------------------------
    data_seed: int = _setting(42, Int(), "seed of the epoch shuffle and of every random draw of the packer", "seed")
    # -- dropouts and geometry (BAGEL's DataConfig) --------------------------------------
    text_cond_dropout_prob: float = _setting(
        0.1, Number(0, 1), "chance to drop a text condition (classifier-free guidance)", "data_config"
    )
    vit_cond_dropout_prob: float = _setting(0.4, Number(0, 1), "chance to drop a ViT image condition", "data_config")
    vae_cond_dropout_prob: float = _setting(0.1, Number(0, 1), "chance to drop a VAE image condition", "data_config")
    vae_image_downsample: int = _setting(
        16, Int(1), "pixels per VAE latent side (the VAE transform's stride)", "data_config"
    )
    max_latent_size: int = _setting(
        32, Int(1), "side of the VAE position table: max_image_size / vae_image_downsample must fit", "data_config"
    )
    vit_patch_size: int = _setting(14, Int(1), "pixels per ViT patch side (the ViT transform's stride)", "data_config")
    max_num_patch_per_side: int = _setting(70, Int(1), "side of the ViT position table", "data_config")
    # -- options (keyword-only at every door) ---------------------------------------------
    strict: bool = _setting(False, Bool(), "raise BadSampleError at the first bad row instead of skipping it", "option")
    max_consecutive_failures: int = _setting(100, Int(0), "bad rows in a row before TooManyFailuresError", "option")
    compat: str | None = _setting(
        None,
        Str(COMPAT_MODES),
        "reproduce the reference pipeline exactly, for any configuration (docs/compat.md)",
        "option",
        nullable=True,
        run=False,  # a run config's top-level `compat:` key
    )
    compat_seed: int | None = _setting(
        None,
        Int(),
        'compat: "bagel" only: the main process\'s seed of the reference-order generators (default data_seed)',
        "option",
        nullable=True,
    )
    mix_by: str = _setting(
        "samples",
        Str(MIX_BY),
        "what a group weight is a share of: samples (the reference) or packed tokens (docs/packing.md)",
        "option",
    )
    pack_strategy: str = _setting(
        "greedy",
        Str(PACK_STRATEGIES),
        "greedy (the reference) or best_fit: fill each pack from the buffer before it closes",
        "option",
    )
    pixel_format: str = _setting(
        "float32",
        Str(PIXEL_FORMATS),
        "float32 (the reference) or uint8: pixels leave as bytes with their mean / std, 4x fewer bytes; "
        "call batch.normalize_pixels() on the device (docs/formats/batch.md)",
        "option",
    )
    read_ahead_bytes: int | None = _setting(
        None,
        Int(0),
        "bytes each group of each worker may fetch ahead of its stream on a few threads (row groups, "
        "images): hides object-store latency, the output is unchanged; default (null): 32 MiB where the "
        "group's files are on an object store or other remote filesystem, none on local disk (where it "
        "buys nothing); a number applies everywhere; 0 reads inline (docs/performance.md)",
        "option",
        nullable=True,
    )
    shuffle_buffer_size: int = _setting(
        SHUFFLE_BUFFER_SIZE,
        Int(0),
        "default mode: samples a worker draws in a random interleaving of the storage units (row groups, "
        "lines) that hold them, each unit read once, front to back; about this many rows' units are open at "
        "once, and at least one unit per 128 of them (at most 8: large row groups are mixed too); 0 reads "
        "each worker's rows in storage order; a resume keeps the value its checkpoint was taken with; "
        "compat mode keeps the reference's order (docs/packing.md)",
        "option",
    )
    rebuild_threads: int | None = _setting(
        None,
        Int(0),
        "threads per worker that rebuild a resumed checkpoint's buffered samples (decoding their images "
        "again) beside the packer; default: the CPUs less one, at most 8; 0 rebuilds them in order; "
        "the output is unchanged (docs/performance.md)",
        "option",
        nullable=True,
    )

    def __post_init__(self) -> None:
        values = dataclasses.asdict(self)
        check_compat(values["compat"])
        check_section("", values, SETTING_TABLE)
        for name, kind in SETTING_TABLE.items():
            value = values[name]
            if isinstance(kind.kind, Int) and value is not None and type(value) is not int:
                object.__setattr__(self, name, int(value))  # numpy's integers: plain ints from here
        _check_seeds(self.compat, self.data_seed, self.compat_seed)
        if self.use_flex and self.max_num_tokens > MAX_FLEX_TOKENS:
            raise ConfigError(
                "max_num_tokens",
                self.max_num_tokens,
                f"with use_flex every pack is padded to max_num_tokens, at most {MAX_FLEX_TOKENS} "
                f"(2**{MAX_FLEX_TOKENS.bit_length() - 1}); lower it (BAGEL's own is 36864) or set use_flex=False",
            )

    def check(self) -> None:
        """The budgets against each other (not at construction: tests build partial configs)."""
        for key in ("max_num_tokens_per_sample", "expected_num_tokens"):
            if getattr(self, key) > self.max_num_tokens:
                raise ConfigError(
                    key,
                    getattr(self, key),
                    f"must not exceed max_num_tokens={self.max_num_tokens}; lower it or raise max_num_tokens",
                )

    @classmethod
    def gather(cls, *sources: object, **explicit: Any) -> Settings:
        """Settings from `explicit` values, else the first source object that has the
        attribute (a `DataConfig`, a `BagelDatasetConfig`), else the defaults."""
        unknown = sorted(set(explicit) - set(SETTING_NAMES))
        if unknown:
            raise ConfigError(
                unknown[0], explicit[unknown[0]], f"not a setting; the settings are {list(SETTING_NAMES)}"
            )
        values = {}
        for name in SETTING_NAMES:
            if name in explicit:
                values[name] = explicit[name]
                continue
            for source in sources:
                if hasattr(source, name):
                    values[name] = getattr(source, name)
                    break
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def stream_read_ahead(self, remote: bool) -> int:
        """The read-ahead budget of a group's stream: `read_ahead_bytes` where it is set,
        else `READ_AHEAD_BYTES` when the group reads `remote` files, 0 on local disk."""
        if self.read_ahead_bytes is not None:
            return self.read_ahead_bytes
        return READ_AHEAD_BYTES if remote else 0

    @property
    def resume_read_ahead(self) -> int:
        """The budget a resume prefetches a checkpoint's buffer with (and whether its rows
        are rebuilt on threads): `read_ahead_bytes` where set, else `READ_AHEAD_BYTES`,
        local disk included, where the threads decode in parallel."""
        return READ_AHEAD_BYTES if self.read_ahead_bytes is None else self.read_ahead_bytes


SETTING_FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(Settings)
SETTING_NAMES: tuple[str, ...] = tuple(field.name for field in SETTING_FIELDS)
SETTING_TABLE: dict[str, Field] = {field.name: field.metadata["schema"] for field in SETTING_FIELDS}
DEFAULTS: Mapping[str, Any] = {field.name: field.default for field in SETTING_FIELDS}


def names_of(*roles: str) -> tuple[str, ...]:
    """The settings of the given roles, in their declared order."""
    return tuple(field.name for field in SETTING_FIELDS if field.metadata["role"] in roles)


# A run config's `packing:` section: every setting but `compat`, which is a top-level key.
RUN_PACKING_NAMES: tuple[str, ...] = tuple(field.name for field in SETTING_FIELDS if field.metadata["run"])
