"""The drop-in names and signatures: NeMo AutoModel's multimodal `__all__`, the reference's
`DataConfig` / `PackedDataset`, and what each does with its arguments."""

from __future__ import annotations

import inspect

import pyarrow.fs as pafs
import pytest
import torch
from PIL import Image

import bagel_data
import bagel_data.datasets
from bagel_data import (
    ConfigError,
    DataConfig,
    MaxLongEdgeMinShortEdgeResize,
    PackedDataset,
    SftJSONLIterableDataset,
    T2IIterableDataset,
    UnifiedEditIterableDataset,
)
from bagel_data.datasets import DEFAULT_DATASET_INFO, make_bagel_multimodal_dataset, rank_data_status
from bagel_data.packing.config import PackingConfig
from helpers.golden import absolute_dataset_info, load_case

# NeMo AutoModel's components/datasets/multimodal/__init__.py (27 names).
NEMO_ALL = [
    "DATASET_REGISTRY", "DEFAULT_DATASET_INFO", "BagelDatasetConfig", "DataConfig", "DistributedIterableDataset",
    "FrameSampler", "ImageTransform", "InterleavedBaseIterableDataset", "MaxLongEdgeMinShortEdgeResize",
    "PackedDataset", "ParquetStandardIterableDataset", "SftJSONLIterableDataset", "SimpleCustomBatch",
    "T2IIterableDataset", "UnifiedEditIterableDataset", "add_special_tokens", "bagel_packed_collate_fn",
    "collate_wrapper", "get_flattened_position_ids_extrapolate", "get_flattened_position_ids_interpolate",
    "get_parquet_data_paths", "init_arrow_pf_fs", "len2weight", "make_bagel_multimodal_dataset", "patchify",
    "pil_img2rgb", "prepare_attention_mask_per_sample",
]  # fmt: skip
FAMILY_BASES = {"InterleavedBaseIterableDataset", "ParquetStandardIterableDataset"}  # families/interleaved_base.py


@pytest.mark.parametrize("module", [bagel_data, bagel_data.datasets], ids=["bagel_data", "bagel_data.datasets"])
def test_every_nemo_name_is_exported(module):
    missing = [name for name in NEMO_ALL if name not in FAMILY_BASES and not hasattr(module, name)]
    assert missing == []
    assert set(NEMO_ALL) - FAMILY_BASES <= set(module.__all__)
    if not set(dir(module)) >= FAMILY_BASES:
        pytest.skip("InterleavedBaseIterableDataset / ParquetStandardIterableDataset: exported with issue 16")


def test_loader_names():
    from bagel_data.nemo.loader import BagelDataloaderBuild, BagelDataloaderConfig

    assert list(inspect.signature(BagelDataloaderConfig).parameters) == [
        "dataset_config", "num_workers", "pin_memory", "prefetch_factor",
    ]  # fmt: skip
    assert [p.default for p in inspect.signature(BagelDataloaderConfig).parameters.values()][1:] == [1, True, 2]
    assert list(inspect.signature(BagelDataloaderBuild).parameters) == ["dataloader", "dataset"]


def _parameters(callable_) -> list[tuple[str, object]]:
    return [
        (p.name, p.default)
        for p in inspect.signature(callable_).parameters.values()
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"
    ]


def test_reference_signatures():
    empty = inspect.Parameter.empty
    # grouped_datasets may be left out for NeMo's keyword form (grouped_datasets_path=...).
    assert _parameters(DataConfig) == [
        ("grouped_datasets", None), ("text_cond_dropout_prob", 0.1), ("vit_cond_dropout_prob", 0.4),
        ("vae_cond_dropout_prob", 0.1), ("vae_image_downsample", 16), ("max_latent_size", 32),
        ("vit_patch_size", 14), ("max_num_patch_per_side", 70),
    ]  # fmt: skip
    assert _parameters(PackedDataset) == [
        ("data_config", empty), ("tokenizer", empty), ("special_tokens", empty), ("local_rank", empty),
        ("world_size", empty), ("num_workers", empty), ("expected_num_tokens", 32768),
        ("max_num_tokens_per_sample", 16384), ("max_num_tokens", 36864), ("prefer_buffer_before", 16384),
        ("max_buffer_size", 50), ("interpolate_pos", False), ("use_flex", False), ("data_status", None),
        ("dataset_info", None), ("global_seed", None),
    ]  # fmt: skip
    assert inspect.signature(PackedDataset).parameters["compat"].default is None
    # The families, as the API page our users start from lists them.
    common = [("local_rank", 0), ("world_size", 1), ("num_workers", 8), ("data_status", None)]
    assert _parameters(T2IIterableDataset) == [
        ("dataset_name", empty), ("transform", empty), ("tokenizer", empty), ("data_dir_list", empty),
        ("num_used_data", empty), *common,
    ]  # fmt: skip
    assert _parameters(SftJSONLIterableDataset) == [
        ("dataset_name", empty), ("transform", empty), ("tokenizer", empty), ("frame_sampler", empty),
        ("jsonl_path_list", empty), ("data_dir_list", empty), ("num_used_data", empty), *common,
        ("shuffle_lines", False), ("shuffle_seed", 0),
    ]  # fmt: skip
    assert _parameters(UnifiedEditIterableDataset) == [
        ("dataset_name", empty), ("transform", empty), ("tokenizer", empty), ("vit_transform", empty),
        ("data_dir_list", empty), ("num_used_data", empty), ("parquet_info", empty), *common,
    ]  # fmt: skip


def test_make_bagel_multimodal_dataset_keeps_the_spec_signature():
    assert [name for name, _ in _parameters(make_bagel_multimodal_dataset)] == [
        "tokenizer", "special_tokens", "grouped_datasets", "local_rank", "world_size", "num_workers",
        "expected_num_tokens", "max_num_tokens_per_sample", "max_num_tokens", "prefer_buffer_before",
        "max_buffer_size", "interpolate_pos", "use_flex", "data_status", "data_seed", "text_cond_dropout_prob",
        "vit_cond_dropout_prob", "vae_cond_dropout_prob", "vae_image_downsample", "max_latent_size",
        "vit_patch_size", "max_num_patch_per_side", "dataset_info",
    ]  # fmt: skip
    defaults = dict(_parameters(make_bagel_multimodal_dataset))
    assert (defaults["local_rank"], defaults["world_size"], defaults["num_workers"], defaults["data_seed"]) == (
        0, 1, 4, 42,
    )  # fmt: skip
    assert defaults["max_num_tokens"] == 36864 and defaults["vit_cond_dropout_prob"] == 0.4
    keyword_only = {
        p.name: p.default
        for p in inspect.signature(make_bagel_multimodal_dataset).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    }
    assert keyword_only == {
        "strict": False,
        "max_consecutive_failures": 100,
        "compat": None,
        "compat_seed": None,
        "mix_by": "samples",
        "pack_strategy": "greedy",
        "pixel_format": "float32",
        "read_ahead_bytes": None,
        "shuffle_buffer_size": 1024,
        "rebuild_threads": None,
    }


@pytest.fixture(scope="module")
def case():
    case, _, _ = load_case("packed_three_groups_flex")
    return case


def _packed(case, tokenizer, special_tokens, data_config, **kwargs):
    kwargs.setdefault("dataset_info", absolute_dataset_info(case))
    packing = case["packing"]
    budgets = {key: packing[key] for key in ("expected_num_tokens", "max_num_tokens_per_sample", "max_num_tokens")}
    return PackedDataset(data_config, tokenizer, special_tokens, 0, 1, 1, **budgets, use_flex=True, **kwargs)


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_attributes_set_after_construction_take_effect(case, tokenizer, special_tokens):
    data_config = DataConfig(case["grouped_datasets"])
    data_config.vit_patch_size, data_config.max_latent_size, data_config.text_cond_dropout_prob = 7, 64, 0.25
    packed = _packed(case, tokenizer, special_tokens, data_config)
    assert (packed.config.vit_patch_size, packed.config.max_latent_size) == (7, 64)
    assert packed.config.text_cond_dropout_prob == 0.25
    assert packed.config.vit_cond_dropout_prob == 0.4  # untouched: DataConfig's default
    # The reference's knobs read as attributes of the dataset, as training scripts do.
    assert (packed.vit_patch_size, packed.max_num_tokens, packed.use_flex) == (7, packed.config.max_num_tokens, True)
    assert packed.data_config is data_config and packed.compat is None
    assert data_config.grouped_datasets == case["grouped_datasets"]  # read, never consumed


def test_without_set_epoch_the_stream_is_that_of_the_reference_default_seed(case, tokenizer, special_tokens):
    """The reference's datasets shuffle with `set_epoch(seed=42)` until told otherwise."""
    data_config = DataConfig(case["grouped_datasets"])
    data_config.vae_cond_dropout_prob = data_config.text_cond_dropout_prob = 0.5  # many seeded draws
    unset = _packed(case, tokenizer, special_tokens, data_config)
    seeded = _packed(case, tokenizer, special_tokens, data_config)
    seeded.set_epoch(42)
    other = _packed(case, tokenizer, special_tokens, data_config)
    other.set_epoch(43)
    first = [next(iter(dataset)) for dataset in (unset, seeded, other)]
    assert torch.equal(first[0]["packed_text_ids"], first[1]["packed_text_ids"])
    assert not torch.equal(first[0]["packed_text_ids"], first[2]["packed_text_ids"])


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_default_dataset_info_is_used_then_required(case, tokenizer, special_tokens, monkeypatch):
    data_config = DataConfig(case["grouped_datasets"])
    with pytest.raises(ConfigError, match="DEFAULT_DATASET_INFO is empty"):
        _packed(case, tokenizer, special_tokens, data_config, dataset_info=None)
    for group, datasets in absolute_dataset_info(case).items():
        monkeypatch.setitem(DEFAULT_DATASET_INFO, group, datasets)
    packed = _packed(case, tokenizer, special_tokens, data_config, dataset_info=None)
    assert packed.group_names == list(case["grouped_datasets"])


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_compat_strict_and_global_seed_arguments(case, tokenizer, special_tokens):
    data_config = DataConfig(case["grouped_datasets"])
    assert _packed(case, tokenizer, special_tokens, data_config, compat="bagel").compat == "bagel"
    assert (
        _packed(case, tokenizer, special_tokens, DataConfig(case["grouped_datasets"], compat="bagel")).compat == "bagel"
    )
    with pytest.raises(ConfigError, match="compat"):
        DataConfig({}, compat="exact")
    for bad in ("BAGEL", "nemo", 1):
        with pytest.raises(ConfigError, match="compat"):
            _packed(case, tokenizer, special_tokens, data_config, compat=bad)
    with pytest.raises(ConfigError, match="global_seed"):
        _packed(case, tokenizer, special_tokens, data_config, global_seed=-1)
    assert _packed(case, tokenizer, special_tokens, data_config, global_seed=0).global_seed == 0
    packed = _packed(case, tokenizer, special_tokens, data_config, strict=True)
    assert all(dataset.strict and dataset.skip_log.strict for dataset in packed.grouped_datasets)
    info = absolute_dataset_info(case)
    made = make_bagel_multimodal_dataset(
        tokenizer, special_tokens, case["grouped_datasets"], dataset_info=info, num_workers=1, strict=True,
        max_consecutive_failures=3, compat="bagel", **case["packing"],
    )  # fmt: skip
    assert made.compat == "bagel"
    assert all(d.strict and d.max_consecutive_failures == 3 for d in made.grouped_datasets)
    with pytest.raises(ConfigError, match="compat"):
        make_bagel_multimodal_dataset(tokenizer, special_tokens, case["grouped_datasets"], compat="exact")


def test_packed_dataset_defaults_are_packing_config_defaults():
    defaults = dict(_parameters(PackedDataset))
    for name in ("expected_num_tokens", "max_num_tokens_per_sample", "max_num_tokens", "prefer_buffer_before"):
        assert defaults[name] == PackingConfig.__dataclass_fields__[name].default

    # The two public entry points share the options they both have.
    def signature_defaults(function) -> dict:
        return {p.name: p.default for p in inspect.signature(function).parameters.values()}

    packed, maker = signature_defaults(PackedDataset), signature_defaults(make_bagel_multimodal_dataset)
    for name in ("strict", "max_consecutive_failures", "compat"):
        assert packed[name] == maker[name], name


def test_rank_data_status_takes_this_ranks_entry_of_a_gathered_list():
    per_rank = [{"t2i_pretrain": {0: [0, 0, 1]}}, {"t2i_pretrain": {0: [2, 1, 0]}}]
    assert rank_data_status(per_rank, 1) == {"t2i_pretrain": {0: [2, 1, 0]}}
    assert rank_data_status(per_rank, 2) is None  # a rank the old run did not have starts fresh
    assert rank_data_status(per_rank[0], 1) is per_rank[0]  # a per-rank dict is used as is
    assert rank_data_status(None, 0) is None


def test_max_long_edge_min_short_edge_resize():
    # 1000 x 500, long edge at most 512: scale 0.512 -> 512 x 256, both multiples of 16.
    resize = MaxLongEdgeMinShortEdgeResize(max_size=512, min_size=256, stride=16, max_pixels=10**7)
    assert resize(Image.new("RGB", (1000, 500))).size == (512, 256)
    assert tuple(resize(torch.zeros(3, 500, 1000)).shape) == (3, 256, 512)
    # Short edge lifted to min_size: 100 x 40 -> scale 64 / 40 = 1.6 -> 160 x 64.
    small = MaxLongEdgeMinShortEdgeResize(max_size=1024, min_size=64, stride=16, max_pixels=10**7)
    assert small(Image.new("RGB", (100, 40))).size == (160, 64)
    # Two images share the pixel budget: 512 x 512 > 2**17 / 2, scaled by the area ratio (the rule's).
    shared = MaxLongEdgeMinShortEdgeResize(max_size=512, min_size=16, stride=16, max_pixels=2**17)
    assert shared(Image.new("RGB", (512, 512)), img_num=2).size == (128, 128)  # 512 * 0.25
    alone = shared(Image.new("RGB", (512, 512)))  # one image by default: the whole budget
    assert alone.size == shared(Image.new("RGB", (512, 512)), img_num=1).size and alone.size[0] > 128
    with pytest.raises(ValueError, match="interpolation"):
        MaxLongEdgeMinShortEdgeResize(64, 32, 16, interpolation="cubic-ish")


def test_max_long_edge_resize_of_tensors_keeps_modes_dtypes_and_leading_dims():
    stripes = (torch.arange(64) % 3 == 0).float()  # every third row lit: finer than the 4x step
    image = stripes.view(64, 1).expand(3, 64, 64).contiguous()
    down = MaxLongEdgeMinShortEdgeResize(16, 16, 16, max_pixels=10**7)  # 64 -> 16
    smooth = down(image)
    # antialiased bicubic averages the stripes to about 1/3; sampled without it they alias
    assert smooth.shape == (3, 16, 16) and float((smooth - 1 / 3).abs().max()) < 0.1
    aliased = MaxLongEdgeMinShortEdgeResize(16, 16, 16, max_pixels=10**7, antialias=False)(image)
    assert float((aliased - 1 / 3).abs().max()) > 0.2
    nearest = MaxLongEdgeMinShortEdgeResize(16, 16, 16, max_pixels=10**7, interpolation="nearest")(image)
    assert set(nearest.unique().tolist()) <= {0.0, 1.0}
    up = MaxLongEdgeMinShortEdgeResize(32, 32, 16, max_pixels=10**7, interpolation="bilinear")
    values = up(torch.tensor([[[0.0, 1.0], [1.0, 0.0]]]).expand(3, 2, 2).contiguous().repeat(1, 8, 8))
    assert values.shape == (3, 32, 32) and ((values > 0.01) & (values < 0.99)).any()  # blends, unlike nearest
    pixels = (image * 255).to(torch.uint8)
    as_bytes = down(pixels)
    assert as_bytes.dtype == torch.uint8 and int((as_bytes.int() - 85).abs().max()) <= 26
    for level in (0, 255):  # bicubic overshoots at edges; bytes are clamped to [0, 255], not wrapped
        edge = torch.full((3, 64, 64), 255 - level, dtype=torch.uint8)
        edge[:, :, :32] = level
        resized = down(edge)
        assert {int(resized.min()), int(resized.max())} == {0, 255}
        steps = resized[0, 0, 1:].int() - resized[0, 0, :-1].int()  # one step across: no wrapped byte
        assert bool((steps >= 0).all()) if level == 0 else bool((steps <= 0).all())
    batch = down(torch.stack([image, 1 - image]).unsqueeze(0))  # (1, 2, 3, 64, 64): leading dims kept
    assert batch.shape == (1, 2, 3, 16, 16) and torch.equal(batch[0, 0], smooth)
    with pytest.raises(ValueError, match="lanczos"):
        MaxLongEdgeMinShortEdgeResize(16, 16, 16, interpolation="lanczos")(image)


def test_init_arrow_pf_fs_local(tmp_path):
    assert isinstance(bagel_data.init_arrow_pf_fs(str(tmp_path / "x.parquet")), pafs.LocalFileSystem)


def test_bagel_packed_collate_fn_wraps_the_one_pack():
    batch = bagel_data.bagel_packed_collate_fn([{"sequence_length": 3, "batch_data_indexes": []}])
    assert isinstance(batch, bagel_data.SimpleCustomBatch) and batch.to_dict()["sequence_length"] == 3
    with pytest.raises(ValueError, match="batch_size=1"):
        bagel_data.bagel_packed_collate_fn([{}, {}])
