"""Every key of every config section: kind, default and meaning (the one schema).

Sections: the keys every `grouped_datasets` group takes, its image transform and frame
sampler arguments, the keys of every `dataset_info` entry (a family's own keys stand in its
file, `families/registry.py` gathers them), the packer's settings (`PackingConfig`), the dataset-level settings
of `make_bagel_multimodal_dataset` (both views of `settings.py`), and the top level of a run
config. The code checks values against these tables and `docs/formats/run_config.md` is
generated from them.
"""

from __future__ import annotations

from .kinds import AnyMapping, Bool, Field, GroupWeight, Int, ListOf, Number, OneOf, Str
from .settings import RUN_PACKING_NAMES, SETTING_TABLE, names_of

# Mirrors of constants that live in heavier modules (kept equal by tests/test_config_schema.py).
FILE_ORDERS = ("sorted", "filesystem")
DEFAULT_MAX_PIXELS = 14 * 14 * 9 * 1024
RESAMPLE_FILTERS = ("bicubic", "bilinear")
RESIZE_BACKENDS = ("pillow", "torch")

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
    "resample": Field(
        Str(choices=RESAMPLE_FILTERS),
        "resize filter: `bicubic` (exact, the reference's) or `bilinear` (opt-in, faster, approximate)",
        default="bicubic",
    ),
    "resize_backend": Field(
        Str(choices=RESIZE_BACKENDS),
        "who resizes: `pillow` (exact, the reference's) or `torch` (opt-in: torch's antialiased uint8 "
        "resize with the same filter, several times faster, within 2 levels of pillow's)",
        default="pillow",
    ),
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
    "resume_data_status": Field(Bool(), "resume this group from `data_status` when one is given", True, scope="all"),
    "dataset_class": Field(
        Str(), 'the family class as "package.module:Class" instead of DATASET_REGISTRY[group] (docs/extending.md)',
        scope="all",
    ),
    "allow_outside_root": Field(
        Bool(), "rows may name media outside data_dir / the shard's folder (absolute paths, `..`, symlinks out)",
        False, scope="all",
    ),
    "image_formats": Field(
        ListOf(Str()),
        "image formats read beside JPEG, PNG, WebP, GIF, BMP and TIFF, by Pillow's names (e.g. [JPEG2000, PPM, "
        "TGA]); the pixel bound applies to every format; EPS never (docs/bad_data.md)",
        scope="all",
    ),
}  # fmt: skip

DATASET_INFO_FIELDS: dict[str, Field] = {
    "data_dir": Field(
        Str(path=True),
        "T2I / edit: the folder of `*.parquet` files (T2I: or `.tar` shards); VLM: the folder image/video names are relative to",
        scope="all (required)",
    ),
    "split": Field(
        Str(),
        "the split of a Hub-style data_dir to read (`{split}-NNNNN-of-NNNNN.parquet`, `data/{split}-*`, `{split}/`); "
        "default train (docs/formats/dataset_info.md#splits)",
        scope="the families that list data_dir (T2I, edit, parquet)",
    ),
    "data_files": Field(
        OneOf((Str(), ListOf(Str(), nonempty=True), AnyMapping("mapping of split -> patterns"))),
        "the dataset's files as glob pattern(s) relative to data_dir, or {split: patterns}, as "
        "datasets.load_dataset takes them; instead of listing data_dir",
        scope="the families that list data_dir (T2I, edit, parquet)",
    ),
    "num_files": Field(Int(0), "informational: parquet files in data_dir", scope="all"),
    "num_total_samples": Field(Int(0), "informational: rows or lines", scope="all"),
    "storage_options": Field(
        AnyMapping("mapping of filesystem options"),
        "options of this entry's s3:// / gs:// / hdfs:// filesystem",
        scope="all",
    ),
    "allow_outside_root": Field(
        Bool(), "this dataset's rows may name media outside its data_dir (the group's setting does it for all)",
        False, scope="all",
    ),
}  # fmt: skip

# The settings of a packed dataset are defined once, in `settings.py`; these two tables are
# views of it: the packer's budgets, dropouts and geometry, then the seed and the options
# (`compat` is a run config's top-level key, below).
PACKING_FIELDS: dict[str, Field] = {name: SETTING_TABLE[name] for name in names_of("budget", "data_config")}
DATASET_FIELDS: dict[str, Field] = {
    name: SETTING_TABLE[name] for name in RUN_PACKING_NAMES if name not in PACKING_FIELDS
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
    "compat": SETTING_TABLE["compat"],
}
