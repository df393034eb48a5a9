"""The extension contract of BAGEL: `InterleavedBaseIterableDataset` + `ParquetStandardIterableDataset`.

A user family subclasses both (in that order, as the reference's edit family does) and
implements `parse_row(row)` with the plan builders `init_data` / `add_text` / `add_image` /
`add_video` (the reference's `_init_data` / `_add_text` / ... work too). The builders are
this module's; the reading is `ParquetStandardIterableDataset`'s (`families/parquet_standard.py`):
units are (parquet file, row group) pairs, sharded, resumed exactly, restarted
elastically, and a failing row is a counted skip. During `parse_row`, `self.rng` is a
`random.Random` and `self.np_rng` a numpy `Generator` seeded by the row's address, so a row
gives the same sample wherever and whenever it is read. The global `random` /
`numpy.random` are never seeded by the library: a `parse_row` that draws from them gets a
different stream in every worker and every run, and a resumed run no longer repeats those
draws.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..media.images import image_tokens
from ..media.safe_read import ALLOWED_IMAGE_FORMATS, read_media
from ..sample import plan_item
from .media import FamilyMedia
from .parquet_standard import ParquetStandardIterableDataset, Row, builder_from_data
from .sample_checks import check_frame_indexes, invalid_sample

__all__ = ["InterleavedBaseIterableDataset", "ParquetStandardIterableDataset", "Row", "builder_from_data"]


class InterleavedBaseIterableDataset:
    """Plan builders for interleaved samples, mixed into a family (before its reading base,
    `ParquetStandardIterableDataset` or another family); needs `tokenizer`, `transform`
    (and `vit_transform` for understood images) on the instance.

    `data` is the dict `init_data()` returns: `sequence_plan`, `text_ids_list`,
    `image_tensor_list`, `num_tokens`, in the order the packer consumes them.
    """

    # Set by the concrete family's constructor (ParquetStandardIterableDataset's, or a user's).
    tokenizer: Any
    transform: Any
    vit_transform: Any
    allow_outside_root: bool
    policy: Any

    def init_data(self) -> dict:
        return {"sequence_plan": [], "text_ids_list": [], "image_tensor_list": [], "num_tokens": 0}

    def add_text(self, data: dict, text: str, need_loss: bool, enable_cfg: bool = True) -> dict:
        """A text item; `need_loss` supervises it, `enable_cfg` lets CFG dropout drop it."""
        ids = self.tokenizer.encode(text)
        data["num_tokens"] += len(ids)
        data["text_ids_list"].append(ids)
        data["sequence_plan"].append(plan_item("text", enable_cfg=enable_cfg, loss=need_loss))
        return data

    def _append_image(self, data, kind, tensor, stride, *, enable_cfg, loss, **extra) -> None:
        data["sequence_plan"].append({**plan_item(kind, enable_cfg=enable_cfg, loss=loss), **extra})
        data["image_tensor_list"].append(tensor)
        data["num_tokens"] += image_tokens(tensor.shape[1], tensor.shape[2], stride)

    def media_roots(self) -> list[str]:
        """The folders a row's media paths may lie under: the dataset folders, and the
        folder of the shard (or JSONL) being read."""
        return [*getattr(self, "data_dir_list", ()), getattr(self, "_image_root", None) or ""]

    def _as_image(self, image, transforms):
        """A PIL image from a PIL image, encoded bytes, or a path (read under `media_roots`
        only), decoded for `transforms` by the family's media (`families/media.py`)."""
        if isinstance(image, (str, os.PathLike)):
            image = read_media(os.fspath(image), self.media_roots(), self.allow_outside_root)
        if isinstance(image, (bytes, bytearray, memoryview)):
            media = getattr(self, "media", None) or FamilyMedia(
                transforms, self.policy, getattr(self, "image_formats", ALLOWED_IMAGE_FORMATS)
            )
            return media.decode(bytes(image), *transforms)
        return image

    def _vit(self):
        vit = getattr(self, "vit_transform", None)
        if vit is None:
            # a row-level problem here (a segment may ask for it): a named skip, not a crash
            raise ValueError("an understood (ViT) image needs the group's vit_image_transform_args")
        return vit

    def add_image(
        self, data: dict, image, need_loss: bool, need_vae: bool, need_vit: bool, enable_cfg: bool = True
    ) -> dict:
        """Up to three items for one image (a PIL image, encoded bytes or a path), in the
        reference's order: generated (VAE, loss), conditioned (VAE), understood (ViT). Each is
        resized now and converted when packed (a `PendingImage`: float32, or bytes with
        `pixel_format: uint8`); iterating the family directly gives float tensors."""
        if not (need_loss or need_vae or need_vit):
            raise ValueError("add_image needs at least one of need_loss, need_vae, need_vit")
        vae = self.transform
        transforms = (vae, self._vit()) if need_vit else (vae,)
        image = self._as_image(image, transforms)
        if need_loss:
            self._append_image(data, "vae_image", vae.prepare(image), vae.stride, enable_cfg=False, loss=True)
        if need_vae:
            self._append_image(data, "vae_image", vae.prepare(image), vae.stride, enable_cfg=enable_cfg, loss=False)
        if need_vit:
            vit = self._vit()
            self._append_image(data, "vit_image", vit.prepare(image), vit.stride, enable_cfg=enable_cfg, loss=False)
        return data

    def add_video(
        self, data: dict, frames: Sequence, frame_indexes: Sequence[int], need_loss: bool, need_vae: bool,
        enable_cfg: bool = True,
    ) -> dict:  # fmt: skip
        """The frames as one split of VAE items (start on the first, end on the last, a
        `frame_delta` to the next frame's index on all but the last): generated when
        `need_loss`, conditioned when `need_vae` (exactly one of the two)."""
        if int(bool(need_loss)) + int(bool(need_vae)) != 1:
            raise ValueError("add_video needs exactly one of need_loss and need_vae")
        if len(frames) != len(frame_indexes) or not frames:
            raise invalid_sample(f"{len(frames)} frame(s) but {len(frame_indexes)} frame index(es)")
        frame_indexes = check_frame_indexes(frame_indexes)  # they become rotary positions
        vae, last = self.transform, len(frames) - 1
        for idx, frame in enumerate(frames):
            extra: dict[str, int | bool] = {"split_start": idx == 0, "split_end": idx == last}
            if idx < last:
                extra["frame_delta"] = int(frame_indexes[idx + 1]) - int(frame_indexes[idx])
            tensor = vae.prepare(self._as_image(frame, (vae,)))
            cfg = False if need_loss else enable_cfg
            self._append_image(data, "vae_image", tensor, vae.stride, enable_cfg=cfg, loss=bool(need_loss), **extra)
        return data

    # The reference's names, so a subclass written for BAGEL runs unchanged.
    def _init_data(self) -> dict:
        return self.init_data()

    def _add_text(self, data, text, need_loss, enable_cfg=True):
        return self.add_text(data, text, need_loss, enable_cfg)

    def _add_image(self, data, image, need_loss, need_vae, need_vit, enable_cfg=True):
        return self.add_image(data, image, need_loss, need_vae, need_vit, enable_cfg)

    def _add_video(self, data, frames, frame_indexes, need_loss, need_vae, enable_cfg=True):
        return self.add_video(data, frames, frame_indexes, need_loss, need_vae, enable_cfg)
