"""Options shared by `run`, `validate`, `inspect` (and `demo`): one name, one default, one help.

`validate` must judge the job `run` will start, so the topology options mean the same thing
everywhere. `--workers` (the old name in `run` and `demo`) stays as a hidden alias.
`--max-drop-fraction` / `--allow-drops` are shared by `run` and every `prepare` command, with
`fail_on_losses`, the exit they lead to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError
from ..tools.drops import Loss, over_limit

DEFAULT_NUM_WORKERS = 2

ConfigArgument = Annotated[
    Path, typer.Argument(help="Run config YAML, or a grouped-datasets YAML with --dataset-info.")
]
DatasetInfoOption = Annotated[
    Path | None, typer.Option("--dataset-info", help="dataset_info YAML/JSON (overrides the config's).")
]
NumWorkersOption = Annotated[
    int, typer.Option("--num-workers", min=0, help="DataLoader worker processes per rank (0: in the main process).")
]
WorkersAlias = Annotated[int | None, typer.Option("--workers", hidden=True, help="Old name of --num-workers.")]
WorldSizeOption = Annotated[int, typer.Option("--world-size", min=1, help="Number of ranks of the job.")]
RankOption = Annotated[int, typer.Option("--rank", min=0, help="This process's rank (0 .. world size - 1).")]
MaxDropFractionOption = Annotated[
    float,
    typer.Option(
        "--max-drop-fraction",
        min=0.0,
        max=1.0,
        help="Exit 1 when more than this fraction of the input's (prepare) or a group's (run) rows is dropped.",
    ),
]
AllowDropsOption = Annotated[
    bool, typer.Option("--allow-drops", help="Exit 0 however many rows are dropped (as long as some are kept).")
]
TokenizerOption = Annotated[
    str | None, typer.Option("--tokenizer", help="'qwen2' (default, offline) or a local HF tokenizer folder.")
]


def workers(num_workers: int, alias: int | None) -> int:
    """The worker count, from `--num-workers` or its old name `--workers`."""
    return num_workers if alias is None else alias


def check_rank(rank: int, world_size: int) -> None:
    """A rank outside the job is the user's mistake: a ConfigError (one line, exit 2)."""
    if rank >= world_size:
        raise ConfigError(
            "rank", rank, f"ranks count from 0, so --rank {rank} needs --world-size of at least {rank + 1}"
        )


def fail_on_losses(losses: list[Loss], max_fraction: float, allow_drops: bool, console: Console, after: str) -> None:
    """Exit 1 naming each loss over `max_fraction` (the data-loss gate, `tools/drops.py`),
    unless `allow_drops`; `after` says what to do next."""
    over = over_limit(losses, max_fraction)
    if not over or allow_drops:
        return
    for loss in over:
        console.print(f"[red]error:[/red] {escape(loss.describe())}", highlight=False)
    console.print(f"more than --max-drop-fraction {max_fraction:g} was dropped; {after}", highlight=False)
    raise typer.Exit(1)
