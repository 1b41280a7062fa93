"""An index held as shards, opened as one (``taskret serve --shards CONFIG``): every shard a taskret index folder of
its own part of the corpus, each query sent to every shard and their top k merged (:mod:`taskret.retrieval.sharded`).

The shards config is a JSON file::

    {"shards": {"shard-0": "index/shard-0", "shard-1": "index/shard-1"},
     "ray": null, "allow_partial": false, "timeout_s": 60}

- ``shards``: name -> index folder (a relative path reads from the config file's folder), in the corpus's order.
  BM25 shards are indexed with the whole corpus's statistics (:func:`~taskret.retrieval.sharded.index_bm25_shards`
  with ``documents``), so the merged top k is the single index's; dense shards need nothing shared.
- ``ray``: null searches every shard in this process, each memory-mapped. A Ray address (``auto``, ``HOST:PORT``)
  searches each shard in an actor of its own, spread over the cluster's nodes
  (:class:`~taskret.retrieval.ray_shards.RayShards`); the folders must then be reachable from every node (a shared
  file system), and this process reads the result texts from them.
- ``allow_partial``: a shard that fails or does not answer within ``timeout_s`` makes the search fail naming it;
  with ``allow_partial``, the others answer and the result names the missing shards
  (:attr:`ShardedRetriever.retrieve`'s ``missing``; the service's ``missing_shards``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Iterator, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..ids import first_duplicate
from .base import RetrievalResult
from .index import IndexRecord, InvalidIndex, LoadedIndex, load_index
from .sharded import ShardedSearch

__all__ = ["ShardsConfig", "ShardedRetriever", "PartialResult", "load_sharded_index", "index_corpus_shards",
           "SHARDS_CONFIG"]


class ShardsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shards: dict[str, str] = Field(description="shard name -> index folder, in the corpus's order", min_length=1)
    ray: Optional[str] = Field(None, description="search each shard in a Ray actor: auto, HOST:PORT or ray://...")
    allow_partial: bool = Field(False, description="answer from the shards that answered, naming the others")
    timeout_s: float = Field(60.0, gt=0, description="seconds a Ray shard may take to answer")


class PartialResult(RetrievalResult):
    """A :class:`~taskret.retrieval.base.RetrievalResult` that may lack shards: ``missing`` names them."""

    missing: tuple[str, ...] = ()


def partial(result: RetrievalResult, missing: Sequence[str]) -> RetrievalResult:
    """``result`` marked as lacking the shards ``missing`` (unchanged when none is)."""
    if not missing:
        return result
    marked = PartialResult(result.ids, result.scores)
    marked.missing = tuple(missing)
    return marked


class _ChainedIds(Sequence[str]):
    """The shards' ids in shard order, as one read-only sequence (no copy of them)."""

    def __init__(self, parts: Sequence[Sequence[str]]):
        self._parts = list(parts)

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if item < 0:
            item += len(self)
        for part in self._parts:
            if item < len(part):
                return part[item]
            item -= len(part)
        raise IndexError("shard id index out of range")

    def __iter__(self) -> Iterator[str]:
        for part in self._parts:
            yield from part


class _ChainedRecords(Mapping[str, IndexRecord]):
    """Each id's record from the shard that holds it."""

    def __init__(self, indexes: Sequence[LoadedIndex]):
        self._indexes = list(indexes)

    def __getitem__(self, key: str) -> IndexRecord:
        for index in self._indexes:
            try:
                return index.records[key]
            except KeyError:
                continue
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        for index in self._indexes:
            yield from index.records

    def __len__(self) -> int:
        return sum(len(index.records) for index in self._indexes)


class ShardedRetriever:
    """The shards searched as one retriever (what the service and ``retrieve`` call): :meth:`retrieve` merges every
    shard's top k; with ``allow_partial`` its result may be a :class:`PartialResult`."""

    def __init__(self, indexes: dict[str, LoadedIndex], config: ShardsConfig):
        first = next(iter(indexes.values())).retriever
        self.name = f"shards of {first.name}"
        self.reads_instruction = first.reads_instruction
        self.ids = _ChainedIds([index.retriever.ids for index in indexes.values()])
        self.config = config
        self._indexes = indexes
        self._remote = None  # RayShards: the actors, to start and to stop
        if config.ray is None:
            self._search = ShardedSearch({name: index.retriever.retrieve for name, index in indexes.items()},
                                         allow_partial=config.allow_partial)
        else:
            import ray

            from .ray_shards import RayShards

            if not ray.is_initialized():
                ray.init(address=config.ray, logging_level="ERROR", log_to_driver=False)
            self._remote = self._search = RayShards({name: index.directory for name, index in indexes.items()},
                                                    timeout_s=config.timeout_s, allow_partial=config.allow_partial)

    def warm_up(self) -> None:
        if self._remote is not None:
            self._remote.where()  # every actor started (its shard loaded), or its error raised now
        else:
            for index in self._indexes.values():
                index.retriever.warm_up()

    def retrieve(self, queries: Sequence[str], k: int = 10) -> RetrievalResult:
        found = self._search.retrieve(list(queries), k)
        return partial(found.result, found.missing)

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()


def load_sharded_index(config_path: str | os.PathLike) -> LoadedIndex:
    """The shards a config file names (module docstring) opened as one index, each memory-mapped and checked as
    :func:`~taskret.retrieval.index.load_index` checks an index; the shards must hold one kind (documents or
    examples) and no id twice."""
    from ..pipeline import read_config

    config_path = Path(config_path)
    config = read_config(ShardsConfig, config_path)
    indexes = {}
    for name, folder in config.shards.items():
        path = Path(folder) if Path(folder).is_absolute() else config_path.parent / folder
        indexes[name] = load_index(path, mmap=True)
    kinds = {index.kind for index in indexes.values()}
    if len(kinds) != 1:
        raise InvalidIndex(f"{config_path}: its shards hold different kinds ({', '.join(sorted(kinds))})")
    twice = first_duplicate(_ChainedIds([index.retriever.ids for index in indexes.values()]))
    if twice is not None:  # each shard's own ids are unique (load_index): the id is in two shards
        name = [name for name, index in indexes.items() if twice in index.retriever.ids][1]
        raise InvalidIndex(f"{config_path}: id '{twice}' is in shard '{name}' and in an earlier shard")
    first = next(iter(indexes.values()))
    return LoadedIndex(directory=config_path, retriever=ShardedRetriever(indexes, config), kind=first.kind,
                       records=_ChainedRecords(list(indexes.values())),
                       info={**first.info, "shards": list(config.shards)})


#: The shards config :func:`index_corpus_shards` writes beside the shards.
SHARDS_CONFIG = "shards.json"


def index_corpus_shards(parts: Sequence, out: str | os.PathLike, retriever: str = "bm25", *, on_ray: bool = False,
                        memory_budget=None) -> Path:
    """Index a corpus held as parts, one shard each, and return the shards config ``taskret serve --shards`` opens.

    ``parts``: :class:`~taskret.corpus.DocumentStream`\\ s (one file each, from
    :func:`~taskret.tart.tasks.open_corpus`), in the corpus's order. Each becomes a document index with its texts,
    ``out/shard-N``, and ``out/shards.json`` names them, written last. ``retriever``: ``bm25``, every part counted
    first and the counts summed into ``out/statistics.json``, each part then indexed with the sum, so the merged
    top k is one index's over the whole corpus (:mod:`taskret.retrieval.sharded`); or a dense spec
    (``dense:ENCODER``), each part an index of its own (a vector's score needs nothing shared). ``on_ray``: each
    part's work is a Ray task on the cluster this process is connected to, so every node must reach the parts and
    ``out`` (one machine, or a shared file system). A shard already in ``out`` is kept: a stopped run started again
    indexes only the rest, and refuses, naming the folder, where the parts' BM25 counts changed since.
    ``memory_budget``: a :class:`~taskret.retrieval.budget.MemoryBudget` for each part's build (8 GiB)."""
    import shutil

    from ..io import write_json
    from .bm25_segments import CorpusStatistics
    from .budget import MemoryBudget
    from .sharded import summed_statistics

    if not parts:
        raise ValueError("no corpus parts to index")
    if retriever != "bm25" and not retriever.startswith("dense:"):
        raise ValueError(f"shards are indexed with bm25 or a dense retriever (dense:ENCODER), not '{retriever}': a "
                         "hybrid's shards would be two indexes each (index the parts with each on its own)")
    out = Path(out).resolve()
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    work, budget = out / ".work", memory_budget or MemoryBudget()
    folders = [out / f"shard-{number}" for number in range(len(parts))]
    pending = [number for number, folder in enumerate(folders) if not folder.is_dir()]  # save_index renames: whole
    try:
        if pending and retriever == "bm25":
            counted = _each(_count_part, [(part, str(work / f"statistics-{n}")) for n, part in enumerate(parts)],
                            on_ray)
            saved = out / "statistics.json"
            before = CorpusStatistics.load(saved) if saved.exists() and len(pending) < len(parts) else None
            total = summed_statistics(counted, out)
            if before is not None and before != total:
                raise ValueError(f"{out}: its finished shards were indexed with other BM25 counts (the parts changed "
                                 "since they were built); remove the folder and index the parts again")
            _each(_index_bm25_part, [(parts[n], total, str(work / f"shard-{n}"), str(folders[n]), budget)
                                     for n in pending], on_ray)
        elif pending:
            _each(_index_dense_part, [(parts[n], retriever, str(folders[n]), budget) for n in pending], on_ray)
    except BaseException:
        # finished shards stay for the next run; a folder this run made and filled with nothing goes
        if created and not any(folder.is_dir() for folder in folders):
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    config = out / SHARDS_CONFIG
    write_json(config, ShardsConfig(shards={folder.name: folder.name for folder in folders}).model_dump())
    return config


def _each(function, jobs: list[tuple], on_ray: bool) -> list:
    """``function(*job)`` for every job: here, one after another, or as Ray tasks at once (one CPU each)."""
    if not on_ray:
        return [function(*job) for job in jobs]
    import ray

    task = ray.remote(num_cpus=1)(function)
    try:
        return ray.get([task.remote(*job) for job in jobs])
    except ray.exceptions.RayTaskError as err:
        # the task's own error (a bad line named by file, line and field), not Ray's wrapper and remote traceback
        if isinstance(err.cause, Exception):
            raise err.cause from None
        raise


def _count_part(part, work: str):
    from .bm25_segments import corpus_statistics

    return corpus_statistics(part.texts(), Path(work))


def _index_bm25_part(part, statistics, work: str, out: str, budget) -> str:
    from .sharded import index_one_shard

    ids, _ = part.scan()  # every document checked: a bad line is named by file, line and field
    return str(index_one_shard(ids, part.texts, statistics, Path(work), Path(out), documents=part, budget=budget))


def _index_dense_part(part, retriever: str, out: str, budget) -> str:
    from . import make_retriever
    from .index import index_documents

    return str(index_documents(out, make_retriever(retriever), part, retriever_spec=retriever, memory_budget=budget))
