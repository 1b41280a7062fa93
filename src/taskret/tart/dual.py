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
    triplet_sampler(config)                           # how one epoch's triplets are drawn
    train_tart_dual(rows, out_dir, config)            # -> out_dir / "model"

Design notes
------------
* Each epoch draws, for every row, ONE negative uniformly among the row's negatives whose kind is in
  ``config.negative_kinds`` (hard, unfollowing, random), seeded by ``(seed, epoch)``; rows without such
  a negative are skipped (counted in ``n_skipped``). The per-epoch triplets are concatenated and
  walked once, epoch by epoch, with the shared batch sampler (:mod:`taskret.training`), so the
  learning-rate schedule spans all epochs and batches avoid in-batch false negatives: no query twice,
  no positive text that is another row's document (MTOP/Break queries often share one parse).
* ``batch_groups`` batches sibling tasks together (the pairs a pooled search confuses), so that an instructed
  query's in-batch negatives are its sibling's documents, the instruction-unfollowing kind; each triplet's
  :class:`~taskret.training.batching.RowKeys` carries its task's group.
* ``use_instruction=False`` trains the no-instruction ablation: the anchor is the query alone.
* The model is :func:`~taskret.training.encoders.build_bi_encoder` with one shared encoder; the trainer set-up, the training
  log and the atomic model folder are :func:`taskret.training.trainer.train`'s. The saved folder is a plain
  SentenceTransformer, so ``make_retriever("dense:" + str(out_dir / "model"))`` and
  :func:`~taskret.tart.evaluation.evaluate_retriever` use it unchanged.
* Output: ``out_dir/model`` (safetensors; written beside it and renamed into place when complete),
  ``out_dir/training_log.jsonl`` (streamed: step, epoch, loss, learning_rate, grad_norm) and, last,
  ``out_dir/tart_dual_config.json`` (the config plus run counts and losses), which marks a finished run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence, Union

from ..training.batching import RowKeys
from ..training.config import DPRSettings
from ..training.encoders import merge_with_base, trained_at_length
from ..training.fit import LOG_FILE, RUN_KEYS
from ..training.losses import dpr_training_loss
from ..training.trainer import ModelRecipe, RowSampler, TrainingRow, negatives_used
from .config import NEGATIVE_KINDS, TartSettings
from .training_data import draw_anchor_and_negatives, epoch_columns, task_batch_groups, train_on_rows

__all__ = ["TartDualConfig", "build_triplets", "triplet_sampler", "train_tart_dual", "CONFIG_FILE", "LOG_FILE"]

CONFIG_FILE = "tart_dual_config.json"

#: Keys of ``tart_dual_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_rows", "n_used", "n_skipped", "train_tasks", "n_triplets", "negatives_used", "task_groups",
               *RUN_KEYS)


@dataclass
class TartDualConfig(DPRSettings, TartSettings):
    """Hyperparameters of TART-dual training. ``batch_size`` triplets per optimiser step, embedded
    ``mini_batch_size`` sequences at a time (GradCache).

    ``instruction_dropout``: the fraction of anchors (drawn per row and epoch) trained on the bare query, so one
    model serves queries with and without an instruction. ``exclude_instruction_from_pooling``: the query vector
    averages the query's tokens only, not its instruction's (INSTRUCTOR-style, :mod:`taskret.retrieval.pooling`).
    ``base_weight``: after training, the weights are moved
    that far back towards the base's (:func:`~taskret.training.encoders.merge_with_base`; 0 keeps them).
    ``max_seq_length`` truncates while training; the saved model encodes with ``encode_max_seq_length``
    (default: the base's own length, so long documents are not cut shorter than the base would cut them).
    ``unfollowing_needs_instruction``: an anchor read without its instruction never gets an
    instruction-unfollowing negative (it is drawn among the row's other kinds), since without the instruction
    nothing says that document is wrong: the same bare query may ask for it in a sibling task. Off by default,
    as the recipes measured before it were trained.
    ``batch_groups``: which tasks share batches (:func:`~taskret.tart.training_data.task_batch_groups`): ``None``
    mixes all tasks in every batch; ``"siblings"`` batches each pair of sibling tasks (the two corpora a pooled
    search confuses, found from the rows' instruction-unfollowing negatives) together, so that an instructed
    query's in-batch negatives are its sibling's documents; ``"tasks"`` batches each task alone; or explicit
    groups, a list of lists of task names. The run's ``task_groups`` records the groups used.
    ``keep_instruction_in_groups``: the anchors of grouped tasks always read their instruction
    (``instruction_dropout`` applies to the others). Sibling tasks ask in the same style for different kinds of
    document (MTOP and MTOP-similar even share queries), so a bare query of theirs is ambiguous and only the
    instruction tells the tasks apart."""

    batch_size: int = 64
    instruction_dropout: float = 0.0
    unfollowing_needs_instruction: bool = False
    batch_groups: Optional[Union[str, list[list[str]]]] = None
    keep_instruction_in_groups: bool = False
    exclude_instruction_from_pooling: bool = False
    base_weight: float = 0.0
    encode_max_seq_length: Optional[int] = None

    RESULT_KEYS: ClassVar[tuple[str, ...]] = RESULT_KEYS  # from_dict reads a tart_dual_config.json, ignoring these
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "max_seq_length",
                                                "logging_steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("instruction_dropout", "base_weight"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.encode_max_seq_length is not None and (isinstance(self.encode_max_seq_length, bool) or not isinstance(
                self.encode_max_seq_length, int) or self.encode_max_seq_length < 1):
            raise ValueError(f"encode_max_seq_length must be a positive integer, got {self.encode_max_seq_length!r}")
        task_batch_groups([], self.batch_groups)  # raises on a grouping that is neither named nor task lists


# -- triplets ------------------------------------------------------------------------------------


def triplet_sampler(config: TartDualConfig,
                    task_groups: Mapping[str, str] | None = None) -> RowSampler[tuple[dict, list[dict]]]:
    """Draws, per usable row (a training row, its negatives of ``config.negative_kinds``), one triplet with one
    negative drawn uniformly, and the row's batching keys (documents by task, unfollowing ones by pooled id;
    the batch group of its task in ``task_groups``, :func:`~taskret.tart.training_data.task_batch_groups`)."""
    task_groups = task_groups or {}

    def draw(usable_row: tuple[dict, list[dict]], rng) -> list[TrainingRow]:
        row, negatives = usable_row
        task = row["task"]
        dropout = 0.0 if config.keep_instruction_in_groups and task in task_groups else None
        anchor, negative = draw_anchor_and_negatives(row, negatives, config, rng,
                                                     lambda pool: pool[int(rng.integers(len(pool)))], dropout)
        negative_id = negative["id"] if negative["kind"] == "unfollowing" else f"{task}/{negative['id']}"
        keys = RowKeys(("q:" + f"{task}/{row['qid']}", "x:" + row["query"]),
                       ("d:" + f"{task}/{row['positive']}", "t:" + row["positive_text"]),
                       ("d:" + negative_id, "t:" + negative["text"]),
                       row["positive_text"], negative["text"], task_groups.get(task, ""))
        values = {"anchor": anchor, "positive": row["positive_text"], "negative": negative["text"]}
        return [TrainingRow(values, keys, negative["kind"])]

    return RowSampler(("anchor", "positive", "negative"), draw)


def build_triplets(rows: Sequence[dict], config: TartDualConfig, epoch: int = 0, *,
                   source: str = "rows") -> dict[str, list[str]]:
    """One epoch of (anchor, positive, negative) text columns, one per usable row, in row order.

    ``anchor`` is ``format_query(instruction, query)`` (the query alone with ``use_instruction=False``),
    ``positive`` the positive's text and ``negative`` one negative drawn uniformly (seeded by
    ``(config.seed, epoch)``) among the row's negatives of ``config.negative_kinds``.
    """
    return epoch_columns(rows, config, triplet_sampler(config), epoch, source)


# -- training ------------------------------------------------------------------------------------


def train_tart_dual(rows: Sequence[dict], out_dir: str | os.PathLike, config: TartDualConfig | None = None,
                    progress: bool = True, source: str = "rows", validate: Callable[[Any], float] | None = None,
                    validate_steps: int = 0) -> Path:
    """Train TART-dual, one encoder for instructed queries and documents with the DPR loss, on the accelerator
    if there is one; return ``out_dir / "model"`` (:func:`~taskret.tart.training_data.train_on_rows`).
    ``validate`` (:func:`~taskret.tart.validation.dual_validator`) every ``validate_steps`` keeps the best step."""
    config = config or TartDualConfig()
    build, restore_length = trained_at_length(config.base_model, config.max_seq_length, config.encode_max_seq_length,
                                              exclude_instruction=config.exclude_instruction_from_pooling)

    def finish(model) -> None:
        merge_with_base(model, config.base_model, config.base_weight)
        restore_length(model)

    recipe = ModelRecipe(build, lambda model: dpr_training_loss(model, config), finish=finish)
    task_groups = task_batch_groups(rows, config.batch_groups)
    if task_groups and not config.no_duplicates:
        raise ValueError("batch_groups needs no_duplicates: the grouped batches are built by the duplicate-free "
                         "batch sampler")
    groups: dict[str, list[str]] = {}
    for task, group in sorted(task_groups.items()):
        groups.setdefault(group, []).append(task)

    def counts(epochs: list) -> dict:
        return {"negatives_used": negatives_used(epochs, NEGATIVE_KINDS), "task_groups": groups}

    return train_on_rows(rows, config, triplet_sampler(config, task_groups), recipe, out_dir, CONFIG_FILE,
                         "n_triplets", source=source, progress=progress, no_duplicates=config.no_duplicates,
                         validate=validate, validate_steps=validate_steps, extra_counts=counts)
