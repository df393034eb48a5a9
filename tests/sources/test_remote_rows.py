"""Parquet on an object store in the walk by rows: every sample equally often, as on disk,
with each footer read once per node (`families/row_counts.py`). On today's main such a group
kept the walk by units: files of 40, 40 and 10 rows on 2 workers drew the short file's rows
8x as often, and 3 files could not feed 2 ranks x 2 workers."""

from __future__ import annotations

import collections

import pytest

from bagel_bench.moto_store import moto_store
from bagel_data.families import row_counts
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sources import storage
from helpers.builders import solid_jpeg, write_t2i
from helpers.golden import as_worker

pytest.importorskip("moto.server")  # a dev dependency (moto_store imports it when started)

BUCKET = "s3://remote-rows"
TRANSFORM = ImageTransform(32, 16, 16)
SIZES = (40, 40, 10)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    image = solid_jpeg(16, 16)
    files = [[[{"image": image, "captions": {"a": f"f{f} r{r}"}} for r in range(n)]] for f, n in enumerate(SIZES)]
    write_t2i(root / "t2i", files)
    with moto_store() as made:
        made.upload(root / "t2i", f"{BUCKET}/t2i")
        yield made


@pytest.fixture()
def proxied(store, monkeypatch, tmp_path):
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", str(tmp_path / "node-cache"))
    monkeypatch.setattr(storage, "_OPTIONS", {})
    store.register(BUCKET)
    store.proxy.counter.reset()
    return store


def _family(tokenizer, rank: int, ranks: int, workers: int) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [f"{BUCKET}/t2i"], [len(SIZES)], rank, ranks, workers)


@pytest.mark.parametrize(("ranks", "workers"), [(1, 2), (2, 2)])
def test_a_remote_group_is_walked_by_rows_and_draws_every_sample_equally(proxied, tokenizer, ranks, workers):
    made = []
    for rank in range(ranks):
        for worker in range(workers):
            family = _family(tokenizer, rank, ranks, workers)
            assert family.units.walks_rows(), "a remote parquet group walks by rows"
            with as_worker(worker, workers):
                made.append((worker, family.iter_samples()))
    total = sum(SIZES)
    chunk = -(-total // (ranks * workers))
    counts: collections.Counter = collections.Counter()
    for step in range(3 * chunk * len(made)):  # three whole rounds
        worker, stream = made[step % len(made)]
        with as_worker(worker, workers):
            _, sample = next(stream)
        counts[tuple(sample["row_key"][:1] + sample["row_key"][2:])] += 1
    run = 3 * chunk * ranks * workers
    assert len(counts) == total and set(counts.values()) <= {run // total, -(-run // total)}


def test_footers_are_read_once_per_node(proxied, tokenizer):
    """The node's first worker reads each footer (a HEAD and a GET); the next reads none of
    them: it opens only the file of its first draw."""
    first = _family(tokenizer, 0, 1, 2)
    proxied.proxy.counter.reset()
    layout = first.units.row_layout()
    assert layout is not None and layout.total == sum(SIZES)
    assert proxied.proxy.counter.reset() == {"HEAD object": len(SIZES), "GET object": len(SIZES)}
    second = _family(tokenizer, 0, 1, 2)
    assert set(proxied.proxy.counter.reset()) <= {"GET list"}  # its construction lists, or the node's listing
    assert second.units.row_layout().total == sum(SIZES)
    assert proxied.proxy.counter.reset() == {}


def test_the_row_counts_cache_is_keyed_by_the_listing(monkeypatch, tmp_path):
    """Counts are read once per listing identity (path, size, store-set time): a file written
    again (another time) is read again; a file the listing gave no time for, or the cache
    off, is read by each process; local files are never counted here."""
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", str(tmp_path / "cache"))
    asked: list = []

    def read(path):
        asked.append(path)
        return (int(path[-1]), 2)

    paths = ["s3://b/f1", "s3://b/f2", "s3://b/f2"]
    listed = {"s3://b/f1": (10, 111), "s3://b/f2": (20, 222)}
    assert row_counts.remote_counts("parquet", paths, listed, read) == {"s3://b/f1": (1, 2), "s3://b/f2": (2, 2)}
    assert sorted(asked) == ["s3://b/f1", "s3://b/f2"]
    asked.clear()
    assert row_counts.remote_counts("parquet", paths, listed, read)["s3://b/f2"] == (2, 2) and asked == []
    rewritten = {**listed, "s3://b/f2": (20, 333)}
    row_counts.remote_counts("parquet", paths, rewritten, read)
    assert sorted(asked) == ["s3://b/f1", "s3://b/f2"]
    asked.clear()
    untimed = {**listed, "s3://b/f2": (20, None)}
    for _ in range(2):
        row_counts.remote_counts("parquet", paths, untimed, read)
    assert len(asked) == 4
    asked.clear()
    assert row_counts.remote_counts("parquet", ["/local/f1"], {"/local/f1": (1, 1)}, read) == {} and asked == []
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", "off")
    for _ in range(2):
        row_counts.remote_counts("parquet", paths, listed, read)
    assert len(asked) == 4


def test_a_damaged_counts_file_is_read_again(monkeypatch, tmp_path):
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", str(tmp_path / "cache"))
    asked: list = []

    def read(path):
        asked.append(path)
        return (3,)

    listed = {"s3://b/f1": (10, 111)}
    row_counts.remote_counts("parquet", ["s3://b/f1"], listed, read)
    (stored,) = (tmp_path / "cache" / row_counts.FOLDER).glob("*.json")
    stored.write_text(stored.read_text().replace("[3]", "[-3]"))
    assert row_counts.remote_counts("parquet", ["s3://b/f1"], listed, read) == {"s3://b/f1": (3,)}
    assert len(asked) == 2


def test_a_footer_that_cannot_be_read_is_tried_again_warned_and_never_kept(monkeypatch, tmp_path):
    """A passing failure (read once more) is not kept as 'unreadable' for the whole node; one
    that stays is named in a warning, and the next process reads that footer itself."""
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", str(tmp_path / "cache"))
    asked: collections.Counter = collections.Counter()
    broken = {"s3://b/f2"}

    def read(path):
        asked[path] += 1
        if path in broken or (asked[path] == 1 and path == "s3://b/f1"):
            return None  # f1 fails once, f2 always
        return (5,)

    listed = {"s3://b/f1": (10, 111), "s3://b/f2": (20, 222)}
    with pytest.warns(UserWarning, match=r"row counts of 1 file\(s\) could not be read \(s3://b/f2\)"):
        found = row_counts.remote_counts("parquet", ["s3://b/f1", "s3://b/f2"], listed, read)
    assert found == {"s3://b/f1": (5,), "s3://b/f2": None} and asked == {"s3://b/f1": 2, "s3://b/f2": 2}
    assert not list((tmp_path / "cache" / row_counts.FOLDER).glob("*.json")), "an unreadable count was kept"
    broken.clear()
    assert row_counts.remote_counts("parquet", ["s3://b/f1", "s3://b/f2"], listed, read)["s3://b/f2"] == (5,)


@pytest.mark.parametrize("cut", [1, 7])
def test_packs_over_a_remote_group_resume_exactly(proxied, tokenizer, special_tokens, cut):
    """A packed dataset over the remote group (walked by rows, shuffle on, read-ahead on): a
    checkpoint after `cut` packs resumes to the same packs, as on disk."""
    from bagel_data.packing.config import PackingConfig
    from bagel_data.packing.packed_dataset import PackedDataset
    from helpers.resume import check_save_load_at

    def make():
        group = _family(tokenizer, 0, 1, 1)
        config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70)
        return PackedDataset.from_groups(
            {"t2i": group}, config, special_tokens, weights={"t2i": 1.0}, mandatory={"t2i": False},
            local_rank=0, world_size=1, num_workers=1, data_seed=1,
        )  # fmt: skip

    assert make().grouped_datasets[0].units.walks_rows()
    check_save_load_at(make, [cut], 10)
