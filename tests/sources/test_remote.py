"""Reading every input from S3 (a moto server on loopback) gives the local packed output."""

from __future__ import annotations

import logging

import pytest

from bagel_data import ConfigError
from bagel_data.sources import storage
from helpers.golden import GOLDEN_CASES, absolute_dataset_info, first_packs, load_case

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "bagel-test"


@pytest.fixture
def unit_walk(monkeypatch):
    """The walk by whole units on local files too: files on an object store are walked by
    units (families/unit_plan.py, `walks_rows`), and these tests hold the two to the same
    stream (or pin the unit walk's own message)."""
    from bagel_data.families.unit_plan import UnitPlan

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)


@pytest.fixture(scope="module")
def s3_endpoint():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def s3(s3_endpoint, monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=BUCKET)
        data = (GOLDEN_CASES / ".." / "data").resolve()
        for path in data.rglob("*"):
            if path.is_file():
                client.upload_file(str(path), BUCKET, f"data/{path.relative_to(data)}")
    return client


def s3_info(case: dict) -> dict:
    info = absolute_dataset_info(case)
    local_root = str((GOLDEN_CASES / ".." / "data").resolve())
    for datasets in info.values():
        for meta in datasets.values():
            for key in ("data_dir", "jsonl_path", "parquet_info_path"):
                if key in meta:
                    meta[key] = meta[key].replace(local_root, f"s3://{BUCKET}/data")
    return info


def test_s3_matches_local(s3, golden_root, tokenizer, special_tokens, unit_walk):
    case, _, _ = load_case("packed_three_groups_flex")
    local, local_dataset = first_packs(case, absolute_dataset_info(case), tokenizer, special_tokens, 3)
    remote, dataset = first_packs(case, s3_info(case), tokenizer, special_tokens, 3)
    for a, b in zip(local, remote):
        assert a["batch_data_indexes"] == b["batch_data_indexes"]
        for key in ("packed_text_ids", "packed_position_ids", "padded_images", "packed_vit_tokens"):
            assert a[key].equal(b[key]), key
    assert dataset.stats["skips"] == local_dataset.stats["skips"]
    assert dataset.stats["skips"]["t2i_pretrain"], "the bad rows are met and counted remotely too"


def test_missing_bucket_or_key_is_a_clear_error(s3, golden_root, tokenizer, special_tokens):
    case, _, _ = load_case("packed_three_groups_flex")
    info = s3_info(case)
    info["vlm_sft"]["vlm"]["jsonl_path"] = f"s3://{BUCKET}/data/vlm/nope.jsonl"
    with pytest.raises(ConfigError, match="nope.jsonl.*does not exist"):
        first_packs(case, info, tokenizer, special_tokens, 1)
    info = s3_info(case)
    info["t2i_pretrain"]["t2i"]["data_dir"] = f"s3://{BUCKET}/data/no-such-folder"  # known by its listing
    with pytest.raises(ConfigError, match="data_dir.*no-such-folder.*no folder at this path"):
        first_packs(case, info, tokenizer, special_tokens, 1)
    info = s3_info(case)
    info["t2i_pretrain"]["t2i"]["data_dir"] = "s3://no-such-bucket/t2i"
    with pytest.raises(ConfigError, match="no-such-bucket"):
        first_packs(case, info, tokenizer, special_tokens, 1)


def test_storage_options_in_dataset_info_replace_the_environment(
    s3, s3_endpoint, golden_root, tokenizer, special_tokens, monkeypatch, unit_walk
):
    case, _, _ = load_case("packed_three_groups_flex")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key)
    monkeypatch.setattr(storage, "_OPTIONS", {})  # this test's options only
    scheme, host = s3_endpoint.split("://")
    options = {
        "endpoint_override": host,
        "scheme": scheme,
        "access_key": "testing",
        "secret_key": "testing",
        "region": "us-east-1",
    }
    info = s3_info(case)
    for datasets in info.values():
        for meta in datasets.values():
            meta["storage_options"] = options
    local, _ = first_packs(case, absolute_dataset_info(case), tokenizer, special_tokens, 2)
    remote, dataset = first_packs(case, info, tokenizer, special_tokens, 2)
    for a, b in zip(local, remote):
        assert a["batch_data_indexes"] == b["batch_data_indexes"]
        assert a["padded_images"].equal(b["padded_images"])
    assert set(dataset.storage_options) == {f"s3://{BUCKET}"}


def test_bad_storage_options_name_the_key_not_the_secret(s3, golden_root, tokenizer, special_tokens, monkeypatch):
    case, _, _ = load_case("packed_three_groups_flex")
    monkeypatch.setattr(storage, "_OPTIONS", {})
    info = s3_info(case)
    info["t2i_pretrain"]["t2i"]["storage_options"] = {"secret_key": "hunter2", "no_such_option": 1}
    with pytest.raises(ConfigError, match=r"dataset_info\.t2i_pretrain\.t2i\.storage_options") as error:
        first_packs(case, info, tokenizer, special_tokens, 1)
    assert "hunter2" not in str(error.value)
    assert "no_such_option" in str(error.value)


def test_s3_hub_splits_and_data_files(s3):
    """The split rule and `data_files` globs list an object store as they list a folder."""
    from bagel_data.sources.parquet import get_parquet_data_paths
    from bagel_data.sources.splits import DataDir

    names = ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
             "data/test-00000-of-00001.parquet", "folders/train/a.parquet", "folders/test/b.parquet"]  # fmt: skip
    for name in names:
        s3.put_object(Bucket=BUCKET, Key=f"hub/{name}", Body=b"x")
    root = f"s3://{BUCKET}/hub"
    assert get_parquet_data_paths([f"{root}/data"], [2]) == [f"{root}/{name}" for name in names[:2]]
    assert get_parquet_data_paths([DataDir(root, "test")], [1]) == [f"{root}/{names[2]}"]  # the repository root
    assert get_parquet_data_paths([f"{root}/folders"], [1]) == [f"{root}/{names[3]}"]
    globbed = DataDir(root, data_files=["**/test*/*.parquet", "data/test-*"])
    assert get_parquet_data_paths([globbed], [2]) == [f"{root}/{names[2]}", f"{root}/{names[4]}"]
