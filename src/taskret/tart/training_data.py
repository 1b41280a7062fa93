"""TART training data: (instruction, query, positive, negatives) rows mined from retrieval tasks.

Each row pairs one query of a task with one of its relevant documents and an instruction sampled
(seeded) from the task's instructions, plus three kinds of negatives, as in TART's BERRI training
data (Asai et al., 2022, section 4):

- ``random``: documents of the task's own corpus drawn at random, never a judged one;
- ``hard``: the first stage's top documents for the query text (through the Retriever API, over the
  task's own corpus) that are not judged for the query. With a ``denoiser`` (a callable scoring
  ``(query, document text)`` pairs, e.g. ``CrossEncoder(...).predict``, or a trained TART-full's
  :meth:`~taskret.rerank.CrossEncoderReranker.predict` with ``denoise_with_instruction``),
  mined hard negatives that it scores above ``denoise_threshold`` are dropped as likely false
  negatives (not replaced), and the count is reported in ``stats["n_denoised"]``;
- ``unfollowing`` (instruction-unfollowing): documents the first stage retrieves for the same query
  from the OTHER tasks' corpora. They may well match the query, but they are not the kind of
  document the instruction asks for, so they are negatives only because of the instruction. Their
  ids are ``"{other task}/{doc id}"`` (see :func:`~taskret.tart.evaluation.pooled_id`); a document
  whose text equals one of the query's relevant documents is never one. ``unfollowing_from`` says
  which other tasks give them: ``"random_tasks"`` takes each rank's top document from the other
  tasks in a seeded random order, so most come from tasks unlike the query's; ``"pooled"`` takes the
  first stage's top documents over all the other corpora pooled into one index, the documents a
  search over a pooled corpus would confuse with the task's own (a sibling task with the same
  queries and another intent, such as MTOP's parses and MTOP-similar's requests).
  ``unfollowing_first_stage`` mines them with another retriever than the hard negatives' (e.g. a
  dense encoder, which matches a request to a parse of it that shares few words with it).

Row layout (one JSON object per line)::

    {"task", "qid", "instruction", "query", "positive": doc id, "positive_text",
     "negatives": [{"id", "text", "kind": "random" | "hard" | "unfollowing"}, ...]}

Queries without a relevant (relevance > 0) document are skipped. A query with several relevant
documents gives one row whose positive is drawn (seeded) among them. Everything is seeded per task
(``seed`` and the task's name), so the same tasks and settings give the same rows.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..formats import SEP, format_query
from ..io import DataError, iter_records, write_jsonl
from .config import NEGATIVE_KINDS
from .tasks import Document, RetrievalTask, check_task_names, doc_text, pooled_corpus, pooled_id, split_pooled_id

logger = logging.getLogger(__name__)

__all__ = ["ROW_FIELDS", "UNFOLLOWING_SOURCES", "build_training_examples", "write_training_examples", "read_training_examples",
           "validate_training_row", "usable_rows", "anchor_text", "draw_anchor", "draw_anchor_and_negatives", "draw_negatives", "negatives_for_anchor", "dpr_training_row", "train_on_rows", "epoch_columns",
           "BATCH_GROUPINGS", "sibling_tasks", "task_batch_groups", "unfollowing_sources"]

ROW_FIELDS = ("task", "qid", "instruction", "query", "positive", "positive_text", "negatives")

#: A denoiser scores (query, document text) pairs; higher = more likely relevant.
Denoiser = Callable[[list[tuple[str, str]]], Sequence[float]]


def _task_rng(seed: int, task_name: str, stream: int) -> np.random.Generator:
    # crc32, not hash(): str hashes change from one interpreter to the next.
    return np.random.default_rng([seed, zlib.crc32(task_name.encode("utf-8")), stream])


def _make_first_stage(first_stage: Any, progress: bool = False):
    """A fresh un-indexed retriever from a spec string, or from a zero-argument factory; with ``progress``,
    its encoders (a dense one's, or a hybrid's dense components') show a progress bar."""
    from ..retrieval import make_retriever

    if isinstance(first_stage, str):
        retriever = make_retriever(first_stage)
    elif callable(first_stage):
        retriever = first_stage()
    else:
        raise TypeError("first_stage must be a make_retriever spec (e.g. 'bm25') or a factory of retrievers")
    if progress:
        for part in [retriever, *getattr(retriever, "components", [])]:
            if hasattr(part, "show_progress_bar"):
                part.show_progress_bar = True
    return retriever


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _random_ids(rng: np.random.Generator, ids: list[str], n: int, excluded: set[str]) -> list[str]:
    """Up to ``n`` distinct ids drawn uniformly from ``ids`` outside ``excluded``."""
    if n == 0:
        return []
    if len(ids) <= 4 * (n + len(excluded)):  # small corpus: filter, then draw
        pool = [i for i in ids if i not in excluded]
        if len(pool) <= n:
            return [pool[int(j)] for j in rng.permutation(len(pool))]
        return [pool[int(j)] for j in rng.choice(len(pool), size=n, replace=False)]
    chosen: list[str] = []
    seen = set(excluded)
    while len(chosen) < n:  # large corpus: rejection sampling (terminates: most ids are allowed)
        candidate = ids[int(rng.integers(len(ids)))]
        if candidate not in seen:
            seen.add(candidate)
            chosen.append(candidate)
    return chosen


#: Where instruction-unfollowing negatives come from (see the module docstring).
UNFOLLOWING_SOURCES = ("random_tasks", "pooled")


def _pooled_unfollowing(index: Any, tasks: Sequence[RetrievalTask], task: RetrievalTask,
                        query_texts: list[str], forbidden: list[set[str]], n: int) -> list[list[tuple[str, str]]]:
    """The ``n`` top documents of the pooled ``index`` for each query that are not ``task``'s own."""
    corpus_of = {t.name: t.corpus for t in tasks}
    n_pooled = sum(len(corpus) for corpus in corpus_of.values())
    chosen: list[list[tuple[str, str]]] = [[] for _ in query_texts]
    todo = list(range(len(query_texts)))
    # The task's own documents usually lead the ranking: look deeper only for the queries still short.
    k = min(n_pooled, n + 32)
    while todo:
        ranked = index.retrieve([query_texts[i] for i in todo], k=k).ids
        short = []
        for i, ids in zip(todo, ranked):
            picked: list[tuple[str, str]] = []
            for pid in ids:
                name, doc_id = split_pooled_id(pid)
                if name == task.name:
                    continue
                text = doc_text(corpus_of[name][doc_id])
                if text not in forbidden[i] and all(text != seen for _, seen in picked):
                    picked.append((pid, text))
                if len(picked) == n:
                    break
            chosen[i] = picked
            if len(picked) < n and k < n_pooled:
                short.append(i)
        todo = short
        k = min(n_pooled, 4 * k)
    return chosen


def build_training_examples(tasks: Sequence[RetrievalTask], first_stage: Any = "bm25", n_hard: int = 5,
                            n_random: int = 2, n_unfollowing: int = 2, seed: int = 0,
                            denoiser: Denoiser | None = None, denoise_threshold: float = 0.5,
                            stats: dict | None = None, denoise_with_instruction: bool = False,
                            unfollowing_from: str = "random_tasks", unfollowing_first_stage: Any = None,
                            progress: bool = False) -> list[dict]:
    """TART training rows for every judged query of ``tasks`` (see the module docstring).

    ``first_stage``: a :func:`~taskret.retrieval.make_retriever` spec (``"bm25"``, ``"dense:..."``) or a
    zero-argument factory of un-indexed retrievers; it indexes each task's corpus once and is queried
    with the query text alone (no instruction). ``n_hard``/``n_random``/``n_unfollowing``: negatives of
    each kind per row (fewer when a corpus is too small; hard ones fewer also after denoising).
    ``denoiser``: called once per task with every (query, mined hard negative text) pair; hard negatives
    it scores above ``denoise_threshold`` are dropped; with ``denoise_with_instruction`` the pairs' queries
    are ``format_query(row instruction, query)``, as a TART-full model trained with instructions reads
    them (re-denoising with TART-full, as the paper does). ``unfollowing_from``: ``"random_tasks"`` or
    ``"pooled"`` (see the module docstring). ``unfollowing_first_stage``: the retriever (spec or factory,
    like ``first_stage``) that mines the unfollowing negatives; None: ``first_stage``. ``progress``: dense
    first stages show a progress bar while they encode the corpora. ``stats``, when given, is filled with counts:
    n_rows, n_skipped (queries without a relevant document), n_negatives per kind, n_denoised and
    denoised (the dropped ``[task, qid, doc id]``), per_task rows, and unfollowing_sources: per task,
    how many of its unfollowing negatives each other task gave (which tasks a pooled search confuses).
    """
    for name, value in (("n_hard", n_hard), ("n_random", n_random), ("n_unfollowing", n_unfollowing)):
        _check_count(name, value)
    if unfollowing_from not in UNFOLLOWING_SOURCES:
        raise ValueError(f"unfollowing_from must be one of {', '.join(UNFOLLOWING_SOURCES)}, got {unfollowing_from!r}")
    tasks = list(tasks)
    check_task_names(tasks)
    for task in tasks:
        if not task.instructions:
            raise ValueError(f"task '{task.name}' has no instructions; TART training needs at least one "
                             f"(give some with RetrievalTask.with_instructions)")

    # Judged queries of each task, in the task's query order.
    qids_of = {t.name: [q for q in t.queries if any(r > 0 for r in t.qrels.get(q, {}).values())] for t in tasks}
    n_skipped = sum(len(t.queries) - len(qids_of[t.name]) for t in tasks)

    # One index per corpus, shared by the task's own hard negatives and the others' unfollowing ones.
    unfollowing_stage = first_stage if unfollowing_first_stage is None else unfollowing_first_stage
    separate = unfollowing_first_stage is not None and unfollowing_first_stage != first_stage
    pooled = unfollowing_from == "pooled" and n_unfollowing and len(tasks) > 1
    per_task_unfollowing = bool(n_unfollowing and len(tasks) > 1 and not pooled)
    indexes: dict[str, Any] = {}
    if n_hard or (per_task_unfollowing and not separate):
        for task in tasks:
            indexes[task.name] = _make_first_stage(first_stage, progress).index_texts(*task.doc_ids_and_texts())
    unfollowing_indexes = indexes
    if per_task_unfollowing and separate:
        unfollowing_indexes = {task.name: _make_first_stage(unfollowing_stage, progress).index_texts(
            *task.doc_ids_and_texts()) for task in tasks}
    pooled_index = _make_first_stage(unfollowing_stage, progress).index_texts(*pooled_corpus(tasks)) if pooled else None

    def rankings(index_task: RetrievalTask, query_texts: list[str], k: int, by: dict | None = None) -> list[list[str]]:
        k = min(k, len(index_task.corpus))
        if k < 1 or not query_texts:
            return [[] for _ in query_texts]
        return (indexes if by is None else by)[index_task.name].retrieve(query_texts, k=k).ids

    rows: list[dict] = []
    counts = {kind: 0 for kind in NEGATIVE_KINDS}
    denoised: list[list[str]] = []
    per_task: dict[str, int] = {}
    for task in tasks:
        qids = qids_of[task.name]
        query_texts = [task.queries[q] for q in qids]
        judged = [set(task.qrels.get(q, {})) for q in qids]
        rng = _task_rng(seed, task.name, 0)
        instructions = [task.instructions[int(rng.integers(len(task.instructions)))] for _ in qids]
        positives = []
        for q in qids:
            relevant = sorted(d for d, r in task.qrels[q].items() if r > 0)
            positives.append(relevant[int(rng.integers(len(relevant)))])

        # Hard negatives: the top unjudged documents of the first stage.
        hard: list[list[str]] = [[] for _ in qids]
        if n_hard:
            k = n_hard + max((len(j) for j in judged), default=0)
            for i, ranked in enumerate(rankings(task, query_texts, k)):
                hard[i] = [d for d in ranked if d not in judged[i]][:n_hard]
        if denoiser is not None and any(hard):
            denoise_queries = [format_query(instructions[i], query_texts[i]) if denoise_with_instruction
                               else query_texts[i] for i in range(len(qids))]
            pairs = [(denoise_queries[i], doc_text(task.corpus[d])) for i in range(len(qids)) for d in hard[i]]
            scores = np.asarray(denoiser(pairs), dtype=np.float64).reshape(-1)
            if len(scores) != len(pairs):
                raise ValueError(f"the denoiser returned {len(scores)} scores for {len(pairs)} pairs")
            position = 0
            for i in range(len(qids)):
                kept = []
                for d in hard[i]:
                    if scores[position] > denoise_threshold:
                        denoised.append([task.name, qids[i], d])
                    else:
                        kept.append(d)
                    position += 1
                hard[i] = kept

        # Instruction-unfollowing negatives: the other tasks' top documents.
        unfollowing: list[list[tuple[str, str]]] = [[] for _ in qids]
        others = [t for t in tasks if t.name != task.name]
        forbidden = [{doc_text(task.corpus[d]) for d, r in task.qrels[q].items() if r > 0} for q in qids]
        if pooled_index is not None:
            unfollowing = _pooled_unfollowing(pooled_index, tasks, task, query_texts, forbidden, n_unfollowing)
        elif n_unfollowing and others:
            # One other task per rank slot, in a seeded random order: the documents are spread over tasks.
            per_other = [rankings(other, query_texts, n_unfollowing, unfollowing_indexes) for other in others]
            order_rng = _task_rng(seed, task.name, 1)
            for i in range(len(qids)):
                order = [int(j) for j in order_rng.permutation(len(others))]
                chosen: list[tuple[str, str]] = []
                for rank in range(n_unfollowing):
                    for j in order:
                        ranked = per_other[j][i]
                        if rank < len(ranked) and len(chosen) < n_unfollowing:
                            text = doc_text(others[j].corpus[ranked[rank]])
                            if text not in forbidden[i]:
                                chosen.append((pooled_id(others[j].name, ranked[rank]), text))
                unfollowing[i] = chosen

        random_rng = _task_rng(seed, task.name, 2)
        corpus_ids = list(task.corpus)
        for i, q in enumerate(qids):
            negatives = [{"id": d, "text": doc_text(task.corpus[d]), "kind": "hard"} for d in hard[i]]
            excluded = judged[i] | set(hard[i])
            negatives += [{"id": d, "text": doc_text(task.corpus[d]), "kind": "random"}
                          for d in _random_ids(random_rng, corpus_ids, n_random, excluded)]
            negatives += [{"id": d, "text": text, "kind": "unfollowing"} for d, text in unfollowing[i]]
            for negative in negatives:
                counts[negative["kind"]] += 1
            rows.append({"task": task.name, "qid": q, "instruction": instructions[i], "query": task.queries[q],
                         "positive": positives[i], "positive_text": doc_text(task.corpus[positives[i]]),
                         "negatives": negatives})
        per_task[task.name] = len(qids)

    if denoised:
        logger.info("denoising dropped %d of %d mined hard negatives", len(denoised), counts["hard"] + len(denoised))
    if stats is not None:
        sources = unfollowing_sources(rows)
        stats.update({"n_rows": len(rows), "n_skipped": n_skipped, "n_negatives": counts,
                      "n_denoised": len(denoised), "denoised": denoised, "per_task": per_task,
                      "unfollowing_sources": {task.name: dict(sources.get(task.name, Counter()).most_common())
                                              for task in tasks}})
    return rows


# -- files ---------------------------------------------------------------------------------------


def _text(source: str, line: int, row: dict, name: str, allow_empty: bool = False) -> str:
    if name not in row:
        raise DataError(source, line, name, "missing field")
    value = row[name]
    if not isinstance(value, str):
        raise DataError(source, line, name, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise DataError(source, line, name, "empty value")
    return value


def validate_training_row(row: Any, source: str | os.PathLike = "rows", line: int | None = None) -> dict:
    """Check one training row's fields and types; a :class:`~taskret.data.DataError` names the source,
    the line and the field (``negatives[2].kind`` for a negative's)."""
    source = str(source)
    if not isinstance(row, dict):
        raise DataError(source, line, None, "expected a JSON object")
    for name in ("task", "qid", "query", "positive", "positive_text"):
        _text(source, line, row, name)
    _text(source, line, row, "instruction", allow_empty=True)
    negatives = row.get("negatives")
    if "negatives" not in row:
        raise DataError(source, line, "negatives", "missing field")
    if not isinstance(negatives, list):
        raise DataError(source, line, "negatives", f"expected a list, got {type(negatives).__name__}")
    for n, negative in enumerate(negatives):
        where = f"negatives[{n}]"
        if not isinstance(negative, dict):
            raise DataError(source, line, where, "expected an object {id, text, kind}")
        for name in ("id", "text", "kind"):
            if name not in negative:
                raise DataError(source, line, f"{where}.{name}", "missing field")
            if not isinstance(negative[name], str) or not negative[name].strip():
                raise DataError(source, line, f"{where}.{name}", "expected a non-empty string")
        if negative["kind"] not in NEGATIVE_KINDS:
            raise DataError(source, line, f"{where}.kind",
                            f"unknown kind '{negative['kind']}' (expected {', '.join(NEGATIVE_KINDS)})")
        if negative["id"] == row["positive"] and negative["kind"] != "unfollowing":
            raise DataError(source, line, f"{where}.id", f"the row's positive '{row['positive']}' is also a negative")
    return row


# -- using rows for training --------------------------------------------------------------------


def usable_rows(rows: Sequence[dict], negative_kinds: Sequence[str],
                source: str) -> tuple[list[tuple[dict, list[dict]]], int]:
    """(row, its negatives of ``negative_kinds``) for the rows that have some, and how many were skipped.

    Every row is validated first (:func:`~taskret.tart.training_data.validate_training_row`): a bad one
    raises a DataError naming ``source``, the row's line (its 1-based position) and the field.
    """
    usable, skipped = [], 0
    for index, row in enumerate(rows):
        validate_training_row(row, source, index + 1)
        negatives = [n for n in row["negatives"] if n["kind"] in negative_kinds]
        if negatives:
            usable.append((row, negatives))
        else:
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d of %d rows with no negative of kinds %s", source, skipped, len(rows),
                       ", ".join(negative_kinds))
    if not usable:
        raise ValueError(f"{source}: no usable training rows" + (" (none has a negative of kinds "
                         f"{', '.join(negative_kinds)})" if rows else ""))
    return usable, skipped


def train_on_rows(rows: Sequence[dict], config: Any, sampler: Any, recipe: Any, out_dir: str | os.PathLike,
                  marker: str, count_name: str, *, source: str = "rows", usable: Sequence | None = None,
                  n_skipped: int = 0, started: float | None = None, extra_counts: Callable[[list], dict] | None = None,
                  no_duplicates: bool = False, progress: bool = True, validate: Callable[[Any], float] | None = None,
                  validate_steps: int = 0) -> Path:
    """What TART-dual, TART-full and distillation share: train ``recipe`` on ``sampler``'s epochs of the rows
    that have negatives of ``config.negative_kinds`` (``usable``/``n_skipped`` when the caller already has them,
    as distillation does), with :func:`taskret.training.trainer.train`; return ``out_dir / "model"``.

    The summary ``out_dir/marker`` (written last) records the rows read, used and skipped, the number of
    training examples as ``count_name``, and ``extra_counts(epochs)``. A failed run leaves no ``model`` folder
    of its own (an older one stays) and no summary; ``training_log.jsonl`` keeps the steps it reached."""
    from ..training.trainer import train

    started = time.perf_counter() if started is None else started
    if usable is None:
        usable, n_skipped = usable_rows(rows, config.negative_kinds, source)

    def counts(epochs: list) -> dict:
        # the tasks trained on, so that weight tuning can tell when its dev tasks were among them
        tasks = Counter(row["task"] for row, _ in usable)
        out = {"n_rows": len(rows), "n_used": len(usable), "n_skipped": n_skipped,
               count_name: sum(len(epoch) for epoch in epochs), "train_tasks": dict(sorted(tasks.items()))}
        out.update(extra_counts(epochs) if extra_counts is not None else {})
        return out

    return train(config, usable, sampler, recipe, out_dir, marker, counts, no_duplicates=no_duplicates,
                 progress=progress, started=started, validate=validate, validate_steps=validate_steps)


def anchor_text(row: dict, config: Any, rng=None, dropout: float | None = None) -> str:
    """A training row's query as the student reads it: ``"{instruction} [SEP] {query}"`` with
    ``config.use_instruction``, except for the share ``config.instruction_dropout`` (or ``dropout``) of anchors
    (drawn with ``rng``) that read the bare query, so that one model serves queries with and without an
    instruction."""
    return draw_anchor(row, config, rng, dropout)[0]


def draw_anchor(row: dict, config: Any, rng=None, dropout: float | None = None) -> tuple[str, bool]:
    """:func:`anchor_text` and whether it carries the row's instruction."""
    dropout = getattr(config, "instruction_dropout", 0.0) if dropout is None else dropout
    instructed = config.use_instruction and not (dropout and rng is not None and rng.random() < dropout)
    return format_query(row["instruction"] if instructed else None, row["query"]), bool(instructed)


#: How TART-dual may group tasks into shared batches (``TartDualConfig.batch_groups``), besides explicit groups.
BATCH_GROUPINGS = ("tasks", "siblings")


def unfollowing_sources(rows: Iterable[dict]) -> dict[str, Counter]:
    """Per task (of rows that have any), how many of its instruction-unfollowing negatives each other task gave."""
    counts: dict[str, Counter] = {}
    for row in rows:
        for negative in row["negatives"]:
            if negative["kind"] == "unfollowing":
                source, _ = split_pooled_id(negative["id"])
                counts.setdefault(row["task"], Counter())[source] += 1
    return counts


def sibling_tasks(rows: Iterable[dict], min_lift: float = 1.5) -> list[tuple[str, str]]:
    """Pairs of tasks that are each other's likeliest source of instruction-unfollowing negatives.

    For task ``t`` and source task ``s``, the lift is the share of ``t``'s unfollowing negatives that come
    from ``s`` over ``s``'s share of all unfollowing negatives (1.0: as often as chance), so that a large
    corpus that supplies every task (a hub such as a Wikipedia QA corpus) does not pass for everyone's sibling.
    ``t``'s sibling is its highest-lift source when that lift is at least ``min_lift``; a pair is kept when the
    two are each other's sibling. Meaningful for rows built with ``unfollowing_from="pooled"`` (with ``"random_tasks"`` the sources
    are drawn blindly and no lift stands out). Sorted pairs, each sorted by name."""
    counts = unfollowing_sources(rows)
    supplied: Counter = Counter()
    for sources in counts.values():
        supplied.update(sources)
    total = sum(supplied.values())
    sibling: dict[str, str] = {}
    for task, sources in counts.items():
        n = sum(sources.values())
        lifts = {source: (k / n) / (supplied[source] / total) for source, k in sources.items() if source != task}
        if lifts:
            best, lift = max(sorted(lifts.items()), key=lambda item: item[1])
            if lift >= min_lift:
                sibling[task] = best
    return sorted({tuple(sorted((task, other))) for task, other in sibling.items()  # type: ignore[misc]
                   if sibling.get(other) == task})


def task_batch_groups(rows: Sequence[dict], batch_groups: Any) -> dict[str, str]:
    """Task name -> batch group name for :func:`taskret.training.batching.epoch_batches` (tasks left out share
    mixed batches). ``batch_groups``: ``None`` (no groups), ``"tasks"`` (each task alone: task-homogeneous
    batches, whose in-batch negatives are the task's own documents), ``"siblings"`` (the pairs of
    :func:`sibling_tasks`, so that an instructed query's in-batch negatives are its sibling's documents,
    instruction-unfollowing ones) or explicit groups, a list of lists of task names."""
    if batch_groups is None:
        return {}
    if batch_groups == "tasks":
        return {row["task"]: row["task"] for row in rows}
    if batch_groups == "siblings":
        return {task: "+".join(pair) for pair in sibling_tasks(rows) for task in pair}
    if isinstance(batch_groups, str):
        raise ValueError(f"unknown batch_groups {batch_groups!r}: choose from {', '.join(BATCH_GROUPINGS)} "
                         "or give a list of task groups")
    groups: dict[str, str] = {}
    for group in batch_groups:
        if isinstance(group, str) or not all(isinstance(task, str) for task in group):
            raise ValueError(f"batch_groups must be lists of task names, got {group!r}")
        for task in group:
            if task in groups:
                raise ValueError(f"task {task!r} is in two batch groups")
            groups[task] = "+".join(group)
    return groups


def draw_anchor_and_negatives(row: dict, negatives: list[dict], config: Any, rng, draw: Callable[[list[dict]], Any],
                              dropout: float | None = None) -> tuple[str, Any]:
    """A row's anchor (:func:`draw_anchor`) and what ``draw`` picks among its negatives. With
    ``config.unfollowing_needs_instruction`` the anchor is drawn first and a bare one draws among
    :func:`negatives_for_anchor`; without it the negatives are drawn first, the order of draws the earlier recipes
    were trained with, so that they retrain to the same rows."""
    if getattr(config, "unfollowing_needs_instruction", False):
        anchor, instructed = draw_anchor(row, config, rng, dropout)
        return anchor, draw(negatives_for_anchor(negatives, instructed))
    drawn = draw(negatives)
    return anchor_text(row, config, rng, dropout), drawn


def negatives_for_anchor(negatives: list[dict], instructed: bool) -> list[dict]:
    """The negatives an anchor may draw with ``unfollowing_needs_instruction``: all of them for an instructed
    anchor; for a bare one all but the instruction-unfollowing ones (all of them if nothing else is left), since
    without its instruction nothing says such a document is wrong: the same bare query may ask for it in a sibling
    task (MTOP's commands in MTOP-similar)."""
    if instructed:
        return negatives
    return [n for n in negatives if n["kind"] != "unfollowing"] or negatives


def epoch_columns(rows: Sequence[dict], config: Any, sampler: Any, epoch: int = 0, source: str = "rows") -> dict:
    """The training columns ``sampler`` draws for one epoch of the usable rows (for inspection and tests)."""
    usable, _ = usable_rows(rows, config.negative_kinds, source)
    return sampler.epoch(usable, config.seed, epoch).columns

def draw_negatives(rng: np.random.Generator, negatives: list[dict], n: int, fill: bool = False) -> list[dict]:
    """``n`` distinct negatives drawn uniformly; all of them, in random order, when there are fewer than ``n``
    (then, with ``fill``, topped up to ``n`` by drawing again among them)."""
    if len(negatives) >= n:
        return [negatives[int(i)] for i in rng.choice(len(negatives), size=n, replace=False)]
    drawn = [negatives[int(i)] for i in rng.permutation(len(negatives))]
    if fill:
        drawn += [negatives[int(i)] for i in rng.integers(len(negatives), size=n - len(drawn))]
    return drawn


def write_training_examples(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Write rows as JSONL (atomically, through :func:`taskret.io.write_jsonl`)."""
    path = Path(path)
    write_jsonl(path, rows)
    return path


def read_training_examples(path: str | os.PathLike) -> list[dict]:
    """Read and validate a training-data JSONL file (a DataError names the file, line and field).

    Reads taskret's rows (see the module docstring) and, line by line, the DPR-style rows that TART's
    released BERRI data and Tevatron use (:func:`dpr_training_row`)."""
    path = Path(path)
    rows = [validate_training_row(dpr_training_row(record, path, line) if DPR_QUESTION in record else record,
                                  path, line)
            for line, record in iter_records(path)]
    if not rows:
        raise DataError(path, None, None, "no training rows in file")
    return rows


# -- DPR-style rows (TART's BERRI release, Tevatron) ---------------------------------------------

DPR_QUESTION = "question"
#: DPR's negative lists and the kind each becomes. TART's release mixes its instruction-unfollowing
#: negatives into ``hard_negative_ctxs``, so they are read as hard negatives.
DPR_NEGATIVES = {"negative_ctxs": "random", "hard_negative_ctxs": "hard"}


def _dpr_doc(source: str, line: int | None, ctx: Any, where: str) -> tuple[str, str]:
    """(id, text) of a DPR context ``{"title", "text", "passage_id"?}``: the text as TART's trainer joins it
    (``"title text"``); without an id, a stable one from the text."""
    if not isinstance(ctx, dict):
        raise DataError(source, line, where, "expected an object {title, text}")
    text = ctx.get("text")
    if isinstance(text, list):  # some BERRI tasks store a one-element list
        text = text[0] if text else ""
    if not isinstance(text, str) or not text.strip():
        raise DataError(source, line, f"{where}.text", "expected a non-empty string")
    title = ctx.get("title") if isinstance(ctx.get("title"), str) else ""
    full = doc_text(Document(id="", title=title, text=text))
    doc_id = next((str(ctx[k]) for k in ("passage_id", "psg_id", "docid", "id") if ctx.get(k) not in (None, "")), None)
    return doc_id or f"sha1:{hashlib.sha1(full.encode()).hexdigest()[:16]}", full


def dpr_training_row(record: dict, source: str | os.PathLike = "rows", line: int | None = None,
                     task: str | None = None) -> dict:
    """One DPR-style row -> a taskret training row.

    ``question`` is ``"{instruction} [SEP] {query}"`` in TART's release (or the query alone, with the
    instruction in an ``instruction`` field); the first of ``positive_ctxs`` is the positive (DPR puts the
    gold passage first); ``negative_ctxs`` become random and ``hard_negative_ctxs`` hard negatives,
    minus any whose text is a positive's (TART's own data builder drops those as false negatives).
    The task is ``task``, else the row's ``task``/``dataset`` field, else the file's name."""
    source = str(source)
    question = _text(source, line, record, DPR_QUESTION)
    instruction, sep, query = question.partition(SEP.strip())
    if not sep:
        instruction, query = record.get("instruction") or "", question
    positives = record.get("positive_ctxs")
    if not isinstance(positives, list) or not positives:
        raise DataError(source, line, "positive_ctxs", "expected a non-empty list of passages")
    gold = [_dpr_doc(source, line, p, f"positive_ctxs[{n}]") for n, p in enumerate(positives)]
    positive_id, positive_text = gold[0]
    positive_texts = {text for _, text in gold}
    negatives = []
    for field_name, kind in DPR_NEGATIVES.items():
        ctxs = record.get(field_name) or []
        if not isinstance(ctxs, list):
            raise DataError(source, line, field_name, "expected a list of passages")
        for n, ctx in enumerate(ctxs):
            doc_id, text = _dpr_doc(source, line, ctx, f"{field_name}[{n}]")
            if text not in positive_texts and doc_id != positive_id:
                negatives.append({"id": doc_id, "text": text, "kind": kind})
    name = task or record.get("task") or record.get("dataset") or Path(source).stem
    return {"task": str(name), "qid": str(record.get("id", record.get("qid", line))),
            "instruction": instruction.strip(), "query": query.strip(), "positive": positive_id,
            "positive_text": positive_text, "negatives": negatives}
