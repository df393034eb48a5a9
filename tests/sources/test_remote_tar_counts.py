"""Tars on an object store walked by rows, from per-tar sample counts written once beside
them (`sources/tar_counts.py`, `bagel-data prepare tar-counts`) and read with one GET. On
today's main such a group kept the walk by whole tars whatever files the folder held: a
short tar's samples were drawn more often, and a counts file was never read."""

from __future__ import annotations

import collections
import itertools
import json
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_bench.moto_store import moto_store
from bagel_data.errors import ConfigWarning, SkipReason
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.sources import shared_listing, storage, tar_counts, tar_index
from bagel_data.tools.prepare.tar_counts import write_counts
from helpers.builders import write_tars
from helpers.golden import as_worker
from helpers.resume import check_save_load_at

pytest.importorskip("moto.server")  # a dev dependency (moto_store imports it when started)

BUCKET = "s3://tar-counts"
TRANSFORM = ImageTransform(32, 16, 16)
SMALL_BLOCKS = 4096  # a counted tar's blocks hold about this many bytes: a few samples each
_made = itertools.count()


@pytest.fixture(scope="module")
def store():
    with moto_store() as made:
        yield made


@pytest.fixture()
def proxied(store, monkeypatch, tmp_path):
    monkeypatch.setenv("BAGEL_DATA_INDEX_CACHE", str(tmp_path / "node-cache"))
    monkeypatch.setenv(shared_listing.TTL_ENV, "0")  # folders are written again between reads
    monkeypatch.setattr(storage, "_OPTIONS", {})
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    store.register(BUCKET)
    store.proxy.counter.reset()
    return store


def upload(store, tmp_path: Path, sizes: list[int], counts: bool = True) -> str:
    uri = f"{BUCKET}/d{next(_made)}"
    store.upload(write_tars(tmp_path / uri.rsplit("/", 1)[1], sizes), uri)
    if counts:  # written through moto's own endpoint: the counting proxy passes no upload body
        options = {**store.proxy.storage_options(), "endpoint_override": store.endpoint.split("://", 1)[1]}
        storage._OPTIONS.clear()  # the fixture's own dict
        storage.register_options(BUCKET, options)
        write_counts(uri)
        storage._OPTIONS.clear()
        store.register(BUCKET)
    return uri


def family(uri: str, tars: int, tokenizer, rank=0, ranks=1, workers=1, buffer=1024) -> T2IIterableDataset:
    made = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [uri], [tars], rank, ranks, workers)
    made.units.shuffle_buffer_size = buffer
    return made


def draws(uri: str, tars: int, tokenizer, ranks: int, workers: int, rounds: int, total: int):
    """Every worker draws `rounds` whole rounds, in turn; the draws of each sample."""
    made = []
    for rank in range(ranks):
        for worker in range(workers):
            dataset = family(uri, tars, tokenizer, rank, ranks, workers)
            assert dataset.units.walks_rows(), "a counted remote tar group walks by rows"
            with as_worker(worker, workers):
                made.append((worker, workers, dataset, dataset.iter_samples()))
    counts: collections.Counter = collections.Counter()
    chunk = -(-total // (ranks * workers))
    for step in range(rounds * chunk * len(made)):
        worker, count, _, stream = made[step % len(made)]
        with as_worker(worker, count):
            _, sample = next(stream)
        unit, _, *row = sample["row_key"]  # a sample by (tar, block, sample within the block)
        counts[(unit, *row)] += 1
    return counts, rounds * chunk * ranks * workers, made


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    ranks=st.integers(1, 2),
    workers=st.integers(1, 3),
)
def test_equal_draws_over_random_remote_tar_sizes_with_a_counts_file(
    proxied, tmp_path_factory, tokenizer, sizes, ranks, workers
):
    uri = upload(proxied, tmp_path_factory.mktemp("t"), sizes)
    counts, run, _ = draws(uri, len(sizes), tokenizer, ranks, workers, 2, sum(sizes))
    assert len(counts) == sum(sizes), "a sample was never drawn"
    assert set(counts.values()) <= {run // sum(sizes), -(-run // sum(sizes))}, counts


def test_short_remote_tars_are_not_oversampled(proxied, tmp_path, tokenizer):
    """Tars of 24 and 4 samples on 2 workers: by whole tars the short one's samples were
    drawn 6x as often; with the counts file each sample 3 times in 3 rounds."""
    uri = upload(proxied, tmp_path, [24, 4])
    counts, _, _ = draws(uri, 2, tokenizer, 1, 2, 3, 28)
    assert len(counts) == 28 and set(counts.values()) == {3}


def test_the_counts_file_is_the_wids_shard_list_and_each_tar_was_indexed(proxied, tmp_path, tokenizer):
    uri = upload(proxied, tmp_path, [3, 5])
    written = json.loads(storage.read_bytes(storage.join(uri, tar_counts.COUNTS_NAME)))
    assert written["__kind__"] == "wids-shard-index-v1" and written["wids_version"] == 1
    assert [(s["url"], s["nsamples"]) for s in written["shardlist"]] == [("00000.tar", 3), ("00001.tar", 5)]
    made = family(uri, 2, tokenizer)
    proxied.proxy.counter.reset()
    assert made.units.row_layout().total == 8
    assert proxied.proxy.counter.reset() == {}, "the layout comes from the counts alone"


@pytest.mark.parametrize("by", ["wids", "energon"])
def test_counts_written_by_other_tools_are_read(proxied, tmp_path, tokenizer, by):
    sizes = [4, 1, 6]
    folder = write_tars(tmp_path / "made", sizes)
    if by == "wids":  # as `widsindex create` writes it: urls relative to the file
        shards = [{"url": f"{t:05d}.tar", "nsamples": n, "filesize": (folder / f"{t:05d}.tar").stat().st_size}
                  for t, n in enumerate(sizes)]  # fmt: skip
        (folder / tar_counts.COUNTS_NAME).write_text(
            json.dumps({"__kind__": "wids-shard-index-v1", "shardlist": shards})
        )
    else:  # Megatron-Energon's prepare: shard paths relative to the dataset folder
        (folder / ".nv-meta").mkdir()
        lines = "".join(f"  {t:05d}.tar: {n}\n" for t, n in enumerate(sizes))
        (folder / ".nv-meta" / ".info.yaml").write_text("shard_counts:\n" + lines)
    uri = f"{BUCKET}/{by}{next(_made)}"
    proxied.upload(folder, uri)
    counts, run, _ = draws(uri, 3, tokenizer, 1, 2, 2, sum(sizes))
    assert len(counts) == sum(sizes) and set(counts.values()) <= {run // sum(sizes), -(-run // sum(sizes))}


def _warned(make) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make()
    return made, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_without_counts_the_walk_by_whole_tars_stays_and_says_how_to_even_it(proxied, tmp_path, tokenizer):
    uri = upload(proxied, tmp_path, [5, 2], counts=False)
    made, said = _warned(lambda: family(uri, 2, tokenizer))
    assert not made.units.walks_rows()
    assert len(said) == 1 and f"bagel-data prepare tar-counts {uri}" in said[0], said


def test_a_stale_counts_file_is_warned_and_ignored(proxied, tmp_path, tokenizer):
    """A tar added (newer than the counts), a tar gone (counted, not listed), a tar of
    another size: each keeps the walk by whole tars, and the warning names the command."""
    uri = upload(proxied, tmp_path, [3, 4])
    assert family(uri, 2, tokenizer).units.walks_rows()
    time.sleep(1.1)  # a store's times are kept to the millisecond or second
    proxied.upload(write_tars(tmp_path / "later", [3, 4, 2]), uri)  # rewrites both, adds one
    made, said = _warned(lambda: family(uri, 3, tokenizer))
    assert not made.units.walks_rows()
    assert len(said) == 1 and "stale" in said[0] and f"prepare tar-counts {uri}" in said[0], said
    rewritten = upload(proxied, tmp_path / "again", [3, 4])
    time.sleep(1.1)
    proxied.upload(write_tars(tmp_path / "same", [3]), rewritten)  # the same bytes, written later
    made, said = _warned(lambda: family(rewritten, 2, tokenizer))
    assert not made.units.walks_rows() and len(said) == 1 and "is older than" in said[0], said
    listed = {f"{uri}/00000.tar": (10, 5)}
    read = tar_counts.FolderCounts("x", {f"{uri}/00000.tar": 3, f"{uri}/00009.tar": 1}, {}, 9)
    assert "does not hold" in tar_counts.check(uri, read, list(listed), listed)
    read = tar_counts.FolderCounts("x", {f"{uri}/00000.tar": 3}, {f"{uri}/00000.tar": 11}, 9)
    assert "another size" in tar_counts.check(uri, read, list(listed), listed)
    assert (
        tar_counts.check(uri, tar_counts.FolderCounts("x", {f"{uri}/00000.tar": 3}, {}, 5), list(listed), listed)
        is None
    )


def test_a_tar_whose_count_is_wrong_is_a_counted_skip_and_moves_no_other_draw(proxied, tmp_path, tokenizer):
    folder = write_tars(tmp_path / "wrong", [4, 3, 5])
    sizes = {t: (folder / f"{t:05d}.tar").stat().st_size for t in range(3)}
    shards = [{"url": f"{t:05d}.tar", "nsamples": n, "filesize": sizes[t]} for t, n in enumerate([4, 6, 5])]
    (folder / tar_counts.COUNTS_NAME).write_text(json.dumps({"shardlist": shards}))
    uri = f"{BUCKET}/wrong{next(_made)}"
    proxied.upload(folder, uri)
    made = [family(uri, 3, tokenizer, 0, 1, 2)]
    made.append(family(uri, 3, tokenizer, 0, 1, 2))
    counts: collections.Counter = collections.Counter()
    for worker, dataset in enumerate(made):
        with as_worker(worker, 2):
            for cursor, sample in dataset.iter_samples():
                if cursor[0] >= 3:  # three whole rounds of this worker
                    break
                counts[(sample["row_key"][0], *sample["row_key"][2:])] += 1
    skipped = sum(dataset.skip_log.counts[SkipReason.TAR_COUNT_STALE.value] for dataset in made)
    assert skipped > 0
    assert len(counts) == 9 and set(counts.values()) == {3}, counts  # 15 positions a pass, 6 of the wrong tar


def test_requests_to_the_first_pack_stay_bounded_at_10_and_100_tars(proxied, tmp_path, tokenizer, special_tokens):
    """The counts file is one GET (and pyarrow's HEAD) at construction, its presence and
    time taken from the folder's listing; the first pack reads only the tars it draws from
    (an index and a block each), about as many at 100 tars as at 10."""
    seen = {}
    for tars in (10, 100):
        uri = upload(proxied, tmp_path / str(tars), [3 + t % 4 for t in range(tars)])
        proxied.proxy.counter.reset()
        group = family(uri, tars, tokenizer)
        config = PackingConfig(
            expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, read_ahead_bytes=0
        )
        dataset = PackedDataset.from_groups(
            {"t2i": group}, config, special_tokens, weights={"t2i": 1.0}, mandatory={"t2i": False},
            local_rank=0, world_size=1, num_workers=1, data_seed=0,
        )  # fmt: skip
        assert group.units.walks_rows()
        assert proxied.proxy.counter.reset() == {"GET list": 1, "HEAD object": 1, "GET object": 1}, tars
        next(iter(dataset))
        seen[tars] = proxied.proxy.counter.reset()
        assert "GET list" not in seen[tars] and sum(seen[tars].values()) <= 16, (tars, seen[tars])
    # Not always equal: which tars the first shuffle window spans depends on the tar count.
    assert abs(sum(seen[10].values()) - sum(seen[100].values())) <= 2, seen


def _packed(uri: str, tokenizer, special_tokens) -> PackedDataset:
    group = family(uri, 3, tokenizer)
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, max_buffer_size=3)
    return PackedDataset.from_groups(
        {"t2i": group}, config, special_tokens, weights={"t2i": 1.0}, mandatory={"t2i": False},
        local_rank=0, world_size=1, num_workers=1, data_seed=3,
    )  # fmt: skip


def test_resume_over_counted_remote_tars_is_exact(proxied, tmp_path, tokenizer, special_tokens):
    uri = upload(proxied, tmp_path, [7, 3, 5])
    assert _packed(uri, tokenizer, special_tokens).grouped_datasets[0].units.walks_rows()
    check_save_load_at(lambda: _packed(uri, tokenizer, special_tokens), [4, 13], 18)


def test_the_prepare_command_writes_the_counts_of_a_local_folder(tmp_path):
    from typer.testing import CliRunner

    from bagel_data.cli.main import app

    write_tars(tmp_path, [2, 7])
    result = CliRunner().invoke(app, ["prepare", "tar-counts", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / tar_counts.COUNTS_NAME).read_text())
    assert [(s["url"], s["nsamples"]) for s in written["shardlist"]] == [("00000.tar", 2), ("00001.tar", 7)]
    assert CliRunner().invoke(app, ["prepare", "tar-counts", str(tmp_path / "none")]).exit_code != 0


def test_validate_names_the_command_without_counts_and_is_quiet_with_them(proxied, tmp_path, tokenizer):
    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config

    said = {}
    for counts in (False, True):
        uri = upload(proxied, tmp_path / str(counts), [6, 2], counts=counts)
        entry = {"data_dir": uri, "storage_options": proxied.proxy.storage_options()}
        group = {"dataset_names": ["t2i"], "num_used_data": [2], "weight": 1.0,
                 "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32}}  # fmt: skip
        report = validate_config(
            RunConfig({"t2i_pretrain": group}, {"t2i_pretrain": {"t2i": entry}}, {}), tokenizer=tokenizer
        )
        assert report.ok, report.errors
        said[counts] = [w for w in report.warnings if "prepare tar-counts" in w]
    assert len(said[False]) == 1 and said[True] == [], said
