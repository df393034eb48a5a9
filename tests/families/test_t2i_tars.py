"""The T2I family reading WebDataset tars in place (`families/t2i_tars.py`): the samples of
the `prepare t2i` copy, each read once per epoch over ranks and workers, resumed exactly from
any cursor, through a slow store as from disk; damaged tars are counted skips."""

from __future__ import annotations

import io
import itertools
import tarfile

import pytest
import torch

from bagel_bench.slow_reads import delayed_storage
from bagel_data.errors import ConfigError, SkipReason
from bagel_data.families import t2i_tars
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.media.images import ImageTransform
from bagel_data.sources import tar_index
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.doors import DOORS, build_through
from helpers.golden import as_worker
from helpers.prepare_inputs import image_bytes, t2i_tar

TRANSFORM = ImageTransform(32, 16, 16)


def _tars(folder, count: int, per_tar: int = 6) -> list[str]:
    """`count` tars of `per_tar` samples captioned `t<tar> s<sample>`; sample 2 of tar 1 has
    no caption (a counted skip in both routes)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for tar in range(count):
        path = folder / f"{tar:05d}.tar"
        with tarfile.open(path, "w") as archive:
            for sample in range(per_tar):
                parts = [(".jpg", image_bytes(tar * 100 + sample, size=(40 + sample * 4, 28)))]
                if (tar, sample) != (1, 2):
                    parts.append((".txt", f"t{tar} s{sample}".encode()))
                for ext, data in parts:
                    info = tarfile.TarInfo(f"{tar:05d}/{sample:04d}{ext}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
        paths.append(str(path))
    return paths


def _dataset(folder, tokenizer, count: int, **kwargs) -> T2IIterableDataset:
    kwargs.setdefault("num_workers", 1)
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [count], **kwargs)


def _first_pass(dataset, read_ahead: int = 0) -> list[tuple[tuple, dict]]:
    samples = []
    for cursor, sample in dataset.iter_samples(read_ahead=read_ahead):
        if cursor[0] > 0:
            return samples
        samples.append((cursor, sample))
    raise AssertionError("unreachable")


def _text(sample, tokenizer) -> str:
    return tokenizer.decode(sample["text_ids_list"][0])


@pytest.fixture()
def by_units(monkeypatch):
    """The walk by whole tars (compat mode's, and tars on an object store's): the cases that
    compare orders, cursors `(pass, unit, block, sample)` or one pass's skips describe it;
    the walk by rows over tars is tests/families/test_tar_rows.py's."""
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)


@pytest.fixture()
def small_blocks(monkeypatch):
    """Blocks of two or three samples, so that a tar holds several."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", 8192)


def test_tars_in_place_give_the_samples_of_their_prepared_copy(tmp_path, tokenizer, small_blocks, by_units):
    _tars(tmp_path / "tars", 3)
    prepare_sharded("t2i", tmp_path / "tars", tmp_path / "prepared")
    in_place = _dataset(tmp_path / "tars", tokenizer, 3)
    prepared = _dataset(tmp_path / "prepared", tokenizer, 1)
    # The copy holds the tars' samples in tar order: the in-place units in that order too.
    ours = sorted(_first_pass(in_place), key=lambda item: (in_place.epoch_units[item[1]["row_key"][0]], item[0]))
    theirs = _first_pass(prepared)
    texts = [_text(sample, tokenizer) for _, sample in ours]
    assert texts == [_text(sample, tokenizer) for _, sample in theirs]
    assert len(texts) == 17 and "t1 s2" not in texts and texts[:2] == ["t0 s0", "t0 s1"]
    for (_, mine), (_, copy) in zip(ours, theirs):
        assert torch.equal(mine["image_tensor_list"][0], copy["image_tensor_list"][0])
    assert dict(in_place.skip_log.counts) == {SkipReason.NO_CAPTION.value: 1}


def test_every_sample_is_read_once_per_epoch_over_two_ranks_of_two_workers(tmp_path, tokenizer, small_blocks):
    _tars(tmp_path / "tars", 8)
    seen = []
    for rank in range(2):
        for worker in range(2):
            with as_worker(worker, 2):
                dataset = _dataset(tmp_path / "tars", tokenizer, 8, local_rank=rank, world_size=2, num_workers=2)
                seen += [_text(sample, tokenizer) for _, sample in _first_pass(dataset)]
    expected = [f"t{tar} s{sample}" for tar in range(8) for sample in range(6) if (tar, sample) != (1, 2)]
    assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("read_ahead", [0, 1 << 20])
def test_a_resume_after_any_cursor_continues_the_stream_exactly(
    tmp_path, tokenizer, small_blocks, by_units, read_ahead
):
    _tars(tmp_path / "tars", 2)
    full = list(itertools.islice(_dataset(tmp_path / "tars", tokenizer, 2).iter_samples(), 16))
    assert len({cursor[2] for cursor, _ in full}) > 1 and max(cursor[3] for cursor, _ in full) > 0, "several blocks"
    for k in (0, 1, 4, 5, 9, 10, 13):
        resumed = _dataset(tmp_path / "tars", tokenizer, 2).iter_samples(after=full[k][0], read_ahead=read_ahead)
        got = [(cursor, _text(sample, tokenizer)) for cursor, sample in itertools.islice(resumed, 16 - k - 1)]
        assert got == [(cursor, _text(sample, tokenizer)) for cursor, sample in full[k + 1 :]], f"after {full[k][0]}"
    # A data_status resumes the same way (a sample's data_indexes: its position, tagged).
    assert full[5][1]["data_indexes"]["data_indexes"][:-1] == list(full[5][0][1:])
    resumed = _dataset(tmp_path / "tars", tokenizer, 2, data_status=[full[5][1]["data_indexes"]["data_indexes"]])
    assert [_text(sample, tokenizer) for sample in itertools.islice(iter(resumed), 3)] == [
        _text(sample, tokenizer) for _, sample in full[6:9]
    ]


@pytest.mark.parametrize("read_ahead", [0, 1 << 20])
def test_a_buffered_sample_is_rebuilt_from_its_cursor(tmp_path, tokenizer, small_blocks, read_ahead, monkeypatch):
    _tars(tmp_path / "tars", 2)
    dataset = _dataset(tmp_path / "tars", tokenizer, 2)
    full = list(itertools.islice(dataset.iter_samples(), 11))
    opened = []

    class Counted(tar_index.TarIndex):
        def __init__(self, path, listed=None):
            opened.append(path)
            super().__init__(path, listed)

    monkeypatch.setattr(t2i_tars, "TarIndex", Counted)
    again = _dataset(tmp_path / "tars", tokenizer, 2)
    cursors = [cursor for cursor, _ in full]
    again.prefetch_rows(cursors, read_ahead)
    for cursor, sample in full:
        rebuilt = again.sample_at(cursor)
        assert rebuilt is not None and _text(rebuilt, tokenizer) == _text(sample, tokenizer)
        assert torch.equal(rebuilt["image_tensor_list"][0], sample["image_tensor_list"][0])
    if read_ahead:
        stats = again.read_ahead_stats()  # each row's index and block, pinned: none read again
        assert (stats["hits"], stats["misses"]) == (2 * len(cursors), 0), stats
    again.stop_read_ahead()
    assert len(opened) == 2, "each tar's index is opened once (pinned, or kept inline), not once per row"


def test_through_a_slow_store_the_read_ahead_gives_the_local_samples(tmp_path, tokenizer, small_blocks):
    _tars(tmp_path / "tars", 3)
    local = [_text(sample, tokenizer) for _, sample in _first_pass(_dataset(tmp_path / "tars", tokenizer, 3))]
    dataset = _dataset(tmp_path / "tars", tokenizer, 3)
    with delayed_storage(0.005):
        remote = [_text(sample, tokenizer) for _, sample in _first_pass(dataset, read_ahead=1 << 20)]
    stats = dataset.read_ahead_stats()
    dataset.stop_read_ahead()
    assert remote == local
    assert stats["hits"] > 0 and stats["misses"] == 0, stats


def test_a_failed_block_read_loses_that_block_only(tmp_path, tokenizer, small_blocks, by_units):
    paths = _tars(tmp_path / "tars", 2)
    index = tar_index.TarIndex(paths[0])
    lost = index.blocks[1]
    with delayed_storage(fail={paths[0]: (lost.start, lost.start + 1)}):
        dataset = _dataset(tmp_path / "tars", tokenizer, 2)
        texts = [_text(sample, tokenizer) for _, sample in _first_pass(dataset)]
    missing = {f"t0 s{sample}" for sample in range(lost.first, lost.stop)}
    assert missing and not missing & set(texts) and len(texts) == 11 - len(missing)
    assert dataset.skip_log.counts[SkipReason.UNIT_UNREADABLE.value] == len(missing)


@pytest.mark.parametrize("cut", ["mid-member", "mid-header", "at-a-header"])
def test_a_truncated_tar_is_a_counted_unreadable_unit(tmp_path, tokenizer, cut):
    paths = _tars(tmp_path / "tars", 2)
    members = tar_index.list_tar(paths[1])
    image = members[1][1].image  # type: ignore[union-attr]
    at = {"mid-member": image.offset + 100, "mid-header": image.offset - 100, "at-a-header": image.offset - 512}
    with open(paths[1], "r+b") as handle:
        handle.truncate(at[cut])
    dataset = _dataset(tmp_path / "tars", tokenizer, 2)
    texts = [_text(sample, tokenizer) for _, sample in _first_pass(dataset)]
    assert texts and all(text.startswith("t0 ") for text in texts)
    assert set(dataset.skip_log.counts) == {SkipReason.UNIT_UNREADABLE.value}  # once per pass that meets it
    assert "not a readable tar file: unexpected end of data" in dataset.skip_log.examples["unit_unreadable"]
    with pytest.raises(ConfigError, match="not a readable tar file: unexpected end of data"):
        prepare_sharded("t2i", tmp_path / "tars", tmp_path / "out")  # prepare's word for it


def test_a_folder_of_tars_and_parquet_is_refused_naming_both(tmp_path, tokenizer):
    t2i_tar(tmp_path / "mixed" / "a.tar", 3)
    (tmp_path / "mixed" / "b.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match=r"data_dir = .*mixed.*a\.tar\).*b\.parquet\)"):
        _dataset(tmp_path / "mixed", tokenizer, 1)


def test_img2dataset_s_listing_beside_each_tar_is_not_data(tmp_path, tokenizer):
    paths = _tars(tmp_path / "tars", 2)
    for path in paths:  # img2dataset's outputs beside each shard
        (tmp_path / "tars" / path.replace(".tar", ".parquet")).write_bytes(b"PAR1 urls and statuses")
        (tmp_path / "tars" / path.replace(".tar", "_stats.json")).write_text("{}")
    dataset = _dataset(tmp_path / "tars", tokenizer, 2)
    assert dataset.tars and sorted(dataset.data_paths) == paths
    assert len(_first_pass(dataset)) == 11


def test_column_names_are_refused_for_tars(tmp_path, tokenizer):
    t2i_tar(tmp_path / "tars" / "a.tar", 3)
    with pytest.raises(ConfigError, match="image_column = 'jpg': .*parquet tables"):
        _dataset(tmp_path / "tars", tokenizer, 1, image_column="jpg")


def test_a_folder_without_tars_or_parquet_says_so(tmp_path, tokenizer):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no \*\.parquet files"):
        _dataset(tmp_path / "empty", tokenizer, 1)


def test_tars_on_an_object_store_give_the_local_samples(tmp_path, tokenizer, monkeypatch, small_blocks):
    """S3 (a moto server on loopback): the listing, the index cache's key and the blocks'
    ranged reads all go through the store."""
    import logging

    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    paths = _tars(tmp_path / "tars", 2)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        client = boto3.client("s3", endpoint_url=f"http://{host}:{port}")
        client.create_bucket(Bucket="wds")
        for path in paths:
            client.upload_file(path, "wds", f"tars/{path.rsplit('/', 1)[-1]}")
        remote = T2IIterableDataset("t2i", TRANSFORM, tokenizer, ["s3://wds/tars"], [2], num_workers=1)
        assert remote.tars and remote.data_paths == ["s3://wds/tars/00000.tar", "s3://wds/tars/00001.tar"]
        got = _first_pass(remote, read_ahead=1 << 20)
        remote.stop_read_ahead()
        cached = tar_index.TarIndex("s3://wds/tars/00000.tar")
    finally:
        server.stop()
    # Tars on a store keep the walk by units (counting a tar's samples is a pass over it).
    assert not remote.units.walks_rows() and _dataset(tmp_path / "tars", tokenizer, 2).units.walks_rows()
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)
    want = _first_pass(_dataset(tmp_path / "tars", tokenizer, 2))
    assert [_text(s, tokenizer) for _, s in got] == [_text(s, tokenizer) for _, s in want]
    assert all(torch.equal(a["image_tensor_list"][0], b["image_tensor_list"][0]) for (_, a), (_, b) in zip(got, want))
    assert cached.folder is not None, "a store's tar keys the node's cache too"


@pytest.mark.parametrize("door", DOORS)
def test_tars_in_place_through_each_door_with_bagel_s_transforms_and_dropouts(
    tmp_path, tokenizer, special_tokens, door
):
    """A user's config: BAGEL's 1024-pixel VAE transform and its CFG dropouts on. Every door
    packs the same first pass, each usable sample of the tars once."""
    _tars(tmp_path / "tars", 2)
    grouped = {"t2i_pretrain": {"dataset_names": ["t2i"], "num_used_data": [2], "weight": 1,
                                "image_transform_args": {"image_stride": 16, "max_image_size": 1024,
                                                         "min_image_size": 512}}}  # fmt: skip
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(tmp_path / "tars")}}}
    settings = dict(max_num_tokens=4096, expected_num_tokens=3000, max_num_tokens_per_sample=4000, max_latent_size=64,
                    text_cond_dropout_prob=0.1, vae_cond_dropout_prob=0.3, vit_cond_dropout_prob=0.3)  # fmt: skip
    packs = []
    for build in (door, "make_bagel_multimodal_dataset"):
        dataset = build_through(build, tokenizer=tokenizer, special_tokens=special_tokens, grouped=grouped,
                                info=info, settings=settings)  # fmt: skip
        packs.append(list(itertools.islice(iter(dataset), 6)))
    ours, baseline = packs
    for mine, theirs in zip(ours, baseline):
        assert torch.equal(mine["packed_text_ids"], theirs["packed_text_ids"])
        assert torch.equal(mine["padded_images"], theirs["padded_images"])
    rows = [tuple(where["data_indexes"]) for pack in ours for where in pack["batch_data_indexes"]]
    first_pass = rows[:11]  # 2 tars x 6 samples, one without a caption
    assert len(set(first_pass)) == 11
    assert max(pack["padded_images"].shape[-1] for pack in ours) > 512  # the 1024-pixel transform, upscaled


def test_the_next_tars_are_listed_while_the_stream_waits_on_an_index(tmp_path):
    """While the read-ahead waits on one tar's index, the walk's next tars are listed too
    (as parquet footers are opened early): a stream over many small tars waits on one index
    round trip at a time, not one per tar in turn."""
    import threading

    from bagel_data.families.reads import FILES_AHEAD, source_tasks
    from bagel_data.families.walk import Phase, WorkItem
    from bagel_data.sources.read_ahead import ReadAhead

    paths = _tars(tmp_path / "tars", 4, per_tar=2)
    release, started = threading.Event(), []

    def index_of(path):
        started.append(path)
        if path == paths[0]:
            assert release.wait(30), "the first tar's index was held"
        return tar_index.TarIndex(path)

    items = iter([WorkItem(i, i, 0, ()) for i in range(len(paths))])
    source = t2i_tars.TarSource(paths.__getitem__, index_of)
    ahead = ReadAhead(64 << 20, ramp_start=8)
    try:
        ahead.follow(source_tasks(source, [Phase(0, True, items)], set()))
        for _ in range(300):
            if len(started) == len(paths):
                break
            threading.Event().wait(0.01)
        listed_early = sorted(started)
        release.set()
        first = ahead.take(("tarindex", paths[0]), lambda: None)
        second = ahead.take(("tarindex", paths[1]), lambda: None)
    finally:
        release.set()
        ahead.close()
    assert len(paths) - 1 <= FILES_AHEAD and listed_early == paths, listed_early
    assert isinstance(first, tar_index.TarIndex) and second.path == paths[1]
    assert (ahead.hits, ahead.misses) == (2, 0)
