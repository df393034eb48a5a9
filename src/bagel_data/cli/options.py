"""Options shared by `run`, `validate`, `inspect` (and `demo`): one name, one default, one help.

`validate` must judge the job `run` will start, so the topology options mean the same thing
everywhere. `--workers` (the old name in `run` and `demo`) stays as a hidden alias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
TokenizerOption = Annotated[
    str | None, typer.Option("--tokenizer", help="'qwen2' (default, offline) or a local HF tokenizer folder.")
]


def workers(num_workers: int, alias: int | None) -> int:
    """The worker count, from `--num-workers` or its old name `--workers`."""
    return num_workers if alias is None else alias


def check_rank(rank: int, world_size: int) -> None:
    if rank >= world_size:
        raise typer.BadParameter(f"--rank {rank} needs --world-size of at least {rank + 1}", param_hint="--rank")
