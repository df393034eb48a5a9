"""SFT JSONL from LLaVA-style JSON or JSONL, checked and repaired."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigError, SkipReason
from ...families.conversation import (
    IMAGE_TAG,
    VIDEO_TAG,
    check_conversations,
    count_image_tags,
)
from ...media.images import ImageDecodeError, ImageTooLargeError, decode_image
from .common import ROLE_NAMES, Progress, Rows, each_row, manifest_rows
from .report import DropReason, Fix, Notes, PrepareReport, RowDropped, RowNote
from .stored_images import check_under_root


def vlm_rows(source: Path) -> Rows:
    """The rows of a LLaVA-style JSON list (located by index) or a JSONL file (by line)."""
    with source.open("rb") as handle:
        first = next((byte for line in handle for byte in line.lstrip(b"\xef\xbb\xbf") if not chr(byte).isspace()), 0)
    if first != ord("["):
        return manifest_rows(source)
    try:
        rows = json.loads(source.read_text(encoding="utf-8-sig"))
    except ValueError as exc:
        raise ConfigError(
            "source", str(source), f"looks like a JSON list but does not parse: {str(exc)[:200]}"
        ) from None
    except RecursionError:
        raise ConfigError("source", str(source), "a JSON list nested too deeply to read") from None
    return [(f"{source.name}[{index}]", row) for index, row in enumerate(rows)]


def _rename_roles(row: dict, fix: Callable[[Fix, str], None]) -> None:
    turns = row.get("conversations")
    if not isinstance(turns, list):
        return
    renamed = [
        {**turn, "from": ROLE_NAMES[turn["from"]]}
        if isinstance(turn, dict) and turn.get("from") in ROLE_NAMES
        else turn
        for turn in turns
    ]
    changed = sum(new is not old for new, old in zip(renamed, turns))
    if changed:
        row["conversations"] = renamed
        fix(Fix.ROLES_RENAMED, f"{changed} turn(s) from user/assistant to human/gpt")


def _prepend_tag(turns: list[dict], tag: str) -> bool:
    for index, turn in enumerate(turns):
        if turn["from"] == "human":
            turns[index] = {**turn, "value": f"{tag}\n{turn['value']}"}
            return True
    return False


def _check_decodes(paths: list[Path]) -> None:
    for path in paths:
        try:
            decode_image(path.read_bytes())
        except (ImageDecodeError, ImageTooLargeError, OSError) as exc:
            raise RowDropped(SkipReason.IMAGE_DECODE, f"{path}: {exc}") from None


def fix_vlm_row(row: object, image_root: Path, fix: Callable[[Fix, str], None], decode_check: bool = True) -> dict:
    """The row as the SFT reader wants it, reporting each repair; raises `RowDropped` otherwise."""
    if not isinstance(row, dict):
        raise RowDropped(SkipReason.SCHEMA, "a row must be a JSON object")
    row = dict(row)
    _rename_roles(row, fix)
    problem = check_conversations(row)
    if problem:
        raise RowDropped(SkipReason.SCHEMA, problem)
    turns = row["conversations"] = list(row["conversations"])
    if not any(turn["from"] == "gpt" and turn["value"].strip() for turn in turns):
        raise RowDropped(SkipReason.NO_LOSS, "no gpt turn with text: nothing to train on")
    image, video = row.get("image"), row.get("video")
    if image is not None and video is not None:
        raise RowDropped(SkipReason.SCHEMA, "a row holds 'image' or 'video', not both")
    if video is not None:
        _check_video_row(turns, image_root, video, fix)
        return row
    names = [image] if isinstance(image, str) else list(image or [])
    for name in names:
        check_under_root(image_root / name, image_root)
    missing = [name for name in names if not (image_root / name).is_file()]
    if missing:
        raise RowDropped(SkipReason.IMAGE_MISSING, f"not under {image_root} (--image-root): {', '.join(missing[:3])}")
    if decode_check:
        _check_decodes([image_root / name for name in names])
    tags = count_image_tags(turns)
    if tags != len(names):
        if not (tags == 0 and len(names) == 1 and _prepend_tag(turns, IMAGE_TAG)):
            raise RowDropped(
                SkipReason.PLACEHOLDER_MISMATCH, f"{tags} <image> placeholder(s) for {len(names)} image(s)"
            )
        fix(Fix.IMAGE_TAG_ADDED, "prepended <image> to the first human turn")
    return row


def _check_video_row(turns: list[dict], image_root: Path, video: str, fix: Callable[[Fix, str], None]) -> None:
    path = image_root / video
    check_under_root(path, image_root)
    if not (path.is_dir() if video.endswith("/") else path.is_file()):
        raise RowDropped(DropReason.VIDEO_MISSING, f"{path} does not exist (paths are resolved against --image-root)")
    # The reader turns one <video> into one <image> per frame; any other tag breaks the count.
    video_tags = sum(turn["value"].count(VIDEO_TAG) for turn in turns if turn["from"] == "human")
    if count_image_tags(turns) or video_tags > 1:
        raise RowDropped(SkipReason.PLACEHOLDER_MISMATCH, "a video row needs exactly one <video> and no <image>")
    if video_tags == 0:
        if not _prepend_tag(turns, VIDEO_TAG):
            raise RowDropped(SkipReason.VIDEO_TAG_MISSING, "a video row needs a human turn to hold <video>")
        fix(Fix.VIDEO_TAG_ADDED, "prepended <video> to the first human turn")


def prepare_vlm(
    source: str | Path,
    out_jsonl: str | Path,
    *,
    image_root: str | Path,
    progress: Progress | None = None,
    decode_check: bool = True,
) -> PrepareReport:
    """Write SFT JSONL from LLaVA-style JSON (a list) or JSONL, checked against `image_root`.

    Repairs (each reported): user/assistant roles become human/gpt; a single image without
    `<image>` gets one prepended to the first human turn (likewise `<video>`). Drops (each
    reported): unparsable or malformed rows, missing media, placeholder counts that cannot
    be repaired, rows without a gpt answer, and (unless `decode_check=False`) images that
    do not decode, as the T2I and edit preparers do. Other keys of a row are kept as they are.
    """
    source, out, root, notes = Path(source), Path(out_jsonl), Path(image_root), Notes()
    if not root.is_dir():
        raise ConfigError("image_root", str(root), "not a folder")
    if not source.is_file():
        raise ConfigError("source", str(source), "the file does not exist")
    rows = vlm_rows(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:

        def write(location: str, row: object) -> None:
            fixes: list[RowNote] = []  # kept only if the row is
            fixed = fix_vlm_row(
                row, root, lambda kind, detail: fixes.append(RowNote(location, kind.value, detail)), decode_check
            )
            handle.write(json.dumps(fixed, ensure_ascii=False) + "\n")
            notes.fixed.extend(fixes)

        written = each_row(rows, write, notes, progress)
    return notes.report(written, (out,))
