"""Start-up against an object store sends a constant number of requests per worker: each
folder is listed once (the listing gives the sizes a checkpoint records), footers are read
only for the units a worker reads, and repeated files are looked at once. Counted by the
proxy in front of a moto S3 server (bench/moto_store.py), at 10 and at 1,000 shards."""

from __future__ import annotations

import pytest

from bagel_bench.moto_store import moto_store
from bagel_data import ImageTransform, T2IIterableDataset, UnifiedEditIterableDataset
from bagel_data.checkpoint.inputs import input_record
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.sources import shared_listing, storage
from helpers.builders import png_bytes, solid_jpeg, write_edit, write_t2i
from helpers.object_store import copies

# Files on an object store are walked by units in the default mode (families/unit_plan.py,
# `walks_rows`): counting their rows for the walk by rows would read every footer at start-up.

pytest.importorskip("moto.server")  # a dev dependency (moto_store imports it when started)

BUCKET = "s3://startup-requests"
SHARDS = (10, 1000)
# Requests one worker may send from its start to its first pack, whatever the shard count:
# opening the first units it reads (size, footer, row group) and nothing per shard. Counted
# with read-ahead off: read-ahead brings the stream's own later reads forward, as far as its
# byte budget allows, so how many of them land before the first pack is a race (its own test
# is below).
PER_WORKER = 12
# The same for tars: the first pack opens two or three tars, each its index and a block.
PER_WORKER_TARS = 16


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """moto behind the counting proxy, holding a T2I and an edit folder per shard count."""
    root = tmp_path_factory.mktemp("shards")
    one_t2i = write_t2i(root / "one_t2i", [[[{"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}] * 2]])
    row = {"image_list": [png_bytes(32, 32)] * 2, "instruction_list": [["make it red"]]}
    one_edit, _ = write_edit(root / "one_edit", [[[row], [row]]])
    with moto_store() as made:
        for count in SHARDS:
            made.upload(copies(one_t2i[0], root / f"t2i_{count}", count)[0].parent, f"{BUCKET}/t2i_{count}")
            made.upload(copies(one_edit[0], root / f"edit_{count}", count)[0].parent, f"{BUCKET}/edit_{count}")
        yield made


@pytest.fixture()
def proxied(store, monkeypatch):
    """Every path of the bucket goes through the proxy (this test's storage options only).
    Each process lists for itself here (these count one process's requests; the node's
    shared listing is tests/sources/test_shared_listing.py's)."""
    monkeypatch.setenv(shared_listing.TTL_ENV, "0")
    monkeypatch.setattr(storage, "_OPTIONS", {})
    store.register(BUCKET)
    store.proxy.counter.reset()
    return store


def build(
    family: str, count: int, tokenizer, special_tokens, num_used: int | None = None, read_ahead_bytes: int = 0
) -> PackedDataset:
    used = [count if num_used is None else num_used]
    if family == "t2i":
        group = T2IIterableDataset(
            "t2i", ImageTransform(64, 32, 16), tokenizer, [f"{BUCKET}/t2i_{count}"], used, num_workers=1
        )
    else:
        info = {f"part-{i:05d}.parquet": {"num_row_groups": 2} for i in range(count)}
        group = UnifiedEditIterableDataset(
            "edit", ImageTransform(32, 16, 16), tokenizer, ImageTransform(28, 14, 14),
            [f"{BUCKET}/edit_{count}"], used, info, num_workers=1,
        )  # fmt: skip
    config = PackingConfig(
        expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, read_ahead_bytes=read_ahead_bytes
    )
    return PackedDataset.from_groups(
        {family: group}, config, special_tokens, weights={family: 1.0}, mandatory={family: False},
        local_rank=0, world_size=1, num_workers=1, data_seed=0,
    )  # fmt: skip


def start_up(store, family: str, count: int, tokenizer, special_tokens, num_used: int | None = None, **kwargs):
    """(requests of construction, requests of a worker up to its first pack)."""
    store.proxy.counter.reset()
    dataset = build(family, count, tokenizer, special_tokens, num_used, **kwargs)
    construction = store.proxy.counter.reset()
    next(iter(dataset))  # this process plays the worker: the same start a DataLoader worker makes
    return construction, store.proxy.counter.reset()


def objects(counts: dict) -> int:
    return sum(value for kind, value in counts.items() if kind.endswith("object"))


@pytest.mark.parametrize("family", ["t2i", "edit"])
def test_start_up_lists_each_folder_once_and_sends_a_constant_per_worker(proxied, family, tokenizer, special_tokens):
    seen = {}
    for count in SHARDS:
        construction, worker = start_up(proxied, family, count, tokenizer, special_tokens)
        # One listing (1,000 keys fit one page), no request per shard: no HEAD, no footer.
        assert construction == {"GET list": 1}, (count, construction)
        assert "GET list" not in worker and objects(worker) <= PER_WORKER, (count, worker)
        seen[count] = worker
    assert seen[SHARDS[0]] == seen[SHARDS[-1]], "a worker's start-up grew with the shard count"


@pytest.mark.parametrize("family", ["t2i", "edit"])
def test_with_read_ahead_a_worker_still_lists_nothing(proxied, family, tokenizer, special_tokens):
    """Read-ahead on (its default budget): its fetches are the stream's own reads, brought
    forward as far as the byte budget allows (with these tiny shards, into later passes), so
    their number at the first pack is a race; construction is unchanged and the worker lists
    nothing."""
    for count in SHARDS:
        construction, worker = start_up(
            proxied, family, count, tokenizer, special_tokens, read_ahead_bytes=PackingConfig().read_ahead_bytes
        )
        assert construction == {"GET list": 1}, (count, construction)
        assert set(worker) <= {"HEAD object", "GET object"} and worker.get("GET object", 0) > 0, worker


def test_repeated_files_are_listed_once(proxied, tokenizer, special_tokens):
    """num_used_data three times the files: still one listing and nothing per file."""
    construction, worker = start_up(proxied, "edit", 10, tokenizer, special_tokens, num_used=30)
    assert construction == {"GET list": 1} and objects(worker) <= PER_WORKER


@pytest.mark.parametrize("family", ["t2i", "edit"])
def test_the_listed_input_record_is_the_one_each_file_gives(proxied, family, tokenizer, special_tokens):
    """The sizes and stamps a checkpoint records come from the listing now; they are exactly
    what asking each file gives (the resume check compares them)."""
    dataset = build(family, 10, tokenizer, special_tokens)
    group = dataset.grouped_datasets[0]
    listed = group.input_record()
    asked = input_record(group.units.kind.input_paths(group.data_paths))  # a HEAD per file
    assert listed == asked and listed["count"] == 10
    assert all(size > 0 and stamp for _, size, stamp in listed["files"])


def test_through_the_config_each_folder_costs_one_listing(proxied, tokenizer, special_tokens, tmp_path, monkeypatch):
    """Built from dataset_info (its storage_options send the client through the proxy): the
    config's check that data_dir is a folder is its listing, which the family then reads
    from the node cache (a HEAD and a one-key listing before, then the listing)."""
    from bagel_data import make_bagel_multimodal_dataset
    from bagel_data.sources import node_cache

    monkeypatch.delenv(shared_listing.TTL_ENV)  # the node's shared listing, as by default
    monkeypatch.setenv(node_cache.ENV, str(tmp_path / "cache"))
    seen = []
    for count in SHARDS:
        monkeypatch.setenv(shared_listing.RUN_ENV, f"launch-{count}")
        entry = {"data_dir": f"{BUCKET}/t2i_{count}", "storage_options": proxied.proxy.storage_options()}
        group = {"dataset_names": ["t2i"], "num_used_data": [count], "weight": 1.0, "is_mandatory": True,
                 "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32}}  # fmt: skip
        proxied.proxy.counter.reset()
        dataset = make_bagel_multimodal_dataset(
            tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets={"t2i_pretrain": group},
            dataset_info={"t2i_pretrain": {"t2i": entry}}, num_workers=1,
            expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, prefer_buffer_before=10,
            read_ahead_bytes=0,
        )  # fmt: skip
        assert proxied.proxy.counter.reset() == {"GET list": 1}, count
        next(iter(dataset))
        seen.append(proxied.proxy.counter.reset())
        assert "GET list" not in seen[-1] and objects(seen[-1]) <= PER_WORKER
    assert seen[0] == seen[-1]


def test_a_stale_row_group_count_of_a_remote_file_is_named_when_a_worker_opens_it(proxied, tokenizer):
    """The footer is not read at construction on an object store; the worker that opens the
    file reports the stale parquet_info entry, naming the file and both counts."""
    from bagel_data import ConfigError

    info = {f"part-{i:05d}.parquet": {"num_row_groups": 3} for i in range(10)}  # the files have 2
    group = UnifiedEditIterableDataset(
        "edit", ImageTransform(32, 16, 16), tokenizer, ImageTransform(28, 14, 14),
        [f"{BUCKET}/edit_10"], [10], info, num_workers=1,
    )  # fmt: skip
    assert proxied.proxy.counter.reset() == {"GET list": 1}
    with pytest.raises(ConfigError, match=r"part-000\d\d.parquet: num_row_groups=3.*the file has 2 row groups"):
        next(iter(group))


def test_a_missing_bucket_is_a_config_error_naming_the_folder(proxied):
    from bagel_data import ConfigError
    from bagel_data.sources.parquet import parquet_data_files

    proxied.register("s3://no-such-bucket")
    with pytest.raises(ConfigError, match=r"data_dir = 's3://no-such-bucket/t2i'.*cannot be listed"):
        parquet_data_files(["s3://no-such-bucket/t2i"], [1])


def test_a_folder_named_twice_is_listed_once(proxied):
    from bagel_data.sources.parquet import parquet_data_files

    paths, listed = parquet_data_files([f"{BUCKET}/t2i_10"] * 3, [10, 5, 12])
    assert len(paths) == 27 and len(listed) == 10
    assert proxied.proxy.counter.reset() == {"GET list": 1}


@pytest.fixture(scope="module")
def tar_store(tmp_path_factory):
    """moto behind the counting proxy, holding a folder of WebDataset tars per shard count."""
    from helpers.prepare_inputs import t2i_tar

    root = tmp_path_factory.mktemp("tars")
    one = t2i_tar(root / "one" / "00000.tar", 6)
    with moto_store() as made:
        for count in SHARDS:
            made.upload(copies(one, root / f"tars_{count}", count, "{:05d}.tar")[0].parent, f"{BUCKET}/tars_{count}")
        yield made


@pytest.mark.parametrize("with_state", [False, True])
def test_tars_start_up_reads_no_tar_it_does_not_pack(tar_store, monkeypatch, with_state, tokenizer, special_tokens):
    """A packed dataset on remote tars: what the checkpoint records of its inputs comes from
    the folder's listing (size and modification time, which the store sets at each write),
    so neither the first pack nor a checkpoint reads the tars it has not reached; the
    requests to the first pack do not grow with the shard count."""
    monkeypatch.setenv(shared_listing.TTL_ENV, "0")  # one process's requests, as in `proxied`
    monkeypatch.setattr(storage, "_OPTIONS", {})
    tar_store.register(BUCKET)
    seen = {}
    for count in SHARDS:
        tar_store.proxy.counter.reset()
        group = T2IIterableDataset(
            "t2i", ImageTransform(64, 32, 16), tokenizer, [f"{BUCKET}/tars_{count}"], [count], num_workers=1
        )
        config = PackingConfig(
            expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, read_ahead_bytes=0
        )
        dataset = PackedDataset.from_groups(
            {"t2i": group}, config, special_tokens, weights={"t2i": 1.0}, mandatory={"t2i": False},
            local_rank=0, world_size=1, num_workers=1, data_seed=0,
        )  # fmt: skip
        assert tar_store.proxy.counter.reset() == {"GET list": 1}, count
        stream = iter(dataset)
        next(stream)
        if with_state:
            dataset.state_dict()
        seen[count] = tar_store.proxy.counter.reset()
        assert "GET list" not in seen[count] and objects(seen[count]) <= PER_WORKER_TARS, (count, seen[count])
    assert seen[SHARDS[0]] == seen[SHARDS[-1]], "a worker's start-up grew with the shard count"
