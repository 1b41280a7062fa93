"""A progress bar with rate and ETA for long jobs (rich), as a plain ``advance(n)`` callback."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)


class _RateColumn(TextColumn):
    def __init__(self, unit: str):
        super().__init__("")
        self.unit = unit

    def render(self, task):
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f} {self.unit}/s" if speed else f"- {self.unit}/s")


@contextmanager
def progress_bar(total: int, description: str, unit: str = "ex", enabled: bool = True) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda n=1: None
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               _RateColumn(unit), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance
