"""Training machinery shared by taskret's learned retrievers: EPR's dual encoder, TART-dual, TART-full
(a cross-encoder) and the distillation of TART-full into TART-dual.

Public API::

    ConfigMixin                        # JSON round-trip of a hyperparameter dataclass (+ its run keys)
    TrainerSettings                    # base_model, learning_rate, warmup_ratio, weight_decay, seed, logging_steps
    check_training_values(config)      # the common range checks of a training config
    RowKeys, epoch_batches             # duplicate-free in-batch-negative batching, epoch by epoch
    make_block_sampler()               # the trainer's batch sampler over per-epoch blocks
    fit(build_model, build_loss, ...)  # one sentence-transformers trainer run -> FitResult
    fit_and_record(config, ...)        # fit with a config's settings, then write the run's summary file
    quiet(progress), replace_dir(tmp, target)

Design notes
------------
* Every training run walks a dataset made of consecutive per-epoch blocks (each epoch draws its own
  negatives) ONCE (``num_train_epochs=1``), with a batch sampler that keeps the epochs in order and
  shuffles within each: the learning-rate schedule (linear, with warm-up) spans all epochs and the
  training log reports the true (fractional) epoch of each step.
* :func:`fit` holds the trainer set-up every model shares: seeding, the trainer arguments, the block
  sampler, ``training_log.jsonl`` streamed step by step (step, epoch, loss, learning_rate, grad_norm),
  no model card, and the atomic model folder: saved into a temporary folder beside ``out_dir/model``
  and renamed into place when complete, so a failed run leaves no model of its own (an older one stays).
  It trains a ``SentenceTransformer`` (:class:`~sentence_transformers.SentenceTransformerTrainer`) or,
  with ``cross_encoder=True``, a ``CrossEncoder`` (:class:`~sentence_transformers.cross_encoder.CrossEncoderTrainer`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, NamedTuple, Sequence

import numpy as np

__all__ = ["ConfigMixin", "TrainerSettings", "check_training_values", "RowKeys", "epoch_batches", "make_block_sampler",
           "fractional_epochs", "FitResult", "fit", "fit_and_record", "quiet", "replace_dir", "LOG_FILE", "RUN_KEYS"]

LOG_FILE = "training_log.jsonl"

#: What :func:`fit_and_record` adds about the run to a summary file, after the config and its counts.
RUN_KEYS = ("steps", "wall_time_s", "epoch_times_s", "final_loss", "mean_loss", "device")


# -- configs -------------------------------------------------------------------------------------


class ConfigMixin:
    """``to_dict``/``from_dict``/``to_json``/``from_json`` for a dataclass of hyperparameters.

    ``from_dict`` also reads the summary a finished run writes (the config plus ``RESULT_KEYS``,
    which it ignores) and rejects any other unknown key. Tuples are written as JSON lists.
    """

    RESULT_KEYS: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - set(cls.RESULT_KEYS)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


@dataclass
class TrainerSettings(ConfigMixin):
    """The hyperparameters every taskret training run has (each model's config adds its own after these)."""

    base_model: str = "minilm-l6"
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 0
    logging_steps: int = 1


def check_training_values(config: Any,
                          positive_ints: Sequence[str] = ("epochs", "batch_size", "logging_steps")) -> None:
    """Raise ``ValueError`` unless the named fields are positive integers, ``learning_rate`` is positive,
    ``warmup_ratio`` in [0, 1), ``weight_decay`` non-negative and (where the config has one) ``scale`` positive."""
    for name in positive_ints:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not config.learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {config.learning_rate}")
    if not 0 <= config.warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {config.warmup_ratio}")
    if hasattr(config, "scale") and not config.scale > 0:
        raise ValueError(f"scale must be positive, got {config.scale}")
    if config.weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {config.weight_decay}")


# -- batching ------------------------------------------------------------------------------------


class RowKeys(NamedTuple):
    """What a triplet row must not share with the other rows of its batch (see :func:`epoch_batches`)."""

    query: tuple[str, ...]  # the query: its id and its text
    positive: tuple[str, ...]  # the positive document: id and text
    negative: tuple[str, ...]  # the negative document: id and text
    positive_text: str  # the text the document encoder sees
    negative_text: str


def epoch_batches(rows: Sequence[Any], batch_size: int, rng: np.random.Generator,
                  no_duplicates: bool) -> list[list[int]]:
    """Shuffle rows ``0..n-1`` into ``ceil(n / batch_size)`` batches, all full but the last.

    Without ``no_duplicates`` the rows can be anything (only their number counts). With it, they are
    :class:`RowKeys` and each batch is first filled greedily, in shuffled order, with rows that add no
    false negative to the batch (a document scored as an in-batch negative although it is as good
    as, or better than, the query's positive):

    * no query twice (by id or text): each one's positive would be the other's negative;
    * no query's own item among the batch's documents (by id or text): for EPR, a query's own
      example is its best possible demonstration, and with ``field="input"`` it is literally the
      query's text, which both encoders start by scoring 1.0;
    * no positive text that is also another document of the batch.

    Two rows sharing a negative are harmless and allowed. If the remaining rows cannot fill the batch
    that way (a small pool in which every example is everyone's candidate), it is topped up with the
    next rows regardless, so no tiny batches are made and duplicates stay as rare as the data allows.
    """
    order = [int(i) for i in rng.permutation(len(rows))]
    if not no_duplicates:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    remaining = order
    while remaining:
        batch: list[int] = []
        queries: set[str] = set()  # keys of the batch's queries
        doc_examples: set[str] = set()  # keys of the items shown as its documents
        positive_texts: set[str] = set()
        doc_texts: set[str] = set()
        deferred: list[int] = []
        for position, index in enumerate(remaining):
            if len(batch) == batch_size:
                deferred.extend(remaining[position:])
                break
            row = rows[index]
            row_docs = row.positive + row.negative
            if (not queries.isdisjoint(row.query) or not doc_examples.isdisjoint(row.query)
                    or not queries.isdisjoint(row_docs) or row.positive_text in doc_texts
                    or row.negative_text in positive_texts):
                deferred.append(index)
                continue
            batch.append(index)
            queries.update(row.query)
            doc_examples.update(row_docs)
            positive_texts.add(row.positive_text)
            doc_texts.update((row.positive_text, row.negative_text))
        top_up = min(batch_size - len(batch), len(deferred))
        batch.extend(deferred[:top_up])
        batches.append(batch)
        remaining = deferred[top_up:]
    return batches


def make_block_sampler():
    """The batch sampler class, built lazily so that importing this module does not import torch."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    class EpochBlockBatchSampler(DefaultBatchSampler):
        """Batches of a dataset made of consecutive per-epoch blocks, epoch by epoch (see
        :func:`epoch_batches`). Computed up front, so ``len()`` is exact and the trainer's
        schedule matches the batches; the trainer's own generator and seed are not used.
        """

        def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                     seed: int = 0, *, blocks: Sequence[Sequence[Any]] = (), sample_seed: int = 0,
                     no_duplicates: bool = True) -> None:
            super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                             valid_label_columns=valid_label_columns, generator=generator, seed=seed)
            if sum(len(b) for b in blocks) != len(dataset):
                raise ValueError(f"epoch blocks cover {sum(len(b) for b in blocks)} rows but the dataset "
                                 f"has {len(dataset)}")
            self.batches: list[list[int]] = []
            self.block_of_batch: list[int] = []
            start = 0
            for epoch, block_keys in enumerate(blocks):
                rng = np.random.default_rng([sample_seed, epoch, 1])
                block = epoch_batches(block_keys, batch_size, rng, no_duplicates)
                if drop_last:
                    block = [b for b in block if len(b) == batch_size]
                self.batches.extend([[start + i for i in b] for b in block])
                self.block_of_batch.extend([epoch] * len(block))
                start += len(block_keys)

        def __iter__(self) -> Iterator[list[int]]:
            return iter([list(b) for b in self.batches])

        def __len__(self) -> int:
            return len(self.batches)

    return EpochBlockBatchSampler


def fractional_epochs(block_of_batch: Sequence[int]) -> list[float]:
    """Epoch reached after each batch: ``e + i / n_e`` after the ``i``-th of epoch ``e``'s ``n_e`` batches."""
    counts: dict[int, int] = {}
    for block in block_of_batch:
        counts[block] = counts.get(block, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for block in block_of_batch:
        seen[block] = seen.get(block, 0) + 1
        out.append(block + seen[block] / counts[block])
    return out


# -- files and logs ------------------------------------------------------------------------------


@contextmanager
def quiet(progress: bool) -> Iterator[None]:
    """Without progress, silence transformers' and datasets' bars and info logs for the block."""
    if progress:
        yield
        return
    import datasets
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    ds_bars = datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)
        if ds_bars:
            datasets.enable_progress_bars()


def replace_dir(tmp: Path, target: Path) -> None:
    """Rename a complete folder onto ``target``, replacing an older one."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# -- one trainer run -----------------------------------------------------------------------------


@dataclass
class FitResult:
    """What a :func:`fit` run reports: the model folder, steps, losses, per-epoch times and device."""

    model_dir: Path
    steps: int
    mean_loss: float
    log_rows: list[dict] = field(default_factory=list)
    epoch_times_s: list[float] = field(default_factory=list)
    device: str = "cpu"
    wall_time_s: float = 0.0

    @property
    def final_loss(self) -> float | None:
        """The last logged step's loss."""
        return self.log_rows[-1]["loss"] if self.log_rows else None


def fit(build_model: Callable[[], Any], build_loss: Callable[[Any], Any], train_dataset: Any,
        blocks: Sequence[Sequence[Any]], out_dir: str | os.PathLike, *, batch_size: int, learning_rate: float,
        warmup_ratio: float, weight_decay: float, seed: int, logging_steps: int = 1, no_duplicates: bool = False,
        cross_encoder: bool = False, marker: str | None = None, extra_args: dict | None = None,
        progress: bool = True) -> FitResult:
    """Train the model ``build_model()`` with the loss ``build_loss(model)`` on ``train_dataset`` and save
    it to ``out_dir/model``; stream the steps to ``out_dir/training_log.jsonl``.

    ``blocks``: one sequence per epoch, as long as that epoch's consecutive rows of ``train_dataset``
    (:class:`RowKeys` when ``no_duplicates``, anything otherwise); batches of ``batch_size`` are drawn
    within each block, seeded by ``seed``. ``marker`` (a finished run's summary file in ``out_dir``) is
    deleted first, for the caller to write when this returns. ``extra_args``: more trainer arguments
    (``router_mapping``, for instance). Seeds everything with ``seed`` before building the model.
    """
    import torch
    from transformers import PrinterCallback, TrainerCallback, set_seed

    if cross_encoder:
        from sentence_transformers.cross_encoder import CrossEncoderTrainer as Trainer
        from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments as Arguments
    else:
        from sentence_transformers import SentenceTransformerTrainer as Trainer
        from sentence_transformers import SentenceTransformerTrainingArguments as Arguments

    class _Trainer(Trainer):
        def add_model_card_callback(self, default_args_dict):
            # No model card is written (the model is saved with create_model_card=False), so skip
            # the callback that samples the dataset for card widgets.
            pass

    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if marker is not None:
        (out_dir / marker).unlink(missing_ok=True)  # a finished run's marker, rewritten last by the caller
    work = Path(tempfile.mkdtemp(prefix=".train-", dir=out_dir))
    try:
        with quiet(progress):
            set_seed(seed)
            model = build_model()
            loss = build_loss(model)
            sampler_class = make_block_sampler()
            samplers: list = []

            def make_sampler(dataset, **kwargs):
                sampler = sampler_class(dataset, blocks=blocks, sample_seed=seed, no_duplicates=no_duplicates,
                                        **kwargs)
                samplers.append(sampler)
                return sampler

            args = Arguments(
                output_dir=str(work / "trainer"),
                num_train_epochs=1,  # the dataset already holds every epoch, in order
                per_device_train_batch_size=batch_size,
                learning_rate=learning_rate,
                weight_decay=weight_decay,
                warmup_steps=warmup_ratio,  # a fraction of the steps when < 1
                lr_scheduler_type="linear",
                seed=seed,
                data_seed=seed,
                save_strategy="no",
                eval_strategy="no",
                report_to="none",
                logging_strategy="steps",
                logging_steps=logging_steps,
                logging_first_step=True,
                disable_tqdm=not progress,
                dataloader_drop_last=False,
                dataloader_pin_memory=torch.cuda.is_available(),
                batch_sampler=make_sampler,
                **(extra_args or {}),
            )

            log_file = open(out_dir / LOG_FILE, "w", encoding="utf-8")
            log_rows: list[dict] = []
            epoch_end_times: dict[int, float] = {}

            class _Log(TrainerCallback):
                fractions: list[float] | None = None

                def _epoch_at(self, step: int) -> float:
                    if self.fractions is None and samplers:
                        self.fractions = fractional_epochs(samplers[-1].block_of_batch)
                    fractions = self.fractions or []
                    return fractions[step - 1] if 0 < step <= len(fractions) else float("nan")

                def on_step_end(self, args_, state, control, **kwargs):
                    epoch = self._epoch_at(state.global_step)
                    if not math.isnan(epoch) and epoch == int(epoch):
                        epoch_end_times[int(epoch)] = time.perf_counter()

                def on_log(self, args_, state, control, logs=None, **kwargs):
                    if not logs or "loss" not in logs:
                        return
                    epoch = self._epoch_at(state.global_step)
                    row = {"step": state.global_step, "epoch": None if math.isnan(epoch) else round(epoch, 4),
                           "loss": float(logs["loss"]), "learning_rate": float(logs.get("learning_rate", float("nan")))}
                    if logs.get("grad_norm") is not None:
                        row["grad_norm"] = float(logs["grad_norm"])
                    log_rows.append(row)
                    log_file.write(json.dumps(row) + "\n")
                    log_file.flush()

            try:
                trainer = _Trainer(model=model, args=args, train_dataset=train_dataset, loss=loss, callbacks=[_Log()])
                if not progress:
                    trainer.remove_callback(PrinterCallback)  # prints every log dict when tqdm is off
                train_start = time.perf_counter()
                result = trainer.train()
            finally:
                log_file.close()
            model_tmp = work / "model"
            model.save(str(model_tmp), safe_serialization=True, create_model_card=False)
        device = str(next(model.parameters()).device)
        replace_dir(model_tmp, out_dir / "model")
        epoch_times, previous = [], train_start
        for epoch in sorted(epoch_end_times):
            epoch_times.append(round(epoch_end_times[epoch] - previous, 3))
            previous = epoch_end_times[epoch]
        return FitResult(model_dir=out_dir / "model", steps=int(result.global_step),
                         mean_loss=float(result.training_loss), log_rows=log_rows, epoch_times_s=epoch_times,
                         device=device, wall_time_s=round(time.perf_counter() - started, 3))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def fit_and_record(config: Any, build_model: Callable[[], Any], build_loss: Callable[[Any], Any],
                   epochs: Sequence[dict[str, list]], out_dir: str | os.PathLike, marker: str, counts: dict, *,
                   started: float, blocks: Sequence[Sequence[Any]] | None = None, **options) -> Path:
    """:func:`fit` on the per-epoch ``epochs`` columns (concatenated) with ``config``'s batch size, learning
    rate, warm-up, weight decay, seed and logging steps; then write ``out_dir/marker``: the config,
    ``counts``, and the run's :data:`RUN_KEYS` (``wall_time_s`` since ``started``). Return ``out_dir/model``.

    ``blocks`` default to each epoch's rows (for batches that need no duplicate checks); ``options``
    go to :func:`fit` (``no_duplicates``, ``cross_encoder``, ``extra_args``, ``progress``).
    """
    import datasets

    from .io import write_json

    train_dataset = datasets.concatenate_datasets([datasets.Dataset.from_dict(dict(cols)) for cols in epochs])
    if blocks is None:
        blocks = [range(len(next(iter(cols.values())))) for cols in epochs]
    run = fit(build_model, build_loss, train_dataset, blocks, out_dir, batch_size=config.batch_size,
              learning_rate=config.learning_rate, warmup_ratio=config.warmup_ratio, weight_decay=config.weight_decay,
              seed=config.seed, logging_steps=config.logging_steps, marker=marker, **options)
    write_json(Path(out_dir) / marker, {
        **config.to_dict(), **counts,
        "steps": run.steps,
        "wall_time_s": round(time.perf_counter() - started, 3),
        "epoch_times_s": run.epoch_times_s,
        "final_loss": run.final_loss,
        "mean_loss": run.mean_loss,
        "device": run.device,
    })
    return run.model_dir
