"""TART-full: a cross-encoder over ``"{instruction} [SEP] {query}"`` and a document, and reranking with it.

TART-full (Asai et al., 2022) reads the instructed query and the document together and outputs one
relevance logit. It is initialised from MiniLM (``minilm-l6``, a sentence-transformers ``CrossEncoder``
with ``num_labels=1``: the encoder's weights plus a new linear head) and trained with binary
cross-entropy on (instructed query, document, 1/0) pairs: for every training row, its positive and
``n_negatives`` (4) of its negatives, i.e. 1 positive : 4 negatives, as in the paper. At test time it
reranks a first stage's top-k (100) documents.

Public API::

    TartFullConfig                                     # hyperparameters, JSON round-trip
    build_pairs(rows, config, epoch)                   # -> {"query", "document", "label"} columns
    train_tart_full(rows, out_dir, config)             # -> out_dir / "model"
    Reranker                                           # abstract: score_pairs / score / rank / rerank
    CrossEncoderReranker(path)                         # a TART-full folder or any CrossEncoder
    load_reranker(spec), cross_encoder_folder(spec), make_denoiser(spec)

Design notes
------------
* Each epoch draws, per row, ``n_negatives`` distinct negatives (fewer if the row has fewer) among
  those whose kind is in ``negative_kinds``, seeded by ``(seed, epoch)``; rows without any are
  skipped. The pairs of all epochs are walked once, shuffled within each epoch, by
  :func:`taskret.training.fit` with sentence-transformers' ``CrossEncoderTrainer`` and
  ``BinaryCrossEntropyLoss``; the schedule spans all epochs.
* ``use_instruction=False`` trains the no-instruction ablation (the query alone); a trained folder's
  :class:`CrossEncoderReranker` knows which, and formats queries the same way when it serves as
  the teacher of distillation or as the denoiser of ``taskret tart build-data``.
* Output: ``out_dir/model`` (a ``CrossEncoder`` folder, safetensors; written beside it and renamed into
  place when complete), ``out_dir/training_log.jsonl`` (streamed) and, last, ``out_dir/tart_full_config.json``
  (the config plus run counts and losses), which marks a finished run.
* Reranking scores are the raw logits (a sigmoid of a confident model saturates at 1.0 in float32,
  which would tie the top documents); :meth:`CrossEncoderReranker.predict` gives the model's own
  activation (a probability for ``num_labels=1``), which denoising compares with a threshold.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Mapping, NamedTuple, Sequence

import numpy as np

from ..formats import format_query
from ..io import read_json
from ..retrieval.base import RetrievalResult
from ..training.fit import LOG_FILE, RUN_KEYS, fit_and_record
from .config import NEGATIVE_KINDS, TartSettings
from .training_data import draw_negatives, usable_rows

__all__ = ["TartFullConfig", "build_pairs", "train_tart_full", "Reranker", "Ranked", "CrossEncoderReranker",
           "load_reranker", "cross_encoder_folder", "make_denoiser", "CONFIG_FILE",
           "LOG_FILE"]

CONFIG_FILE = "tart_full_config.json"

#: Keys of ``tart_full_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_rows", "n_used", "n_skipped", "n_pairs", "n_positive_pairs", "negatives_used", *RUN_KEYS)


@dataclass
class TartFullConfig(TartSettings):
    """Hyperparameters of TART-full training: ``batch_size`` (query, document) pairs per optimiser step,
    ``n_negatives`` negatives per positive, texts cut to ``max_length`` tokens (query and document together)."""

    batch_size: int = 32
    n_negatives: int = 4
    max_length: int = 256

    RESULT_KEYS: ClassVar[tuple[str, ...]] = RESULT_KEYS  # from_dict reads a tart_full_config.json, ignoring these
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "n_negatives", "max_length", "logging_steps")


# -- pairs ---------------------------------------------------------------------------------------


def _sample_epoch(usable, config: TartFullConfig, epoch: int):
    rng = np.random.default_rng([config.seed, epoch])
    columns: dict[str, list] = {"query": [], "document": [], "label": []}
    kinds: list[str] = []
    for row, negatives in usable:
        query = format_query(row["instruction"] if config.use_instruction else None, row["query"])
        columns["query"].append(query)
        columns["document"].append(row["positive_text"])
        columns["label"].append(1.0)
        for negative in draw_negatives(rng, negatives, config.n_negatives):
            columns["query"].append(query)
            columns["document"].append(negative["text"])
            columns["label"].append(0.0)
            kinds.append(negative["kind"])
    return columns, kinds


def build_pairs(rows: Sequence[dict], config: TartFullConfig, epoch: int = 0, *,
                source: str = "rows") -> dict[str, list]:
    """One epoch of (query, document, label) pairs in row order: each usable row's positive (label 1.0)
    followed by ``config.n_negatives`` of its negatives (label 0.0), drawn seeded by ``(config.seed, epoch)``.
    ``query`` is ``format_query(instruction, query)`` (the query alone with ``use_instruction=False``)."""
    usable, _ = usable_rows(rows, config.negative_kinds, source)
    columns, _ = _sample_epoch(usable, config, epoch)
    return columns


# -- training ------------------------------------------------------------------------------------


def train_tart_full(rows: Sequence[dict], out_dir: str | os.PathLike, config: TartFullConfig | None = None,
                    progress: bool = True, source: str = "rows") -> Path:
    """Train TART-full on training rows (see :mod:`taskret.tart.training_data`); return ``out_dir / "model"``.

    A failed run leaves no ``model`` folder of its own (an older one stays) and no config file;
    ``training_log.jsonl`` keeps the steps it reached. Runs on the accelerator if there is one.
    """
    from sentence_transformers.cross_encoder import CrossEncoder
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from ..models import resolve_model

    config = config or TartFullConfig()
    started = time.perf_counter()
    usable, n_skipped = usable_rows(rows, config.negative_kinds, source)
    epochs = [_sample_epoch(usable, config, epoch) for epoch in range(config.epochs)]
    counts = {"n_rows": len(rows), "n_used": len(usable), "n_skipped": n_skipped,
              "n_pairs": sum(len(cols["label"]) for cols, _ in epochs), "n_positive_pairs": len(usable) * config.epochs,
              "negatives_used": {kind: sum(k == kind for _, kinds in epochs for k in kinds) for kind in NEGATIVE_KINDS}}
    base = str(resolve_model(config.base_model))
    return fit_and_record(config, lambda: CrossEncoder(base, num_labels=1, max_length=config.max_length, device="cpu"),
                          BinaryCrossEntropyLoss, [cols for cols, _ in epochs], out_dir, CONFIG_FILE, counts,
                          started=started, cross_encoder=True, progress=progress)


# -- reranking -----------------------------------------------------------------------------------


class Ranked(NamedTuple):
    """One reranked document: its id, score (higher is more relevant), rank (1-based) and text."""

    doc_id: str
    score: float
    rank: int
    text: str


class Reranker(ABC):
    """Scores (query, document) pairs, higher = more relevant, in the style of the ``rerankers`` library:
    ``score(query, docs)`` and ``rank(query, docs, doc_ids)``; ``rerank`` reorders a first stage's
    :class:`~taskret.retrieval.RetrievalResult`. Subclasses implement :meth:`score_pairs` (batched)."""

    name: str = "reranker"
    #: Whether the model was trained on instructed queries (informative; callers format the queries).
    use_instruction: bool = True

    @abstractmethod
    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One score per (query, document) pair."""

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        return np.asarray(self.score_pairs([(query, d) for d in docs]), dtype=np.float32).reshape(-1)

    def rank(self, query: str, docs: Sequence[str], doc_ids: Sequence[str] | None = None) -> list[Ranked]:
        """``docs`` best first (ties keep the given order); ids default to the documents' positions."""
        ids = [str(i) for i in range(len(docs))] if doc_ids is None else [str(i) for i in doc_ids]
        if len(ids) != len(docs):
            raise ValueError(f"{len(ids)} doc_ids for {len(docs)} documents")
        scores = self.score(query, docs)
        order = sorted(range(len(docs)), key=lambda i: -float(scores[i]))
        return [Ranked(ids[i], float(scores[i]), rank, docs[i]) for rank, i in enumerate(order, start=1)]

    def rerank(self, queries: Sequence[str], result: RetrievalResult,
               doc_text: Mapping[str, str] | Callable[[str], str], top_k: int = 100) -> RetrievalResult:
        """Rerank the first ``top_k`` documents of each query of ``result`` (all pairs scored in one batch).

        The reranked documents come first with their reranker scores; documents the first stage ranked
        below ``top_k`` keep their order after them, with scores below the lowest reranked one (so that
        trec_eval, which sorts by score, sees the same order). ``doc_text`` maps a document id to its text.
        """
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        if len(queries) != len(result.ids):
            raise ValueError(f"{len(queries)} queries for {len(result.ids)} result rows")
        text_of = doc_text if callable(doc_text) else doc_text.__getitem__
        heads = [list(ids[:top_k]) for ids in result.ids]
        pairs = [(q, text_of(d)) for q, head in zip(queries, heads) for d in head]
        flat = np.asarray(self.score_pairs(pairs), dtype=np.float64).reshape(-1) if pairs else np.zeros(0)
        if len(flat) != len(pairs):
            raise ValueError(f"the reranker returned {len(flat)} scores for {len(pairs)} pairs")
        width = max((len(ids) for ids in result.ids), default=0)
        out_ids: list[list[str]] = []
        out_scores = np.full((len(result.ids), width), np.nan, dtype=np.float32)
        position = 0
        for q, (ids, head) in enumerate(zip(result.ids, heads)):
            scores = flat[position:position + len(head)]
            position += len(head)
            order = sorted(range(len(head)), key=lambda i: -scores[i])
            ranked = [head[i] for i in order] + list(ids[len(head):])
            values = [float(scores[i]) for i in order]
            floor = min(values, default=0.0)
            values += [floor - 1.0 - i for i in range(len(ids) - len(head))]
            out_ids.append(ranked)
            out_scores[q, :len(ranked)] = values
        return RetrievalResult(out_ids, out_scores)


def cross_encoder_folder(spec: str | os.PathLike) -> Path:
    """The CrossEncoder folder of ``spec``: a TART-full run folder (its ``model/``), a CrossEncoder
    folder, or a registered model name."""
    from ..models import resolve_model

    path = Path(spec)
    if (path / CONFIG_FILE).exists() and (path / "model").is_dir():
        return path / "model"
    if path.is_dir():
        return path
    return Path(resolve_model(str(spec)))


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` as a :class:`Reranker`: a TART-full run folder (or its
    ``model/``), any CrossEncoder folder, or a registered model name."""

    name = "cross-encoder"

    def __init__(self, spec: str | os.PathLike, batch_size: int = 32, device: str | None = None,
                 max_length: int | None = None) -> None:
        from sentence_transformers.cross_encoder import CrossEncoder

        from ..models import pick_device

        folder = cross_encoder_folder(spec)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a cross-encoder folder (no config.json); expected a TART-full "
                                    f"run folder (written by `taskret tart train-full`) or a CrossEncoder")
        self.path = folder
        self.batch_size = batch_size
        self.model = CrossEncoder(str(folder), device=device or pick_device(), max_length=max_length)
        config_path = folder.parent / CONFIG_FILE
        self.config = read_json(config_path) if folder.name == "model" and config_path.exists() else None
        self.use_instruction = bool(self.config.get("use_instruction", True)) if self.config else True
        self.name = f"cross-encoder:{spec}"

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw logits (no activation)."""
        import torch

        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict([tuple(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False,
                                    activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(len(pairs), -1)[:, 0]

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The model's own activation of each pair (a probability for a TART-full model)."""
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict([tuple(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False,
                                    convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(len(pairs), -1)[:, 0]


def load_reranker(spec: str | os.PathLike | Reranker, **kwargs) -> Reranker:
    """A :class:`Reranker` as it is, or a :class:`CrossEncoderReranker` of a folder or model name."""
    if isinstance(spec, Reranker):
        return spec
    return CrossEncoderReranker(spec, **kwargs)


def make_denoiser(spec: str | os.PathLike, batch_size: int = 64) -> tuple[Callable, bool]:
    """A denoiser for :func:`~taskret.tart.training_data.build_training_examples` from a TART-full folder
    or any CrossEncoder: (pairs -> the model's own activation, e.g. a probability; whether the pairs'
    queries should carry the instruction, True for a TART-full model trained with instructions)."""
    reranker = CrossEncoderReranker(spec, batch_size=batch_size)
    return reranker.predict, reranker.config is not None and reranker.use_instruction
