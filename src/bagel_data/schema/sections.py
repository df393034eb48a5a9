"""Every key of every config section: kind, default and meaning (the one schema).

Sections: a `grouped_datasets` group, its image transform and frame sampler arguments, a
`dataset_info` entry, the packer's settings (`PackingConfig`), the dataset-level settings
of `make_bagel_multimodal_dataset`, and the top level of a run config. The code checks
values against these tables and `docs/formats/run_config.md` is generated from them.
"""

from __future__ import annotations

from .kinds import AnyMapping, Bool, Field, GroupWeight, Int, ListOf, Number, OneOf, Str

# Mirrors of constants that live in heavier modules (kept equal by tests/test_config_schema.py).
FILE_ORDERS = ("sorted", "filesystem")
MIX_BY = ("samples", "tokens")  # packing/strategies.py
PACK_STRATEGIES = ("greedy", "best_fit")
DEFAULT_MAX_PIXELS = 14 * 14 * 9 * 1024

TRANSFORM_FIELDS: dict[str, Field] = {
    "max_image_size": Field(Int(1), "longest side after resizing, in pixels", required=True),
    "min_image_size": Field(Int(1), "shortest side is scaled up to at least this, in pixels", required=True),
    "image_stride": Field(
        Int(1), "patch size: sides are snapped to multiples of it (VAE downsample or ViT patch)", required=True
    ),
    "max_pixels": Field(
        Int(1), "pixel budget of one image (shared by the images of a row)", default=DEFAULT_MAX_PIXELS
    ),
    "image_mean": Field(
        ListOf(Number(-1e3, 1e3), length=3), "per-channel mean subtracted (RGB, pixels in [0, 1])", [0.5, 0.5, 0.5]
    ),
    "image_std": Field(ListOf(Number(1e-3, 1e3), length=3), "per-channel divisor (RGB), never 0", [0.5, 0.5, 0.5]),
    "fast_decode": Field(Bool(), "decode JPEGs at a reduced size when the resize allows (opt-in)", default=False),
}

FRAME_SAMPLER_FIELDS: dict[str, Field] = {
    "max_num_frames": Field(Int(), "most frames per video; <= 0 means no cap (only with fps sampling)", default=-1),
    "min_num_frames": Field(Int(), "fewest frames per video, in [1, max_num_frames]", default=8),
    "sample": Field(Str(), "`rand`, `middle` or `fps<rate>` (e.g. `fps0.5`)", default="rand"),
}

GROUP_FIELDS: dict[str, Field] = {
    "dataset_names": Field(
        ListOf(Str(), nonempty=True),
        "datasets mixed inside the group; each is a key under the same group in dataset_info",
        required=True,
        scope="all",
    ),
    "num_used_data": Field(
        ListOf(Int(1), nonempty=True),
        "one count per dataset name: parquet files (repeated in sorted order to reach it) or JSONL lines",
        required=True,
        scope="all",
    ),
    "weight": Field(
        GroupWeight(),
        "relative chance that the next sample comes from this group (sum over groups > 0); a list of "
        "[step, weight] pairs changes it from each step on (docs/packing.md)",
        0.0,
        scope="all",
    ),
    "is_mandatory": Field(Bool(), "every pack starts with one sample of this group", False, scope="all"),
    "image_transform_args": Field(
        AnyMapping("mapping (image transform)"),
        "the VAE resize (T2I, edit) or the ViT resize (VLM); keys below",
        required=True,
        scope="all",
    ),
    "vit_image_transform_args": Field(
        AnyMapping("mapping (image transform)"), "the ViT resize of edit inputs; keys below", scope="unified_edit (required)"
    ),
    "frame_sampler_args": Field(
        AnyMapping("mapping (frame sampler)"), "how frames are drawn from videos; keys below", None, scope="vlm_sft"
    ),
    "shuffle_lines": Field(Bool(), "shuffle the JSONL lines once, reproducibly, before taking num_used_data", False, scope="vlm_sft"),
    "shuffle_seed": Field(Int(), "seed of that shuffle", 0, scope="vlm_sft"),
    "resume_data_status": Field(Bool(), "resume this group from `data_status` when one is given", True, scope="all"),
    "file_order": Field(
        Str(FILE_ORDERS), "order of parquet files: by name, or the filesystem's listing (the reference's)", "sorted",
        scope="t2i_pretrain, unified_edit, interleaved, user families",
    ),
    "dataset_class": Field(
        Str(), 'the family class as "package.module:Class" instead of DATASET_REGISTRY[group] (docs/extending.md)',
        scope="all",
    ),
    "segment_defaults": Field(
        AnyMapping("mapping (segment roles)"), "roles of segments that set none (docs/formats/interleaved.md)",
        scope="interleaved",
    ),
}  # fmt: skip

DATASET_INFO_FIELDS: dict[str, Field] = {
    "data_dir": Field(
        Str(path=True),
        "T2I / edit: the folder of `*.parquet` files; VLM: the folder image/video names are relative to",
        scope="all (required)",
    ),
    "jsonl_path": Field(Str(path=True), "the SFT JSONL file", scope="vlm_sft (required)"),
    "parquet_info_path": Field(
        Str(path=True), "the parquet_info JSON (parquet file -> num_row_groups)", scope="unified_edit (required)"
    ),
    "num_files": Field(Int(0), "informational: parquet files in data_dir", scope="all"),
    "num_total_samples": Field(Int(0), "informational: rows or lines", scope="all"),
    "storage_options": Field(
        AnyMapping("mapping of filesystem options"),
        "options of this entry's s3:// / gs:// / hdfs:// filesystem",
        scope="all",
    ),
}

PACKING_FIELDS: dict[str, Field] = {
    "expected_num_tokens": Field(Int(1), "a pack is emitted once it holds at least this many tokens", 32768),
    "max_num_tokens_per_sample": Field(Int(1), "samples this long or longer are skipped (counted)", 16384),
    "max_num_tokens": Field(Int(1), "hard cap of tokens in one pack", 36864),
    "prefer_buffer_before": Field(Int(0), "below this pack length, buffered (left-over) samples are used first", 16384),
    "max_buffer_size": Field(Int(0), "most samples held back for a later pack", 50),
    "interpolate_pos": Field(Bool(), "interpolated instead of extrapolated 2D position ids", False),
    "use_flex": Field(Bool(), "flex-attention layout: packs are padded to max_num_tokens", False),
    "text_cond_dropout_prob": Field(Number(0, 1), "chance to drop a text condition (classifier-free guidance)", 0.1),
    "vit_cond_dropout_prob": Field(Number(0, 1), "chance to drop a ViT image condition", 0.4),
    "vae_cond_dropout_prob": Field(Number(0, 1), "chance to drop a VAE image condition", 0.1),
    "vae_image_downsample": Field(Int(1), "pixels per VAE latent side (the VAE transform's stride)", 16),
    "max_latent_size": Field(Int(1), "side of the VAE position table: max_image_size / vae_image_downsample must fit", 32),
    "vit_patch_size": Field(Int(1), "pixels per ViT patch side (the ViT transform's stride)", 14),
    "max_num_patch_per_side": Field(Int(1), "side of the ViT position table", 70),
    "mix_by": Field(
        Str(MIX_BY), "what a group weight is a share of: samples (the reference) or packed tokens (docs/packing.md)",
        "samples",
    ),
    "pack_strategy": Field(
        Str(PACK_STRATEGIES), "greedy (the reference) or best_fit: fill each pack from the buffer before it closes",
        "greedy",
    ),
}  # fmt: skip

# Settings of make_bagel_multimodal_dataset beyond PackingConfig, accepted under `packing:`.
DATASET_FIELDS: dict[str, Field] = {
    "data_seed": Field(Int(), "seed of the epoch shuffle and of every random draw of the packer", 42),
    "strict": Field(Bool(), "raise BadSampleError at the first bad row instead of skipping it", False),
    "max_consecutive_failures": Field(Int(0), "bad rows in a row before TooManyFailuresError", 100),
    "compat_seed": Field(
        Int(),
        'compat: "bagel" only: the main process\'s seed of the reference-order generators (default data_seed)',
        None,
        nullable=True,
    ),
}

TOPOLOGY_FIELDS: dict[str, Field] = {
    "local_rank": Field(Int(0), "this process's rank, in [0, world_size)", 0),
    "world_size": Field(Int(1), "number of ranks", 1),
    "num_workers": Field(Int(0), "DataLoader worker processes per rank", 4),
}

_SOURCE = OneOf((AnyMapping(), Str(path=True)))
RUN_FIELDS: dict[str, Field] = {
    "grouped_datasets": Field(
        _SOURCE, "what to mix: the groups (inline, or a YAML/JSON path relative to this file)", required=True
    ),
    "dataset_info": Field(
        _SOURCE, "where each dataset lives (inline or a path); `--dataset-info` on the command line overrides it"
    ),
    "packing": Field(AnyMapping(), "packer and dataset settings (keys below)", {}, nullable=True),
    "compat": Field(
        Str(("bagel",)),
        "reproduce the reference pipeline exactly, for any configuration (docs/compat.md)",
        None,
        nullable=True,
    ),
}
