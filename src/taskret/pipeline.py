"""Multi-stage jobs in a work folder (``taskret epr run``, ``taskret tart run``, the benchmarks).

A stage is skipped when its output exists, so a job that stops (killed, out of memory, a bad config found
late) is started again with the same command and goes on from where it was. Two things make that safe:

- :func:`guard_config`: the work folder keeps the config it was made with, and a different one is refused,
  since outputs made under another config must not be reused; :func:`work_folder` guards it so, and a run that
  fails before its first stage made anything (a bad training file, an empty test file) leaves no folder behind
  (or, in a folder that holds nothing yet, lets the corrected config take over);
- :class:`Stage`: a stage counts as done only when its output is complete. A file output is written to a
  temporary name and renamed when the stage returns; a folder output is done when its marker, the file the
  stage writes last, exists.

Each stage prints one line: ``name: what it made -> output (time)``, or ``name: output exists, skipped``.

:func:`stop_after` ends a job once a named stage is done (e.g. score and train on a GPU machine, then copy the
work folder and evaluate elsewhere).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping, TypeVar

from pydantic import BaseModel

from .io import DataError, atomic_path, read_json, write_json

__all__ = ["Stage", "StoppedAfter", "count_earlier_sessions", "earlier_sessions", "guard_config",
           "explain_validation_error", "read_config", "stop_after", "work_folder"]

Config = TypeVar("Config", bound=BaseModel)


def read_config(cls: type[Config], path: str | os.PathLike) -> Config:
    """A job's config from a JSON file; a file that is not one (unknown keys, bad values) raises a
    :class:`~taskret.io.DataError` that names the file and what is wrong (:func:`explain_validation_error`)."""
    from pydantic import ValidationError

    try:
        return cls.model_validate(read_json(path))
    except ValidationError as err:
        raise DataError(path, None, None, explain_validation_error(err, cls)) from err


def _keys(model: type[BaseModel]) -> list[str]:
    """The keys ``model`` accepts: its fields' names and their aliases."""
    from pydantic import AliasChoices

    keys = []
    for name, info in model.model_fields.items():
        keys.append(name)
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias] if isinstance(alias, str) else []
        keys.extend(c for c in choices if isinstance(c, str) and c != name)
    return keys


def explain_validation_error(err, model: type[BaseModel] | None = None) -> str:
    """pydantic's findings (a ``ValidationError``) as a user reads them, one per ``;``: ``unknown key 'eval_limt'
    (did you mean 'eval_limit'?)``, ``key 'k': Input should be greater than or equal to 1 (got 0)``, a model
    check's own sentence; no pydantic type names or URLs. ``model`` (the config's class) gives the keys that
    exist, for the nearest one to a misspelt key."""
    import difflib

    known = _keys(model) if model is not None else []
    found = []
    for error in err.errors(include_url=False):
        where = ".".join(map(str, error["loc"]))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1) if len(error["loc"]) == 1 else []
            found.append(f"unknown key '{where}'" + (f" (did you mean '{close[0]}'?)" if close else
                                                     f" (keys: {', '.join(known)})" if known else ""))
        elif where:
            got = repr(error.get("input"))
            found.append(f"key '{where}': {message} (got {got if len(got) <= 60 else got[:57] + '...'})")
        else:
            found.append(message)
    return "; ".join(found)


def _fields(config: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    return dict(config) if isinstance(config, Mapping) else {k: getattr(config, k) for k in type(config).model_fields}


def guard_config(path: str | os.PathLike, config: BaseModel | Mapping[str, Any], ignore: Collection[str] = ()) -> None:
    """Save ``config`` (a pydantic model or a JSON-able dict) at ``path`` the first time; later, refuse a
    config that differs from the saved one in any field but those in ``ignore`` (fields that say where the
    work runs, not what it computes)."""
    path = Path(path)
    if not path.exists():
        write_json(path, config.model_dump() if isinstance(config, BaseModel) else dict(config))
        return
    saved = read_json(path)
    # A saved pydantic config is validated again, so fields added since then compare with their defaults.
    used = _fields(type(config).model_validate(saved) if isinstance(config, BaseModel) else saved)
    wanted = _fields(config)
    changed = sorted(k for k in set(used) | set(wanted) if k not in ignore and used.get(k) != wanted.get(k))
    if changed:
        raise ValueError(f"{path.parent} was made with another config (changed: {', '.join(changed)}); "
                         f"use a new work folder or delete the old one")


#: What a work folder holds before any stage made something: the config, the log, the stages' times.
BOOKKEEPING = frozenset({"pipeline_config.json", "logs", "stage_times.jsonl"})


def _holds_work(folder: Path) -> bool:
    """Whether ``folder`` holds anything a stage made (anything but :data:`BOOKKEEPING`)."""
    return folder.is_dir() and any(entry.name not in BOOKKEEPING for entry in folder.iterdir())


@contextmanager
def work_folder(folder: str | os.PathLike, config: BaseModel, ignore: Collection[str] = (),
                config_file: str = "pipeline_config.json") -> Iterator[Path]:
    """The block runs a job in ``folder``, whose ``config_file`` :func:`guard_config` keeps. A folder that holds no
    stage's output yet (only what an earlier run that failed at start left: its config, an empty log) is taken
    over by this config, since nothing was made under the old one; a folder this block created is removed again
    when the block fails before anything but the bookkeeping was written. So a run stopped by a bad input file
    does not block the run of the corrected config."""
    folder = Path(folder)
    created = not folder.exists()
    if not created and not _holds_work(folder):
        (folder / config_file).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    guard_config(folder / config_file, config, ignore=ignore)
    try:
        yield folder
    except BaseException:
        if created and not _holds_work(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise


class StoppedAfter(Exception):
    """Raised by the stage that :func:`stop_after` names, once it is done (run now or before)."""

    def __init__(self, stage: str):
        super().__init__(f"stopped after stage '{stage}'")
        self.stage = stage


# (the stage to stop after, the names of the stages seen so far) while a stop_after block runs
_STOP: ContextVar[tuple[str, list[str]] | None] = ContextVar("taskret_stop_after", default=None)


@contextmanager
def stop_after(stage: str | None) -> Iterator[None]:
    """Within the block, the stage named ``stage`` raises :class:`StoppedAfter` once it is done. A block that ends
    without meeting it raises ValueError naming the stages it ran through, so a misspelt name does not silently
    run the whole job. ``None``: no stop."""
    if stage is None:
        yield
        return
    seen: list[str] = []
    token = _STOP.set((stage, seen))
    try:
        yield
    finally:
        _STOP.reset(token)
    raise ValueError(f"no stage named '{stage}' ran; the stages were: {', '.join(seen) or 'none'}")


def _silent(text: str) -> None:
    pass


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


#: the seconds earlier sessions spent on the work a resumed stage goes on from (see :func:`earlier_sessions`)
_EARLIER: ContextVar[list[float] | None] = ContextVar("taskret_earlier_seconds", default=None)


def count_earlier_sessions(seconds: float | None) -> None:
    """Record that the work now resuming took ``seconds`` in earlier sessions (a checkpoint's measured training
    time), for the :class:`Stage` that resumed it: a job's cost is every session's time, not only the last one's."""
    collected = _EARLIER.get()
    if collected is not None and seconds:
        collected.append(float(seconds))


@contextmanager
def earlier_sessions() -> Iterator[list[float]]:
    """Within the block, :func:`count_earlier_sessions` adds to the list it yields (one stage's run)."""
    collected: list[float] = []
    token = _EARLIER.set(collected)
    try:
        yield collected
    finally:
        _EARLIER.reset(token)


@dataclass
class Stage:
    """One stage of a job: ``name`` (in its progress line) and ``output``, a file, or a folder whose
    ``marker`` file the stage writes last. ``say`` receives the progress line."""

    name: str
    output: Path
    marker: Path | None = None
    say: Callable[[str], None] = _silent
    # a JSONL file that gets {"stage", "wall_s", "cpu_s", "made"} when the stage runs (and "earlier_s" when it resumed
    # work that earlier sessions spent those seconds on: count_earlier_sessions)
    timings: Path | None = None

    def __post_init__(self) -> None:
        self.output = Path(self.output)
        self.marker = Path(self.marker) if self.marker is not None else None

    @property
    def done(self) -> bool:
        return (self.marker or self.output).exists()

    def run(self, make: Callable[[Path], str | None], reused: str = "skipped") -> bool:
        """Unless the stage is done, call ``make(path)``, which writes the output at ``path`` and may return what
        it made, for the progress line (e.g. ``"8 examples x 4"``). For a file output ``path`` is a temporary name
        beside it, renamed onto it when ``make`` returns, so a failed stage leaves nothing that marks it done.
        A done stage prints ``name: output exists, {reused}``. Returns whether ``make`` ran."""
        if self.done:
            self.say(f"{self.name}: {self.marker or self.output} exists, {reused}")
            self._maybe_stop()
            return False
        start, cpu = time.perf_counter(), time.process_time()
        with earlier_sessions() as earlier:
            if self.marker is None:
                with atomic_path(self.output) as tmp:
                    made = make(tmp)
            else:
                made = make(self.output)
                if not self.marker.exists():
                    raise RuntimeError(f"stage {self.name} finished without writing {self.marker}")
        line = " ".join(part for part in (made, "->", str(self.output)) if part)
        wall = time.perf_counter() - start
        self.say(f"{self.name}: {line} ({_duration(wall)})")
        if self.timings is not None:
            # earlier_s: what earlier sessions spent on the work this run resumed (a training's checkpoint), not in
            # wall_s; the stage's whole cost is the sum
            with open(self.timings, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"stage": self.name, "wall_s": round(wall, 1),
                                         "cpu_s": round(time.process_time() - cpu, 1), "made": made,
                                         **({"earlier_s": round(sum(earlier), 1)} if earlier else {})}) + "\n")
        self._maybe_stop()
        return True

    def _maybe_stop(self) -> None:
        stop = _STOP.get()
        if stop is not None:
            stop[1].append(self.name)
            if stop[0] == self.name:
                raise StoppedAfter(self.name)
