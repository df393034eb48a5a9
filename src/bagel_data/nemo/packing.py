"""The reference-shaped door: `DataConfig` and `PackedDataset(data_config, ...)`.

Mirrors `nemo_automodel.components.datasets.multimodal.packing` (itself a port of BAGEL's
`data/dataset_base.py`). `DataConfig` is BAGEL's and NeMo's at once: BAGEL's trainer builds
it positionally (`DataConfig(grouped_datasets, 0.1, 0.4, ...)`) and sets attributes
afterwards; NeMo's recipe builds it by keyword (`DataConfig(grouped_datasets=...,
dataset_info=..., data_seed=...)`, where it is also `BagelDatasetConfig`) and calls
`build()`. Its fields are every setting of `Settings` plus where the groups and the dataset
info come from. `PackedDataset` reads the config's settings, lets explicit arguments win,
and builds through `assembly.assemble` like every other door.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from ..assembly import assemble
from ..config import load_mapping
from ..errors import ConfigError
from ..packing.packed_dataset import PackedDataset as _CorePackedDataset
from ..schema.settings import SETTING_FIELDS, SETTING_NAMES, Settings
from .signatures import bind_explicit, keyword, keyword_settings, positional, positional_settings, with_self

# Paths always come from an explicit dataset_info unless the user fills this, as a BAGEL
# user edits data/dataset_info.py: `DEFAULT_DATASET_INFO.update({...})`.
DEFAULT_DATASET_INFO: dict = {}

# -- DataConfig / BagelDatasetConfig ---------------------------------------------------------
_SOURCES = ("grouped_datasets_path", "dataset_info", "dataset_info_path")
_CONFIG_SIGNATURE = inspect.Signature(
    [
        positional("grouped_datasets", None),
        *positional_settings("data_config"),  # BAGEL's positional order
        *[keyword(name) for name in _SOURCES],
        *keyword_settings("budget", "seed", "option"),
    ]
)


def _config_init(self, *args, **kwargs) -> None:
    bound = _CONFIG_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    for name, value in bound.arguments.items():
        setattr(self, name, value)
    Settings.gather(self)  # a wrong value is a ConfigError now, not when the dataset is built


_config_init.__signature__ = with_self(_CONFIG_SIGNATURE)  # type: ignore[attr-defined]


def _resolved(self, name: str):
    """A private copy of `grouped_datasets` or `dataset_info` (a path wins over the mapping;
    a `dataset_info` path stays a path, so relative paths inside the file stay relative to it)."""
    path, inline = getattr(self, f"{name}_path"), getattr(self, name)
    if path is None and inline is None:
        raise ConfigError(name, None, f"a BAGEL dataset config needs {name} or {name}_path")
    if path is not None:
        return path if name == "dataset_info" else load_mapping(path, f"{name}_path")[0]
    if not isinstance(inline, Mapping):
        raise ConfigError(name, type(inline).__name__, "must be a mapping (or give a *_path file)")
    return copy.deepcopy(dict(inline))


def _build(
    self, *, tokenizer, special_tokens, rank: int, world_size: int, num_workers: int, global_seed, data_status=None
):
    """A fresh `PackedDataset` with `set_epoch(data_seed)` applied; this config is not
    changed. `global_seed` goes to the packer's own generator (see docs/coming_from.md);
    the caller's global random generators are left as they are."""
    grouped, info = self.resolved("grouped_datasets"), self.resolved("dataset_info")
    runtime = dataclasses.replace(
        self,
        grouped_datasets=grouped,
        grouped_datasets_path=None,
        dataset_info=info if isinstance(info, Mapping) else None,
        dataset_info_path=None if isinstance(info, Mapping) else info,
    )
    # `PackedDataset` is looked up in this module when called, as NeMo's tests patch it here.
    dataset = PackedDataset(
        data_config=runtime,
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        local_rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        data_status=data_status,
        dataset_info=info,
        global_seed=global_seed,
    )
    dataset.set_epoch(self.data_seed)
    return dataset


def _config_fields() -> list[tuple[str, Any, Any]]:
    sources: list[tuple[str, Any, Any]] = [
        (name, Any, dataclasses.field(default=None, repr=name.endswith("_path")))
        for name in ("grouped_datasets", *_SOURCES)
    ]
    settings: list[tuple[str, Any, Any]] = [
        (f.name, f.type, dataclasses.field(default=f.default, metadata=f.metadata)) for f in SETTING_FIELDS
    ]
    return sources + settings


DataConfig: Any = dataclasses.make_dataclass(
    "DataConfig",
    _config_fields(),
    init=False,
    namespace={
        "__init__": _config_init,
        "__doc__": (
            "BAGEL's and NeMo AutoModel's data config: the groups, the dataset info, and every "
            "setting (mutable: attributes set before the dataset is built take effect)."
        ),
        "__module__": __name__,
        "resolved": _resolved,
        "build": _build,
    },
)
BagelDatasetConfig = DataConfig  # NeMo AutoModel: `DataConfig = BagelDatasetConfig`


def grouped_datasets_of(data_config):
    """The group mapping of a data config (a `*_path` file wins, as in NeMo AutoModel)."""
    path = getattr(data_config, "grouped_datasets_path", None)
    grouped = path if path is not None else getattr(data_config, "grouped_datasets", None)
    if grouped is None:
        raise ConfigError(
            "data_config.grouped_datasets", None, "set grouped_datasets (a mapping) or grouped_datasets_path"
        )
    return grouped


def dataset_info_for(data_config, dataset_info):
    """`dataset_info` if given, else the config's own, else `DEFAULT_DATASET_INFO` when filled."""
    if dataset_info is not None:
        return dataset_info
    for key in ("dataset_info_path", "dataset_info"):
        value = getattr(data_config, key, None)
        if value is not None:
            return value
    if DEFAULT_DATASET_INFO:
        return DEFAULT_DATASET_INFO
    raise ConfigError(
        "dataset_info",
        None,
        "no dataset_info was passed and bagel_data.datasets.DEFAULT_DATASET_INFO is empty: pass "
        "dataset_info= (a mapping group -> dataset name -> {data_dir, ...}, or a YAML/JSON path) "
        "or fill DEFAULT_DATASET_INFO as you would edit BAGEL's data/dataset_info.py",
    )


# -- PackedDataset(data_config, ...) -----------------------------------------------------------
_PACKED_SIGNATURE = inspect.Signature(
    [
        positional("data_config"),
        positional("tokenizer"),
        positional("special_tokens"),
        positional("local_rank"),
        positional("world_size"),
        positional("num_workers"),
        *positional_settings("budget"),
        positional("data_status", None),
        positional("dataset_info", None),
        positional("global_seed", None),
        *keyword_settings("seed", "data_config", "option"),
    ]
)


class PackedDataset(_CorePackedDataset):
    """The reference's `PackedDataset(data_config, tokenizer, special_tokens, local_rank,
    world_size, num_workers, <budgets>, data_status, dataset_info, global_seed)`.

    Each setting is the argument when one is passed, else the data config's attribute of
    that name (a `DataConfig`, or any object with the reference's attributes), else its
    default. `dataset_info` defaults to the config's own, then to `DEFAULT_DATASET_INFO`.
    `data_status` is this rank's dict (group -> worker id -> position) or the list gathered
    over ranks. `set_epoch(data_seed)` is left to the caller, as in the reference.
    """

    def __init__(self, *args, **kwargs):
        given = bind_explicit(_PACKED_SIGNATURE, args, kwargs)
        data_config = given["data_config"]
        settings = Settings.gather(data_config, **{k: v for k, v in given.items() if k in SETTING_NAMES})
        parts = assemble(
            given["tokenizer"],
            grouped_datasets_of(data_config),
            dataset_info_for(data_config, given.get("dataset_info")),
            settings,
            local_rank=given["local_rank"],
            world_size=given["world_size"],
            num_workers=given["num_workers"],
            data_status=given.get("data_status"),
        )
        self._setup(
            parts,
            given["special_tokens"],
            num_workers=given["num_workers"],
            tokenizer=given["tokenizer"],
            global_seed=given.get("global_seed"),
        )
        self.data_config = data_config


PackedDataset.__init__.__signature__ = _PACKED_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=[
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *_PACKED_SIGNATURE.parameters.values(),
    ]
)

__all__ = ["DEFAULT_DATASET_INFO", "BagelDatasetConfig", "DataConfig", "PackedDataset"]
