"""A progress bar with rate and ETA for long jobs (rich), as a plain ``advance(n)`` callback.

``advance.resume(n)`` counts work a resumed job finished before (e.g. shards already on disk) as done without
counting it in the rate, so the ETA of a restarted job is for what is left. Callers holding any other
callback use :func:`report_resumed`.

On a terminal it is a live rich bar. Elsewhere (a log file, CI, ``nohup``) a live bar prints nothing
until the end, so a plain line with the count, rate and ETA is written to stderr every ``log_every``
seconds instead: a long job sent to a file still shows that it is moving and when it will finish. Either
way it goes to stderr, never into data on stdout (``--json``).

Library stages that can take minutes (encoding a corpus, reranking) report through :func:`stage`, which is
silent unless the caller asked: within ``with reporting():`` (what the CLI's ``evaluate`` / ``index`` /
``search`` commands do), or where the call site turns it on itself. The Python API stays quiet otherwise.

Other libraries' bars are kept off where they would interleave with taskret's: :func:`no_loading_bars` around every
model load.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO, TypeVar

import numpy as np
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class _RateColumn(TextColumn):
    def __init__(self, unit: str):
        super().__init__("")
        self.unit = unit

    def render(self, task):
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f} {self.unit}/s" if speed else f"- {self.unit}/s")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@contextmanager
def progress_lines(total: int | None, description: str, unit: str = "ex", log_every: float = 30.0,
                   stream: TextIO | None = None) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` that writes ``description: done/total (pct) rate unit/s, elapsed, ETA`` lines (``total``
    None: ``description: done unit, rate unit/s, elapsed``),
    at most one per ``log_every`` seconds, and a last one when the block ends (unless the count has not moved since
    the line before: the last line is printed once)."""
    stream = stream or sys.stderr
    start = time.monotonic()
    state = {"done": 0, "resumed": 0, "last": start, "shown": None}

    def line() -> str:
        elapsed = time.monotonic() - start
        done = state["done"]
        rate = (done - state["resumed"]) / elapsed if elapsed > 0 else 0.0
        eta = _duration((total - done) / rate) if rate > 0 and total is not None and total > done else "-"
        if total is None:  # a count not known in advance (a corpus read for the first time)
            return f"{description}: {done} {unit}, {rate:.2f} {unit}/s, elapsed {_duration(elapsed)}"
        pct = f"{100 * done / total:.0f}%" if total else "-"
        return (f"{description}: {done}/{total} ({pct}) {rate:.2f} {unit}/s, elapsed {_duration(elapsed)}, "
                f"ETA {eta}")

    def advance(n: int = 1) -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["last"] >= log_every:
            state["last"], state["shown"] = now, state["done"]
            print(line(), file=stream, flush=True)

    def resume(n: int) -> None:
        state["done"] += n
        state["resumed"] += n

    advance.resume = resume
    yield advance
    if state["shown"] != state["done"]:
        print(line(), file=stream, flush=True)


@contextmanager
def progress_bar(total: int | None, description: str, unit: str = "ex", enabled: bool = True,
                 log_every: float = 30.0) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda n=1: None
        return
    if not sys.stderr.isatty():
        with progress_lines(total, description, unit, log_every=log_every) as advance:
            yield advance
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               _RateColumn(unit), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    from rich.console import Console

    with Progress(*columns, transient=False, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        def resume(n: int) -> None:
            # Reset with the work already done: the clock and rate start now, so ETA is for what is left.
            bar.reset(task, completed=bar.tasks[task].completed + n)

        advance.resume = resume
        yield advance


def report_resumed(progress: Callable[[int], None] | None, n: int) -> None:
    """Tell ``progress`` that ``n`` units were done before this run: through its ``resume`` if it has one
    (the callbacks of this module), else as a plain ``progress(n)``."""
    if progress is None or n <= 0:
        return
    getattr(progress, "resume", progress)(n)


_reporting = False


@contextmanager
def reporting(enabled: bool = True) -> Iterator[None]:
    """Within the block, library stages (:func:`stage`) show their progress on stderr; ``enabled=False`` keeps
    them quiet. The previous setting comes back after the block."""
    global _reporting
    previous, _reporting = _reporting, enabled
    try:
        yield
    finally:
        _reporting = previous


def reporting_enabled() -> bool:
    """Whether :func:`reporting` is on here."""
    return _reporting


def note(text: str, enabled: bool | None = None) -> None:
    """One line on stderr beside a stage's progress (what a resumed job reuses, where an interrupted one stopped),
    shown as :func:`stage` is: when ``enabled``, by default when :func:`reporting` is on."""
    if _reporting if enabled is None else enabled:
        print(text, file=sys.stderr, flush=True)


@contextmanager
def stage(total: int | None, description: str, unit: str = "ex", enabled: bool | None = None,
          log_every: float = 30.0) -> Iterator[Callable[[int], None]]:
    """:func:`progress_bar` for one stage of library work: a bar on a terminal, else a line every ``log_every``
    seconds and one when the stage ends. Shown when ``enabled``, by default when :func:`reporting` is on."""
    with progress_bar(total, description, unit, enabled=_reporting if enabled is None else enabled,
                      log_every=log_every) as advance:
        yield advance


Item = TypeVar("Item")


def in_chunks(items: Sequence[Item], work: Callable[[list[Item]], np.ndarray], chunk_size: int,
              progress: Callable[[int], None] | None = None,
              size: Callable[[Item], int] | None = None) -> np.ndarray:
    """``work`` over ``items`` in chunks of ``chunk_size``, its rows stacked back in the items' order, and
    ``progress(len(chunk))`` after each chunk: a long batched job (encoding, scoring pairs) that says how far it is.

    With ``size``, items go largest first (as sentence-transformers orders a batch), so each chunk holds items of
    about one length, padded little, and an ETA taken early errs long rather than short."""
    rows = sorted(range(len(items)), key=lambda i: -size(items[i])) if size else list(range(len(items)))
    parts = []
    for start in range(0, len(rows), max(chunk_size, 1)):
        chunk = rows[start:start + chunk_size]
        parts.append(np.asarray(work([items[i] for i in chunk])))
        if progress is not None:
            progress(len(chunk))
    if not parts:
        return np.asarray(work([]))
    stacked = np.concatenate(parts)
    out = np.empty_like(stacked)
    out[rows] = stacked
    return out


@contextmanager
def no_loading_bars() -> Iterator[None]:
    """Turn transformers' progress bars off for the block: what every model load runs under, so that its
    ``Loading weights: 100%`` bar never reaches the Python API's, LangChain's or DSPy's output."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


#: The run log of the innermost active :func:`taskret.training.logs.library_logs` block, where libraries' output
#: goes (None outside one). Here, low in the package, so that what runs under such a block at any layer (a Ray
#: pool's messages, the trainer) can write to it.
ACTIVE_LIBRARY_LOG: ContextVar[Path | None] = ContextVar("taskret_library_log", default=None)


def library_log() -> Path | None:
    """The log file of the active :func:`taskret.training.logs.library_logs` block, or None."""
    return ACTIVE_LIBRARY_LOG.get()
