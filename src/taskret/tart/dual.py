"""TART-dual: one shared sentence-transformers encoder for instructed queries and for documents.

A query is encoded as ``format_query(instruction, query)`` (``"{instruction} [SEP] {query}"``) and a
document as its ``doc_text``, by the SAME encoder (Asai et al., 2022, TART-dual). Training is
contrastive: each query scores its positive against the positives and negatives of every other row
of its batch plus its own one negative (``2B - 1`` negatives for a batch of ``B``), the
MultipleNegativesRankingLoss on (anchor, positive, negative) triplets, in its GradCache variant
(``CachedMultipleNegativesRankingLoss``) so that large batches fit in ``mini_batch_size`` memory.

Public API::

    TartDualConfig                                    # hyperparameters, JSON round-trip
    build_triplets(rows, config, epoch)               # -> {"anchor", "positive", "negative"} columns
    train_tart_dual(rows, out_dir, config)            # -> out_dir / "model"

Design notes
------------
* Each epoch draws, for every row, ONE negative uniformly among the row's negatives whose kind is in
  ``config.negative_kinds`` (hard, unfollowing, random), seeded by ``(seed, epoch)``; rows without such
  a negative are skipped (counted in ``n_skipped``). The per-epoch triplets are concatenated and
  walked once, epoch by epoch, with EPR's batch sampler (:mod:`taskret.epr.training`), so the
  learning-rate schedule spans all epochs and batches avoid in-batch false negatives: no query twice,
  no positive text that is another row's document (MTOP/Break queries often share one parse).
* ``use_instruction=False`` trains the no-instruction ablation: the anchor is the query alone.
* The model, the quiet mode and the atomic model folder are EPR's (``build_model`` with
  ``shared_encoder=True``, ``_quiet``, ``_replace_dir``). The saved folder is a plain
  SentenceTransformer, so ``make_retriever("dense:" + str(out_dir / "model"))`` and
  :func:`~taskret.tart.evaluation.evaluate_retriever` use it unchanged.
* Output: ``out_dir/model`` (safetensors; written beside it and renamed into place when complete),
  ``out_dir/training_log.jsonl`` (streamed: step, epoch, loss, learning_rate, grad_norm) and, last,
  ``out_dir/tart_dual_config.json`` (the config plus run counts and losses), which marks a finished run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..io import write_json
from .evaluation import format_query
from .training_data import NEGATIVE_KINDS, validate_training_row

logger = logging.getLogger(__name__)

__all__ = ["TartDualConfig", "build_triplets", "train_tart_dual", "CONFIG_FILE", "LOG_FILE"]

CONFIG_FILE = "tart_dual_config.json"
LOG_FILE = "training_log.jsonl"

#: Keys of ``tart_dual_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_rows", "n_used", "n_skipped", "n_triplets", "negatives_used", "steps", "wall_time_s",
               "final_loss", "mean_loss", "device")


@dataclass
class TartDualConfig:
    """Hyperparameters of TART-dual training. ``batch_size`` triplets per optimiser step, embedded
    ``mini_batch_size`` sequences at a time (GradCache)."""

    base_model: str = "minilm-l6"
    epochs: int = 1
    batch_size: int = 64
    mini_batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 0
    use_instruction: bool = True
    negative_kinds: tuple[str, ...] = NEGATIVE_KINDS
    max_seq_length: int = 128
    scale: float = 20.0
    no_duplicates: bool = True
    logging_steps: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "mini_batch_size", "max_seq_length", "logging_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")
        self.negative_kinds = tuple(self.negative_kinds)
        unknown = [k for k in self.negative_kinds if k not in NEGATIVE_KINDS]
        if unknown or not self.negative_kinds:
            raise ValueError(f"negative_kinds must be a non-empty subset of {NEGATIVE_KINDS}, got {self.negative_kinds}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["negative_kinds"] = list(self.negative_kinds)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TartDualConfig":
        """Inverse of :meth:`to_dict`; also reads a ``tart_dual_config.json`` (ignoring its run keys)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - set(RESULT_KEYS)
        if unknown:
            raise ValueError(f"unknown TartDualConfig keys: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TartDualConfig":
        return cls.from_dict(json.loads(text))


# -- triplets ------------------------------------------------------------------------------------


def _usable(rows: Sequence[dict], config: TartDualConfig, source: str) -> tuple[list[tuple[dict, list[dict]]], int]:
    """(row, its negatives of the configured kinds) for rows that have some; and how many were skipped."""
    usable, skipped = [], 0
    for index, row in enumerate(rows):
        validate_training_row(row, source, index + 1)
        negatives = [n for n in row["negatives"] if n["kind"] in config.negative_kinds]
        if negatives:
            usable.append((row, negatives))
        else:
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d of %d rows with no negative of kinds %s", source, skipped, len(rows),
                       ", ".join(config.negative_kinds))
    if not usable:
        raise ValueError(f"{source}: no usable training rows" + (" (none has a negative of kinds "
                         f"{', '.join(config.negative_kinds)})" if rows else ""))
    return usable, skipped


def _anchor(row: dict, config: TartDualConfig) -> str:
    return format_query(row["instruction"] if config.use_instruction else None, row["query"])


def _sample_epoch(usable, config: TartDualConfig, epoch: int):
    """One epoch's triplet columns, the kind of each drawn negative, and EPR's per-row batching keys."""
    from ..epr.training import _RowKeys

    rng = np.random.default_rng([config.seed, epoch])
    columns: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    kinds: list[str] = []
    keys = []
    for row, negatives in usable:
        negative = negatives[int(rng.integers(len(negatives)))]
        anchor = _anchor(row, config)
        columns["anchor"].append(anchor)
        columns["positive"].append(row["positive_text"])
        columns["negative"].append(negative["text"])
        kinds.append(negative["kind"])
        task = row["task"]
        negative_id = negative["id"] if negative["kind"] == "unfollowing" else f"{task}/{negative['id']}"
        keys.append(_RowKeys(("q:" + f"{task}/{row['qid']}", "x:" + row["query"]),
                             ("d:" + f"{task}/{row['positive']}", "t:" + row["positive_text"]),
                             ("d:" + negative_id, "t:" + negative["text"]),
                             row["positive_text"], negative["text"]))
    return columns, kinds, keys


def build_triplets(rows: Sequence[dict], config: TartDualConfig, epoch: int = 0, *,
                   source: str = "rows") -> dict[str, list[str]]:
    """One epoch of (anchor, positive, negative) text columns, one per usable row, in row order.

    ``anchor`` is ``format_query(instruction, query)`` (the query alone with ``use_instruction=False``),
    ``positive`` the positive's text and ``negative`` one negative drawn uniformly (seeded by
    ``(config.seed, epoch)``) among the row's negatives of ``config.negative_kinds``.
    """
    usable, _ = _usable(rows, config, source)
    columns, _, _ = _sample_epoch(usable, config, epoch)
    return columns


# -- training ------------------------------------------------------------------------------------


def train_tart_dual(rows: Sequence[dict], out_dir: str | os.PathLike, config: TartDualConfig | None = None,
                    progress: bool = True, source: str = "rows") -> Path:
    """Train TART-dual on training rows (see :mod:`taskret.tart.training_data`); return ``out_dir / "model"``.

    A failed run leaves no ``model`` folder of its own (an older one stays) and no config file;
    ``training_log.jsonl`` keeps the steps it reached. Runs on the accelerator if there is one.
    """
    import datasets
    import torch
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    from transformers import PrinterCallback, TrainerCallback, set_seed

    from ..epr.training import TrainingConfig, _fractional_epochs, _make_block_sampler, _quiet, _replace_dir
    from ..epr.training import build_model as build_epr_model

    class _Trainer(SentenceTransformerTrainer):
        def add_model_card_callback(self, default_args_dict):
            pass  # no model card is written

    config = config or TartDualConfig()
    out_dir = Path(out_dir)
    started = time.perf_counter()
    usable, n_skipped = _usable(rows, config, source)
    epochs = [_sample_epoch(usable, config, epoch) for epoch in range(config.epochs)]
    train_dataset = datasets.concatenate_datasets([datasets.Dataset.from_dict(cols) for cols, _, _ in epochs])
    block_keys = [keys for _, _, keys in epochs]
    negatives_used = {kind: sum(k == kind for _, kinds, _ in epochs for k in kinds) for kind in NEGATIVE_KINDS}

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).unlink(missing_ok=True)  # a finished run's marker, rewritten last
    work = Path(tempfile.mkdtemp(prefix=".tart-train-", dir=out_dir))
    log_path = out_dir / LOG_FILE
    try:
        with _quiet(progress):
            set_seed(config.seed)
            model = build_epr_model(TrainingConfig(base_model=config.base_model, shared_encoder=True,
                                                   max_seq_length=config.max_seq_length))
            loss = CachedMultipleNegativesRankingLoss(model, scale=config.scale, mini_batch_size=config.mini_batch_size,
                                                      show_progress_bar=False)
            sampler_class = _make_block_sampler()
            samplers: list = []

            def make_sampler(dataset, **kwargs):
                sampler = sampler_class(dataset, blocks=block_keys, sample_seed=config.seed,
                                        no_duplicates=config.no_duplicates, **kwargs)
                samplers.append(sampler)
                return sampler

            args = SentenceTransformerTrainingArguments(
                output_dir=str(work / "trainer"),
                num_train_epochs=1,  # the dataset already holds config.epochs epochs, in order
                per_device_train_batch_size=config.batch_size,
                learning_rate=config.learning_rate,
                weight_decay=config.weight_decay,
                warmup_steps=config.warmup_ratio,  # a fraction of the steps when < 1
                lr_scheduler_type="linear",
                seed=config.seed,
                data_seed=config.seed,
                save_strategy="no",
                eval_strategy="no",
                report_to="none",
                logging_strategy="steps",
                logging_steps=config.logging_steps,
                logging_first_step=True,
                disable_tqdm=not progress,
                dataloader_drop_last=False,
                dataloader_pin_memory=torch.cuda.is_available(),
                batch_sampler=make_sampler,
            )

            log_rows: list[dict] = []
            log_file = open(log_path, "w", encoding="utf-8")

            class _Log(TrainerCallback):
                fractions: list[float] | None = None

                def _epoch_at(self, step: int) -> float:
                    if self.fractions is None and samplers:
                        self.fractions = _fractional_epochs(samplers[-1].block_of_batch)
                    fractions = self.fractions or []
                    return fractions[step - 1] if 0 < step <= len(fractions) else float("nan")

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
                    trainer.remove_callback(PrinterCallback)
                result = trainer.train()
            finally:
                log_file.close()
            model_tmp = work / "model"
            model.save(str(model_tmp), safe_serialization=True, create_model_card=False)
        device = str(next(model.parameters()).device)
        _replace_dir(model_tmp, out_dir / "model")
        write_json(out_dir / CONFIG_FILE, {
            **config.to_dict(),
            "n_rows": len(rows),
            "n_used": len(usable),
            "n_skipped": n_skipped,
            "n_triplets": len(train_dataset),
            "negatives_used": negatives_used,
            "steps": int(result.global_step),
            "wall_time_s": round(time.perf_counter() - started, 3),
            "final_loss": log_rows[-1]["loss"] if log_rows else None,
            "mean_loss": float(result.training_loss),
            "device": device,
        })
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out_dir / "model"
