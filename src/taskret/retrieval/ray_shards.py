"""Shards past one machine, on Ray: each BM25 shard indexed by a Ray task of its own, each shard searched by an actor
that holds it, and a front (:class:`RayShards`) that sends every query to every actor at once and merges their top k
(:mod:`taskret.retrieval.sharded`).

Indexing runs in two waves of tasks, one task a shard each: the first counts each shard's
:class:`~taskret.retrieval.bm25_segments.CorpusStatistics`, the driver sums them, the second indexes each shard with
the sum, so the merged top k is one index's over the whole corpus. The tasks write the shard folders under ``out``:
every node must reach that folder (one machine, or a shared file system); the actors load their shard from it,
memory-mapped.

An actor that dies, or does not answer within ``timeout_s``, makes the search raise
:class:`~taskret.retrieval.sharded.ShardFailed` naming its shard, or, with ``allow_partial``, answer from the others
with the shard listed in :attr:`~taskret.retrieval.sharded.ShardedResult.missing`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from .base import RetrievalResult
from .sharded import ShardedResult, ShardedSearch, index_one_shard, summed_statistics

__all__ = ["index_bm25_shards_on_ray", "RayShards"]


def _statistics(texts: list[str], work: str):
    from .bm25_segments import corpus_statistics

    return corpus_statistics(iter(texts), Path(work))


def _index_shard(ids: list[str], texts: list[str], statistics, work: str, out: str, k1: float, b: float,
                 documents: list | None) -> str:
    return str(index_one_shard(ids, lambda: iter(texts), statistics, Path(work), Path(out), k1, b, documents))


def index_bm25_shards_on_ray(shards: Sequence[tuple[list[str], list[str]]], out: Path, work: Path,
                             k1: float = 1.5, b: float = 0.75, documents: Sequence[list] | None = None) -> list[Path]:
    """Index each shard (``(ids, texts)``) as a BM25 index ``out/shard-N`` on the connected Ray cluster, with the
    whole corpus's statistics (module docstring), saved to ``out/statistics.json`` too. ``documents``: each shard's
    documents, to write document indexes with their texts (``taskret serve --shards``). Returns the folders."""
    import ray

    out, work = Path(out).resolve(), Path(work).resolve()
    statistics_task = ray.remote(_statistics)
    index_task = ray.remote(_index_shard)
    parts = ray.get([statistics_task.remote(texts, str(work / f"statistics-{n}"))
                     for n, (_, texts) in enumerate(shards)])
    shared = ray.put(summed_statistics(parts, out))
    done = ray.get([index_task.remote(ids, texts, shared, str(work / f"shard-{n}"), str(out / f"shard-{n}"), k1, b,
                                      None if documents is None else list(documents[n]))
                    for n, (ids, texts) in enumerate(shards)])
    return [Path(folder) for folder in done]


class _ShardActor:
    """Holds one shard's index, memory-mapped, and answers its top k."""

    def __init__(self, folder: str):
        from .base import Retriever

        self.retriever = Retriever.load(folder, mmap=True)

    def where(self) -> dict:
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def retrieve(self, queries: list[str], k: int):
        found = self.retriever.retrieve(queries, k)
        return found.ids, found.scores


class RayShards:
    """One actor per shard folder (``shards``: name -> folder), spread over the cluster's nodes; :meth:`retrieve`
    asks them all at once and merges."""

    def __init__(self, shards: dict[str, str | os.PathLike], timeout_s: float = 60.0, allow_partial: bool = False,
                 cpus_per_shard: float = 1.0):
        import ray

        actor = ray.remote(num_cpus=cpus_per_shard, max_restarts=0)(_ShardActor)
        self.actors = {name: actor.options(scheduling_strategy="SPREAD").remote(str(Path(folder).resolve()))
                       for name, folder in shards.items()}
        self.timeout_s = timeout_s
        self.allow_partial = allow_partial

    def where(self) -> dict[str, dict]:
        """Each shard's node and process (every actor started, or its error raised)."""
        import ray

        return dict(zip(self.actors, ray.get([a.where.remote() for a in self.actors.values()],
                                             timeout=self.timeout_s)))

    def retrieve(self, queries: Sequence[str], k: int) -> ShardedResult:
        import ray

        queries = list(queries)
        pending = {name: actor.retrieve.remote(queries, k) for name, actor in self.actors.items()}

        def answer(ref):
            def get(_queries, _k) -> RetrievalResult:
                ids, scores = ray.get(ref, timeout=self.timeout_s)
                return RetrievalResult(ids, scores)
            return get

        return ShardedSearch({name: answer(ref) for name, ref in pending.items()},
                             allow_partial=self.allow_partial).retrieve(queries, k)

    def close(self) -> None:
        import ray

        for actor in self.actors.values():
            ray.kill(actor)
        self.actors = {}
