"""How a `bagel-data prepare` command runs: the sharded prepare under a progress bar, its
summary table, warnings and full report, and the exit code a lossy run gets (`tools.py`
holds the commands themselves)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..tools.drops import Loss
from .errors import ClearingProgress, print_whole
from .options import fail_on_losses

if TYPE_CHECKING:
    from ..tools.prepare import PrepareReport

console = Console()
_SHOWN_ROWS = 20


def _run_with_progress(label: str, work: Callable[[Callable[[int, int], None]], PrepareReport]) -> PrepareReport:
    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    try:
        with ClearingProgress(*columns, console=console) as progress:
            task = progress.add_task(label, total=None)
            return work(lambda done, total: progress.update(task, completed=done, total=total))
    except OSError as error:  # a file the user named: their mistake, said in one line
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None


def run_prepare(
    kind: str, source: Path, out: Path, report: Path | None, max_drop_fraction: float, allow_drops: bool, **options
) -> None:
    """Run one `prepare` kind shard by shard (`tools/prepare/sharded.py`) with a progress bar,
    then print its summary (and write the full report when asked); exit 1 when nothing was
    written or more than `max_drop_fraction` of the input rows was dropped (`tools/drops.py`)."""
    from ..tools.prepare.report import likely_cause
    from ..tools.prepare.sharded import prepare_sharded

    result = _run_with_progress(kind, lambda progress: prepare_sharded(kind, source, out, progress=progress, **options))
    _print_report(result, report)
    loss = Loss("input", result.rows_dropped, result.rows_dropped + result.rows_written, likely_cause(result))
    again = "fix the cause and run it again" + ("" if kind == "vlm" else " with --overwrite")
    fail_on_losses([loss], max_drop_fraction, allow_drops, console,
                   f"the kept rows were written; {again}, or pass --allow-drops to keep them")  # fmt: skip


def _print_report(report: PrepareReport, report_path: Path | None) -> None:
    table = Table(title="prepare summary", show_header=False)
    table.add_row("rows written", str(report.rows_written))
    table.add_row("rows dropped", str(report.rows_dropped))
    for reason, locations in sorted(report.dropped_by_reason.items()):
        table.add_row(f"  dropped: {reason}", str(len(locations)))
    for reason, locations in sorted(report.fixed_by_reason.items()):
        table.add_row(f"  fixed: {reason}", str(len(locations)))
    for source, count in sorted(report.sources.items()):
        # An edit step's source says it whole (EDIT_SOURCE in tools/prepare/edit.py, not imported
        # here: it would load pyarrow for `bagel-data --help`); a caption's source is short.
        edit = source.startswith("edit steps from columns: ")
        table.add_row(f"  {source}" if edit else f"  captions from {source}", str(count))
    for path in report.files_written:
        table.add_row("file", str(path))
    print_whole(console, table)
    if report.dropped:
        rows = Table(title=f"dropped rows (first {min(_SHOWN_ROWS, report.rows_dropped)})")
        for column in ("location", "reason", "detail"):
            rows.add_column(column, overflow="fold")
        for note in report.dropped[:_SHOWN_ROWS]:
            rows.add_row(note.location, note.reason, note.detail)
        console.print(rows)
    if report_path is not None:
        report_path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"full report: {report_path}")
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True, highlight=False)
    if report.rows_written == 0:
        from ..tools.prepare.report import likely_cause

        console.print(f"[red]error:[/red] nothing was written. Likely cause: {likely_cause(report)}")
        raise typer.Exit(1)
