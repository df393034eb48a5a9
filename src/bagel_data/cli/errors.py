"""How the command line fails: one short message and a non-zero exit, never a traceback
unless `--debug` is given.

Exit codes: 2 for a library error (`BagelDataError`: a config mistake, a bad row in strict
mode, a checkpoint that cannot resume, ...), 3 for anything unexpected (a bug, or an
environment problem the library did not foresee). Commands are wrapped with `guarded`; a
progress display made with `ClearingProgress` erases itself when the command fails; a table
printed with `print_whole` is never cut to 80 columns.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import NoReturn

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from ..errors import BagelDataError

LIBRARY_ERROR_EXIT = 2
UNEXPECTED_ERROR_EXIT = 3
_state = {"debug": False}
_console = Console(stderr=False)


def set_debug(on: bool) -> None:
    _state["debug"] = bool(on)


def short_message(error: BaseException) -> str:
    """The error's own line; a DataLoader worker's re-raise keeps only its last line.

    Escaped for rich, which would take `[ray]` in `bagel-data[ray]` for markup.
    """
    message = str(error).strip()
    if "Original Traceback" in message:
        message = message.splitlines()[-1].split(": ", 1)[-1]
    return escape(message or type(error).__name__)


def fail(error: BaseException, console: Console | None = None) -> NoReturn:
    """Print `error` as one line (plus the traceback under --debug) and exit non-zero."""
    console = console or _console
    # soft_wrap: never broken at the console's width, so a path or a traceback line reads
    # (and is searched) whole however long the clone's path and however narrow the terminal.
    if _state["debug"]:
        console.print("".join(traceback.format_exception(error)), markup=False, highlight=False, soft_wrap=True)
    if isinstance(error, BagelDataError):
        console.print(
            f"[red]error:[/red] {type(error).__name__}: {short_message(error)}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(LIBRARY_ERROR_EXIT)
    console.print(
        f"[red]unexpected error:[/red] {type(error).__name__}: {short_message(error)}", highlight=False, soft_wrap=True
    )
    if not _state["debug"]:
        console.print("rerun with `bagel-data --debug ...` for the traceback, and report it if it is a bug")
    raise typer.Exit(UNEXPECTED_ERROR_EXIT)


def guarded(command: Callable) -> Callable:
    """Wrap a command so that any exception becomes `fail(...)` (typer/click exits pass)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.ClickException, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as error:  # every failure gets a message and an exit code
            fail(error)

    return wrapper


class ClearingProgress(Progress):
    """A progress display that erases itself when the block it wraps raises (no stale bar
    left above the error message)."""

    def __exit__(self, exc_type, exc_value, exc_traceback) -> None:
        if exc_type is not None:
            self.live.transient = True
        super().__exit__(exc_type, exc_value, exc_traceback)


def print_whole(console: Console, table: Table) -> None:
    """`table` at full width when the output is not a terminal (a pipe, a file, CI): rich
    would fit it into 80 columns and cut names, numbers and paths short (`t2i_pretr…`)."""
    if console.is_terminal:
        console.print(table)
        return
    needed = console.measure(table, options=console.options.update(max_width=100_000)).maximum
    # `print(width=...)` cannot exceed the console's width: a console of the table's width can.
    Console(width=max(console.width, needed)).print(table)
