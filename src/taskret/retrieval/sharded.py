"""Search over a corpus split into shards: each shard an index of its own, every query sent to every shard, their top
k merged by score, as faiss's ``IndexShards`` and the engines users run past one machine (OpenSearch, Vespa, Milvus)
do.

A BM25 score reads the whole corpus (each term's document frequency, the mean document length), so a shard indexed
with its own statistics ranks otherwise than the single index. :func:`index_bm25_shards` first sums every shard's
:class:`~taskret.retrieval.bm25_segments.CorpusStatistics` (the "dfs" phase of Elasticsearch's
``dfs_query_then_fetch``), then indexes each shard with the sum: every document then scores as in the single index,
and the merged top k is the single index's. Dense shards need nothing shared: a vector's score is its own.

:class:`ShardedSearch` merges what each shard answers. A shard that fails is never dropped silently: the search
raises :class:`ShardFailed` naming it, or, with ``allow_partial``, answers from the others and names the missing
shards in :attr:`ShardedResult.missing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .base import RetrievalResult

__all__ = ["ShardFailed", "ShardedResult", "ShardedSearch", "merge_top_k", "index_bm25_shards", "index_one_shard",
           "summed_statistics"]

#: What a shard is to the search: ``search(queries, k)`` returning its top k (ids and scores), local or remote.
ShardSearch = Callable[[list[str], int], RetrievalResult]


class ShardFailed(RuntimeError):
    """A shard did not answer; ``shard`` names it."""

    def __init__(self, shard: str, cause: BaseException):
        super().__init__(f"shard '{shard}' failed: {type(cause).__name__}: {cause}")
        self.shard = shard


@dataclass
class ShardedResult:
    """The merged top k (``result``) and the shards that did not answer (``missing``: empty unless the search allowed
    a partial answer, and then the answer is of the other shards only)."""

    result: RetrievalResult
    missing: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.missing)


def merge_top_k(results: Sequence[RetrievalResult], k: int) -> RetrievalResult:
    """Each query's ``k`` best over every shard's answer, by score (a tie keeps shard order, then each shard's own
    order: the merge of shards holding a corpus in order ranks ties as one index over it)."""
    if not results:
        raise ValueError("no shard answered")
    merged_ids: list[list[str]] = []
    merged_scores = np.full((len(results[0].ids), k), np.nan, dtype=np.float32)
    for q in range(len(results[0].ids)):
        found = [(float(score), shard, rank, doc)
                 for shard, result in enumerate(results)
                 for rank, (doc, score) in enumerate(zip(result.ids[q], result.scores[q]))
                 if not math.isnan(float(score))]
        found.sort(key=lambda hit: (-hit[0], hit[1], hit[2]))
        best = found[:k]
        merged_ids.append([doc for _, _, _, doc in best])
        merged_scores[q, :len(best)] = [score for score, _, _, _ in best]
    return RetrievalResult(merged_ids, merged_scores)


class ShardedSearch:
    """One search over ``shards`` (name -> :data:`ShardSearch`), in the order given (the corpus's)."""

    def __init__(self, shards: dict[str, ShardSearch], allow_partial: bool = False):
        if not shards:
            raise ValueError("a sharded search needs at least one shard")
        self.shards = dict(shards)
        self.allow_partial = allow_partial

    def retrieve(self, queries: Sequence[str], k: int) -> ShardedResult:
        queries = list(queries)
        answers, missing = [], []
        for name, search in self.shards.items():
            try:
                answers.append(search(queries, k))
            except Exception as err:  # noqa: BLE001 - any shard's failure is named, never swallowed
                if not self.allow_partial:
                    raise ShardFailed(name, err) from err
                missing.append(name)
        if not answers:
            raise ShardFailed(", ".join(missing), RuntimeError("no shard answered"))
        return ShardedResult(merge_top_k(answers, k), missing)


def summed_statistics(parts: Sequence, out: Path):
    """The whole corpus's :class:`~taskret.retrieval.bm25_segments.CorpusStatistics`, summed from each shard's
    (``parts``, in shard order) and saved to ``out/statistics.json``: every shard is scored with it."""
    if not parts:
        raise ValueError("no shards to index")
    total = parts[0]
    for part in parts[1:]:
        total = total.merge(part)
    Path(out).mkdir(parents=True, exist_ok=True)
    total.save(Path(out) / "statistics.json")
    return total


def index_one_shard(ids: Sequence[str], texts: Callable[[], object], statistics, work: Path, out: Path,
                    k1: float = 1.5, b: float = 0.75, documents: Sequence | None = None, budget=None) -> Path:
    """One shard's BM25 index in ``out``, scored with the whole corpus's ``statistics``: a Ray task's step too.
    With ``documents`` (the shard's documents, :class:`~taskret.corpus.Document`, in ``ids``' order) ``out`` is a document
    index with their texts, which ``taskret serve --shards`` opens (:mod:`taskret.retrieval.sharded_index`);
    without, the retriever's files alone. ``budget``: the :class:`~taskret.retrieval.budget.MemoryBudget` its
    segments are cut to (8 GiB)."""
    from .bm25 import BM25Retriever
    from .budget import MemoryBudget
    from .index import save_index

    retriever = BM25Retriever(k1=k1, b=b).index_shard(ids, texts, statistics, Path(work), budget or MemoryBudget())
    if documents is None:
        retriever.save(out)
    else:
        save_index(out, retriever, documents, kind="documents", retriever_spec="bm25")
    return Path(out)


def index_bm25_shards(shards: Sequence[tuple[Sequence[str], Callable[[], object]]], out: Path, work: Path,
                      k1: float = 1.5, b: float = 0.75, documents: Sequence[Sequence] | None = None) -> list[Path]:
    """Index each shard (``(ids, texts)``: ``texts()`` yields the shard's texts in order, on every call) as a BM25
    index in ``out/shard-N/``, scored with the whole corpus's statistics (module docstring), summed first into
    ``out/statistics.json``. ``documents``: each shard's documents, to write document indexes with their texts
    (:func:`index_one_shard`). Returns the shards' folders. Each shard's steps are the ones a Ray task runs for it."""
    from .bm25_segments import corpus_statistics

    out, work = Path(out), Path(work)
    total = summed_statistics([corpus_statistics(texts(), work / f"statistics-{number}")
                               for number, (_, texts) in enumerate(shards)], out)
    return [index_one_shard(ids, texts, total, work / f"shard-{number}", out / f"shard-{number}", k1, b,
                            None if documents is None else documents[number])
            for number, (ids, texts) in enumerate(shards)]
