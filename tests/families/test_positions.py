"""families/positions.py: a position from outside (BAGEL's `data_status`, a checkpoint) either
names the row it was recorded on, or is a ResumeError that names what is wrong and the fix.

The reference lists a folder in the filesystem's order and takes its first `num_used_data`
files (repeating them); the default mode takes them in sorted order. Here the filesystem
order is made the reverse of the sorted one, so that 10 of 7 files repeat other files."""

from __future__ import annotations

import itertools

import pytest

from bagel_data import ResumeError
from bagel_data.families.edit import UnifiedEditIterableDataset
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.media.video import FrameSampler
from bagel_data.sources import storage
from helpers.builders import png_bytes, solid_jpeg, write_edit, write_t2i, write_vlm

VAE = ImageTransform(32, 16, 16)
VIT = ImageTransform(28, 14, 14)
ROW = {"image": solid_jpeg(32, 32), "captions": {"c": "a grey square"}}
NUM_FILES = 7


@pytest.fixture()
def reversed_listing(monkeypatch):
    """The folder's own order is the reverse of the sorted one (as os.listdir may give it)."""
    listed = storage.list_entries

    def backwards(path, sort=True):
        entries = listed(path, sort=True)
        return entries if sort else entries[::-1]

    monkeypatch.setattr(storage, "list_entries", backwards)


# These positions name units of a worker's list: the walk by units (tars', a user family's,
# compat's); the default walk by rows has its own (tests/test_row_walk.py).
pytestmark = pytest.mark.walk_by_units


@pytest.fixture()
def t2i_folder(tmp_path):
    # file i has i + 1 rows in its first row group and 2 in its second: rows tell files apart
    write_t2i(tmp_path, [[[ROW] * (i + 1), [ROW] * 2] for i in range(NUM_FILES)])
    return str(tmp_path)


@pytest.fixture()
def t2i(t2i_folder, tokenizer):
    """A T2I family over the 7 files, taking `used` of them (1 worker, rank 0)."""

    def build(used, compat=None, data_status=None, world_size=1):
        dataset = T2IIterableDataset(
            "t2i", VAE, tokenizer, [t2i_folder], [used], 0, world_size, 1, data_status, compat=compat
        )
        return dataset

    return build


def _rows(dataset, count):
    """(data_indexes, file, row group, row) of the next `count` samples."""
    samples = itertools.islice(iter(dataset), count)
    return [(s["data_indexes"]["data_indexes"], dataset.row_location(s["row_key"])) for s in samples]


def test_a_reference_position_on_repeated_files_is_a_resume_error_that_says_compat(t2i, reversed_listing):
    reference = _rows(t2i(10, "bagel"), 12)
    status = {0: reference[5][0]}
    # compat="bagel" continues at the reference's next row ...
    assert _rows(t2i(10, "bagel", status), 3) == reference[6:9]
    # ... the default mode repeats other files: it would land elsewhere, so it says so
    with pytest.raises(ResumeError, match=r'reference\'s listing order.*resume with compat="bagel"'):
        _rows(t2i(10, None, status), 1)


def test_a_reference_position_continues_exactly_where_the_lists_agree(t2i, reversed_listing):
    # 14 of 7 takes each file twice in either order: the same list, so the same rows
    reference = _rows(t2i(14, "bagel"), 12)
    ours = _rows(t2i(14), 12)
    assert [where for _, where in ours] == [where for _, where in reference]
    resumed = _rows(t2i(14, None, {0: reference[5][0]}), 3)
    assert [where for _, where in resumed] == [where for _, where in reference[6:9]]


def test_own_positions_on_repeated_files_are_tagged_and_resume_exactly(t2i, reversed_listing):
    ours = _rows(t2i(10), 12)
    assert all(len(position) == 4 for position, _ in ours)  # [file, row group, row, fingerprint]
    assert _rows(t2i(10, None, {0: ours[5][0]}), 3) == ours[6:9]
    other_list = [*ours[5][0][:3], ours[5][0][3] ^ 1]
    with pytest.raises(ResumeError, match="recorded on another file list"):
        _rows(t2i(10, None, {0: other_list}), 1)


def test_a_reference_position_under_uneven_sharding_is_a_resume_error(t2i):
    # 7 files over 2 ranks: the reference gives rank 0 three and drops one, the default mode four
    reference = _rows(t2i(7, "bagel", world_size=2), 4)
    ours = _rows(t2i(7, world_size=2), 4)
    assert all(len(position) == 4 for position, _ in ours)
    with pytest.raises(ResumeError, match=r"do not divide evenly over 2 rank.*compat=\"bagel\""):
        _rows(t2i(7, None, {0: reference[1][0]}, world_size=2), 1)
    assert _rows(t2i(7, None, {0: ours[1][0]}, world_size=2), 2) == ours[2:4]


@pytest.mark.parametrize("compat", [None, "bagel"])
@pytest.mark.parametrize(
    ("position", "named"),
    [
        ([0, 2, 0], r"row group 2 does not exist: .*part-\d+\.parquet has 2 row group\(s\)"),
        ([0, 0, 9], r"row 9 does not exist: .*part-\d+\.parquet, row group 0 has \d row\(s\)"),
        ([0, 1, 2], r"row 2 does not exist: .*row group 1 has 2 row\(s\)"),  # one past the end
        ([7, 0, 0], r"under its 7 unit"),
    ],
)
def test_a_t2i_position_naming_no_row_is_a_resume_error(t2i, compat, position, named):
    with pytest.raises(ResumeError, match=named):
        _rows(t2i(7, compat, {0: position}), 1)


def test_a_data_status_read_back_from_json_or_as_a_list_resumes_alike(t2i):
    """String worker ids (a JSON round trip) and a list per worker name the same entry as an
    int key; a list without this worker's entry is a ResumeError naming the worker."""
    full = _rows(t2i(7), 6)
    position = full[2][0]
    assert _rows(t2i(7, None, {"0": position}), 2) == full[3:5]
    assert _rows(t2i(7, None, [position]), 2) == full[3:5]
    with pytest.raises(ResumeError, match="no entry for worker 0"):
        _rows(t2i(7, None, []), 1)


@pytest.mark.parametrize("position", [[0, 0, -1], [-1, 0, 0], [0, True, 0]])
def test_a_negative_or_bool_position_is_a_resume_error(t2i, position):
    with pytest.raises(ResumeError, match="non-negative int"):
        _rows(t2i(7, None, {0: position}), 1)


@pytest.mark.parametrize("compat", [None, "bagel"])
def test_a_t2i_position_on_the_last_row_of_a_row_group_continues_at_the_next(t2i, compat):
    full = _rows(t2i(7, compat), 6)
    last_of_group = next(i for i, (position, _) in enumerate(full) if position[1] == 1 and position[2] == 1)
    assert _rows(t2i(7, compat, {0: full[last_of_group][0]}), 1) == [full[last_of_group + 1]]


def _edit(tmp_path, tokenizer, compat, data_status):
    row = {"image_list": [png_bytes(32, 32)] * 2, "instruction_list": [["make it red"]]}
    _, info = write_edit(tmp_path, [[[row] * 3, [row] * 2]])
    return UnifiedEditIterableDataset(
        "edit", VAE, tokenizer, VIT, [str(tmp_path)], [1], info, 0, 1, 1, data_status, compat=compat
    )


@pytest.mark.parametrize("compat", [None, "bagel"])
def test_an_edit_row_past_its_row_groups_end_is_a_resume_error(tmp_path, tokenizer, compat):
    dataset = _edit(tmp_path, tokenizer, compat, None)
    units = [position[0] for position, _ in _rows(dataset, 5)]
    last = units[-1]  # the unit read second: the row group of 2 rows or of 3
    size = units.count(last)
    with pytest.raises(ResumeError, match=rf"row {size} does not exist: .*row group \d has {size} row\(s\)"):
        _rows(_edit(tmp_path, tokenizer, compat, {0: [last, size]}), 1)
    with pytest.raises(ResumeError, match="under its 2 unit"):
        _rows(_edit(tmp_path, tokenizer, compat, {0: [2, 0]}), 1)


@pytest.mark.parametrize("compat", [None, "bagel"])
def test_a_vlm_position_past_its_lines_is_a_resume_error(tmp_path, tokenizer, compat):
    rows = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]} for i in range(4)]
    jsonl, images = write_vlm(tmp_path, rows)
    dataset = SftJSONLIterableDataset(
        "vlm",
        VIT,
        tokenizer,
        FrameSampler(max_num_frames=3, min_num_frames=2),
        [jsonl],
        [images],
        [4],
        0,
        1,
        1,
        {0: 4},
        compat=compat,
    )
    with pytest.raises(ResumeError, match="under its 4 unit"):
        next(iter(dataset))
    dataset.data_status = {0: 3}  # the last line: the next pass starts
    assert next(iter(dataset))["data_indexes"]["data_indexes"] == 0


def test_vlm_positions_under_uneven_sharding_are_ours_when_tagged_else_refused(tmp_path, tokenizer):
    # 5 lines over 2 ranks: the reference gives rank 0 two lines, the default mode three
    rows = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]} for i in range(5)]
    jsonl, images = write_vlm(tmp_path, rows)

    def vlm(data_status=None, compat=None):
        sampler = FrameSampler(max_num_frames=3, min_num_frames=2)
        return SftJSONLIterableDataset(
            "vlm", VIT, tokenizer, sampler, [jsonl], [images], [5], 0, 2, 1, data_status, compat=compat
        )

    ours = _rows(vlm(), 4)
    assert all(isinstance(position, list) and len(position) == 2 for position, _ in ours)  # [row, fingerprint]
    assert _rows(vlm({0: ours[0][0]}), 2) == ours[1:3]
    reference = _rows(vlm(compat="bagel"), 2)
    assert all(isinstance(position, int) for position, _ in reference)
    with pytest.raises(ResumeError, match=r"vlm: data_status\[0\] = 0 .*do not divide evenly.*compat=\"bagel\""):
        _rows(vlm({0: reference[0][0]}), 1)


def test_the_walk_by_rows_fingerprint_tells_every_field_of_the_share_apart():
    """A position of the walk by rows resumes only on the same share: the worker, the worker
    count, the rows of a pass, the window's rows and pieces and the rounds' offset (an elastic
    restart's) each change the fingerprint."""
    import types

    from bagel_data.families.positions import row_fingerprint
    from bagel_data.families.row_share import EqualShare

    def fingerprint(worker=1, workers=4, total=100, buffer_size=8, offset=0, open_pieces=1):
        share = EqualShare(total, workers, offset)
        plan = types.SimpleNamespace(worker=worker, share=share, buffer_size=buffer_size, open_pieces=open_pieces)
        return row_fingerprint(types.SimpleNamespace(rows=plan))

    base = fingerprint()
    assert fingerprint() == base
    changed = [fingerprint(worker=2), fingerprint(workers=5), fingerprint(total=101), fingerprint(buffer_size=9)]
    changed += [fingerprint(offset=25), fingerprint(open_pieces=8)]
    assert base not in changed and len(set(changed)) == 6


def test_a_family_asked_for_several_workers_tags_each_with_its_own_list(t2i_folder, tokenizer):
    """One family object walked as worker 0 then worker 1 (as `validate` walks every
    worker's share) tags each worker's positions with that worker's list, as a fresh one."""
    from bagel_data.families.positions import position_tag
    from helpers.golden import as_worker

    def family():
        return T2IIterableDataset("t2i", VAE, tokenizer, [t2i_folder], [NUM_FILES], 0, 1, 2)

    shared, tags = family(), []
    for worker in (0, 1):
        with as_worker(worker, 2):
            fresh = family()
            tags.append(position_tag(shared, shared.worker_shard()))
            assert tags[-1] == position_tag(fresh, fresh.worker_shard()) is not None
    assert tags[0] != tags[1]


def test_a_unit_kind_s_salt_sets_its_list_fingerprint_apart():
    """Tars' positions carry their kind's salt: the `prepare t2i` copy's parquet list of as
    many units fingerprints otherwise, so neither's data_status resumes the other."""
    import types

    import numpy as np

    from bagel_data.families.positions import list_fingerprint

    def fingerprint(salt):
        family = types.SimpleNamespace(
            epoch_units=list(range(6)), units=types.SimpleNamespace(kind=types.SimpleNamespace(position_salt=salt))
        )
        return list_fingerprint(family, types.SimpleNamespace(unit_ids=np.array([1, 4])))

    assert fingerprint(0) == fingerprint(0) != fingerprint(0x7A5)


@pytest.mark.parametrize("round_index", [-2, -1])
def test_a_walk_by_rows_position_in_a_restart_phase_is_read_as_one(t2i, monkeypatch, round_index):
    """A sample drawn in an elastic restart's inherited or remainder phase has a negative
    round: its position is read as such, and without the restart plan it names, said so
    (not refused as a position of another kind)."""
    from bagel_data.families.positions import position_tag

    monkeypatch.setattr(UnitPlan, "walk_by_rows", True)
    dataset = t2i(7)
    tag = position_tag(dataset, dataset.worker_shard())
    with pytest.raises(ResumeError, match="a restart phase, but the checkpoint has no restart plan"):
        _rows(t2i(7, None, {0: [round_index, 0, tag]}), 1)
    with pytest.raises(ResumeError, match="not a position of this worker's walk by rows"):
        _rows(t2i(7, None, {0: [-3, 0, tag]}), 1)
