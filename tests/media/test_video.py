"""Frame sampling from video files and frame folders (bagel_data.media.video)."""

from __future__ import annotations

import itertools
import pickle
import random

import av
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from bagel_data.media.video import FrameSampler, VideoDecodeError, frame_indices, sort_frame_names

NUM_FRAMES, RATE, STEP = 24, 4, 10  # frame i is solid grey of intensity STEP * i


def _make_video(path, num_frames: int = NUM_FRAMES) -> str:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=RATE)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.bit_rate = 4_000_000  # high enough that solid greys survive within +-1
        for i in range(num_frames):
            pixels = np.full((48, 64, 3), STEP * i, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def _make_folder(root, num_frames: int) -> str:
    root.mkdir()
    for i in range(1, num_frames + 1):  # frame_1.jpg holds index 0
        Image.new("RGB", (16, 12), (STEP * (i - 1),) * 3).save(root / f"frame_{i}.jpg")
    return str(root) + "/"


def _ids(frames: list[Image.Image]) -> list[int]:
    """Which source frame each image is, read back from its (lossy) intensity."""
    assert all(f.mode == "RGB" for f in frames)
    return [round(float(np.asarray(f).mean()) / STEP) for f in frames]


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> str:
    return _make_video(tmp_path_factory.mktemp("video") / "clip.mp4")


def _expected(sampler: FrameSampler, seed: int, vlen: int, fps: float) -> list[int]:
    """What the sampler should pick: replay its two draws on an identically seeded rng."""
    rng = np.random.default_rng(seed)
    t = int(rng.integers(sampler.min_num_frames, sampler.max_num_frames + 1))
    return frame_indices(t, vlen, sampler.sample, rng, input_fps=fps, max_num_frames=sampler.max_num_frames)


@pytest.mark.parametrize("seed", range(5))
def test_video_picks_expected_frames(video, seed):
    sampler = FrameSampler(max_num_frames=12, min_num_frames=4)
    frames = sampler(video, np.random.default_rng(seed))
    assert 4 <= len(frames) <= 12
    assert _ids(frames) == _expected(sampler, seed, NUM_FRAMES, RATE)


def test_video_more_frames_than_stream_pads_with_last(video):
    sampler = FrameSampler(max_num_frames=40, min_num_frames=30, sample="middle")
    frames = sampler(video, np.random.default_rng(0))
    ids = _ids(frames)
    assert 30 <= len(ids) <= 40
    assert ids[:NUM_FRAMES] == list(range(NUM_FRAMES))
    assert set(ids[NUM_FRAMES:]) == {NUM_FRAMES - 1}
    frames[-1].thumbnail((4, 4))  # padded copies are independent images
    assert frames[-2].size == (64, 48)


def test_same_seed_same_frames_different_seeds_differ(video):
    sampler = FrameSampler(max_num_frames=6, min_num_frames=6)
    first = _ids(sampler(video, np.random.default_rng(7)))
    assert _ids(sampler(video, np.random.default_rng(7))) == first
    picks = {tuple(_ids(sampler(video, np.random.default_rng(s)))) for s in range(8)}
    assert len(picks) > 1


def test_video_middle_and_fps_modes(video):
    middle = FrameSampler(max_num_frames=4, min_num_frames=4, sample="middle")
    assert _ids(middle(video)) == [2, 8, 14, 20]  # (a + b) // 2 of 0-5, 6-11, 12-17, 18-23
    # 24 frames at 4 fps = 6 s; one frame per second at 0.5 s, 1.5 s, ... -> 2, 6, ..., 22.
    assert _ids(FrameSampler(sample="fps1")(video)) == [2, 6, 10, 14, 18, 22]
    capped = FrameSampler(max_num_frames=3, min_num_frames=1, sample="fps1")
    assert _ids(capped(video, np.random.default_rng(0))) == [2, 6, 10]


def test_video_without_frame_count_metadata(tmp_path):
    path = _make_video(tmp_path / "clip.mkv")  # Matroska stores no frame count
    with av.open(path) as container:
        assert container.streams.video[0].frames == 0
    sampler = FrameSampler(max_num_frames=8, min_num_frames=2)
    frames = sampler(path, np.random.default_rng(3))
    assert _ids(frames) == _expected(sampler, 3, NUM_FRAMES, RATE)


def test_folder_numeric_order_and_segments(tmp_path):
    path = _make_folder(tmp_path / "frames", 12)
    middle = FrameSampler(max_num_frames=3, min_num_frames=3, sample="middle")
    assert _ids(middle(path)) == [1, 5, 9]  # numeric order: frame_10 is index 9, not 2
    rand = FrameSampler(max_num_frames=4, min_num_frames=2)
    for seed in range(5):
        ids = _ids(rand(path, np.random.default_rng(seed)))
        assert 2 <= len(ids) <= 4
        assert ids == _expected(rand, seed, 12, 1.0)


def test_folder_with_fewer_frames_than_count_returns_all(tmp_path):
    path = _make_folder(tmp_path / "frames", 11)
    frames = FrameSampler(max_num_frames=16, min_num_frames=11)(path, np.random.default_rng(0))
    assert _ids(frames) == list(range(11))


def test_sort_frame_names():
    names = ["f_10.jpg", "f_2.jpg", "notes.txt", "f_1.jpg", "cover.jpg"]
    assert sort_frame_names(names) == ["cover.jpg", "notes.txt", "f_1.jpg", "f_2.jpg", "f_10.jpg"]


def test_unreadable_inputs_raise_video_decode_error(tmp_path):
    sampler = FrameSampler(max_num_frames=4, min_num_frames=2)
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    (tmp_path / "empty").mkdir()
    bad_frame = _make_folder(tmp_path / "bad", 3)
    (tmp_path / "bad" / "frame_2.jpg").write_bytes(b"not a jpeg")
    cases = [
        str(corrupt),
        str(tmp_path / "missing.mp4"),
        str(tmp_path / "nope") + "/",
        str(tmp_path / "empty") + "/",
        bad_frame,
    ]
    for path in cases:
        with pytest.raises(VideoDecodeError) as info:
            sampler(path, np.random.default_rng(0))
        assert path.rstrip("/") in str(info.value)
    error = pickle.loads(pickle.dumps(VideoDecodeError("a.mp4", "broken")))
    assert (error.path, error.reason) == ("a.mp4", "broken")


def test_bad_settings_raise_value_error():
    for kwargs in (
        {"sample": "uniform", "max_num_frames": 4},
        {"sample": "fpsx", "max_num_frames": 4},
        {"max_num_frames": -1},
        {"max_num_frames": 4, "min_num_frames": 8},
    ):
        with pytest.raises(ValueError):
            FrameSampler(**kwargs)
    with pytest.raises(ValueError, match="uniform"):
        frame_indices(4, 10, "uniform")


def test_sampler_leaves_global_generators_alone(video, tmp_path):
    folder = _make_folder(tmp_path / "frames", 12)
    before = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    sampler = FrameSampler(max_num_frames=6, min_num_frames=2)
    sampler(video)
    sampler(folder)
    frame_indices(5, 6, "rand")  # forces the permutation fallback without an rng
    after = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    assert before[0] == after[0]
    assert all(np.array_equal(a, b) for a, b in zip(before[1], after[1]))
    assert torch.equal(before[2], after[2])


@settings(max_examples=300, deadline=None)
@given(
    t=st.integers(1, 40),
    vlen=st.integers(1, 40),
    sample=st.sampled_from(["rand", "middle"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_segment_rule_properties(t, vlen, sample, seed):
    """Length t; the first n = min(t, vlen) indices strictly increase in [0, vlen) and the
    rest repeat the last. When every segment has >= 2 frames (guaranteed once vlen >= 2n)
    'rand' takes index i from segment i, never its last frame."""
    indices = frame_indices(t, vlen, sample, np.random.default_rng(seed))
    n = min(t, vlen)
    assert len(indices) == t
    assert all(0 <= i < vlen for i in indices)
    assert all(a < b for a, b in itertools.pairwise(indices[:n]))
    assert indices[n:] == [indices[n - 1]] * (t - n)
    bounds = np.linspace(0, vlen, n + 1).astype(int)
    if sample == "rand" and np.all(np.diff(bounds) >= 2):
        assert all(bounds[k] <= indices[k] <= bounds[k + 1] - 2 for k in range(n))
    if vlen >= 2 * n:
        assert np.all(np.diff(bounds) >= 2)
    if sample == "middle":
        assert indices == frame_indices(t, vlen, sample)


@settings(max_examples=200, deadline=None)
@given(
    vlen=st.integers(1, 200),
    input_fps=st.sampled_from([1.0, 4.0, 25.0, 29.97]),
    output_fps=st.sampled_from(["0.5", "1", "2", "30"]),
    cap=st.integers(-1, 10),
)
def test_fps_rule_properties(vlen, input_fps, output_fps, cap):
    """fps sampling: non-decreasing indices in [0, vlen), at most `cap` of them when cap > 0."""
    indices = frame_indices(0, vlen, "fps" + output_fps, input_fps=input_fps, max_num_frames=cap)
    assert all(0 <= i < vlen for i in indices)
    assert indices == sorted(indices)
    if cap > 0:
        assert len(indices) <= cap
