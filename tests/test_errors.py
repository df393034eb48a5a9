"""The error vocabulary: every public error type lives in errors.py and derives from BagelDataError."""

from __future__ import annotations

import inspect
import pickle

import pytest

from bagel_data import errors
from bagel_data.checkpoint.restart import check_complete
from bagel_data.media import images, video
from bagel_data.packing import invariants
from bagel_data.sources import storage


def test_every_error_type_in_errors_derives_from_bagel_data_error():
    classes = [obj for _, obj in inspect.getmembers(errors, inspect.isclass)]
    types = [obj for obj in classes if issubclass(obj, Exception) and not issubclass(obj, Warning)]
    assert {t.__name__ for t in types} >= {"ImageDecodeError", "VideoDecodeError", "StorageOptionsError", "ResumeError"}
    for error_type in types:
        assert issubclass(error_type, errors.BagelDataError), error_type


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (images, "ImageDecodeError"),
        (images, "ImageTooLargeError"),
        (video, "VideoDecodeError"),
        (storage, "StorageOptionsError"),
        (invariants, "InvariantError"),
    ],
)
def test_old_homes_still_export_the_same_type(module, name):
    assert getattr(module, name) is getattr(errors, name)


def test_decode_errors_stay_value_errors_and_pickle():
    assert issubclass(errors.ImageDecodeError, ValueError)
    assert issubclass(errors.InvariantError, AssertionError)
    error = pickle.loads(pickle.dumps(errors.VideoDecodeError("clip.mp4", "no frames")))
    assert (error.path, error.reason) == ("clip.mp4", "no frames")
    assert str(error) == "cannot read video frames from 'clip.mp4': no frames"


def test_incomplete_worker_checkpoints_raise_resume_error():
    topology = {"rank": 0, "world_size": 2, "worker_id": 0, "num_workers": 1}
    with pytest.raises(errors.ResumeError, match=r"missing \(rank, worker\) \[\(1, 0\)\]"):
        check_complete([topology])
    with pytest.raises(errors.ResumeError, match="different topologies"):
        check_complete([topology, {**topology, "rank": 1, "num_workers": 2}])


def test_counted_agrees_the_noun_with_the_count():
    from bagel_data.errors import counted

    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert counted(1, "index", "indexes") == "1 index" and counted(3, "index", "indexes") == "3 indexes"


def test_shown_cuts_only_what_is_over_the_limit():
    from bagel_data.errors import shown

    assert shown([1, 2], limit=6) == "[1, 2]"  # exactly the limit: whole
    assert shown([1, 2, 3], limit=6) == "[1, 2,..."  # over it: cut, and marked
    assert shown(list(range(100))).endswith(", ...]")  # a long list is bounded by repr first


def test_a_bad_sample_message_is_parsed_only_when_it_names_a_reason():
    plain = errors.BadSampleError("the worker said something else")
    assert plain.location is None and plain.reason == "the worker said something else"
    unknown = errors.BadSampleError("BadSampleError: no_such_reason at f.parquet, row 3: broken")
    assert unknown.location is None and unknown.detail == ""
    known = errors.BadSampleError("BadSampleError: image_decode_failed at f.parquet, row 3: broken")
    assert (known.reason, known.location, known.detail) == (
        errors.SkipReason.IMAGE_DECODE,
        "f.parquet, row 3",
        "broken",
    )


def test_warnings_stop_after_ten_thousand_rows_and_repeat_for_none(caplog):
    log = errors.SkipLog("g", max_consecutive_failures=10**9)
    with caplog.at_level("WARNING", logger="bagel_data"):
        for row in range(10_001):
            log.skip(errors.SkipReason.IMAGE_DECODE, f"row {row}")
        log.skip(errors.SkipReason.IMAGE_DECODE, "row 0")  # met again on the next pass
    assert len(caplog.records) == 10_000 and log.counts["image_decode_failed"] == 10_002


def test_a_skip_log_allows_a_hundred_failures_in_a_row_by_default():
    log = errors.SkipLog("g")
    for row in range(100):
        log.skip(errors.SkipReason.IMAGE_DECODE, f"row {row}")
    with pytest.raises(errors.TooManyFailuresError, match="101 consecutive rows failed"):
        log.skip(errors.SkipReason.IMAGE_DECODE, "row 100")
