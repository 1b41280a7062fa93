"""Dev scores while TART trains: the model being trained, scored on held-out dev queries of its training tasks,
so that a run keeps its best checkpoint rather than its last (:func:`taskret.training.fit.fit`'s ``validate``).

Public API::

    dual_validator(tasks, use_instruction=True)                  # TART-dual: mean NDCG@10, closed corpora
    full_validator(tasks, first_stage="bm25", top_k=20, ...)      # TART-full: reranking a fixed first stage

Design notes
------------
* Each task searches its own corpus (closed setting) and the score is the mean NDCG@10 over tasks, in percent,
  computed by :func:`~taskret.tart.evaluation.compute_metrics` like every other TART number.
* TART-full reranks a first stage ranked ONCE when the validator is built; only the reranking changes
  between checks, so a check costs ``len(queries) * top_k`` cross-encoder pairs.
* Dev queries must not be training queries: use a task's dev split (berri-lite's held-out queries), never the
  evaluation task.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..formats import format_query
from .evaluation import compute_metrics
from .tasks import RetrievalTask

__all__ = ["dual_validator", "full_validator"]


def _queries(task: RetrievalTask, use_instruction: bool) -> tuple[list[str], list[str]]:
    qids = [q for q in task.queries if q in task.qrels]
    if not qids:
        raise ValueError(f"dev task '{task.name}' has no judged queries to validate on")
    instruction = task.instruction if use_instruction else None
    return qids, [format_query(instruction, task.queries[q]) for q in qids]


def _mean_ndcg(per_task: list[tuple[RetrievalTask, dict[str, dict[str, float]]]]) -> float:
    return float(np.mean([compute_metrics(task.qrels, run)["ndcg@10"] for task, run in per_task]))


def dual_validator(tasks: Sequence[RetrievalTask], use_instruction: bool = True,
                   batch_size: int = 64) -> Callable[[Any], float]:
    """``validate(model)``: the mean NDCG@10 of a SentenceTransformer on ``tasks``' judged queries, each task
    searching its own corpus by cosine similarity."""
    prepared = [(task, *_queries(task, use_instruction), *task.doc_ids_and_texts()) for task in tasks]

    def validate(model) -> float:
        runs = []
        for task, qids, queries, doc_ids, doc_texts in prepared:
            docs = model.encode(doc_texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)
            embedded = model.encode(queries, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)
            scores = embedded @ docs.T
            top = np.argsort(-scores, axis=1)[:, :10]
            runs.append((task, {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}))
        return _mean_ndcg(runs)

    return validate


def full_validator(tasks: Sequence[RetrievalTask], first_stage: str = "bm25", top_k: int = 20,
                   use_instruction: bool = True, batch_size: int = 64) -> Callable[[Any], float]:
    """``validate(model)``: the mean NDCG@10 of a CrossEncoder reranking ``first_stage``'s top ``top_k`` (ranked
    once, here) on ``tasks``' judged queries."""
    from ..retrieval import make_retriever

    prepared = []
    for task in tasks:
        qids, queries = _queries(task, use_instruction)
        doc_ids, doc_texts = task.doc_ids_and_texts()
        texts = dict(zip(doc_ids, doc_texts))
        first = make_retriever(first_stage).index_texts(doc_ids, doc_texts).retrieve(
            [format_query(None, task.queries[q]) for q in qids], k=min(top_k, len(doc_ids)))
        prepared.append((task, qids, [[(query, texts[d]) for d in ids] for query, ids in zip(queries, first.ids)],
                         first.ids))

    def validate(model) -> float:
        runs = []
        for task, qids, pairs, ids in prepared:
            flat = [pair for row in pairs for pair in row]
            scores = np.asarray(model.predict(flat, batch_size=batch_size, show_progress_bar=False)).reshape(-1)
            run, position = {}, 0
            for q, row_ids in zip(qids, ids):
                run[q] = {d: float(s) for d, s in zip(row_ids, scores[position:position + len(row_ids)])}
                position += len(row_ids)
            runs.append((task, run))
        return _mean_ndcg(runs)

    return validate
