"""The libraries' logs in a file, off the terminal: what ``taskret epr run`` and ``taskret tart run`` print is
one line per stage (and taskret's own progress bars); transformers' and the other libraries' messages,
Python warnings and the trainer's log dicts go to a log file in the work folder.

::

    with library_logs(work / "logs" / "run.log"):
        ...  # fit() inside the block: no tqdm bar, no printed dicts; each trainer log dict is a line of the file

:func:`library_log` is the file of the innermost active block (None outside one), for :func:`~taskret.training.fit.fit`
to know that the terminal is not its to print on.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..progress import ACTIVE_LIBRARY_LOG, library_log, no_loading_bars

__all__ = ["TRAINER_LOGGER", "library_log", "library_logs", "no_library_bars", "trained"]

#: The logger :func:`~taskret.training.fit.fit` writes every trainer log dict to (at INFO).
TRAINER_LOGGER = "taskret.training"

# Logger -> the lowest level the file gets. sentence-transformers stays at WARNING: at INFO it turns on the
# progress bar of every encode() call. transformers' trainer adds its INFO lines (the run's sizes), not the
# hundreds of every model load.
_LEVELS = {"transformers": logging.WARNING, "transformers.trainer": logging.INFO, TRAINER_LOGGER: logging.INFO,
           "sentence_transformers": logging.WARNING, "datasets": logging.WARNING, "huggingface_hub": logging.WARNING,
           "accelerate": logging.WARNING, "torch": logging.WARNING, "py.warnings": logging.WARNING}
# Loggers whose records reach the file through a parent's handler: only their level is set.
_CHILDREN = {"transformers.trainer"}

_ACTIVE = ACTIVE_LIBRARY_LOG  # library_log() reads it (taskret.progress: every layer may need the file)


class _LazyFileHandler(logging.FileHandler):
    """A file handler that makes the file (and its folder) at its first record: a command that stops on bad input
    before anything is logged leaves no log behind."""

    def __init__(self, path: Path):
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


@contextmanager
def no_library_bars() -> Iterator[None]:
    """Turn transformers' and datasets' progress bars off for the block."""
    import datasets

    ds_bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with no_loading_bars():
            yield
    finally:
        if ds_bars:
            datasets.enable_progress_bars()


@contextmanager
def library_logs(path: str | Path) -> Iterator[Path]:
    """Within the block, send the libraries' logs, Python warnings and the trainer's log dicts to ``path``
    (appended, so a resumed job keeps the earlier runs' lines), and turn the libraries' progress bars off; on
    leaving it, restore every logger, warning filter and bar as it was."""
    from datasets.utils import logging as ds_logging
    from transformers.utils import logging as hf_logging

    # Both libraries set up their loggers (a stderr handler, a level) on first use: now, so that ours stick.
    hf_logging.get_verbosity()
    ds_logging.get_verbosity()
    path = Path(path)
    handler = _LazyFileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name, level in _LEVELS.items():
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate, list(logger.handlers)))
        logger.setLevel(level)
        if name in _CHILDREN:
            continue
        for old in list(logger.handlers):  # transformers' and datasets' own stderr handlers
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
    token = _ACTIVE.set(path)
    try:
        with warnings.catch_warnings():
            logging.captureWarnings(True)
            warnings.simplefilter("default")  # each distinct warning once per place, into the file
            try:
                with no_library_bars():
                    yield path
            finally:
                logging.captureWarnings(False)
        if not path.exists():  # the block ended well: the file it names exists, even if nothing was logged
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()  # (only when missing: a resumed run that logs nothing leaves the file as it was)
    finally:
        _ACTIVE.reset(token)
        for logger, level, propagate, handlers in saved:
            logger.removeHandler(handler)
            for old in handlers:
                logger.addHandler(old)
            logger.setLevel(level)
            logger.propagate = propagate
        handler.close()


def trained(summary_file: Path, log: Path) -> str:
    """A training stage's progress line: ``"N steps, final loss L (trainer log: LOG)"``, from the summary file
    :func:`~taskret.training.fit.fit_and_record` wrote."""
    from ..io import read_json

    run = read_json(summary_file)
    loss = f", final loss {run['final_loss']:.3f}" if run.get("final_loss") is not None else ""
    return f"{run['steps']} steps{loss} (trainer log: {log})"
