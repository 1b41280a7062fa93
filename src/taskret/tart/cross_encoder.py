"""TART-full: a cross-encoder over ``"{instruction} [SEP] {query}"`` and a document, and its training.

TART-full (Asai et al., 2022) reads the instructed query and the document together and outputs one
relevance logit. It is initialised from MiniLM (``minilm-l6``, a sentence-transformers ``CrossEncoder``
with ``num_labels=1``: the encoder's weights plus a new linear head), or from a causal LM
(``base_model="smollm2-135m"``) whose ``yes``/``no`` log-odds is the logit, as the paper builds TART-full on an
instruction-following LM (:func:`taskret.rerank.cross_encoder.load_cross_encoder`), and trained with binary
cross-entropy on (instructed query, document, 1/0) pairs: for every training row, its positive and
``n_negatives`` (4) of its negatives, i.e. 1 positive : 4 negatives, as in the paper. At test time it
reranks a first stage's top-k (100) documents: see :mod:`taskret.rerank` (``load_reranker(folder)``).

Public API::

    TartFullConfig                                     # hyperparameters, JSON round-trip
    build_pairs(rows, config, epoch)                   # -> {"query", "document", "label"} columns
    pair_sampler(config)                               # how one epoch's pairs are drawn
    train_tart_full(rows, out_dir, config)             # -> out_dir / "model"

Design notes
------------
* Each epoch draws, per row, ``n_negatives`` distinct negatives (fewer if the row has fewer) among
  those whose kind is in ``negative_kinds``, seeded by ``(seed, epoch)``; rows without any are
  skipped. The pairs of all epochs are walked once, shuffled within each epoch, by
  :func:`taskret.training.trainer.train` with sentence-transformers' ``CrossEncoderTrainer`` and
  ``BinaryCrossEntropyLoss``; the schedule spans all epochs.
* ``use_instruction=False`` trains the no-instruction ablation (the query alone); a trained folder's
  :class:`~taskret.rerank.CrossEncoderReranker` knows which (it reads ``tart_full_config.json``), and formats
  queries the same way when it serves as the teacher of distillation or as the denoiser of
  ``taskret tart build-data``.
* Output: ``out_dir/model`` (a ``CrossEncoder`` folder, safetensors; written beside it and renamed into
  place when complete), ``out_dir/training_log.jsonl`` (streamed) and, last, ``out_dir/tart_full_config.json``
  (the config plus run counts and losses), which marks a finished run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from ..formats import format_query
from ..rerank.cross_encoder import RUN_CONFIG_FILE
from ..training.fit import LOG_FILE, RUN_KEYS
from ..training.trainer import ModelRecipe, RowSampler, TrainingRow, negatives_used
from .config import NEGATIVE_KINDS, TartSettings
from .training_data import draw_negatives, epoch_columns, train_on_rows

__all__ = ["TartFullConfig", "build_pairs", "pair_sampler", "train_tart_full", "CONFIG_FILE", "LOG_FILE"]

#: The finished run's summary, written last; it also tells a reranker that a folder is a TART-full run.
CONFIG_FILE = RUN_CONFIG_FILE

#: Keys of ``tart_full_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_rows", "n_used", "n_skipped", "train_tasks", "n_pairs", "n_positive_pairs", "negatives_used",
               *RUN_KEYS)


@dataclass
class TartFullConfig(TartSettings):
    """Hyperparameters of TART-full training: ``batch_size`` (query, document) pairs per optimiser step,
    ``n_negatives`` negatives per positive, texts cut to ``max_length`` tokens (query and document together).

    ``objective``: ``"relevance"`` (binary cross-entropy on a relevance logit: a MiniLM head, or a causal LM's
    yes/no) or ``"query_likelihood"`` (a causal LM fine-tuned to write the query from its instruction and document,
    scored as the UPR reranker is: :mod:`taskret.tart.query_likelihood`). With the latter, ``batch_size`` counts
    training rows (each with its positive and ``n_negatives`` negatives), ``ranking_weight`` weighs the listwise
    term over them against the positive's likelihood, documents are cut to ``max_doc_tokens`` LM tokens, and
    ``instruction_dropout`` rows read the bare query with UPR's instruction-free prompt; with
    ``unfollowing_needs_instruction`` those rows never get an instruction-unfollowing negative (as in TART-dual:
    without the instruction nothing says such a document is wrong). Off by default, as the recipes measured
    before it were trained. ``checkpoint_minutes`` (resume) applies to ``"relevance"`` only: the query-likelihood
    loop saves no checkpoints."""

    batch_size: int = 32
    n_negatives: int = 4
    max_length: int = 256
    objective: str = "relevance"
    ranking_weight: float = 1.0
    max_doc_tokens: int = 200
    instruction_dropout: float = 0.0
    unfollowing_needs_instruction: bool = False

    RESULT_KEYS: ClassVar[tuple[str, ...]] = RESULT_KEYS  # from_dict reads a tart_full_config.json, ignoring these
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "max_length", "max_doc_tokens", "logging_steps")
    OBJECTIVES: ClassVar[tuple[str, ...]] = ("relevance", "query_likelihood")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in self.OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(self.OBJECTIVES)}, got {self.objective!r}")
        # a relevance model learns from its negatives; query likelihood may do without (the LM objective alone)
        lowest = 1 if self.objective == "relevance" else 0
        if isinstance(self.n_negatives, bool) or not isinstance(self.n_negatives, int) or self.n_negatives < lowest:
            raise ValueError(f"n_negatives must be an integer >= {lowest} for objective {self.objective}, "
                             f"got {self.n_negatives!r}")
        if not self.ranking_weight >= 0:
            raise ValueError(f"ranking_weight must be non-negative, got {self.ranking_weight}")
        if not 0.0 <= self.instruction_dropout <= 1.0:
            raise ValueError(f"instruction_dropout must be in [0, 1], got {self.instruction_dropout}")
        for name in ("instruction_dropout", "unfollowing_needs_instruction"):
            if self.objective == "relevance" and getattr(self, name):
                raise ValueError(f"{name} applies to objective query_likelihood only")


# -- pairs ---------------------------------------------------------------------------------------


def pair_sampler(config: TartFullConfig) -> RowSampler[tuple[dict, list[dict]]]:
    """Draws, per usable row (a training row, its negatives of ``config.negative_kinds``), the positive pair
    (label 1.0) then ``config.n_negatives`` distinct negative pairs (label 0.0; all of them if fewer)."""

    def draw(usable_row: tuple[dict, list[dict]], rng) -> list[TrainingRow]:
        row, negatives = usable_row
        query = format_query(row["instruction"] if config.use_instruction else None, row["query"])
        pairs = [TrainingRow({"query": query, "document": row["positive_text"], "label": 1.0})]
        pairs += [TrainingRow({"query": query, "document": negative["text"], "label": 0.0},
                              negative_kind=negative["kind"])
                  for negative in draw_negatives(rng, negatives, config.n_negatives)]
        return pairs

    return RowSampler(("query", "document", "label"), draw)


def build_pairs(rows: Sequence[dict], config: TartFullConfig, epoch: int = 0, *,
                source: str = "rows") -> dict[str, list]:
    """One epoch of (query, document, label) pairs in row order: each usable row's positive (label 1.0)
    followed by ``config.n_negatives`` of its negatives (label 0.0), drawn seeded by ``(config.seed, epoch)``.
    ``query`` is ``format_query(instruction, query)`` (the query alone with ``use_instruction=False``)."""
    return epoch_columns(rows, config, pair_sampler(config), epoch, source)


# -- training ------------------------------------------------------------------------------------


def train_tart_full(rows: Sequence[dict], out_dir: str | os.PathLike, config: TartFullConfig | None = None,
                    progress: bool = True, source: str = "rows", validate: Callable[[Any], float] | None = None,
                    validate_steps: int = 0) -> Path:
    """Train TART-full, a binary relevance head over (instructed query, document) pairs (or, with
    ``objective="query_likelihood"``, a causal LM's query likelihood), on the accelerator if
    there is one; return ``out_dir / "model"`` (:func:`~taskret.tart.training_data.train_on_rows`).
    ``validate`` (:func:`~taskret.tart.validation.full_validator`) every ``validate_steps`` keeps the best step."""
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from ..models import resolve_model
    from ..rerank.cross_encoder import load_cross_encoder

    config = config or TartFullConfig()
    if config.objective == "query_likelihood":
        from .query_likelihood import train_tart_full_lm

        return train_tart_full_lm(rows, out_dir, config, progress=progress, source=source, validate=validate,
                                  validate_steps=validate_steps, marker=CONFIG_FILE)
    base = str(resolve_model(config.base_model))
    recipe = ModelRecipe(lambda: load_cross_encoder(base, max_length=config.max_length, device="cpu", num_labels=1),
                         BinaryCrossEntropyLoss, cross_encoder=True)
    return train_on_rows(rows, config, pair_sampler(config), recipe, out_dir, CONFIG_FILE, "n_pairs", source=source,
                         progress=progress, validate=validate, validate_steps=validate_steps,
                         extra_counts=lambda epochs: {
                             "n_positive_pairs": sum(label == 1.0 for e in epochs for label in e.columns["label"]),
                             "negatives_used": negatives_used(epochs, NEGATIVE_KINDS)})
