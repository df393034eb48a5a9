"""Hand-written mutants for `scripts/mutate.py`: bugs that look like real ones.

The generated mutants flip one operator or constant at a time. The bugs people write are
often other ones: a limit off by one in the direction that looks right, a condition left
out, two arguments swapped, a field saved and not restored, a fallback to the global random
stream. Each entry is `(text in the module, what it becomes, the bug it stands for)`; the
text must occur exactly once in the module (`tests/scripts/test_mutate.py` holds every entry
to that, so an entry whose code moved is found at once, not at the next mutation run).
"""

from __future__ import annotations

WRITTEN: dict[str, list[tuple[str, str, str]]] = {
    "checkpoint/inputs.py": [
        (
            'return not path.endswith(".parquet") and not storage.is_remote(path)',
            'return not path.endswith(".parquet")',
            "remote inputs digested again: every remote tar read at start-up",
        ),
        ("if len(files) <= MAX_LISTED:", "if len(files) < MAX_LISTED:", "the listing limit off by one"),
        (
            "if old_hash and not colon and old[0] == new[0] and old_time == new_time:",
            "if old_hash and not colon and old[0] == new[0]:",
            "an old checkpoint's digest read even where the time already shows the change",
        ),
        (
            "if old_hash and new_hash and old_hash != new_hash:",
            "if old_hash != new_hash:",
            "a remote file's new time reported as different content",
        ),
    ],
    "media/photos.py": [
        ("_SWAPS_SIDES = (5, 6, 7, 8)", "_SWAPS_SIDES = (6, 8)", "only the rotations counted as sideways"),
        (
            "    5: Image.Transpose.TRANSPOSE,\n    6: Image.Transpose.ROTATE_270,\n    7: Image.Transpose.TRANSVERSE,",
            "    5: Image.Transpose.TRANSVERSE,\n    6: Image.Transpose.ROTATE_270,\n    7: Image.Transpose.TRANSPOSE,",
            "transpose and transverse swapped",
        ),
        (
            'out_mode = "RGBA" if mode == "RGBA" else "RGB"',
            'out_mode = "RGB"',
            "an RGBA photo's alpha lost by the colour transform",
        ),
        (
            "image = in_srgb(high_bit_depth_to_8bit(wide_png_to_8bit(image)))",
            "image = high_bit_depth_to_8bit(wide_png_to_8bit(image))",
            "the colour profile not applied",
        ),
    ],
    "nemo/video.py": [
        (
            "    rng = np.random.default_rng() if rng is None else rng\n    path = os.fspath(video_path)",
            "    rng = np.random.default_rng(0) if rng is None else rng\n    path = os.fspath(video_path)",
            "a fixed seed where NeMo's callers pass no generator",
        ),
        (
            "vlen, offset = int((end - start) * fps), int(start * fps)",
            "vlen, offset = int(end * fps), int(start * fps)",
            "a clip's length taken from its end, not its duration",
        ),
        (
            "    except (VideoDecodeError, MemoryError):\n        raise\n    except Exception as err:",
            "    except (VideoDecodeError, MemoryError):\n        raise\n    except ValueError as err:",
            "a missing or bad file's own error escapes unnamed",
        ),
        (
            "picked = [int(start) + int(fix_start) for start in starts]",
            "picked = [int(start) + int(fix_start) - 1 for start in starts]",
            "fix_start counted from one",
        ),
    ],
}
