"""Every error type of the library, and the accounting of skipped rows.

Two kinds of trouble:

* a *configuration* mistake is found at construction and raised as `ConfigError`, naming
  the key, the value and the fix;
* a *bad row or sample* is skipped with a named `SkipReason`, counted in a `SkipLog`, and
  never dropped silently. In strict mode the first one raises `BadSampleError` with its
  location; a run of consecutive bad rows longer than `max_consecutive_failures` raises
  `TooManyFailuresError`, because that means the dataset or the config is broken.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import re
import reprlib

logger = logging.getLogger("bagel_data")


class BagelDataError(Exception):
    """Base class of every error raised on purpose by bagel_data."""


def shown(value: object, limit: int = 200) -> str:
    """A value as messages show it: at most `limit` characters of a bounded repr. A hostile
    value (an alias bomb, a huge list) never floods a message or spends minutes in repr()."""
    bounded = reprlib.Repr()
    bounded.maxlevel, bounded.maxlist, bounded.maxdict = 4, 20, 20
    bounded.maxstring = bounded.maxother = limit
    try:
        text = bounded.repr(value)
    except Exception:  # a value whose own repr fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class ConfigError(BagelDataError, ValueError):
    """A configuration mistake, reported before any data is read."""

    def __init__(self, key: str, value: object = None, fix: str | None = None):
        self.key, self.value, self.fix = key, value, fix
        # One argument is a finished message: DataLoader re-raises worker errors that way.
        super().__init__(key if fix is None else f"{key} = {shown(value)}: {fix}")

    def __reduce__(self):  # keep key, value and fix through pickling
        return type(self), (self.key, self.value, self.fix)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 step`, `2 steps`: a count with its noun agreeing, for messages."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


class ConfigWarning(UserWarning):
    """A configuration that runs but wastes tokens or risks oversize packs."""


class IndexCacheWarning(UserWarning):
    """The node's JSONL index cache cannot be used (unsafe folder, no room, no permission):
    the index is built in this process's memory instead."""


class StorageSpaceError(BagelDataError, OSError):
    """No room left on the disk a build writes its temporary files to."""


class SkipReason(str, enum.Enum):
    """Why a row or sample was left out. The value is what reports print."""

    IMAGE_DECODE = "image_decode_failed"
    IMAGE_TOO_LARGE = "image_over_pixel_limit"
    IMAGE_MISSING = "image_file_missing"
    VIDEO_DECODE = "video_decode_failed"
    VIDEO_DECODE_OVER_TIME = "video_decode_over_time"
    JSON_INVALID = "json_invalid"
    SCHEMA = "row_schema_invalid"
    CAPTION_INVALID = "caption_not_json"
    PLACEHOLDER_MISMATCH = "image_placeholder_mismatch"
    VIDEO_TAG_MISSING = "video_tag_missing"
    NO_LOSS = "no_loss_item"
    EDIT_LISTS_DISAGREE = "edit_list_lengths_disagree"
    EDIT_TOO_FEW_IMAGES = "edit_fewer_than_two_images"
    UNIT_UNREADABLE = "unit_unreadable"
    OVER_SAMPLE_BUDGET = "over_max_num_tokens_per_sample"
    NO_ROOM_BESIDE_MANDATORY = "no_room_beside_mandatory_samples"
    PARSE_ROW_FAILED = "parse_row_failed"
    PARSE_ROW_EMPTY = "parse_row_returned_nothing"
    SAMPLE_INVALID = "row_sample_invalid"
    OUTSIDE_ROOT = "path_outside_dataset_root"
    # Counted, never raised in strict mode: CFG dropout dropped every item of the sample.
    CFG_DROPPED_ALL = "every_item_dropped_by_cfg"
    # compat="bagel" only: what the reference drops silently or crashes on.
    DROPPED_AT_EMIT = "dropped_at_emit_buffer_full"
    IMAGE_ITEMS_EXCEED_IMAGES = "image_items_exceed_images"
    PARQUET_INFO_MISSING = "parquet_file_not_in_parquet_info"
    ROW_GROUP_UNREADABLE = "row_group_unreadable"
    ROW_FAILED = "row_raised_unexpected_error"
    IMAGE_UNREADABLE = "image_file_unreadable"
    # The sample rules of WebDataset tars and sidecar captions, which `prepare` and the
    # in-place tar reader share (`sources/tar_members.py`, `sources/captions.py`).
    NO_CAPTION = "no_caption"
    CAPTION_WITHOUT_IMAGE = "caption_file_without_image"
    MEMBER_TWICE = "tar_member_given_twice"
    # Bytes of a tar that are no header and no member (resynchronised at the next header).
    TAR_DAMAGED = "tar_damaged"
    TAR_MEMBER_TOO_LARGE = "tar_member_over_size_limit"
    # A tar on a store holding another number of samples than its counts file says.
    TAR_COUNT_STALE = "tar_count_differs_from_counts_file"


_REASON_VALUES = {reason.value for reason in SkipReason}


class ResumeError(BagelDataError):
    """A checkpoint that cannot be loaded into this pipeline."""


class ImageDecodeError(BagelDataError, ValueError):
    """The bytes are not a decodable image (corrupt, truncated or unknown format)."""


class ImageTooLargeError(BagelDataError, ValueError):
    """The image header declares more pixels than the configured limit."""


class VideoDecodeError(BagelDataError, ValueError):
    """A video or frame folder that is missing, empty, corrupt or otherwise unreadable."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        # args holds both fields so the error survives pickling across worker processes.
        super().__init__(path, reason)

    def __str__(self) -> str:
        return f"cannot read video frames from {self.path!r}: {self.reason}"


class VideoDecodeOverTime(VideoDecodeError):
    """A video's frames took longer to decode than `media/video_decode.DECODE_BUDGET_S`."""


class StorageOptionsError(BagelDataError, ValueError):
    """Options that do not fit the filesystem, or that clash with options given before."""


class InvariantError(BagelDataError, AssertionError):
    """A packed batch breaks an invariant of the batch schema (docs/formats/batch.md)."""


class EmptyWorkerError(BagelDataError):
    """A worker's units gave neither a row nor a skip in a whole pass: it cannot progress."""


# The tail of a BadSampleError message: "<reason> at <location>: <detail>".
_BAD_SAMPLE_TAIL = re.compile(r"BadSampleError: (\w+) at (.+?): (.*)\Z", re.DOTALL)


class BadSampleError(BagelDataError):
    """Raised in strict mode on the first bad row, with where it lives.

    `reason`, `location` and `detail` survive pickling (`__reduce__`) and a DataLoader
    worker boundary (which re-creates the error from its formatted traceback: the fields
    are read back from it).
    """

    def __init__(self, reason: SkipReason | str, location: str | None = None, detail: str = ""):
        self.reason, self.location, self.detail = reason, location, detail
        if location is None:  # a finished message, as DataLoader re-raises worker errors
            super().__init__(str(reason))
            found = _BAD_SAMPLE_TAIL.search(str(reason).rstrip())
            if found and found.group(1) in _REASON_VALUES:
                self.reason, self.location, self.detail = SkipReason(found.group(1)), found.group(2), found.group(3)
        else:
            super().__init__(f"{SkipReason(reason).value} at {location}: {detail}")

    def __reduce__(self):
        if self.location is None:
            return type(self), (str(self),)
        return type(self), (self.reason, self.location, self.detail)


class RowDropped(BagelDataError):
    """A row that cannot be used, with why (a `SkipReason`, or a reason of `prepare`'s own)
    and the particulars: raised by the rules `prepare` and the readers share; `prepare`
    records it in its report, a reader counts it in its `SkipLog`."""

    def __init__(self, reason: enum.Enum, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail

    def __reduce__(self):  # rows travel pickled to the workers of `prepare --engine ray`
        return (RowDropped, (self.reason, self.detail))


class TooManyFailuresError(BagelDataError):
    """Raised when too many rows in a row fail: the data or the config is likely broken."""


@dataclasses.dataclass
class SkipLog:
    """Counts skipped rows by reason and enforces strict mode and the failure bound.

    Lives in one worker; the packed dataset gathers the logs of its groups.
    """

    dataset_name: str
    strict: bool = False
    max_consecutive_failures: int = 100
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    warned: set = dataclasses.field(default_factory=set)
    examples: dict = dataclasses.field(default_factory=dict)
    consecutive: int = 0
    # Samples in a row that the packer set aside as over budget (reset when one is packed):
    # each such sample was a good row, so `ok()` does not reset this run.
    over_budget_run: int = 0

    def skip(self, reason: SkipReason, location: str, detail: str = "", rows: int = 1) -> None:
        """Count `rows` rows (a whole file or row group when its row count is known) skipped."""
        if self.strict:
            raise BadSampleError(reason, location, detail)
        self.counts[reason.value] += max(int(rows), 1)
        self.consecutive += 1
        # Each pass over the data meets the same bad rows again: warn about a row once.
        self.examples.setdefault(reason.value, f"{location}: {detail}")
        if location not in self.warned and len(self.warned) < 10_000:
            self.warned.add(location)
            logger.warning("%s: skipped %s at %s: %s", self.dataset_name, reason.value, location, detail)
        if self.consecutive > self.max_consecutive_failures:
            raise TooManyFailuresError(
                f"{self.dataset_name}: {self.consecutive} consecutive rows failed, the last "
                f"({reason.value}) at {location}: {detail}. The dataset or its config is likely "
                "broken; run `bagel-data validate` on the config, or raise "
                "max_consecutive_failures if this is expected."
            )

    def ok(self) -> None:
        self.consecutive = 0

    def total(self) -> int:
        """Rows skipped so far, all reasons together."""
        return sum(self.counts.values())

    def over_budget(self, location: str, detail: str, reason: SkipReason = SkipReason.OVER_SAMPLE_BUDGET) -> None:
        """Count a sample the packer cannot use; too many in a row means no sample fits."""
        self.skip(reason, location, detail)
        self.consecutive -= 1  # a good row: only the run below bounds these
        self.over_budget_run += 1
        if self.over_budget_run > self.max_consecutive_failures:
            raise TooManyFailuresError(
                f"{self.dataset_name}: {self.over_budget_run} samples in a row did not fit the token "
                f"budget, the last at {location}: {detail}. No sample of this group fits: raise "
                "max_num_tokens / max_num_tokens_per_sample (they must be positive), lower "
                "max_image_size or shorten the texts; `bagel-data validate` shows the lengths."
            )

    def used(self) -> None:
        """The packer put a sample of this group in a pack."""
        self.over_budget_run = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)
