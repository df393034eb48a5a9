"""The order of the walk by rows as a checkpoint records it (`checkpoint/orders.py`): a
window of several open pieces where row groups are larger than the shuffle window, a
resume under another `shuffle_buffer_size` refused by name, and a checkpoint taken under
the older rule (windows cut by rows alone) resuming exactly as that code went on.

`fixtures/state_rows_v6.json` was written by the code before the record existed
(`python tests/checkpoint/test_row_orders.py write`, with that code's `src` first on
`PYTHONPATH` and `tests` beside it): a checkpoint after 3 packs and the 4 packs that code made
next. Its input record is left out: its paths were the writer's temporary folder.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import sys
import tempfile
from pathlib import Path

import pytest

from bagel_data import ResumeError, make_bagel_multimodal_dataset
from helpers.builders import SMALL_VAE, solid_jpeg, write_t2i
from helpers.resume import rows

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "state_rows_v6.json"
CUT, NEXT = 3, 4
FILES, GROUPS, ROWS = 3, 2, 300  # row groups of 300 rows, more than the window's 256
WINDOW = 256  # opens 2 pieces (one per 128 rows)


def _write_data(folder) -> None:
    image = solid_jpeg(16, 16)
    files = [
        [[{"image": image, "captions": {"a": f"f{f} g{g} r{r}"}} for r in range(ROWS)] for g in range(GROUPS)]
        for f in range(FILES)
    ]
    write_t2i(folder, files)


def _packed(folder, tokenizer, special_tokens, shuffle_buffer_size: int = WINDOW):
    grouped = {
        "t2i_pretrain": {
            "dataset_names": ["t2i"],
            "image_transform_args": SMALL_VAE,
            "num_used_data": [FILES],
            "weight": 1,
        }
    }
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(folder), "num_files": FILES}}}
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=grouped, dataset_info=info,
        num_workers=1, data_seed=11, expected_num_tokens=120, max_num_tokens=160, max_num_tokens_per_sample=100,
        prefer_buffer_before=40, shuffle_buffer_size=shuffle_buffer_size,
    )  # fmt: skip


def _captions(batch, tokenizer) -> list[str]:
    """The rows of a pack, by their captions ("f{file} g{row group} r{row}"), in order."""
    return re.findall(r"f\d+ g\d+ r\d+", tokenizer.decode(batch["packed_text_ids"].tolist()))


def _consecutive_same_group(batches, tokenizer) -> float:
    """The share of consecutive samples (across packs) from one row group."""
    keys = [caption.rsplit(" ", 1)[0] for batch in batches for caption in _captions(batch, tokenizer)]
    return sum(a == b for a, b in itertools.pairwise(keys)) / max(len(keys) - 1, 1)


def _seen(batch, tokenizer) -> list:
    """A pack by its samples' positions and rows."""
    return [rows(batch), _captions(batch, tokenizer)]


def test_the_pieces_a_window_opens_follow_its_size():
    from bagel_data.families.row_plan import open_pieces_for

    assert [open_pieces_for(size) for size in (0, 127, 128, 255, 256, 1023, 1024, 4096)] == [1, 1, 1, 1, 2, 7, 8, 8]


def test_row_groups_larger_than_the_window_are_mixed(tmp_path, tokenizer, special_tokens):
    """6 row groups of 300 rows, a window of 256 rows: a window held one row group, so
    consecutive samples came from one row group but at its seams; now two are interleaved."""
    _write_data(tmp_path)
    batches = list(itertools.islice(iter(_packed(tmp_path, tokenizer, special_tokens)), 12))
    assert _consecutive_same_group(batches, tokenizer) < 0.7
    off = list(itertools.islice(iter(_packed(tmp_path, tokenizer, special_tokens, 0)), 12))
    assert _consecutive_same_group(off, tokenizer) > 0.8


def test_a_checkpoint_records_the_order_and_refuses_another_window(tmp_path, tokenizer, special_tokens):
    _write_data(tmp_path)
    dataset = _packed(tmp_path, tokenizer, special_tokens)
    stream = iter(dataset)
    for _ in range(2):
        next(stream)
    state = dataset.state_dict()
    assert state["orders"] == {"t2i_pretrain": {"shuffle_buffer_size": 256, "open_pieces": 2}}
    other = _packed(tmp_path, tokenizer, special_tokens, 1024)
    match = "shuffle_buffer_size 256, this pipeline has 1024.*Resume with shuffle_buffer_size: 256"
    with pytest.raises(ResumeError, match=match):
        other.load_state_dict(state)
        next(iter(other))


@pytest.mark.parametrize(
    ("orders", "named"),
    [
        ({"t2i_pretrain": {"shuffle_buffer_size": 256, "open_pieces": 0}}, "orders.t2i_pretrain"),
        ({"t2i_pretrain": {"shuffle_buffer_size": 256}}, "orders.t2i_pretrain"),
        ({"other": None}, "one entry"),
        ([8, 8], "one entry"),
    ],
)
def test_a_malformed_order_record_is_a_resume_error(tmp_path, tokenizer, special_tokens, orders, named):
    _write_data(tmp_path)
    dataset = _packed(tmp_path, tokenizer, special_tokens)
    next(iter(dataset))
    state = copy.deepcopy(dataset.state_dict())
    state["orders"] = orders
    again = _packed(tmp_path, tokenizer, special_tokens)
    with pytest.raises(ResumeError, match=named):
        again.load_state_dict(state)
        next(iter(again))


def test_a_checkpoint_from_before_the_record_continues_as_its_code_did(tmp_path, tokenizer, special_tokens):
    saved = json.loads(FIXTURE.read_text())
    assert "orders" not in saved["state"]
    _write_data(tmp_path)
    dataset = _packed(tmp_path, tokenizer, special_tokens)
    dataset.load_state_dict(saved["state"])
    half = NEXT // 2
    got = [_seen(batch, tokenizer) for batch in itertools.islice(iter(dataset), half)]
    assert got == saved["next"][:half]
    # ...and its next checkpoint keeps that rule, so a second resume goes on the same way.
    again_state = json.loads(json.dumps(dataset.state_dict()))
    assert again_state["orders"]["t2i_pretrain"]["open_pieces"] == 1
    again = _packed(tmp_path, tokenizer, special_tokens)
    again.load_state_dict(again_state)
    assert [_seen(batch, tokenizer) for batch in itertools.islice(iter(again), NEXT - half)] == saved["next"][half:]


def test_an_elastic_merge_follows_the_order_of_its_checkpoints(tmp_path, tokenizer, special_tokens):
    """The fixture's worker merged for an elastic restart: what its round had not drawn is
    what the older rule left, not today's rule's leftover at the same cursor."""
    from bagel_data.families.row_plan import RowPlan, row_seed

    saved = json.loads(FIXTURE.read_text())
    _write_data(tmp_path)
    dataset = _packed(tmp_path, tokenizer, special_tokens)
    dataset.load_elastic_state([saved["state"]])
    merged = dataset._resume["restart"]["groups"]["t2i_pretrain"]["pieces"]
    units = dataset.grouped_datasets[0].units
    round_index, index = saved["state"]["stages"]["draw"]["cursors"]["t2i_pretrain"]

    def leftover(open_pieces: int) -> list:
        plan = RowPlan(units.row_layout(), 0, 1, WINDOW, row_seed(units), 0, open_pieces)
        return plan.leftover(plan.round(round_index), index + 1)

    assert leftover(1) != leftover(2)
    assert merged == leftover(1)


def write_fixture() -> None:
    """Run with the code before the record (see the module's docstring)."""
    from bagel_data.tokenizer import QwenTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import SPECIAL_TOKENS

    with tempfile.TemporaryDirectory() as folder:
        _write_data(folder)
        dataset = _packed(folder, QwenTokenizer(), dict(SPECIAL_TOKENS))
        stream = iter(dataset)
        for _ in range(CUT):
            next(stream)
        state = json.loads(json.dumps(dataset.state_dict()))
        state["inputs"] = None
        following = [_seen(next(stream), QwenTokenizer()) for _ in range(NEXT)]
    FIXTURE.write_text(json.dumps({"state": state, "next": following}, indent=1) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["write"]:
    write_fixture()
