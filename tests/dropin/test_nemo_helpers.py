"""The reference's helper functions in `bagel_data.nemo.utils` and `bagel_data.nemo.video`,
on small generated inputs: their return shapes, their draws (from `rng`, never from the
global generators), and the frames they read."""

from __future__ import annotations

import collections
import itertools
import random

import numpy as np
import pytest
from PIL import Image

from bagel_data.errors import VideoDecodeError
from bagel_data.nemo.utils import split_integer_exp_decay
from bagel_data.nemo.video import (
    extract_frame_number,
    get_frame_indices,
    read_frames_decord,
    read_frames_folder,
    sort_frames,
)
from helpers.builders import write_video


# -- split_integer_exp_decay ------------------------------------------------------------
@pytest.mark.parametrize("decay", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("total", [1, 2, 7])
def test_a_split_has_positive_parts_summing_to_the_total(total, decay):
    for seed in range(30):
        parts, bounds = split_integer_exp_decay(total, decay, rng=random.Random(seed))
        assert all(part >= 1 for part in parts) and sum(parts) == total
        assert bounds[0] == 0 and bounds[-1] == total and len(bounds) == len(parts) + 1
        assert [b - a for a, b in itertools.pairwise(bounds)] == parts


def test_the_number_of_parts_follows_the_decay():
    def counts(decay):
        rng = random.Random(0)
        return collections.Counter(len(split_integer_exp_decay(4, decay, rng=rng)[0]) for _ in range(4000))

    uniform = counts(1.0)
    assert set(uniform) == {1, 2, 3, 4} and max(uniform.values()) < 1.2 * min(uniform.values())
    decaying = counts(0.5)  # P(N = k) proportional to 0.5 ** (k - 1): 8/15, 4/15, 2/15, 1/15
    assert decaying[1] > 1.6 * decaying[2] > 1.6 * 1.6 * decaying[3]
    assert abs(decaying[1] / 4000 - 8 / 15) < 0.03
    assert counts(0.0) == {1: 4000}  # only the first weight is not zero


def test_the_split_draws_from_its_rng_as_the_reference_draws_from_random():
    seed, total = 11, 9
    _, bounds = split_integer_exp_decay(total, rng=random.Random(seed))
    expected = random.Random(seed)  # the reference's order: the count, then the cut points
    count = expected.randint(1, total)
    assert bounds == [0, *sorted(expected.sample(range(1, total), count - 1)), total]
    before = random.getstate()
    split_integer_exp_decay(total)  # no rng: a private one, the global one untouched
    assert random.getstate() == before


def test_a_split_of_nothing_is_refused():
    with pytest.raises(ValueError, match="S must be a positive int"):
        split_integer_exp_decay(0)


# -- frame names and indices --------------------------------------------------------------
def test_frame_numbers_and_their_order():
    assert extract_frame_number("clip_12.jpg") == 12
    assert extract_frame_number("clip_12.png") == -1 and extract_frame_number("clip.jpg") == -1
    paths = ["/v/b_10.jpg", "/v/a_2.jpg", "/v/notes.txt", "/v/c_1.jpg", "/v/z.txt"]
    assert sort_frames(paths) == ["/v/notes.txt", "/v/z.txt", "/v/c_1.jpg", "/v/a_2.jpg", "/v/b_10.jpg"]


def test_frame_indices_of_each_mode():
    assert get_frame_indices(4, 8, "middle") == [0, 2, 4, 6]  # segments [0,1], [2,3], ...: (a + b) // 2
    assert get_frame_indices(4, 8, "middle", fix_start=1) == [1, 3, 5, 7]
    assert get_frame_indices(5, 3, "middle") == [0, 1, 2, 2, 2]  # padded with the last
    rand = get_frame_indices(4, 20, "rand", fix_start=3, rng=np.random.default_rng(0))  # fix_start: 'middle' only
    assert len(rand) == 4 and all(5 * i <= index < 5 * i + 4 for i, index in enumerate(rand))
    assert get_frame_indices(0, 20, "fps2", input_fps=4) == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
    assert get_frame_indices(0, 20, "fps2", input_fps=4, max_num_frames=3) == [1, 3, 5]


# -- reading frames -------------------------------------------------------------------------
def grey_levels(frames) -> list[int]:
    """Which frame each is: frame i of the test videos and folders is a grey of 10 * i."""
    return [round(float(np.asarray(frame).mean()) / 10) for frame in frames]


def test_read_frames_decord_reads_with_pyav(tmp_path):
    path = write_video(tmp_path / "clip.mp4", num_frames=24, rate=4)
    frames = read_frames_decord(path, num_frames=6, min_num_frames=6, sample="middle")
    assert all(isinstance(f, Image.Image) and f.mode == "RGB" and f.size == (32, 24) for f in frames)
    assert grey_levels(frames) == [1, 5, 9, 13, 17, 21]  # six segments of four frames: their middles
    counts = {len(read_frames_decord(path, 6, min_num_frames=2, rng=np.random.default_rng(s))) for s in range(40)}
    assert counts == {2, 3, 4, 5, 6}  # both ends of [min_num_frames, num_frames] are reached
    seeded = [grey_levels(read_frames_decord(path, 6, rng=np.random.default_rng(3))) for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_read_frames_decord_clip_is_in_seconds(tmp_path):
    path = write_video(tmp_path / "clip.mp4", num_frames=24, rate=4)
    # seconds 2 to 4 at 4 fps: frames 8..15, four segments of two: their middles (a + (a + 1)) // 2 = a
    frames = read_frames_decord(path, num_frames=4, min_num_frames=4, sample="middle", clip=(2, 4))
    assert grey_levels(frames) == [8, 10, 12, 14]


def test_get_frame_indices_without_rng_draws_from_a_fresh_generator_of_its_own():
    """NeMo's callers pass no rng: each call draws anew (not a fixed seed), one frame inside
    each segment, and the global `random` / `numpy.random` streams are left as they were."""
    np.random.seed(5)
    random.seed(5)
    numpy_state, python_state = np.random.get_state()[1].copy(), random.getstate()
    draws = {tuple(get_frame_indices(4, 40, "rand")) for _ in range(20)}
    assert len(draws) > 1
    assert all(10 * i <= index < 10 * (i + 1) for draw in draws for i, index in enumerate(draw))
    assert (np.random.get_state()[1] == numpy_state).all() and random.getstate() == python_state


def test_read_frames_decord_past_the_end_is_a_decode_error_naming_the_file(tmp_path):
    """A clip past the video's end asks for frames it does not have: the file is named."""
    path = write_video(tmp_path / "clip.mp4", num_frames=12, rate=4)
    with pytest.raises(VideoDecodeError, match="clip.mp4"):
        read_frames_decord(path, num_frames=4, min_num_frames=4, sample="middle", clip=(10, 20))


def test_read_frames_decord_without_rng_draws_anew_each_call(tmp_path):
    """No generator passed (as NeMo's callers do): the number of frames kept is drawn afresh
    each call, not from a fixed seed."""
    path = write_video(tmp_path / "clip.mp4", num_frames=24, rate=4)
    counts = {len(read_frames_decord(path, 6, min_num_frames=2, sample="middle")) for _ in range(12)}
    assert len(counts) > 1, counts


def test_read_frames_decord_names_a_missing_file(tmp_path):
    with pytest.raises(VideoDecodeError, match=r"absent.mp4.*FileNotFoundError"):
        read_frames_decord(str(tmp_path / "absent.mp4"), num_frames=4)


def test_read_frames_decord_names_a_bad_file(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(VideoDecodeError, match="bad.mp4"):
        read_frames_decord(str(bad), num_frames=4)


def test_read_frames_folder_keeps_frame_order(tmp_path):
    for i in range(10):  # written out of order, one frame name without a number
        Image.new("RGB", (16, 12), (10 * i,) * 3).save(tmp_path / f"f_{9 - i}.jpg" if i < 9 else tmp_path / "x.jpg")
    frames = read_frames_folder(str(tmp_path), num_frames=3, min_num_frames=3, sample="middle")
    # sorted: x.jpg (grey 90) first, then f_1 .. f_9 (grey 80 .. 0); of 10 frames, segments
    # [0,2], [3,5], [6,9]: their middles 1, 4, 7
    assert grey_levels(frames) == [8, 5, 2]
    everything = read_frames_folder(str(tmp_path), num_frames=12, min_num_frames=10)
    assert grey_levels(everything) == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]  # no more frames than drawn: all of them


def test_fix_start_picks_for_middle_only_and_pads_a_short_video():
    """The reference reads `fix_start` for 'middle' only ('rand' draws as without it), and a
    video shorter than `num_frames` gives its segments' frames padded with the last one."""
    plain = get_frame_indices(4, 40, "rand", rng=np.random.default_rng(3))
    assert get_frame_indices(4, 40, "rand", fix_start=2, rng=np.random.default_rng(3)) == plain
    assert get_frame_indices(4, 40, "middle", fix_start=2) == [2, 12, 22, 32]
    assert get_frame_indices(6, 4, "middle", fix_start=0) == [0, 1, 2, 3, 3, 3]


def test_read_frames_folder_without_rng_draws_anew_and_orders_ties_by_name(tmp_path, monkeypatch):
    """No generator passed: the frames kept are drawn afresh each call; frames of the same
    number come in name order whatever order the folder lists them in."""
    import os

    from bagel_data.nemo import video

    for i in range(24):
        Image.new("RGB", (16, 12), (10 * (i % 20),) * 3).save(tmp_path / f"f_{i}.jpg")
    counts = {len(read_frames_folder(str(tmp_path), 6, min_num_frames=2, sample="middle")) for _ in range(12)}
    assert len(counts) > 1, counts
    ties = tmp_path / "ties"
    ties.mkdir()
    for name, grey in (("a_1.jpg", 50), ("b_1.jpg", 150), ("c_0.jpg", 250)):
        Image.new("RGB", (16, 12), (grey,) * 3).save(ties / name)
    listed = os.listdir
    monkeypatch.setattr(video.os, "listdir", lambda folder: sorted(listed(folder), reverse=True))
    assert grey_levels(read_frames_folder(str(ties), 3, min_num_frames=3)) == [25, 5, 15]


def test_read_frames_decord_samples_fps_at_the_video_s_rate(tmp_path):
    """'fps2' on a 4 fps video of 6 seconds keeps every second frame: 12 of 24."""
    path = write_video(tmp_path / "clip.mp4", num_frames=24, rate=4)
    frames = read_frames_decord(path, num_frames=16, min_num_frames=16, sample="fps2")
    assert len(frames) == 12
