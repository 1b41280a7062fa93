"""The reranker interface, in the style of the ``rerankers`` library: a small abstract base whose backends
implement one batched method, :meth:`Reranker.score_pairs`.

A query's ranking is the retrievers' own result type, :class:`~taskret.retrieval.base.RetrievalResult`
(ids and scores, best first), with one row per query: :meth:`Reranker.rank` returns one row,
:meth:`Reranker.rerank` reorders every row of a first stage's result.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Mapping, Sequence

import numpy as np

from ..retrieval.base import RetrievalResult

__all__ = ["Reranker", "RetrievalResult"]


class Reranker(ABC):
    """Scores (query, document) pairs, higher = more relevant: ``score(query, docs)``,
    ``rank(query, docs, doc_ids)``, and ``rerank`` to reorder a first stage's :class:`RetrievalResult`.
    Subclasses implement :meth:`score_pairs` (batched) and set ``name``."""

    name: str = "reranker"
    #: Whether the model was trained on instructed queries (informative; callers format the queries).
    use_instruction: bool = True

    @abstractmethod
    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One score per (query, document) pair."""

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        """One score per document of ``docs`` against ``query``."""
        return np.asarray(self.score_pairs([(query, d) for d in docs]), dtype=np.float32).reshape(-1)

    def rank(self, query: str, docs: Sequence[str], doc_ids: Sequence[str] | None = None) -> RetrievalResult:
        """``docs`` ranked best first for ``query``: a one-row :class:`RetrievalResult` (``ids[0]``, ``scores[0]``);
        ties keep the given order; ids default to the documents' positions (``"0"``, ``"1"``, ...)."""
        ids = [str(i) for i in range(len(docs))] if doc_ids is None else [str(i) for i in doc_ids]
        if len(ids) != len(docs):
            raise ValueError(f"{len(ids)} doc_ids for {len(docs)} documents")
        scores = self.score(query, docs)
        order = sorted(range(len(docs)), key=lambda i: -float(scores[i]))
        return RetrievalResult([[ids[i] for i in order]], scores[order].reshape(1, -1).astype(np.float32))

    def rerank(self, queries: Sequence[str], result: RetrievalResult,
               doc_text: Mapping[str, str] | Callable[[str], str], top_k: int = 100,
               first_stage_weight: float | None = None) -> RetrievalResult:
        """Rerank the first ``top_k`` documents of each query of ``result`` (all pairs scored in one batch).

        The reranked documents come first with their reranker scores; documents the first stage ranked
        below ``top_k`` keep their order after them, with scores below the lowest reranked one (so that
        trec_eval, which sorts by score, sees the same order). ``doc_text`` maps a document id to its text.

        ``first_stage_weight`` (0-1) interpolates the reranking with ``result``: min-max normalised scores, this
        share for the first stage and the rest for the reranker (:func:`~taskret.retrieval.hybrid.fuse_results`).
        With the weight chosen on dev data (:func:`taskret.tart.fusion.tune_weight`, which gives the reranker a
        share only when its dev gain is more than noise) a weak reranker cannot wreck a good first stage: at 1 the
        first stage's order comes back. None keeps the reranker's order.
        """
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        if first_stage_weight is not None and not 0.0 <= first_stage_weight <= 1.0:
            raise ValueError(f"rerank_weight (the first stage's share) must be in [0, 1], got {first_stage_weight}")
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
        reranked = RetrievalResult(out_ids, out_scores)
        if first_stage_weight is None:
            return reranked
        from ..retrieval.hybrid import fuse_results

        return fuse_results([result, reranked], [first_stage_weight, 1.0 - first_stage_weight])
