"""Mutation fuzzing of WebDataset tars, read in place (`families/t2i_tars.py`) and by
`prepare t2i`: flipped and overwritten bytes, garbage or zeros over a block, a cut. Every key
of the original tar must come out once as a sample, or be counted by name, or lie wholly
inside a stretch counted `tar_damaged` (or the tar be one counted unreadable unit): never
lost without a word, never read twice, and nothing may escape as an exception.

CI runs a small budget (a few seconds). For a larger run:
`BAGEL_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_tars.py` (the seed is fixed,
`BAGEL_FUZZ_SEED` changes it), as `tests/test_fuzz.py` does.
"""

from __future__ import annotations

import io
import os
import random
import re
import tarfile

from bagel_data.errors import SkipLog, SkipReason
from bagel_data.families.reads import FamilyReads
from bagel_data.families.t2i_tars import tar_rows
from bagel_data.sources import jsonl_cache
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.prepare_inputs import image_bytes

EXAMPLES = int(os.environ.get("BAGEL_FUZZ_EXAMPLES", "40"))
SEED = int(os.environ.get("BAGEL_FUZZ_SEED", "15"))
DAMAGED = re.compile(r"<damaged bytes (\d+)-(\d+)>")


def _tar(path) -> dict[str, list[int]]:
    """Eight keys of `.jpg`, `.txt` and sometimes `.json` / `.cls`; each key's header offsets."""
    headers: dict[str, list[int]] = {}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(8):
            key = f"s/{index:03d}"
            parts = [(".jpg", image_bytes(index, size=(24 + index, 16)))]
            parts += [(".cls", b"7")] if index % 3 == 0 else []
            parts += [(".txt", f"caption {index}".encode())]
            parts += [(".json", b'{"caption": "j"}')] if index % 2 else []
            for ext, data in parts:
                info = tarfile.TarInfo(key + ext)
                info.size = len(data)
                headers.setdefault(key, []).append(archive.offset)
                archive.addfile(info, io.BytesIO(data))
    return headers


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three in-place edits (offsets stay put): a flipped bit, a set byte, 512 bytes of
    garbage or 4 KiB of zeros (at a block or anywhere), or a cut."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "set", "garbage", "zeros", "cut"))
        at = rng.randrange(len(out)) if out else 0
        if kind in ("garbage", "zeros") and rng.random() < 0.5:
            at -= at % 512
        if kind == "flip" and out:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "set" and out:
            out[at] = rng.choice((0x00, 0xFF, 0x30, rng.randrange(256)))
        elif kind == "garbage":
            out[at : at + 512] = bytes(rng.randrange(256) for _ in range(512))[: len(out) - at]
        elif kind == "zeros":
            out[at : at + 4096] = bytes(min(4096, len(out) - at))
        elif rng.random() < 0.3:  # cuts are rarer: they make the whole tar one unreadable unit
            del out[at:]
    return bytes(out)


def _accounted(headers: dict[str, list[int]], read: list[str], skipped: list[tuple[str, str]]) -> None:
    """Each original key read once, or counted, or inside a counted damaged stretch."""
    reasons = {reason for reason, _ in skipped}
    if SkipReason.UNIT_UNREADABLE.value in reasons:
        assert not read, "an unreadable tar gives no sample"
        return
    counted = {location.rsplit(":", 1)[-1] for _, location in skipped}
    damage = [(int(a), int(b)) for _, location in skipped for a, b in DAMAGED.findall(location)]
    assert len(read) == len(set(read)), f"a key read twice: {read}"
    for key, offsets in headers.items():
        inside = all(any(low <= at < high for low, high in damage) for at in offsets)
        assert key in read or key in counted or inside, f"{key} lost without a word: read {read}, skips {skipped}"


def _in_place(path: str) -> tuple[list[str], list[tuple[str, str]]]:
    skipped: list[tuple[str, str]] = []
    log = SkipLog("t2i")
    log.skip = lambda reason, location, detail="", rows=1: skipped.append((SkipReason(reason).value, location))  # type: ignore[method-assign]
    read = [location.rsplit(":", 1)[-1] for _, _, _, location in tar_rows(FamilyReads(), path, 0, 0, log)]
    return read, skipped


def test_mutated_tars_give_each_sample_once_or_count_it(tmp_path, monkeypatch):
    monkeypatch.setenv(jsonl_cache.ENV, "off")  # each mutant listed afresh
    original = tmp_path / "orig.tar"
    headers = _tar(original)
    data = original.read_bytes()
    rng = random.Random(SEED)
    for example in range(EXAMPLES):
        folder = tmp_path / f"m{example}"
        folder.mkdir()
        path = folder / "00000.tar"
        path.write_bytes(_mutate(data, rng))
        read, skipped = _in_place(str(path))
        _accounted(headers, read, skipped)
        if example % 8 == 0:  # prepare t2i, on some: the same accounting by its report
            try:
                report = prepare_sharded("t2i", folder, tmp_path / f"out{example}")
            except Exception as exc:  # a tar prepare cannot read at all: its ConfigError, by name
                assert "not a readable tar file" in str(exc), repr(exc)
                continue
            dropped = [(str(getattr(n.reason, "value", n.reason)), n.location) for n in report.dropped]
            assert report.rows_written == len(read), (report.rows_written, read, dropped)
