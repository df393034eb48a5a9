"""The sharded engine layer of `prepare` (engine="local"; the Ray engine is in test_prepare_ray.py).

Expectations come from the plain `prepare_*` functions, which do not go through the engine.
"""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.errors import ConfigError
from bagel_data.tools.prepare import engine, prepare_edit, prepare_interleaved, prepare_t2i, prepare_vlm
from bagel_data.tools.prepare.shard_jobs import ShardResult
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers import prepare_inputs


def rows_of(files) -> list[dict]:
    return [row for path in files if path.suffix == ".parquet" for row in pq.read_table(path).to_pylist()]


def notes(report) -> list[tuple[str, str]]:
    return [(note.location, note.reason) for note in report.dropped]


def test_local_engine_writes_the_plain_tools_files_byte_for_byte(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 23, bad=False)
    plain = prepare_t2i(raw, tmp_path / "plain", rows_per_group=4, rows_per_shard=10)
    sharded = prepare_sharded("t2i", raw, tmp_path / "sharded", rows_per_group=4, rows_per_shard=10)
    assert [p.name for p in sharded.files_written] == [p.name for p in plain.files_written]
    assert len(plain.files_written) == 3
    for a, b in zip(plain.files_written, sharded.files_written):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert sharded.rows_written == plain.rows_written == 23


def test_shards_follow_the_input_rows_and_keep_every_drop(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 30)
    plain = prepare_t2i(raw, tmp_path / "plain", rows_per_shard=1000)
    calls = []
    sharded = prepare_sharded(
        "t2i", raw, tmp_path / "out", rows_per_group=3, rows_per_shard=10, progress=lambda *a: calls.append(a)
    )
    assert rows_of(sharded.files_written) == rows_of(plain.files_written)
    assert notes(sharded) == notes(plain) and len(notes(plain)) == 8  # 4 uncaptioned, 3 broken, 1 orphan
    # Input rows 0-9 hold img0003 (no caption) and img0005 (broken): shard 0 keeps 8 of 10;
    # 10, 16 and 17 are bad in shard 1, 24 and 27 in shard 2; shard 3 (the orphan) has no file.
    counts = [pq.read_metadata(path).num_rows for path in sharded.files_written]
    assert counts == [8, 7, 8]
    groups = [pq.read_metadata(sharded.files_written[0]).row_group(g).num_rows for g in range(3)]
    assert groups == [3, 3, 2]
    assert calls[0] == (0, 31) and calls[-1] == (31, 31)


def test_vlm_output_and_report_equal_the_plain_tool(tmp_path):
    source = prepare_inputs.vlm_source(tmp_path / "raw", 17)
    plain = prepare_vlm(source, tmp_path / "plain.jsonl", image_root=tmp_path / "raw")
    sharded = prepare_sharded("vlm", source, tmp_path / "out.jsonl", image_root=tmp_path / "raw", rows_per_shard=4)
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    assert sharded.files_written == (tmp_path / "out.jsonl",)
    assert notes(sharded) == notes(plain) and plain.dropped
    assert sharded.fixed == plain.fixed and plain.fixed
    assert not (tmp_path / "out.jsonl.parts").exists()


@pytest.mark.parametrize("kind", ["edit", "interleaved"])
def test_edit_and_interleaved_rows_report_and_parquet_info(tmp_path, kind):
    if kind == "edit":
        source = prepare_inputs.edit_manifest(tmp_path / "raw", 12)
        plain = prepare_edit(source, tmp_path / "plain", rows_per_group=2)
    else:
        source = prepare_inputs.interleaved_docs(tmp_path / "raw", 12)
        plain = prepare_interleaved(source, tmp_path / "plain", rows_per_group=2)
    sharded = prepare_sharded(kind, source, tmp_path / "out", rows_per_group=2, rows_per_shard=5)
    assert rows_of(sharded.files_written) == rows_of(plain.files_written)
    assert notes(sharded) == notes(plain) and plain.dropped
    info = json.loads((tmp_path / "out" / "parquet_info.json").read_text())
    parts = sorted((tmp_path / "out").glob("*.parquet"))
    assert len(parts) == 3
    assert info == {
        os.path.abspath(path): {"num_row_groups": pq.read_metadata(path).num_row_groups,
                                "num_rows": pq.read_metadata(path).num_rows}
        for path in parts
    }  # fmt: skip
    if kind == "interleaved":
        assert (tmp_path / "out" / "run.yaml").is_file()


def test_webdataset_tar_gives_the_rows_of_the_same_folder(tmp_path):
    tar = prepare_inputs.t2i_tar(tmp_path / "shards" / "00000.tar", 9)
    report = prepare_sharded("t2i", tmp_path / "shards", tmp_path / "out", rows_per_shard=4)
    assert notes(report) == [
        ("00000.tar:k/0003", "no_caption"),
        ("00000.tar:k/0004", "image_unreadable"),
        ("00000.tar:k/lonely", "caption_file_without_image"),
    ]
    rows = rows_of(report.files_written)
    kept = [index for index in range(9) if index not in (3, 4)]
    assert [json.loads(row["captions"]) for row in rows] == [{"caption_1": f"caption of {i}"} for i in kept]
    assert [row["image"] for row in rows] == [prepare_inputs.image_bytes(i) for i in kept]
    single = prepare_sharded("t2i", tar, tmp_path / "single", rows_per_shard=4)  # one .tar names itself
    assert rows_of(single.files_written) == rows


@pytest.mark.parametrize("second", ["k/0002.txt", "k/0002.png"])
def test_a_webdataset_member_given_twice_drops_its_key_by_name(tmp_path, second):
    import io
    import tarfile

    tar = prepare_inputs.t2i_tar(tmp_path / "shards" / "00000.tar", 3)
    with tarfile.open(tar, "a") as archive:  # the same part of key k/0002 again
        data = prepare_inputs.image_bytes(7) if second.endswith(".png") else b"another caption"
        info = tarfile.TarInfo(second)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    report = prepare_sharded("t2i", tmp_path / "shards", tmp_path / "out", rows_per_shard=4)
    assert ("00000.tar:k/0002", "tar_member_given_twice") in notes(report)
    assert [json.loads(row["captions"]) for row in rows_of(report.files_written)] == [
        {"caption_1": f"caption of {i}"} for i in (0, 1)
    ]


def test_img2dataset_files_folder_gives_the_rows_of_its_tar(tmp_path):
    tar = prepare_inputs.t2i_tar(tmp_path / "shards" / "00000.tar", 9, folder="00000")
    files = prepare_inputs.img2dataset_files(tar, tmp_path / "files")
    from_tar = prepare_sharded("t2i", tar, tmp_path / "from_tar", rows_per_shard=4)
    from_folder = prepare_sharded("t2i", files, tmp_path / "from_folder", rows_per_shard=4)
    assert len(rows_of(from_folder.files_written)) == 7
    assert rows_of(from_folder.files_written) == rows_of(from_tar.files_written)
    # The same drops; the shard's _stats.json and .parquet are not rows.
    assert notes(from_folder) == [
        ("00000/0003.jpg", "no_caption"),
        ("00000/0004.jpg", "image_unreadable"),
        ("00000/lonely.txt", "caption_file_without_image"),
    ]
    assert [reason for _, reason in notes(from_tar)] == [reason for _, reason in notes(from_folder)]
    assert from_folder.sources == from_tar.sources == {".txt": 4, ".json caption": 3}


def test_a_crashed_run_resumes_and_skips_finished_shards(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 30)
    out = tmp_path / "out"
    full = prepare_sharded("t2i", raw, out, rows_per_shard=10)
    before = {path.name: path.read_bytes() for path in full.files_written}
    # The crash: shard 1 was being written (no marker, a cut file), shard 2 never started.
    state = out / ".prepare-state"
    (state / "part-00001.done").unlink()
    (out / "part-00001.parquet").write_bytes(b"cut short")
    (state / "part-00002.done").unlink()
    (out / "part-00002.parquet").unlink()
    first_mtime = (out / "part-00000.parquet").stat().st_mtime_ns
    with pytest.raises(ConfigError, match="already holds a run.*--resume"):
        prepare_sharded("t2i", raw, out, rows_per_shard=10)
    with pytest.raises(ConfigError, match="another job"):
        prepare_sharded("t2i", raw, out, rows_per_shard=7, resume=True)
    calls = []
    resumed = prepare_sharded("t2i", raw, out, rows_per_shard=10, resume=True, progress=lambda *a: calls.append(a))
    assert calls[0] == (11, 31), "the finished shard counts as done from the start"
    assert (out / "part-00000.parquet").stat().st_mtime_ns == first_mtime
    assert {path.name: path.read_bytes() for path in resumed.files_written} == before
    assert resumed.dropped == full.dropped and resumed.rows_written == full.rows_written
    assert resumed.sources == full.sources == {".txt": 23}, "a finished shard's marker keeps its caption sources"
    fresh = prepare_sharded("t2i", raw, out, rows_per_shard=7, overwrite=True)
    assert [path.name for path in fresh.files_written] == [f"part-{k:05d}.parquet" for k in range(5)]
    assert fresh.rows_written == 23 and not (out / ".prepare-state" / "part-00005.done").exists()


def test_unknown_engine_and_address_without_ray_are_config_errors(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 3, bad=False)
    with pytest.raises(ConfigError, match="engine.*local, ray"):
        prepare_sharded("t2i", raw, tmp_path / "out", engine="spark")
    with pytest.raises(ConfigError, match="only --engine ray"):
        prepare_sharded("t2i", raw, tmp_path / "out", address="10.0.0.1:6379")


@pytest.fixture()
def no_ray(monkeypatch):
    real_import = builtins.__import__

    def without_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_ray)


def test_engine_ray_without_ray_names_the_extra(tmp_path, no_ray):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 3, bad=False)
    with pytest.raises(ConfigError, match=r"pip install 'bagel-data\[ray\]'"):
        prepare_sharded("t2i", raw, tmp_path / "out", engine="ray")
    assert not (tmp_path / "out").exists(), "the error comes before any work"
    result = CliRunner().invoke(prepare_app, ["t2i", str(raw), str(tmp_path / "cli"), "--engine", "ray"])
    assert result.exit_code == 2, result.output
    assert "bagel-data[ray]" in " ".join(result.output.split())


def test_cli_resume_option(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 12, bad=False)
    out = tmp_path / "out"
    args = ["t2i", str(raw), str(out), "--rows-per-shard", "5"]
    assert CliRunner().invoke(prepare_app, args).exit_code == 0
    (out / ".prepare-state" / "part-00001.done").unlink()
    again = CliRunner().invoke(prepare_app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert (out / ".prepare-state" / "part-00001.done").is_file()
    assert Path(out / "part-00001.parquet").is_file()


@pytest.mark.parametrize("damage", ["deleted", "replaced", "another_shard", "input_changed", "image_rewritten"])
def test_resume_redoes_a_finished_shard_that_no_longer_matches(tmp_path, damage):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 20, bad=False)
    out = tmp_path / "out"
    prepare_sharded("t2i", raw, out, rows_per_shard=10)
    if damage == "deleted":  # its marker says done, its file is gone
        (out / "part-00001.parquet").unlink()
    elif damage == "replaced":  # a whole, valid file, but another shard's
        (out / "part-00001.parquet").write_bytes((out / "part-00000.parquet").read_bytes()[:-8] + b"x" * 8)
    elif damage == "another_shard":  # valid parquet with the marker's row count, another size
        other = (out / "part-00000.parquet").read_bytes()
        assert len(other) != (out / "part-00001.parquet").stat().st_size
        (out / "part-00001.parquet").write_bytes(other)
    elif damage == "input_changed":  # same row count, other content: never mix old and new shards
        (raw / "img0013.txt").write_text("a new caption\n")
    else:  # the same captions, another image in place
        (raw / "img0013.jpg").write_bytes(prepare_inputs.image_bytes(99))
    resumed = prepare_sharded("t2i", raw, out, rows_per_shard=10, resume=True)
    fresh = prepare_sharded("t2i", raw, tmp_path / "fresh", rows_per_shard=10)
    assert rows_of(resumed.files_written) == rows_of(fresh.files_written)
    assert resumed.rows_written == 20


def _dead_loopback_port() -> int:
    import socket

    with socket.socket() as probe:  # bound, never listening, then closed: nothing answers there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_ray_address_nobody_answers_fails_at_once_in_one_line(scheme):
    from bagel_data.tools.prepare.ray_engine import check_address

    address = f"{scheme}127.0.0.1:{_dead_loopback_port()}"
    with pytest.raises(ConfigError, match="no Ray cluster answers there") as error:
        check_address(address, timeout=5)
    assert "\n" not in str(error.value) and address in str(error.value)
    assert "(Connection refused)" in str(error.value)  # the system's reason, not only the error's type


def test_the_local_cluster_takes_one_cpu_or_more_and_no_cpu_count_for_a_remote_one(monkeypatch):
    """`--num-cpus` is checked before Ray starts (here Ray itself is stood in for)."""
    from bagel_data.tools.prepare import ray_engine

    monkeypatch.setattr(ray_engine, "_import_ray", lambda: None)
    assert callable(ray_engine.ray_mapper(None, 1)) and callable(ray_engine.ray_mapper(None, None))
    for num_cpus in (0, -2):
        with pytest.raises(ConfigError, match="num_cpus"):
            ray_engine.ray_mapper(None, num_cpus)
    with pytest.raises(ConfigError, match="not with --address"):
        ray_engine.ray_mapper("auto", 2)


@pytest.mark.parametrize("address", ["nohost", "host:port", ":6379"])
def test_a_malformed_ray_address_is_a_config_error(address):
    from bagel_data.tools.prepare.ray_engine import check_address

    with pytest.raises(ConfigError, match="host:port"):
        check_address(address)


def test_a_listening_address_passes_the_check():
    import socket

    from bagel_data.tools.prepare.ray_engine import check_address

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_address(f"127.0.0.1:{server.getsockname()[1]}")


def _results(*indexes: int):
    return [ShardResult(index, None, 0, (), ()) for index in indexes]


@pytest.mark.parametrize(
    ("returned", "message"),
    [((0, 2, 1), "shard 2 out of order"), ((0, 1, 2, 3), "shard 3 out of order"), ((0, 1), "returned 2 of 3")],
)
def test_an_engine_that_returns_shards_out_of_order_or_too_many_or_few_is_caught(returned, message):
    """A distributed engine's results are checked one per shard, in shard order: a shard
    written twice or under another's name would lose rows silently."""
    checked = engine._checked(iter(_results(*returned)), [0, 1, 2])
    with pytest.raises(RuntimeError, match=message):
        list(checked)
    assert [result.index for result in engine._checked(iter(_results(0, 1, 2)), [0, 1, 2])] == [0, 1, 2]


def test_overwrite_into_a_folder_without_an_earlier_run(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 4, bad=False)
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        report = prepare_sharded("t2i", raw, out, rows_per_shard=10, overwrite=True)
        assert report.rows_written == 4


def test_a_tar_s_folders_and_files_without_an_extension_are_not_samples(tmp_path):
    """Only `key.ext` files are sample parts: a folder entry (even `set.v1/`) or a README
    beside the samples drops nothing and adds nothing."""
    import io
    import tarfile

    tar = tmp_path / "shards" / "00000.tar"
    tar.parent.mkdir()
    with tarfile.open(tar, "w") as archive:
        for name in ("set.v1", "set.v1/deeper.d"):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            archive.addfile(folder)
        for name, data in (
            ("set.v1/0001.jpg", prepare_inputs.image_bytes(1)),
            ("set.v1/0001.txt", b"a caption"),
            ("README", b"made by hand"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    report = prepare_sharded("t2i", tar, tmp_path / "out", rows_per_shard=4)
    assert notes(report) == []
    assert [json.loads(row["captions"]) for row in rows_of(report.files_written)] == [{"caption_1": "a caption"}]
