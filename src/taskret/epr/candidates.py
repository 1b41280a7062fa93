"""Candidates: the top-L BM25 neighbours of every training example within the training set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..data import Example
from ..io import DataError, iter_records, write_jsonl
from ..retrieval import BM25Retriever
from ..retrieval.base import example_text


def mine_candidates(examples: Sequence[Example], n: int = 50, field: str = "output") -> list[dict]:
    """For each example, ``n`` neighbours by BM25 over ``field`` (output, input or both), itself excluded.

    Rows: ``{"id", "candidates": [ids, best first], "bm25": [scores]}``.
    """
    return mine_candidates_for(examples, examples, n=n, field=field)


def mine_candidates_for(pool: Sequence[Example], queries: Sequence[Example] | None, n: int = 50,
                        field: str = "output") -> list[dict]:
    """The rows of :func:`mine_candidates` for ``queries`` only (e.g. a seeded ``data.sample`` of the pool):
    their neighbours come from the whole ``pool``, and the rows keep the pool's order. ``None``: every example.

    Only the queries are searched; each query's BM25 ranking depends on the pool alone, so the rows are those
    of ``mine_candidates(pool)`` for these ids.
    """
    if queries is None:
        queries = pool
    wanted = {e.id for e in queries}
    known = {e.id for e in pool}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"{len(missing)} queries are not in the candidate pool, e.g. '{missing[0]}'")
    chosen = [e for e in pool if e.id in wanted]
    retriever = BM25Retriever(field=field).index(pool)
    result = retriever.retrieve([example_text(e, field) for e in chosen], k=n, exclude=[e.id for e in chosen])
    return [{"id": e.id, "candidates": ids, "bm25": [round(float(s), 4) for s in scores[: len(ids)]]}
            for e, ids, scores in zip(chosen, result.ids, result.scores)]


def mine_candidates_with(retriever, pool: Sequence[Example], queries: Sequence[Example], n: int = 50) -> list[dict]:
    """UDR's re-mining (Li et al., ACL 2023): each query's top ``n`` examples of ``pool`` by a trained retriever,
    reading the query's input as at test time, itself excluded. ``retriever`` must have indexed ``pool``.

    Rows: ``{"id", "candidates": [ids, best first], "retriever": [scores]}``."""
    result = retriever.retrieve([e.input for e in queries], k=n, exclude=[e.id for e in queries])
    return [{"id": e.id, "candidates": ids, "retriever": [round(float(s), 4) for s in scores[: len(ids)]]}
            for e, ids, scores in zip(queries, result.ids, result.scores)]


def unscored(rows: Sequence[dict], score_rows: Sequence[dict]) -> list[dict]:
    """``rows`` without the (example, candidate) pairs that ``score_rows`` already scored; rows left empty are
    dropped. A later mining round scores only what is new. ``score_rows`` may hold several rows per example (every
    earlier round's, concatenated): a pair scored in any of them counts as scored."""
    done: dict[str, set[str]] = {}
    for row in score_rows:
        done.setdefault(row["id"], set()).update(c["id"] for c in row["candidates"])
    out = []
    for row in rows:
        fresh = [c for c in row["candidates"] if c not in done.get(row["id"], ())]
        if fresh:
            out.append({**{k: v for k, v in row.items() if k not in ("candidates", "bm25", "retriever")},
                        "candidates": fresh})
    return out


def merge_scores(*score_files: Sequence[dict]) -> list[dict]:
    """Score rows of several rounds joined per example (first file's order, then new examples): each example's
    candidates are every pair scored for it in any round, the first score of a pair kept."""
    merged: dict[str, dict] = {}
    for rows in score_files:
        for row in rows:
            target = merged.setdefault(row["id"], {"id": row["id"], "candidates": []})
            seen = {c["id"] for c in target["candidates"]}
            target["candidates"].extend(c for c in row["candidates"] if c["id"] not in seen)
    return list(merged.values())


def write_candidates(path: str | os.PathLike, rows: list[dict]) -> None:
    write_jsonl(path, rows)


def read_candidates(path: str | os.PathLike, known_ids: set[str] | None = None) -> list[dict]:
    """Read and check a candidates file: every row has an id and a list of candidate ids."""
    rows = []
    for line, row in iter_records(Path(path)):
        rows.append(row)
        for key in ("id", "candidates"):
            if key not in row:
                raise DataError(path, line, key, "missing field")
        if not isinstance(row["candidates"], list):
            raise DataError(path, line, "candidates", "expected a list of example ids")
        if known_ids is not None:
            if row["id"] not in known_ids:
                raise DataError(path, line, "id", f"unknown example id '{row['id']}'")
            unknown = [c for c in row["candidates"] if c not in known_ids]
            if unknown:
                raise DataError(path, line, "candidates", f"unknown example id '{unknown[0]}'")
    return rows
