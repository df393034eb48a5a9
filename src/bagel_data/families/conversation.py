"""Turning a VLM SFT conversation into plan elements (pure functions, no I/O)."""

from __future__ import annotations

from typing import TypedDict

IMAGE_TAG = "<image>"
VIDEO_TAG = "<video>"


class Element(TypedDict, total=False):
    type: str  # "text" or "image"
    has_loss: int
    text: str


def conversation_to_elements(conversations: list[dict], num_images: int) -> list[Element]:
    """The reference's turn-to-element rule (docs/samples.md, VLM SFT).

    A human turn without `<image>` is one text element; with `<image>`, it is split on the
    tag: each non-blank piece becomes a stripped text element and each split point before
    the last becomes an image element while images remain. A gpt turn is one text element
    with loss. Other roles are ignored.
    """
    elements: list[Element] = []
    for turn in conversations:
        role, value = turn["from"], turn["value"]
        if role == "human":
            if IMAGE_TAG not in value:
                elements.append({"type": "text", "has_loss": 0, "text": value})
                continue
            pieces = value.split(IMAGE_TAG)
            for index, piece in enumerate(pieces):
                if piece.strip():
                    elements.append({"type": "text", "has_loss": 0, "text": piece.strip()})
                if index != len(pieces) - 1 and index < num_images:
                    elements.append({"type": "image"})
        elif role == "gpt":
            elements.append({"type": "text", "has_loss": 1, "text": value})
    return elements


def count_image_tags(conversations: list[dict]) -> int:
    return sum(turn["value"].count(IMAGE_TAG) for turn in conversations if turn["from"] == "human")


def expand_video_tag(conversations: list[dict], num_frames: int) -> bool:
    """Replace `<video>` in the first human turn holding it by one `<image>` per frame.

    Returns False when no human turn holds the tag. The reference only looked at the
    first turn; any human turn is accepted here.
    """
    for turn in conversations:
        if turn["from"] == "human" and VIDEO_TAG in turn["value"]:
            turn["value"] = turn["value"].replace(VIDEO_TAG, IMAGE_TAG * num_frames)
            return True
    return False


def expand_video_tag_first_turn(conversations: list[dict], num_frames: int) -> bool:
    """The reference's rule (`compat="bagel"`): `<video>` is replaced in the first turn
    only, whatever its role; False when the first turn does not hold it."""
    if not conversations or VIDEO_TAG not in conversations[0]["value"]:
        return False
    conversations[0]["value"] = conversations[0]["value"].replace(VIDEO_TAG, IMAGE_TAG * num_frames)
    return True


def check_conversations(row: object) -> str | None:
    """Why `row` is not a well-formed SFT row, or None when it is."""
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__}"
    conversations = row.get("conversations")
    if not isinstance(conversations, list) or not conversations:
        return "missing or empty 'conversations' list"
    for index, turn in enumerate(conversations):
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("from"), str)
            or not isinstance(turn.get("value"), str)
        ):
            return f"conversations[{index}] must be an object with string 'from' and 'value'"
    image = row.get("image")
    if image is not None and not (
        isinstance(image, str) or (isinstance(image, list) and all(isinstance(name, str) for name in image))
    ):
        return "'image' must be a file name or a list of file names"
    if row.get("video") is not None and not isinstance(row.get("video"), str):
        return "'video' must be a file or folder name"
    return None
