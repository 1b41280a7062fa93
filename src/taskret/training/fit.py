"""Training machinery shared by taskret's learned retrievers: EPR's dual encoder, TART-dual, TART-full
(a cross-encoder) and the distillation of TART-full into TART-dual.

The package: ``config`` (settings shared by every run), ``batching`` (in-batch negatives, per-epoch
blocks), ``encoders`` (the bi-encoder every model starts from), ``losses`` (DPR), ``checkpoints`` (resumable runs),
``trainer`` (``train``, the entry every model calls: per-epoch row sampling, then :func:`fit_and_record`), and this
module::

    fit(build_model, build_loss, ...)  # one sentence-transformers trainer run -> FitResult
    fit_and_record(config, ...)        # fit with a config's settings, then write the run's summary file
    quiet(progress), replace_dir(tmp, target)

Under :func:`~taskret.training.logs.library_logs` (``taskret epr run``, ``taskret tart run``), :func:`fit` prints
nothing itself: with ``progress`` taskret's own bar counts the steps, and the trainer's log dicts go to the log file.

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
* Resume (:mod:`~taskret.training.checkpoints`): every ``checkpoint_minutes`` the Trainer saves a checkpoint
  (``out_dir/checkpoints/checkpoint-N``: model as safetensors, optimiser, scheduler, RNG states, trainer state), and
  ``on_save`` completes it with taskret's marker (the run's fingerprint, the training log so far, the loss sum, the
  epoch times, the dev scores and the best step's weights). A run started again with the same settings and data goes
  on with ``trainer.train(resume_from_checkpoint=...)``: the Trainer skips the batches done (the block sampler's
  batches are fixed by the seed, so the same ones) and restores the RNG states after skipping them, so the resumed
  run ends with the weights of an uninterrupted one (``tests/training/test_checkpoints.py``). The checkpoints are
  removed once the model is in place.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..progress import progress_bar, report_resumed
from .batching import fractional_epochs, make_block_sampler
from .checkpoints import CHECKPOINTS, Checkpoints, fingerprint

__all__ = ["FitResult", "Validation", "fit", "fit_and_record", "quiet", "replace_dir", "LOG_FILE", "RUN_KEYS"]

LOG_FILE = "training_log.jsonl"

#: What :func:`fit_and_record` adds about the run to a summary file, after the config and its counts
#: (``resumed_from_step``: the checkpoint's step a run went on from, None for a run from step 0).
RUN_KEYS = ("steps", "wall_time_s", "epoch_times_s", "final_loss", "mean_loss", "device", "validation",
            "resumed_from_step")

#: A Trainer checkpoint's copy of the best dev step's weights (:class:`Validation`), beside its own files.
BEST_STATE = "best_state.safetensors"


# -- files and logs ------------------------------------------------------------------------------


@contextmanager
def quiet(progress: bool) -> Iterator[None]:
    """Without progress, silence transformers' and datasets' bars and info logs for the block."""
    if progress:
        yield
        return
    from transformers.utils import logging as hf_logging

    from .logs import no_library_bars

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with no_library_bars():
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


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
    validation: dict | None = None  # with a validate function: every step's dev score and the best step kept
    resumed_from_step: int | None = None  # the checkpoint's step the run went on from

    @property
    def final_loss(self) -> float | None:
        """The last logged step's loss."""
        losses = [row["loss"] for row in self.log_rows if "loss" in row]
        return losses[-1] if losses else None


class Validation:
    """Dev scores during training: each one logged, the best step's weights kept (on the CPU) to be restored."""

    def __init__(self, validate: Callable[[Any], float], every: int, log_file, log_rows: list):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"validate_steps must be a positive integer with a validate function, got {every!r}")
        self.validate, self.every, self.log_file, self.log_rows = validate, every, log_file, log_rows
        self.scores: dict[int, float] = {}
        self.best_step: int | None = None
        self.best_state: dict | None = None

    def check(self, model, step: int) -> None:
        if step in self.scores:
            return
        was_training = model.training
        model.eval()
        score = float(self.validate(model))
        model.train(was_training)
        self.scores[step] = score
        row = {"step": step, "dev_score": round(score, 4)}
        self.log_rows.append(row)
        self.log_file.write(json.dumps(row) + "\n")
        self.log_file.flush()
        if self.best_step is None or score > self.scores[self.best_step]:
            self.best_step = step
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def restore_best(self, model) -> None:
        if self.best_state is not None and self.best_step != max(self.scores):
            model.load_state_dict(self.best_state)

    def state(self) -> dict:
        """The scores so far and the best step, for a checkpoint (the best step's weights are saved beside)."""
        return {"scores": {str(step): score for step, score in self.scores.items()}, "best_step": self.best_step}

    def restore(self, state: dict, best_state: dict | None) -> None:
        """Go on from a checkpoint's :meth:`state` and best weights."""
        self.scores = {int(step): float(score) for step, score in state["scores"].items()}
        self.best_step, self.best_state = state["best_step"], best_state

    def summary(self) -> dict:
        return {"best_step": self.best_step, "best_dev_score": round(self.scores[self.best_step], 4),
                "dev_scores": {str(step): round(v, 4) for step, v in self.scores.items()},
                "every_steps": self.every}


def fit(build_model: Callable[[], Any], build_loss: Callable[[Any], Any], train_dataset: Any,
        blocks: Sequence[Sequence[Any]], out_dir: str | os.PathLike, *, batch_size: int, learning_rate: float,
        warmup_ratio: float, weight_decay: float, seed: int, logging_steps: int = 1, no_duplicates: bool = False,
        cross_encoder: bool = False, marker: str | None = None, extra_args: dict | None = None,
        progress: bool = True, finish: Callable[[Any], None] | None = None,
        validate: Callable[[Any], float] | None = None, validate_steps: int = 0, checkpoint_minutes: float = 0.0,
        settings: dict | None = None) -> FitResult:
    """Train the model ``build_model()`` with the loss ``build_loss(model)`` on ``train_dataset`` and save
    it to ``out_dir/model``; stream the steps to ``out_dir/training_log.jsonl``.

    ``blocks``: one sequence per epoch, as long as that epoch's consecutive rows of ``train_dataset``
    (:class:`RowKeys` when ``no_duplicates``, anything otherwise); batches of ``batch_size`` are drawn
    within each block, seeded by ``seed``. ``marker`` (a finished run's summary file in ``out_dir``) is
    deleted first, for the caller to write when this returns. ``extra_args``: more trainer arguments
    (``router_mapping``, for instance). ``finish(model)`` runs on the trained model just before it is saved.
    Seeds everything with ``seed`` before building the model.

    ``validate(model) -> score`` (higher is better, e.g. NDCG@10 on held-out dev queries), with
    ``validate_steps``: the model is scored before training, every ``validate_steps`` steps and after the last
    step; each score is a ``{"step", "dev_score"}`` row of the training log, and the weights of the best one
    (the earliest, on ties) are the ones saved, as the TART paper keeps its best checkpoint.

    Every ``checkpoint_minutes`` of training (0: never) a checkpoint is saved in ``out_dir/checkpoints``; a run that
    finds a complete one of the same run goes on from it (module docstring). The same run: the same ``settings``
    (what else identifies it: the model's config and the data counts), the same arguments here and the same rows
    and blocks. The checkpoints are removed once the model is in place.
    """
    import torch
    from transformers import PrinterCallback, TrainerCallback, set_seed

    from .logs import TRAINER_LOGGER, library_log

    # Under library_logs() the terminal gets no tqdm bar and no log dicts: taskret's own bar counts the steps.
    logged_to = library_log()
    shown = progress
    steps_bar = progress and logged_to is not None
    progress = progress and logged_to is None
    trainer_logger = logging.getLogger(TRAINER_LOGGER)

    if cross_encoder:
        from sentence_transformers.cross_encoder import CrossEncoderTrainer as Trainer
        from sentence_transformers.cross_encoder import (
            CrossEncoderTrainingArguments as Arguments,
        )
    else:
        from sentence_transformers import SentenceTransformerTrainer as Trainer
        from sentence_transformers import (
            SentenceTransformerTrainingArguments as Arguments,
        )

    class _Trainer(Trainer):
        def add_model_card_callback(self, default_args_dict):
            # No model card is written (the model is saved with create_model_card=False), so skip
            # the callback that samples the dataset for card widgets.
            pass

        def _save(self, output_dir: str | None = None, state_dict=None) -> None:
            # A checkpoint's model, as sentence-transformers' _save writes it (safetensors), without its torch.save
            # of the training arguments: a pickle nothing reads back, which cannot hold fit's batch-sampler factory.
            output_dir = output_dir if output_dir is not None else self.args.output_dir
            os.makedirs(output_dir, exist_ok=True)
            self.model.save_pretrained(output_dir, safe_serialization=True, create_model_card=False)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)

    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if marker is not None:
        (out_dir / marker).unlink(missing_ok=True)  # a finished run's marker, rewritten last by the caller
    run_id = fingerprint({**(settings or {}), "batch_size": batch_size, "learning_rate": learning_rate,
                          "warmup_ratio": warmup_ratio, "weight_decay": weight_decay, "seed": seed,
                          "no_duplicates": no_duplicates, "cross_encoder": cross_encoder, "extra_args": extra_args,
                          "validate_steps": validate_steps if validate is not None else 0,
                          "n_rows": len(train_dataset), "n_blocks": len(blocks)}, _data_items(train_dataset, blocks))
    checkpoints = Checkpoints(out_dir / CHECKPOINTS, run_id, checkpoint_minutes, shown=shown)
    resume_path, record = checkpoints.latest() or (None, None)
    if record is not None:
        checkpoints.resumed(record)
    work = Path(tempfile.mkdtemp(prefix=".train-", dir=out_dir))
    try:
        with quiet(progress or logged_to is not None):  # library_logs() has turned the bars off, kept the logs
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
                output_dir=str(checkpoints.folder),  # checkpoints, saved by _Log's should_save every checkpoint_minutes
                num_train_epochs=1,  # the dataset already holds every epoch, in order
                per_device_train_batch_size=batch_size,
                learning_rate=learning_rate,
                weight_decay=weight_decay,
                warmup_steps=warmup_ratio,  # a fraction of the steps when < 1
                lr_scheduler_type="linear",
                seed=seed,
                data_seed=seed,
                save_strategy="no",  # when to save is _Log's (a time interval); how, the Trainer's
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

            # A resumed run starts from its checkpoint's log, dev scores, loss sum and epoch times.
            log_rows: list[dict] = _read_rows(resume_path / LOG_FILE) if resume_path is not None else []
            log_file = open(out_dir / LOG_FILE, "w", encoding="utf-8")
            log_file.writelines(json.dumps(row) + "\n" for row in log_rows)
            log_file.flush()
            epoch_end_times: dict[int, float] = {}
            loss_before = float(record["loss_sum"]) if record else 0.0
            times_before = list(record["epoch_times_s"]) if record else []
            in_epoch_before = float(record["in_epoch_s"]) if record else 0.0

            checks = Validation(validate, validate_steps, log_file, log_rows) if validate is not None else None
            if checks is not None and record and record.get("validation"):
                checks.restore(record["validation"], _load_best_state(resume_path / BEST_STATE))

            def epoch_times(now: float) -> tuple[list[float], float]:
                """The durations of the epochs finished so far, and the time spent in the current one."""
                times, previous = list(times_before), train_start - in_epoch_before
                for epoch in sorted(epoch_end_times):
                    times.append(round(epoch_end_times[epoch] - previous, 3))
                    previous = epoch_end_times[epoch]
                return times, now - previous

            class _Log(TrainerCallback):
                fractions: list[float] | None = None

                def _epoch_at(self, step: int) -> float:
                    if self.fractions is None and samplers:
                        self.fractions = fractional_epochs(samplers[-1].block_of_batch)
                    fractions = self.fractions or []
                    return fractions[step - 1] if 0 < step <= len(fractions) else float("nan")

                def on_train_begin(self, args_, state, control, **kwargs):
                    state.logging_steps = args_.logging_steps  # a resumed state holds the earlier run's
                    if state.global_step:
                        checkpoints.say(f"training: resumed from step {state.global_step} of {state.max_steps} "
                                        f"(checkpoint {resume_path})")
                    if steps_bar:
                        self.advance = bars.enter_context(progress_bar(state.max_steps, "training", unit="step"))
                        report_resumed(self.advance, state.global_step)  # counted as done, not in the rate
                    if checks is not None:
                        checks.check(model, 0)
                    checkpoints.last_save = time.monotonic()

                def on_step_end(self, args_, state, control, **kwargs):
                    if steps_bar:
                        self.advance(1)
                    if checks is not None and (state.global_step % checks.every == 0
                                               or state.global_step == state.max_steps):
                        checks.check(model, state.global_step)
                    epoch = self._epoch_at(state.global_step)
                    if not math.isnan(epoch) and epoch == int(epoch):
                        epoch_end_times[int(epoch)] = time.perf_counter()
                    if checkpoints.due(state.global_step, state.max_steps):
                        control.should_save = True  # the Trainer saves after logging this step, then calls on_save
                        self.save_started = time.perf_counter()

                def on_save(self, args_, state, control, **kwargs):
                    # The Trainer has written checkpoint-N (model, optimiser, scheduler, RNG, trainer state); what
                    # taskret needs to go on is added, and the marker written last makes the checkpoint complete.
                    path = checkpoints.folder / f"checkpoint-{state.global_step}"
                    if checks is not None and checks.best_state is not None:
                        from safetensors.torch import save_file

                        save_file({k: v.contiguous() for k, v in checks.best_state.items()}, str(path / BEST_STATE))
                    (path / LOG_FILE).write_text("".join(json.dumps(row) + "\n" for row in log_rows),
                                                 encoding="utf-8")
                    times, in_epoch = epoch_times(time.perf_counter())
                    # The Trainer's loss sum of this call's steps (its train_loss is their mean): logged, and not yet.
                    loss_sum = loss_before + trainer._total_loss_scalar + float(trainer._tr_loss)
                    checkpoints.mark(path, {"step": state.global_step, "total_steps": state.max_steps,
                                            "loss_sum": loss_sum, "epoch_times_s": times, "in_epoch_s": in_epoch,
                                            "validation": checks.state() if checks is not None else None})
                    trainer_logger.info("checkpoint at step %d of %d: %s (%.2f s)", state.global_step, state.max_steps,
                                        path, time.perf_counter() - getattr(self, "save_started", time.perf_counter()))

                def on_log(self, args_, state, control, logs=None, **kwargs):
                    if logs:
                        trainer_logger.info("step %d: %s", state.global_step, json.dumps(logs))
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
                with ExitStack() as bars:
                    result = trainer.train(resume_from_checkpoint=None if resume_path is None else str(resume_path))
            finally:
                log_file.close()
            model_tmp = work / "model"
            if checks is not None:
                checks.restore_best(model)
            if finish is not None:
                finish(model)
            model.save(str(model_tmp), safe_serialization=True, create_model_card=False)
        device = str(next(model.parameters()).device)
        replace_dir(model_tmp, out_dir / "model")
        checkpoints.discard()
        steps = int(result.global_step)
        resumed = int(record["step"]) if record else None
        mean_loss = float(result.training_loss)
        if resumed:  # the Trainer's train_loss is the mean of this call's steps only
            mean_loss = (loss_before + mean_loss * (steps - resumed)) / max(steps, 1)
        return FitResult(model_dir=out_dir / "model", steps=steps, mean_loss=mean_loss, log_rows=log_rows,
                         epoch_times_s=epoch_times(time.perf_counter())[0], device=device,
                         wall_time_s=round(time.perf_counter() - started, 3),
                         validation=checks.summary() if checks is not None else None, resumed_from_step=resumed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        checkpoints.tidy()  # the Trainer makes its output folder whether it saves there or not
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _data_items(train_dataset: Any, blocks: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """What a run trains on, for its fingerprint: every column of the dataset, then every block (row keys)."""
    for name, column in train_dataset.to_dict().items():
        yield [name, column]
    for block in blocks:
        yield block if isinstance(block, range) else list(block)


def _read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _load_best_state(path: Path) -> dict | None:
    from safetensors.torch import load_file

    return load_file(str(path)) if path.exists() else None


def fit_and_record(config: Any, build_model: Callable[[], Any], build_loss: Callable[[Any], Any],
                   epochs: Sequence[dict[str, list]], out_dir: str | os.PathLike, marker: str, counts: dict, *,
                   started: float, blocks: Sequence[Sequence[Any]] | None = None, **options) -> Path:
    """:func:`fit` on the per-epoch ``epochs`` columns (concatenated) with ``config``'s batch size, learning
    rate, warm-up, weight decay, seed and logging steps; then write ``out_dir/marker``: the config,
    ``counts``, and the run's :data:`RUN_KEYS` (``wall_time_s`` since ``started``). Return ``out_dir/model``.

    ``blocks`` default to each epoch's rows (for batches that need no duplicate checks); ``options``
    go to :func:`fit` (``no_duplicates``, ``cross_encoder``, ``extra_args``, ``progress``). The run checkpoints every
    ``config.checkpoint_minutes`` and resumes from a checkpoint of the same config and ``counts`` (and data).
    """
    import datasets

    from ..io import write_json

    train_dataset = datasets.concatenate_datasets([datasets.Dataset.from_dict(dict(cols)) for cols in epochs])
    if blocks is None:
        blocks = [range(len(next(iter(cols.values())))) for cols in epochs]
    run = fit(build_model, build_loss, train_dataset, blocks, out_dir, batch_size=config.batch_size,
              learning_rate=config.learning_rate, warmup_ratio=config.warmup_ratio, weight_decay=config.weight_decay,
              seed=config.seed, logging_steps=config.logging_steps, marker=marker,
              checkpoint_minutes=getattr(config, "checkpoint_minutes", 0.0), settings={**config.to_dict(), **counts},
              **options)
    write_json(Path(out_dir) / marker, {
        **config.to_dict(), **counts,
        "steps": run.steps,
        "wall_time_s": round(time.perf_counter() - started, 3),
        "epoch_times_s": run.epoch_times_s,
        "final_loss": run.final_loss,
        "mean_loss": run.mean_loss,
        "device": run.device,
        **({"validation": run.validation} if run.validation is not None else {}),
        "resumed_from_step": run.resumed_from_step,
    })
    return run.model_dir
