"""Resumable training: a run's checkpoints in ``out_dir/checkpoints/`` and the resume from the newest complete one
of the *same* run (same settings, same data). Long runs (EPR's dual encoder for hours on a 2-core CPU, UDR's listwise
rounds) that are killed go on from their last checkpoint instead of step 0, and end with the weights an
uninterrupted run would have::

    fingerprint(settings, data) -> dict               # what identifies a run: its settings and a hash of its data
    Checkpoints(folder, fingerprint, shown)           # one run's checkpoint folder
        .latest() -> (path, record) | None            #   its newest complete checkpoint (another run's: said, ignored)
        .due(step, total) / .saved()                  #   whether the interval has passed since the last save
        .mark(path, record)                           #   write the marker last: the checkpoint is complete
        .discard()                                    #   the final model is in place: remove them all
    LoopCheckpoints(..., model, optimizer, scheduler)  # the same for a plain torch loop: save(step, loop) / resume()

:func:`~taskret.training.fit.fit` checkpoints through Hugging Face's Trainer (``trainer.train(resume_from_checkpoint=
...)``); :func:`~taskret.epr.finetune.fit_epochs` (UDR's listwise training) through :class:`LoopCheckpoints`.

Design notes
------------
* A checkpoint is a folder ``checkpoint-N`` (N: optimiser steps done), complete once it holds :data:`MARKER`, which is
  written last (under a temporary name, then renamed). A folder the process died in while writing lacks it and is
  never resumed from; it is removed when the next run starts. The Trainer writes its ``checkpoint-N`` itself, so
  :func:`fit` writes the marker in ``on_save``, once the Trainer is done; :class:`LoopCheckpoints` writes the whole
  folder under a temporary name and renames it.
* One checkpoint is kept: once a new one is complete, every other entry of the folder is removed.
* The marker holds the run's fingerprint: the settings but those that do not change the weights
  (:data:`NOT_FINGERPRINTED`: the checkpoint interval, the logging interval) and a SHA-256 of the data. A checkpoint
  of another run is ignored with a message naming what differs (a new run's first checkpoint replaces it).
* Checkpoints are saved every ``checkpoint_minutes`` of training (0: none), not every N steps: a step takes from
  0.2 s (a GPU) to over a minute (TART on 2 CPU cores), and the interval bounds the work a kill loses.
* Pickle: the Trainer's optimiser, scheduler and RNG files are ``torch.save``'d by the Trainer itself and read back by
  it with ``torch.load(weights_only=True)``, only from the checkpoint this run wrote in its own folder; its
  ``training_args.bin`` is never read. :class:`LoopCheckpoints` writes no pickle: the model through
  sentence-transformers' save (safetensors), the optimiser's tensors and the RNG states as safetensors, the rest as JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ..pipeline import count_earlier_sessions
from ..progress import note
from .config import check_checkpoint_minutes

__all__ = ["CHECKPOINTS", "MARKER", "NOT_FINGERPRINTED", "fingerprint", "Checkpoints", "LoopCheckpoints"]

logger = logging.getLogger(__name__)

#: The folder of a run's checkpoints, inside its ``out_dir``.
CHECKPOINTS = "checkpoints"
#: The file that makes a checkpoint complete: the run's fingerprint, the step and what the run needs to go on.
MARKER = "taskret_checkpoint.json"
#: Settings that do not change the trained weights: a run resumes across a change of them.
NOT_FINGERPRINTED = ("checkpoint_minutes", "logging_steps")

_NAME = re.compile(r"^checkpoint-(\d+)$")


def fingerprint(settings: dict[str, Any], data: Iterable[Any] = ()) -> dict[str, Any]:
    """A run's identity: ``settings`` (JSON-able; :data:`NOT_FINGERPRINTED` left out) and ``data_sha256``, a hash
    of the JSON of each item of ``data`` in order (the rows trained on)."""
    digest = hashlib.sha256()
    for item in data:
        digest.update(json.dumps(item, sort_keys=True, default=str).encode("utf-8"))
        digest.update(b"\n")
    kept = {k: v for k, v in settings.items() if k not in NOT_FINGERPRINTED}
    return json.loads(json.dumps({**kept, "data_sha256": digest.hexdigest()}, sort_keys=True, default=str))


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


class Checkpoints:
    """The checkpoints of one run in ``folder`` (module docstring). ``minutes``: the interval between two saves
    (0: none; a run still resumes from a checkpoint an earlier run left). ``shown``: messages go to the terminal
    (and to the log), else to the ``taskret.training.checkpoints`` logger only."""

    def __init__(self, folder: str | os.PathLike, run: dict[str, Any], minutes: float = 0.0, shown: bool = False):
        check_checkpoint_minutes(minutes)
        self.folder, self.run, self.minutes, self.shown = Path(folder), run, float(minutes), shown
        self.last_save = time.monotonic()
        # training seconds up to the checkpoint this run resumed from (earlier sessions'), and when this run began:
        # each marker records the sum, so that a run resumed over several sessions costs all of them
        self.earlier_s, self.started = 0.0, time.monotonic()

    def resumed(self, record: dict) -> None:
        """This run goes on from the checkpoint whose marker is ``record``: its training seconds count as earlier
        sessions' work (:func:`taskret.pipeline.count_earlier_sessions`, for the stage's time record)."""
        self.earlier_s, self.started = float(record.get("trained_s") or 0.0), time.monotonic()
        count_earlier_sessions(self.earlier_s)

    def say(self, text: str, warning: bool = False) -> None:
        if self.shown:
            note(text, enabled=True)
            logger.info(text)
        else:
            logger.log(logging.WARNING if warning else logging.INFO, text)

    def latest(self) -> tuple[Path, dict] | None:
        """This run's newest complete checkpoint and its marker's record, or None. Incomplete folders (a process
        died writing them) are removed; a complete checkpoint of another run is left in place, ignored, with a
        message naming what differs."""
        if not self.folder.is_dir():
            return None
        complete: list[tuple[int, Path, dict]] = []
        for entry in self.folder.iterdir():
            match = _NAME.match(entry.name)
            record = _read_marker(entry) if match and entry.is_dir() else None
            if record is None:
                self.say(f"removing {entry}: not a complete checkpoint (a run stopped while writing it)")
                _remove(entry)
            else:
                complete.append((int(match.group(1)), entry, record))
        if not complete:
            return None
        _, path, record = max(complete, key=lambda c: c[0])
        if record.get("fingerprint") != self.run:
            self.say(f"ignoring the checkpoint {path}: it is of a run with other settings or data "
                     f"({_differences(record.get('fingerprint') or {}, self.run)}); training starts at step 0 and "
                     "replaces it at its first checkpoint", warning=True)
            return None
        return path, record

    def due(self, step: int, total: int) -> bool:
        """Whether a checkpoint is due after ``step`` of ``total``: the interval has passed since the last save
        (or the start) and the run is not over (its model is saved then)."""
        return self.minutes > 0 and step < total and time.monotonic() - self.last_save >= self.minutes * 60

    def mark(self, path: Path, record: dict) -> None:
        """Make the checkpoint ``path`` complete: write its marker (the fingerprint and ``record``) last, then remove
        every other entry of the folder (the previous checkpoint, another run's, leftovers)."""
        trained_s = round(self.earlier_s + time.monotonic() - self.started, 1)
        _write_json_atomic(path / MARKER, {**record, "trained_s": trained_s, "fingerprint": self.run})
        for entry in self.folder.iterdir():
            if entry != path:
                _remove(entry)
        self.last_save = time.monotonic()

    def discard(self) -> None:
        """Remove the folder: the run's model is in place."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def tidy(self) -> None:
        """Remove the folder if it holds nothing (a run that failed before its first checkpoint)."""
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()


class LoopCheckpoints(Checkpoints):
    """:class:`Checkpoints` of a plain torch loop: ``save`` writes ``model`` (sentence-transformers' save, safetensors),
    ``optimizer`` and ``scheduler`` states, the torch RNG states and ``extra()`` (JSON) into a temporary folder and
    renames it ``checkpoint-N``; ``resume`` loads the newest one of this run back (``restore_extra`` gets what
    ``extra`` gave) and returns the loop's own record, or None."""

    def __init__(self, folder: str | os.PathLike, run: dict[str, Any], minutes: float, model, optimizer,
                 scheduler=None, extra: Callable[[], dict] | None = None,
                 restore_extra: Callable[[dict], None] | None = None, shown: bool = False):
        super().__init__(folder, run, minutes, shown)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.extra, self.restore_extra = extra, restore_extra
        self.resumed_from: int | None = None  # the step resume() went on from

    def save(self, step: int, total: int, loop: dict) -> Path:
        import torch
        from safetensors.torch import save_file

        self.folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}.", suffix=".tmp", dir=self.folder))
        modes = [(module, module.training) for module in self.model.modules()]
        self.model.save(str(tmp / "model"))
        for module, training in modes:  # sentence-transformers' save leaves the model in eval mode (no dropout)
            module.train(training)
        tensors, optimizer_state = _split_optimizer_state(self.optimizer.state_dict())
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
        save_file(rng, str(tmp / "rng_state.safetensors"))
        (tmp / "state.json").write_text(json.dumps({
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "extra": self.extra() if self.extra is not None else None,
        }), encoding="utf-8")
        path = self.folder / f"checkpoint-{step}"
        _remove(path)
        os.replace(tmp, path)
        self.mark(path, {"step": step, "total_steps": total, "loop": loop})
        logger.info("checkpoint at step %d of %d: %s (%.2f s)", step, total, path, time.perf_counter() - started)
        return path

    def resume(self) -> dict | None:
        import torch
        from safetensors.torch import load_file

        found = self.latest()
        if found is None:
            return None
        path, record = found
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        loaded = type(self.model)(str(path / "model"), device="cpu")
        self.model.load_state_dict(loaded.state_dict())
        del loaded
        self.optimizer.load_state_dict(_join_optimizer_state(load_file(str(path / "optimizer.safetensors")),
                                                             state["optimizer"]))
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.restore_extra is not None:
            self.restore_extra(state["extra"])
        rng = load_file(str(path / "rng_state.safetensors"))
        torch.set_rng_state(rng["cpu"])
        cuda = [rng[f"cuda.{i}"] for i in range(len(rng) - 1) if f"cuda.{i}" in rng]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        self.say(f"resumed from step {record['step']} of {record['total_steps']} (checkpoint {path})")
        self.last_save = time.monotonic()
        self.resumed_from = int(record["step"])
        self.resumed(record)
        return {"step": self.resumed_from, **record["loop"]}


def _split_optimizer_state(state: dict) -> tuple[dict, dict]:
    """A torch optimiser's ``state_dict`` as safetensors tensors (``"{param}.{name}"``) and JSON for the rest."""
    tensors, plain = {}, {}
    for index, values in state["state"].items():
        plain[str(index)] = {}
        for name, value in values.items():
            if hasattr(value, "detach"):
                tensors[f"{index}.{name}"] = value.detach().contiguous().cpu()
            else:
                plain[str(index)][name] = value
    return tensors, {"state": plain, "param_groups": state["param_groups"]}


def _join_optimizer_state(tensors: dict, saved: dict) -> dict:
    state: dict[int, dict] = {int(index): dict(values) for index, values in saved["state"].items()}
    for key, tensor in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = tensor
    # JSON made the groups' tuples (AdamW's betas) lists; their parameter index lists stay lists.
    groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
              for group in saved["param_groups"]]
    return {"state": state, "param_groups": groups}


def _read_marker(path: Path) -> dict | None:
    try:
        record = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


def _differences(old: dict, new: dict) -> str:
    keys = sorted(set(old) | set(new), key=lambda k: (k == "data_sha256", k))
    parts = []
    for key in keys:
        if old.get(key) != new.get(key):
            parts.append("data differ" if key == "data_sha256" else f"{key} {old.get(key)!r} there, {new.get(key)!r} here")
    return "; ".join(parts[:5]) + ("; ..." if len(parts) > 5 else "")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)
