"""`bagel-data bench`: the benchmark's subcommands, one line each in `SUBCOMMANDS`.

The library's CLI mounts `app` where this package is installed (`bagel_data.cli.main`);
`bagel-data bench` alone (or with `--quick`, ...) runs `bench run`. Each subcommand imports
what it measures when it runs, so mounting the app costs the CLI's start nothing.
A subcommand is either a typer function here, or a module with an argparse `main(argv)`
mounted by `argv_command` (its `--help` is the module's own).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable
from pathlib import Path

import typer

ROOT_HELP = "Benchmark dataset folder, generated on first use [default: bench_data; --quick: a temporary folder]."
OUT_HELP = "Where to write the results JSON [default: benchmarks/results.json; --quick: a temporary folder]."
QUICK_HELP = "Tiny sizes, one round: a smoke test in about 15 s on a free machine."
RootOption = typer.Option(None, help=ROOT_HELP)
OutOption = typer.Option(None, help=OUT_HELP)
BatchesOption = typer.Option(8, min=1, help="Packs per measured run.")
QuickOption = typer.Option(False, help=QUICK_HELP)
WarmOption = typer.Option(None, help="MiB touched and freed before measuring (default 3072, 256 with --quick).")
RunConfigArgument = typer.Argument(..., exists=True, dir_okay=False, help="The run config (RUN.yaml).")


def run(
    root: Path = RootOption, out: Path = OutOption, batches: int = BatchesOption,
    quick: bool = QuickOption, warm_mb: int = WarmOption,
) -> None:  # fmt: skip
    """The pipeline against its floor (the image work it cannot avoid), stages, loader, memory and more."""
    from .main import run_benchmark

    run_benchmark(root, out, batches=batches, quick=quick, warm_mb=warm_mb)


def remote(root: Path = RootOption, out: Path = OutOption, batches: int = BatchesOption, quick: bool = QuickOption):
    """The T2I shards from S3 on loopback (moto) at +0/20/100 ms per round trip vs local disk,
    3 interleaved rounds (--quick: 1)."""
    from .remote import print_remote_report, run_remote_benchmark

    print_remote_report(run_remote_benchmark(root, out, batches=batches, quick=quick))


def scale(root: Path = RootOption, out: Path = OutOption, quick: bool = QuickOption) -> None:
    """Start-up and memory at 10-5,000 parquet shards and 1e4-1e6 JSONL lines."""
    from .scale import run_scale

    run_scale(root, out, quick=quick)


def config(
    run_config: Path = RunConfigArgument, out: Path = OutOption, batches: int = BatchesOption,
    quick: bool = QuickOption,
    dataset_info: Path | None = typer.Option(None, help="The dataset_info, if RUN.yaml lacks one."),
) -> None:  # fmt: skip
    """On RUN.yaml's data: the stage shares, pixel_format float32 vs uint8 and the float write's cost."""
    from .run_config import measure_run_config, print_run_config_report

    results = measure_run_config(
        str(run_config), batches=batches, repeats=1 if quick else 2, warmup=1 if quick else 2,
        dataset_info=None if dataset_info is None else str(dataset_info),
    )  # fmt: skip
    print_run_config_report(results, out)


def mixing(
    run_config: Path = RunConfigArgument, out: Path = typer.Option(None, help="Where to write the results JSON."),
    packs: int = typer.Option(1000, min=1, help="Packs per mode."),
    plot: Path | None = typer.Option(None, help="Write the fill and token-share plot (PNG) here."),
    switch: int | None = typer.Option(
        None, min=1, help="Instead: token shares per step across a Stage 1 -> 2 change at this step, 2 ranks x 2 workers."
    ),
) -> None:  # fmt: skip
    """Real packs of RUN.yaml in every packing/mixing mode, its dropouts on (docs/packing.md)."""
    if switch is not None:
        from .stage_switch import measure_switch, print_switch

        switched = measure_switch(str(run_config), switch=switch)
        print_switch(switched)
        if out is not None:
            out.write_text(json.dumps(switched, indent=1))
        return
    from .mixing import measure_mixing, plot_mixing, print_mixing

    results = measure_mixing(str(run_config), packs=packs)
    print_mixing(results)
    if out is not None:
        out.write_text(json.dumps(results, indent=1))
    if plot is not None:
        plot_mixing(results, str(plot))


# How a failure is shown: the library's CLI hands in its own one-line handling when it mounts
# `app` (`mount`), so this package imports nothing of the CLI that imports it.
_ERROR_HANDLING: list[Callable[[Callable[..., None]], Callable[..., None]]] = []


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """`command` under the error handling `mount` was given (as it is, before a mount)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs) -> None:
        handled = _ERROR_HANDLING[-1](command) if _ERROR_HANDLING else command
        handled(*args, **kwargs)

    return wrapper


def mount(error_handling: Callable[[Callable[..., None]], Callable[..., None]]) -> typer.Typer:
    """The benchmark's app, its commands' failures shown by `error_handling`."""
    _ERROR_HANDLING[:] = [error_handling]
    return app


def argv_command(module: str, summary: str) -> Callable[..., None]:
    """A subcommand that hands its arguments to `module`'s argparse `main(argv)`."""

    def command(ctx: typer.Context) -> None:
        result = importlib.import_module(module).main(list(ctx.args))
        if result:  # a main that returns a non-zero status
            raise typer.Exit(int(result))

    command.__doc__ = f"{summary} (`python -m {module} --help` lists its options)."
    command.argv_module = module  # type: ignore[attr-defined]  # how `_register` knows it
    return command


# One line per subcommand: its name and the function (or `argv_command`) it runs.
SUBCOMMANDS: dict[str, Callable[..., None]] = {
    "run": run,
    "remote": remote,
    "scale": scale,
    "config": config,
    "mixing": mixing,
    "read-ahead": argv_command("bagel_bench.read_ahead", "The read-ahead at a round-trip delay per open and read"),
    "read-ahead-load": argv_command(
        "bagel_bench.read_ahead_load", "The read-ahead's first batch, local cost, small shards"
    ),
    "video": argv_command("bagel_bench.video", "One video sample's CPU seconds, mp4 and Matroska, against decord"),
    "seams": argv_command("bagel_bench.seams", "What the library's seams cost with nothing attached"),
    "tars": argv_command("bagel_bench.tars", "WebDataset tars in place vs their prepared copy, and at +20 ms"),
    "startup": argv_command("bagel_bench.startup", "Start-up to the first pack on 1,000 remote tars, 1 and 8 ranks"),
    "forks": argv_command("bagel_bench.forked_store", "DataLoader workers forked while a store is read: skips"),
    "shuffle": argv_command("bagel_bench.shuffle", "The default mode's shuffle against storage order, same data"),
    "shuffle-memory": argv_command(
        "bagel_bench.shuffle_memory", "What the shuffle holds in memory on row groups of 1,000 photos"
    ),
    "peers": argv_command(
        "bagel_bench.peers", "The read path (or --shuffle: the shuffle) beside Megatron-Energon and MosaicML Streaming"
    ),
}

app = typer.Typer(add_completion=False, help="Measure the pipeline (`bench` alone: `bench run`).")


@app.callback(invoke_without_command=True)
def default(
    ctx: typer.Context, root: Path = RootOption, out: Path = OutOption, batches: int = BatchesOption,
    quick: bool = QuickOption, warm_mb: int = WarmOption,
) -> None:  # fmt: skip
    """Measure the pipeline against its floor (the image work it cannot avoid), memory and more.

    With no subcommand: `bench run` with these options.
    """
    if ctx.invoked_subcommand is None:
        guarded(run)(root, out, batches, quick, warm_mb)
        return
    # typer carries its own click: its ParameterSource is compared by name, not imported
    given = [name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]
    if given:
        option, command = "--" + given[0].replace("_", "-"), ctx.invoked_subcommand
        raise typer.BadParameter(
            f"{option} before `{command}` belongs to the default run (`bench run`); "
            f"put it after the subcommand: bagel-data bench {command} {option} ...",
            param_hint=option,
        )


def _register(name: str, function: Callable[..., None]) -> None:
    if hasattr(function, "argv_module"):  # its options are the module's: passed on unparsed, --help too
        settings = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
        app.command(name, context_settings=settings, add_help_option=False)(function)
    else:
        app.command(name)(guarded(function))


for _name, _function in SUBCOMMANDS.items():
    _register(_name, _function)
