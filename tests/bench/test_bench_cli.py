"""`bagel-data bench`: one subcommand per row of `SUBCOMMANDS`, the default run without one,
and one line naming the install where the benchmark is not installed."""

from __future__ import annotations

import sys
import types

import pytest
import typer
from typer.testing import CliRunner

import bagel_bench.cli as bench_cli
from bagel_data.cli.errors import LIBRARY_ERROR_EXIT
from bagel_data.cli.main import BENCH_INSTALL, app, mount_bench
from bagel_data.errors import ConfigError


@pytest.fixture
def calls(monkeypatch):
    """What `run_benchmark` / `run_scale` were asked, instead of running them."""
    seen: list = []
    monkeypatch.setattr("bagel_bench.main.run_benchmark", lambda *a, **k: seen.append(("run", a, k)))
    monkeypatch.setattr("bagel_bench.scale.run_scale", lambda *a, **k: seen.append(("scale", a, k)))
    return seen


def test_every_subcommand_of_the_table_is_mounted():
    result = CliRunner().invoke(app, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands", 1)[1]
    assert all(name in listed for name in bench_cli.SUBCOMMANDS)
    assert {"run", "remote", "scale", "config", "mixing"} <= set(bench_cli.SUBCOMMANDS)


def test_bench_alone_is_bench_run_with_its_options(calls, tmp_path):
    assert CliRunner().invoke(app, ["bench", "--quick", "--batches", "3", "--out", str(tmp_path)]).exit_code == 0
    assert CliRunner().invoke(app, ["bench", "run", "--quick", "--batches", "3", "--out", str(tmp_path)]).exit_code == 0
    assert calls[0] == calls[1] == ("run", (None, tmp_path), {"batches": 3, "quick": True, "warm_mb": None})


def test_a_subcommand_gets_its_own_options_and_not_the_default_run(calls):
    assert CliRunner().invoke(app, ["bench", "scale", "--quick"]).exit_code == 0
    assert calls == [("scale", (None, None), {"quick": True})]


def test_an_option_before_the_subcommand_is_refused_with_where_it_goes(calls):
    result = CliRunner().invoke(app, ["bench", "--quick", "scale"])
    assert result.exit_code == 2 and calls == []
    assert "bagel-data bench scale --quick" in " ".join(result.output.split())


def test_an_argv_subcommand_hands_its_arguments_unparsed_to_the_modules_main(monkeypatch):
    seen: list = []
    module = types.ModuleType("fake_bench_module")
    module.main = lambda argv: seen.append(argv) or (3 if "--fail" in argv else None)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bench_module", module)
    sub = typer.Typer()
    sub.callback()(lambda: None)
    monkeypatch.setattr(bench_cli, "app", sub)
    bench_cli._register("fake", bench_cli.argv_command("fake_bench_module", "A fake"))
    assert CliRunner().invoke(sub, ["fake", "--t2i", "x", "--help"]).exit_code == 0
    assert CliRunner().invoke(sub, ["fake", "--fail"]).exit_code == 3
    assert seen == [["--t2i", "x", "--help"], ["--fail"]]


def test_without_the_benchmark_package_bench_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "bagel_bench", None)  # what an import finds where it is missing
    monkeypatch.delitem(sys.modules, "bagel_bench.cli")
    cli = typer.Typer()
    cli.callback()(lambda: None)
    mount_bench(cli)
    for args in (["bench"], ["bench", "--quick"], ["bench", "remote", "--help"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and BENCH_INSTALL in lines[0] and "pip install -e ./benchmarks" in lines[0]


def test_a_failing_benchmark_is_one_line_of_the_librarys_error_handling(monkeypatch):
    """The library hands its error handling in when it mounts the app (the benchmark imports
    nothing of the CLI): a failure is the CLI's one line and exit status, not a traceback."""

    def broken(*args, **kwargs):
        raise ConfigError("the shards are gone")

    monkeypatch.setattr("bagel_bench.scale.run_scale", broken)
    result = CliRunner().invoke(app, ["bench", "scale", "--quick"])
    assert result.exit_code == LIBRARY_ERROR_EXIT, result.output
    assert "error: ConfigError: the shards are gone" in result.output and "Traceback" not in result.output
