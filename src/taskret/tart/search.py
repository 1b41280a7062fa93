"""Search a saved index with an instruction, optionally reranked by TART-full.

Any index a taskret ``index`` command writes can be searched (documents from ``taskret tart index``, or
examples from ``taskret index`` / ``taskret epr index``). Results are a
:class:`~taskret.retrieval.RetrievalResult`; the texts are the index's records, looked up by id.

Public API::

    search_index(index, queries, instruction, top_k, reranker)   # -> (searched texts, RetrievalResult)
    recorded_rerank(index)                                       # the reranking an index records (its setup)
    resolve_rerank(index, reranker, rerank_depth, rerank_weight) # the reranking to apply, overrides on the record
    instruction_read(index, reranker)                            # whether any stage reads an instruction
    rerank_first_stage(index, texts, first, reranker, ...)       # search_index's second stage, on a first stage
    record_text(record)                                          # what a reranker reads of a record
    snippet(record)                                              # "title | first 200 characters..."
"""

from __future__ import annotations

import os
from typing import Sequence

from ..formats import format_query
from ..retrieval.base import RetrievalResult
from ..retrieval.index import IndexRecord, LoadedIndex, load_index

__all__ = ["RECORDED", "instruction_read", "record_text", "recorded_rerank", "rerank_first_stage", "resolve_rerank",
           "snippet", "search_index"]


def record_text(record: IndexRecord) -> str:
    """A document's ``"title text"`` (as :func:`~taskret.tart.tasks.doc_text` indexes it), or an example's input."""
    return record.indexed_text


def snippet(record: IndexRecord, width: int = 200) -> str:
    """``"title | first width characters of the text..."`` (whitespace collapsed); an example shows
    ``"input -> output"``."""
    text = " ".join(record.text.split())
    if record.output is not None:
        text = f"{text} -> {' '.join(record.output.split())}"
    text = text[:width] + ("..." if len(text) > width else "")
    title = (record.title or "").strip()
    return f"{title} | {text}" if title else text


#: ``search_index(reranker=RECORDED)``: rerank as the index records (an index built from a named setup).
RECORDED = "recorded"


def recorded_rerank(index: LoadedIndex) -> dict:
    """The reranking an index records (``rerank``, ``rerank_depth``, ``rerank_weight``; ``rerank`` None: none):
    written by ``taskret tart index`` from a named setup such as ``docs-rerank``."""
    info = index.info
    return {"rerank": info.get("rerank"), "rerank_depth": info.get("rerank_depth") or 100,
            "rerank_weight": info.get("rerank_weight")}


def resolve_rerank(index: LoadedIndex, reranker=RECORDED, rerank_depth: int | None = None,
                   rerank_weight: float | None = None) -> dict:
    """The reranking to apply (``rerank``, ``rerank_depth``, ``rerank_weight``), as :func:`search_index` reads its
    arguments: ``reranker`` :data:`RECORDED` takes the index's (:func:`recorded_rerank`), with ``rerank_depth`` /
    ``rerank_weight`` overriding its depth and weight where given; None: no reranking; else that reranker with
    the depth given (default 100) and the weight given (default None: the reranker's order alone)."""
    if isinstance(reranker, str) and reranker == RECORDED:
        recorded = recorded_rerank(index)
        reranker = recorded["rerank"]
        rerank_depth = rerank_depth if rerank_depth is not None else recorded["rerank_depth"]
        rerank_weight = rerank_weight if rerank_weight is not None else recorded["rerank_weight"]
    return {"rerank": reranker, "rerank_depth": rerank_depth if rerank_depth is not None else 100,
            "rerank_weight": rerank_weight}


def instruction_read(index: LoadedIndex, reranker=RECORDED) -> bool:
    """Whether a search of ``index`` with ``reranker`` (as :func:`search_index` takes it) reads an instruction at any
    stage: a first stage that reads it (a dense one; not BM25, nor the named document setups' hybrid) or a reranker.
    When none does, :func:`search_index` searches with the query alone, as its ranking would anyway."""
    return index.retriever.reads_instruction or resolve_rerank(index, reranker)["rerank"] is not None


def rerank_first_stage(index: LoadedIndex, texts: Sequence[str], first: RetrievalResult, reranker,
                       rerank_depth: int = 100, rerank_weight: float | None = None) -> RetrievalResult:
    """The second stage of :func:`search_index`, given its first stage's ``first`` for the searched ``texts``:
    the top ``rerank_depth`` of each row reranked by ``reranker`` (a spec or a
    :class:`~taskret.rerank.Reranker`), fused with the first stage at its share ``rerank_weight``. Apart from
    :func:`search_index` so that a caller holding the first stage (the service: it shows both rankings, and
    batches first stages) reranks exactly as search does."""
    from ..rerank import load_reranker

    return load_reranker(reranker).rerank(texts, first, lambda i: record_text(index.records[i]), top_k=rerank_depth,
                                          first_stage_weight=rerank_weight)


def search_index(index: LoadedIndex | str | os.PathLike, queries: Sequence[str], instruction: str | None = None,
                 top_k: int = 5, reranker=RECORDED, rerank_depth: int | None = None,
                 rerank_weight: float | None = None,
                 query_encoder: str | None = None) -> tuple[list[str], RetrievalResult]:
    """Search ``index`` (a loaded index or its folder) with ``format_query(instruction, query)`` for each
    query; return those texts and the ``top_k`` best ids and scores of each. The first stage reads of the
    instruction what its spec says (BM25, and the named document setups, read the query alone).

    ``reranker``: by default the one the index records (:func:`recorded_rerank`, with its depth and weight,
    unless ``rerank_depth`` / ``rerank_weight`` are given); None: no reranking; else a TART-full folder, a
    ``upr:LM`` spec or a :class:`~taskret.rerank.Reranker`. The first stage's top ``rerank_depth`` (default 100)
    are reranked, and with ``rerank_weight`` interpolated with the first stage
    (:meth:`~taskret.rerank.Reranker.rerank`'s ``first_stage_weight``, the first stage's share).

    ``query_encoder``: a dense index is searched with queries encoded by this model, one trained over the
    index's document vectors (:meth:`~taskret.retrieval.dense.DenseRetriever.use_query_encoder`, which checks it).

    An instruction that no stage reads (:func:`instruction_read`) is left out of the searched texts: they are the
    queries alone, which rank the same."""
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    if not isinstance(index, LoadedIndex):
        index = load_index(index)
    rerank = resolve_rerank(index, reranker, rerank_depth, rerank_weight)
    reranker, rerank_depth = rerank["rerank"], rerank["rerank_depth"]
    if query_encoder is not None:
        index.use_query_encoder(query_encoder)
    if instruction is not None and reranker is None and not index.retriever.reads_instruction:
        instruction = None  # no stage reads it: the texts say what was searched
    texts = [format_query(instruction, q) for q in queries]
    if reranker is None:
        result = index.retriever.retrieve(texts, k=top_k)
    else:
        first = index.retriever.retrieve(texts, k=max(top_k, rerank_depth))
        result = rerank_first_stage(index, texts, first, reranker, rerank_depth, rerank["rerank_weight"])
    return texts, result.head(top_k)
