"""Search a saved TART index (``taskret tart index``) with an instruction, optionally reranked by TART-full.

Public API::

    read_index_docs(index_dir)                                   # {doc id: {"id", "title", "text"}}
    search_index(index_dir, queries, instruction, k, reranker)   # -> one SearchHit list per query
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Sequence

from ..formats import format_query

__all__ = ["DOCS_FILE", "TART_META", "SearchHit", "read_index_docs", "snippet", "search_index"]

DOCS_FILE = "docs.jsonl"
TART_META = "tart.json"


class SearchHit(NamedTuple):
    doc_id: str
    score: float
    doc: dict | None  # {"id", "title", "text"} as indexed, or None when the index does not hold it


def read_index_docs(index_dir: str | os.PathLike) -> dict[str, dict]:
    """The documents a ``taskret tart index`` folder stores beside its index, by id."""
    from ..io import iter_records

    path = Path(index_dir) / DOCS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; this folder was not written by `taskret tart index`")
    return {str(r["id"]): r for _, r in iter_records(path)}


def _doc_text(doc: dict | None) -> str:
    if doc is None:
        return ""
    return f"{(doc.get('title') or '').strip()} {(doc.get('text') or '').strip()}".strip()


def snippet(doc: dict | None, width: int = 200) -> str:
    """``"title | first width characters of the text..."`` (whitespace collapsed)."""
    if doc is None:
        return "(document text not stored)"
    title = (doc.get("title") or "").strip()
    text = " ".join((doc.get("text") or "").split())
    text = text[:width] + ("..." if len(text) > width else "")
    return f"{title} | {text}" if title else text


def search_index(index_dir: str | os.PathLike, queries: Sequence[str], instruction: str | None = None, k: int = 5,
                 reranker=None, rerank_top_k: int = 100) -> tuple[list[str], list[list[SearchHit]]]:
    """Search ``index_dir`` with ``format_query(instruction, query)`` for each query; return those texts and
    the top ``k`` hits of each. With ``reranker`` (a TART-full folder or a
    :class:`~taskret.tart.cross_encoder.Reranker`), the first stage's top ``rerank_top_k`` are reranked."""
    from ..retrieval import Retriever

    if k < 1:
        raise ValueError("k must be at least 1")
    docs = read_index_docs(index_dir)
    retriever = Retriever.load(index_dir)
    texts = [format_query(instruction, q) for q in queries]
    if reranker is None:
        result = retriever.retrieve(texts, k=k)
    else:
        from .cross_encoder import load_reranker

        reranker = load_reranker(reranker)
        result = retriever.retrieve(texts, k=max(k, rerank_top_k))
        result = reranker.rerank(texts, result, lambda d: _doc_text(docs.get(d)), top_k=rerank_top_k)
    hits = [[SearchHit(d, float(s), docs.get(d)) for d, s in zip(ids[:k], scores)]
            for ids, scores in zip(result.ids, result.scores)]
    return texts, hits
