"""The one training entry every taskret model goes through: EPR's dual encoder, TART-dual, TART-full and the
distillation of TART-full into a dual encoder.

A model brings three small parts; :func:`train` does the rest (draw every epoch's rows, fit, write the
summary file)::

    RowSampler(columns, draw)        # how one item (a labelled example, a training row) becomes dataset rows
    ModelRecipe(build, loss, ...)    # the untrained model, its loss, the trainer kind
    counts(epochs) -> dict           # what the summary file says about the data

    sample_epoch(items, draw, seed, epoch, columns)   # one epoch's rows (the sampler's ``epoch``)
    train(config, items, sampler, recipe, out_dir, marker, counts)   # -> out_dir / "model"

Design notes
------------
* Every epoch draws its rows with its own generator, ``np.random.default_rng([seed, epoch])``, walking
  the items in order, so the same seed gives the same rows whatever else changes, and ``build_*``
  helpers (one epoch's rows, for inspection) and training see the same draws.
* A draw returns :class:`TrainingRow` s: the dataset row, and optionally its :class:`RowKeys` (for
  duplicate-free batches, see :func:`~taskret.training.batching.epoch_batches`) and the kind of negative
  it holds (counted in TART summaries).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Mapping, NamedTuple, Sequence, TypeVar

import numpy as np

from .batching import RowKeys
from .fit import fit_and_record

__all__ = ["TrainingRow", "EpochRows", "RowSampler", "ModelRecipe", "sample_epoch", "negatives_used", "train"]

Item = TypeVar("Item")


class TrainingRow(NamedTuple):
    """One dataset row a draw makes: column -> value, the keys that keep false negatives out of its batch
    (where the model batches without duplicates) and the kind of negative it holds (TART), if any."""

    values: dict[str, Any]
    keys: RowKeys | None = None
    negative_kind: str | None = None


@dataclass
class EpochRows:
    """One epoch's dataset columns, in draw order, with each row's keys and the kinds of the drawn negatives."""

    columns: dict[str, list]
    keys: list[RowKeys] = field(default_factory=list)
    negative_kinds: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))


Draw = Callable[[Item, np.random.Generator], Iterable[TrainingRow]]


def sample_epoch(items: Iterable[Item], draw: Draw, seed: int, epoch: int, columns: Sequence[str]) -> EpochRows:
    """Epoch ``epoch``'s rows: ``draw(item, rng)`` for each item in order, with one generator seeded by
    ``[seed, epoch]``. Every row must fill exactly ``columns``; keys are kept only if every row has some."""
    rng = np.random.default_rng([seed, epoch])
    out = EpochRows({name: [] for name in columns})
    keys: list[RowKeys | None] = []
    for item in items:
        for row in draw(item, rng):
            if row.values.keys() != out.columns.keys():
                raise ValueError(f"a drawn row has columns {sorted(row.values)}, expected {sorted(out.columns)}")
            for name, value in row.values.items():
                out.columns[name].append(value)
            keys.append(row.keys)
            if row.negative_kind is not None:
                out.negative_kinds.append(row.negative_kind)
    if keys and all(k is not None for k in keys):
        out.keys = keys  # type: ignore[assignment]
    return out


@dataclass(frozen=True)
class RowSampler(Generic[Item]):
    """How a model's dataset rows are drawn: the column names and ``draw(item, rng)`` (see :func:`sample_epoch`)."""

    columns: tuple[str, ...]
    draw: Draw

    def epoch(self, items: Iterable[Item], seed: int, epoch: int) -> EpochRows:
        return sample_epoch(items, self.draw, seed, epoch, self.columns)


@dataclass(frozen=True)
class ModelRecipe:
    """The model part of a run: ``build()`` the untrained model, ``loss(model)`` its trainer loss; a
    ``cross_encoder`` trains with sentence-transformers' CrossEncoderTrainer; ``router_mapping`` sends
    dataset columns to a Router's routes (EPR's two encoders); ``finish(model)``, if given, changes the trained
    model in place just before it is saved (TART-dual: restore the base's encoding length, merge with the base)."""

    build: Callable[[], Any]
    loss: Callable[[Any], Any]
    cross_encoder: bool = False
    router_mapping: Mapping[str, str] | None = None
    finish: Callable[[Any], None] | None = None


def negatives_used(epochs: Sequence[EpochRows], kinds: Sequence[str]) -> dict[str, int]:
    """How many drawn negatives of each of ``kinds`` all epochs hold."""
    counted = Counter(kind for epoch in epochs for kind in epoch.negative_kinds)
    return {kind: counted[kind] for kind in kinds}


def train(config: Any, items: Sequence[Item], sampler: RowSampler[Item], recipe: ModelRecipe,
          out_dir: str | os.PathLike, marker: str, counts: Callable[[list[EpochRows]], dict], *,
          no_duplicates: bool = False, progress: bool = True, started: float | None = None,
          validate: Callable[[Any], float] | None = None, validate_steps: int = 0) -> Path:
    """Draw ``config.epochs`` epochs of rows from ``items`` (seeded by ``config.seed``), fit ``recipe``'s model
    on them (:func:`~taskret.training.fit.fit`, with the config's trainer settings) and write
    ``out_dir/marker`` last: the config, ``counts(epochs)`` and the run's figures. Return ``out_dir/model``.

    ``no_duplicates`` batches without in-batch false negatives (the sampler's rows must carry keys).
    ``started`` (a ``time.perf_counter()``) is when the run began, for ``wall_time_s``; default: now.
    ``validate``/``validate_steps``: dev scores during training, the best step's weights saved (see
    :func:`~taskret.training.fit.fit`).
    """
    started = time.perf_counter() if started is None else started
    epochs = [sampler.epoch(items, config.seed, epoch) for epoch in range(config.epochs)]
    if no_duplicates and not all(len(e.keys) == len(e) for e in epochs):
        raise ValueError("no_duplicates needs a sampler whose rows carry RowKeys")
    extra_args = None if recipe.router_mapping is None else {"router_mapping": dict(recipe.router_mapping)}
    return fit_and_record(config, recipe.build, recipe.loss, [e.columns for e in epochs], out_dir, marker,
                          counts(epochs), started=started, blocks=[e.keys for e in epochs] if no_duplicates else None,
                          no_duplicates=no_duplicates, cross_encoder=recipe.cross_encoder, extra_args=extra_args,
                          progress=progress, finish=recipe.finish, validate=validate,
                          validate_steps=validate_steps)
