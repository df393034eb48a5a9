"""What a prepare call reports: the rows written, and each row dropped or repaired with its
location and reason (`PrepareReport`); `RowDropped`, which a row handler raises for a bad
row; and `likely_cause`, the one line a prepare that wrote nothing, or dropped too much, prints."""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections import defaultdict
from pathlib import Path

from ...errors import RowDropped as RowDropped  # re-exported: prepare's modules raise it
from ...errors import SkipReason


class DropReason(str, enum.Enum):
    """Faults only the prepare tools meet; a fault the readers also skip is a `SkipReason`."""

    VIDEO_MISSING = "video_missing"


# The report's names for the faults prepare shares with the readers (`SkipReason`); they
# predate the shared vocabulary and reports and scripts match on them, so they stay.
REPORT_NAMES: dict[SkipReason, str] = {
    SkipReason.IMAGE_MISSING: "image_missing",
    SkipReason.IMAGE_DECODE: "image_unreadable",
    SkipReason.OUTSIDE_ROOT: "image_outside_image_root",
    SkipReason.CAPTION_INVALID: "caption_file_unreadable",
    SkipReason.JSON_INVALID: "malformed_row",
    SkipReason.SCHEMA: "malformed_row",
    SkipReason.EDIT_TOO_FEW_IMAGES: "fewer_than_two_images",
    SkipReason.EDIT_LISTS_DISAGREE: "instruction_count_mismatch",
    SkipReason.PLACEHOLDER_MISMATCH: "placeholder_mismatch",
    SkipReason.VIDEO_TAG_MISSING: "placeholder_mismatch",
    SkipReason.NO_LOSS: "no_gpt_turn",
}


def report_name(reason: enum.Enum) -> str:
    """How a prepare report names `reason`."""
    if isinstance(reason, SkipReason):
        return REPORT_NAMES.get(reason, reason.value)
    return reason.value


class Fix(str, enum.Enum):
    IMAGE_TAG_ADDED = "image_placeholder_added"
    VIDEO_TAG_ADDED = "video_placeholder_added"
    ROLES_RENAMED = "roles_renamed"


@dataclasses.dataclass(frozen=True)
class RowNote:
    """One dropped or repaired row: where it is, why, and the particulars."""

    location: str
    reason: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class PrepareReport:
    rows_written: int
    files_written: tuple[Path, ...]
    dropped: tuple[RowNote, ...] = ()
    fixed: tuple[RowNote, ...] = ()
    # Where the written rows' text came from -> rows (T2I from sidecars: ".txt", ".json caption").
    sources: dict[str, int] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # what runs but will bite later (too few shards for a job)

    @property
    def rows_dropped(self) -> int:
        return len(self.dropped)

    @property
    def dropped_by_reason(self) -> dict[str, tuple[str, ...]]:
        """Reason -> locations of the rows dropped for it."""
        return _by_reason(self.dropped)

    @property
    def fixed_by_reason(self) -> dict[str, tuple[str, ...]]:
        return _by_reason(self.fixed)

    def to_dict(self) -> dict:
        return {
            "rows_written": self.rows_written,
            "files_written": [str(path) for path in self.files_written],
            "dropped": [dataclasses.asdict(note) for note in self.dropped],
            "fixed": [dataclasses.asdict(note) for note in self.fixed],
            "sources": dict(self.sources),
            "warnings": list(self.warnings),
        }


def _by_reason(notes: tuple[RowNote, ...]) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for note in notes:
        grouped[note.reason].append(note.location)
    return {reason: tuple(locations) for reason, locations in grouped.items()}


def likely_cause(report: PrepareReport) -> str:
    """Why a prepare dropped rows (or wrote none), in one line that says what to change."""
    if not report.dropped:
        return "the source holds no rows: check the path and its format (docs/commands/prepare.md)"
    reason, locations = max(report.dropped_by_reason.items(), key=lambda item: len(item[1]))
    share = f"{len(locations)} of the {report.rows_dropped} dropped rows"
    if reason in (report_name(SkipReason.IMAGE_MISSING), DropReason.VIDEO_MISSING.value):
        return f"{share} name media that do not exist: is --image-root right? (paths are resolved against it)"
    example = next(note for note in report.dropped if note.reason == reason)
    return f"{share} dropped as {reason}, e.g. {example.location}: {example.detail}"


@dataclasses.dataclass
class Notes:
    """The dropped and repaired rows of one prepare call, gathered into its report."""

    dropped: list[RowNote] = dataclasses.field(default_factory=list)
    fixed: list[RowNote] = dataclasses.field(default_factory=list)
    sources: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def count_source(self, source: str | None) -> None:
        if source is not None:
            self.sources[source] += 1

    def report(self, written: int, files: tuple[Path, ...]) -> PrepareReport:
        return PrepareReport(written, files, tuple(self.dropped), tuple(self.fixed), dict(self.sources))
