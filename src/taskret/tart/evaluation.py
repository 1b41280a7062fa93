"""Retrieval metrics (trec_eval, through pytrec-eval-terrier) and instruction-following evaluation.

Two settings, as in TART's cross-task (X^2) evaluation:

- ``closed``: each task searches only its own corpus;
- ``pooled``: one index over every task's corpus merged (document ids prefixed ``"{task}/"``), and each
  task's queries must find their own documents among all of them. A retriever that ignores what the
  user asks for (the instruction) finds documents of the wrong kind here; ``gap`` = pooled - closed.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..formats import format_query
from ..io import write_jsonl
from .tasks import (
    POOLED,
    RetrievalTask,
    check_task_names,
    pooled_corpus,
    pooled_id,
    split_pooled_id,
)

__all__ = ["METRICS", "SETTINGS", "compute_metrics", "build_indexes", "evaluate_retriever"]

METRICS = ("ndcg@10", "recall@100", "mrr@10")
SETTINGS = ("closed", "pooled")
_TREC_MEASURES = {"ndcg_cut.10", "recall.100"}


def _ranked(scores: Mapping[str, float]) -> list[str]:
    """Documents in trec_eval's order: score descending, ties by document id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def compute_metrics(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                    per_query: bool = False) -> dict:
    """NDCG@10, Recall@100 and MRR@10 (in percent), averaged over the queries of ``qrels`` that have at
    least one relevant (relevance > 0) document; a query missing from ``run`` scores 0.

    NDCG uses trec_eval's linear gains (relevance itself, as BEIR does); MRR@10 is the reciprocal rank
    of the first relevant document within the top 10, and 0 beyond. With ``per_query``, the result also
    holds ``per_query: {qid: {metric: value}}``.
    """
    import pytrec_eval

    judged = {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items()
              if any(r > 0 for r in docs.values())}
    clean_run = {q: {d: float(s) for d, s in run.get(q, {}).items() if not math.isnan(float(s))} for q in judged}
    clean_run = {q: docs for q, docs in clean_run.items() if docs}
    trec = pytrec_eval.RelevanceEvaluator(judged, _TREC_MEASURES).evaluate(clean_run) if clean_run else {}
    rows: dict[str, dict[str, float]] = {}
    for q, relevant in judged.items():
        values = trec.get(q, {})
        top10 = _ranked(clean_run.get(q, {}))[:10]
        first = next((rank for rank, d in enumerate(top10, start=1) if relevant.get(d, 0) > 0), None)
        rows[q] = {
            "ndcg@10": 100.0 * values.get("ndcg_cut_10", 0.0),
            "recall@100": 100.0 * values.get("recall_100", 0.0),
            "mrr@10": 100.0 / first if first else 0.0,
        }
    n = len(rows)
    result: dict = {m: (sum(r[m] for r in rows.values()) / n if n else 0.0) for m in METRICS}
    result["n_queries"] = n
    if per_query:
        result["per_query"] = rows
    return result


# --- indexes --------------------------------------------------------------------------------------

def build_indexes(retriever_spec: str, tasks: Sequence[RetrievalTask], setting: str,
                  make: Callable | None = None) -> dict[str, tuple[object, float]]:
    """Index through the Retriever API: per task (``closed``, keyed by task name) or one index over the
    merged corpora (``pooled``, under one key). Values are (retriever, seconds spent indexing).

    Indexes depend only on the corpora, not on queries or instructions: build once, evaluate many times.
    """
    from ..retrieval import make_retriever

    make = make or make_retriever
    check_task_names(tasks)
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting '{setting}'; expected closed, pooled or both")
    indexes: dict[str, tuple[object, float]] = {}
    if setting == "closed":
        for task in tasks:
            start = time.perf_counter()
            retriever = make(retriever_spec).index_texts(*task.doc_ids_and_texts())
            indexes[task.name] = (retriever, time.perf_counter() - start)
    else:
        start = time.perf_counter()
        retriever = make(retriever_spec).index_texts(*pooled_corpus(tasks))
        indexes[POOLED] = (retriever, time.perf_counter() - start)
    return indexes


# --- evaluation -----------------------------------------------------------------------------------


def _doc_texts(tasks: Sequence[RetrievalTask], task: RetrievalTask, setting: str) -> Callable[[str], str]:
    """Document id -> indexed text, in the setting's ids (``"{task}/{doc id}"`` when pooled)."""
    from .tasks import doc_text

    if setting == "closed":
        return lambda doc_id: doc_text(task.corpus[doc_id])
    by_name = {t.name: t for t in tasks}

    def pooled_text(pooled: str) -> str:
        name, doc_id = split_pooled_id(pooled)
        return doc_text(by_name[name].corpus[doc_id])

    return pooled_text


def _evaluate_setting(tasks: Sequence[RetrievalTask], setting: str, indexes: dict, use_instruction: bool, k: int,
                      run_dir: Path | None, reranker=None, rerank_top_k: int = 100,
                      first_stage_instruction: bool | None = None, rerank_weight: float | None = None) -> dict:
    results: dict[str, dict] = {}
    for task in tasks:
        retriever, index_s = indexes[task.name] if setting == "closed" else indexes[POOLED]
        qids = [q for q in task.queries if q in task.qrels]
        instruction = task.instruction if use_instruction else None
        texts = [format_query(instruction, task.queries[q]) for q in qids]
        first_instruction = instruction if first_stage_instruction is None else (
            task.instruction if first_stage_instruction else None)
        first_texts = [format_query(first_instruction, task.queries[q]) for q in qids]
        start = time.perf_counter()
        result = retriever.retrieve(first_texts, k=max(k, rerank_top_k) if reranker is not None else k)
        query_s = time.perf_counter() - start
        rerank_entry: dict = {}
        if reranker is not None:
            n_pairs = sum(min(len(ids), rerank_top_k) for ids in result.ids)
            start = time.perf_counter()
            result = reranker.rerank(texts, result, _doc_texts(tasks, task, setting), top_k=rerank_top_k,
                                     first_stage_weight=rerank_weight)
            rerank_s = time.perf_counter() - start
            result = type(result)([ids[:k] for ids in result.ids], result.scores[:, :k])
            rerank_entry = {"rerank_s": round(rerank_s, 3), "rerank_pairs": n_pairs,
                            "rerank_pairs_per_s": round(n_pairs / rerank_s, 1) if rerank_s > 0 else None,
                            "first_stage_instruction": first_instruction, "rerank_weight": rerank_weight}
        if setting == "pooled":
            qrels = {q: {pooled_id(task.name, d): r for d, r in task.qrels[q].items()} for q in qids}
        else:
            qrels = {q: task.qrels[q] for q in qids}
        run = {q: {d: float(s) for d, s in zip(ids, scores)} for q, ids, scores in zip(qids, result.ids, result.scores)}
        metrics = compute_metrics(qrels, run, per_query=True)
        per_query = metrics.pop("per_query")
        entry: dict = {"metrics": {m: metrics[m] for m in METRICS}, "n_queries": metrics["n_queries"],
                       "n_docs": len(task.corpus) if setting == "closed" else len(retriever.ids),
                       "instruction": instruction, "index_s": round(index_s, 3), "query_s": round(query_s, 3),
                       **rerank_entry}
        if setting == "pooled":
            # How much of each top 10 comes from other tasks' corpora: documents of the wrong kind.
            foreign = [sum(split_pooled_id(d)[0] != task.name for d in ids[:10]) / max(len(ids[:10]), 1)
                       for ids in result.ids]
            entry["other_task@10"] = 100.0 * sum(foreign) / max(len(foreign), 1)
        results[task.name] = entry
        if run_dir is not None:
            write_jsonl(run_dir / setting / f"{task.name}.jsonl", (
                {"qid": q, "query": text, "retrieved_ids": ids,
                 "scores": [round(float(s), 5) for s in scores[: len(ids)]],
                 "relevant": sorted(d for d, r in qrels[q].items() if r > 0), **per_query.get(q, {})}
                for q, text, ids, scores in zip(qids, texts, result.ids, result.scores)))
    return results


def _indexes(cache: dict, retriever_spec: str, tasks: Sequence[RetrievalTask], setting: str,
             make: Callable | None, indexed: Mapping[str, object] | None = None) -> dict[str, tuple[object, float]]:
    """The indexes of a setting, built on first use: one per task's corpus (closed), shared by every call
    that evaluates that task, or one over all corpora (pooled), shared by calls with the same tasks. ``indexed``:
    closed-setting retrievers already indexed over a task's corpus (a saved index), by task name: not built."""
    def corpus_key(task: RetrievalTask) -> str:
        return f"{task.name}:{len(task.corpus)}"

    if setting == "closed":
        out = {}
        for task in tasks:
            key = f"{retriever_spec}|closed|{corpus_key(task)}"
            if indexed and task.name in indexed:
                check_indexed_corpus(indexed[task.name], task)
                cache[key] = (indexed[task.name], 0.0)
            if key not in cache:
                cache[key] = build_indexes(retriever_spec, [task], "closed", make=make)[task.name]
            out[task.name] = cache[key]
        return out
    key = f"{retriever_spec}|pooled|" + ",".join(corpus_key(t) for t in tasks)
    if key not in cache:
        cache[key] = build_indexes(retriever_spec, tasks, "pooled", make=make)[POOLED]
    return {POOLED: cache[key]}


def check_indexed_corpus(retriever, task: RetrievalTask) -> None:
    """Refuse a retriever indexed over other documents than ``task``'s corpus (a saved index of another corpus)."""
    ids, corpus = set(retriever.ids), set(task.corpus)
    if ids != corpus:
        missing, extra = sorted(corpus - ids), sorted(ids - corpus)
        raise ValueError(f"the index holds other documents than {task.name}'s corpus: {len(missing)} of its "
                         f"{len(corpus)} documents missing (e.g. {', '.join(missing[:3]) or '-'}), {len(extra)} not in "
                         f"it (e.g. {', '.join(extra[:3]) or '-'}); index this corpus with `taskret tart index`")


def _mean(per_task: dict[str, dict]) -> dict[str, float]:
    return {m: sum(t["metrics"][m] for t in per_task.values()) / len(per_task) for m in METRICS}


def evaluate_retriever(retriever_spec: str, tasks: Sequence[RetrievalTask], setting: str = "closed",
                       use_instruction: bool = True, k: int = 100, run_dir: str | Path | None = None,
                       indexes: dict | None = None, make: Callable | None = None, reranker=None,
                       rerank_top_k: int = 100, first_stage_instruction: bool | None = None,
                       rerank_weight: float | None = None, progress: bool = False,
                       indexed: Mapping[str, object] | None = None) -> dict:
    """Evaluate one retriever (a ``make_retriever`` spec) on ``tasks``.

    ``setting``: ``closed``, ``pooled`` or ``both``. Queries are ``format_query(task.instruction, query)``
    with ``use_instruction``, else the query alone. Returns ``{"settings": {setting: {task: {"metrics",
    "n_queries", "n_docs", "instruction", "index_s", "query_s"[, "other_task@10"]}}}, "mean": {setting:
    metrics}}`` and, for ``both``, ``"gap": {task: {metric: pooled - closed}}`` and ``"gap_mean"``
    (negative: pooling hurts).
    With ``run_dir``, writes ``run_dir/{setting}/{task}.jsonl`` (qid, query, retrieved_ids, scores, relevant,
    per-query metrics). ``indexes`` (a dict, filled on first use) lets several calls share built indexes
    (keyed by retriever, setting, task names and corpus sizes: pass it only for the same corpora).

    ``reranker`` (a :class:`~taskret.rerank.Reranker`, or a TART-full / CrossEncoder folder)
    reranks each query's first ``rerank_top_k`` documents (the first stage retrieves ``max(k,
    rerank_top_k)``); it reads the same query text as above, while the first stage reads the query with
    the instruction if ``first_stage_instruction`` (default: as ``use_instruction``). Each task's entry
    then also holds rerank_s, rerank_pairs and rerank_pairs_per_s. ``rerank_weight`` (the first stage's share,
    0-1) interpolates the reranking with its first stage (:meth:`~taskret.rerank.Reranker.rerank`'s
    ``first_stage_weight``); None keeps the reranker's order.

    ``progress``: the long stages (encoding a corpus, reranking) report their rate and ETA on stderr
    (:func:`taskret.progress.reporting`); without it they are as quiet as the caller's setting.

    ``indexed``: retrievers already indexed over a task's corpus, by task name (a saved index's, as ``taskret tart
    evaluate --index`` loads it): the closed setting searches them instead of encoding the corpus again; one indexed
    over other documents is refused (:func:`check_indexed_corpus`).
    """
    if progress:
        from ..progress import reporting

        with reporting():
            return evaluate_retriever(retriever_spec, tasks, setting=setting, use_instruction=use_instruction, k=k,
                                      run_dir=run_dir, indexes=indexes, make=make, reranker=reranker,
                                      rerank_top_k=rerank_top_k, first_stage_instruction=first_stage_instruction,
                                      rerank_weight=rerank_weight, indexed=indexed)
    if k < 1:
        raise ValueError("k must be at least 1")
    if reranker is not None:
        from ..rerank import load_reranker

        if rerank_top_k < 1:
            raise ValueError("rerank_top_k must be at least 1")
        reranker = load_reranker(reranker)
        if rerank_weight is not None and not 0.0 <= rerank_weight <= 1.0:  # before any index is built
            raise ValueError(f"rerank_weight must be in [0, 1], got {rerank_weight}")
    settings = list(SETTINGS) if setting == "both" else [setting]
    for name in settings:
        if name not in SETTINGS:
            raise ValueError(f"unknown setting '{setting}'; expected closed, pooled or both")
    check_task_names(tasks)
    cache = indexes if indexes is not None else {}
    run_path = Path(run_dir) if run_dir is not None else None
    out: dict = {"retriever": retriever_spec, "use_instruction": use_instruction, "k": k,
                 "tasks": [t.name for t in tasks], "settings": {}, "mean": {}}
    if reranker is not None:
        out.update({"reranker": getattr(reranker, "name", type(reranker).__name__), "rerank_top_k": rerank_top_k,
                    "first_stage_instruction": use_instruction if first_stage_instruction is None
                    else first_stage_instruction, "rerank_weight": rerank_weight})
    for name in settings:
        per_task = _evaluate_setting(tasks, name, _indexes(cache, retriever_spec, tasks, name, make, indexed),
                                     use_instruction, k, run_path, reranker, rerank_top_k, first_stage_instruction,
                                     rerank_weight)
        out["settings"][name] = per_task
        out["mean"][name] = _mean(per_task)
    if len(settings) == 2:
        closed, pooled = out["settings"]["closed"], out["settings"]["pooled"]
        out["gap"] = {t: {m: pooled[t]["metrics"][m] - closed[t]["metrics"][m] for m in METRICS} for t in closed}
        out["gap_mean"] = {m: out["mean"]["pooled"][m] - out["mean"]["closed"][m] for m in METRICS}
    return out
