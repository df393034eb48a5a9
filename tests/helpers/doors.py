"""Building one packed configuration through each public entrance ("door").

Every door must give the same packed dataset for the same settings: the conformance tests
run each packed case through all of them, and the entrance tests check them against the
reference run as BAGEL's trainer runs it.
"""

from __future__ import annotations

from bagel_data import BagelDatasetConfig, DataConfig, PackedDataset, make_bagel_multimodal_dataset
from bagel_data.schema.settings import names_of
from bagel_data.tools.run import RunConfig, build_from_run_config

DOORS = ("make_bagel_multimodal_dataset", "PackedDataset(DataConfig)", "BagelDatasetConfig.build", "run_config")


def build_through(
    door: str,
    *,
    tokenizer,
    special_tokens,
    grouped: dict,
    info: dict,
    settings: dict,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 1,
    data_status=None,
):
    """The packed dataset of `settings` (any `Settings` fields, `data_seed` included), built
    as a user of `door` builds it, with `set_epoch(data_seed)` applied as that user would."""
    settings = dict(settings)
    data_seed = settings.get("data_seed", 42)
    topology = dict(local_rank=rank, world_size=world_size, num_workers=num_workers)
    if door == "make_bagel_multimodal_dataset":
        return make_bagel_multimodal_dataset(
            tokenizer, special_tokens, grouped, **topology, data_status=data_status, dataset_info=info, **settings
        )
    if door == "PackedDataset(DataConfig)":
        # BAGEL's trainer: DataConfig with the dropouts and sizes, the budgets as arguments,
        # the newer settings as keywords, then set_epoch(data_seed).
        budgets = {name: settings.pop(name) for name in names_of("budget") if name in settings}
        sizes = {name: settings.pop(name) for name in names_of("data_config") if name in settings}
        settings.pop("data_seed", None)
        config = DataConfig(grouped, **sizes)
        dataset = PackedDataset(
            config, tokenizer, special_tokens, **topology, **budgets, data_status=data_status, dataset_info=info,
            **settings,
        )  # fmt: skip
        dataset.set_epoch(data_seed)
        return dataset
    if door == "BagelDatasetConfig.build":
        config = BagelDatasetConfig(grouped_datasets=grouped, dataset_info=info, **settings)
        return config.build(
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            global_seed=None,
            data_status=data_status,
        )
    if door == "run_config":
        assert data_status is None, "a run config resumes from checkpoints, not data_status"
        compat = settings.pop("compat", None)
        run = RunConfig(grouped, info, settings, compat)
        return build_from_run_config(
            run, rank=rank, world_size=world_size, num_workers=num_workers, tokenizer=tokenizer
        ).dataset
    raise ValueError(door)
