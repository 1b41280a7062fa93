"""The retriever interface every method shares: index examples, retrieve for queries, save, load."""

from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np

from ..data import Example
from ..formats import render_demo
from ..ids import IdList
from ..io import read_json, write_json


class RetrievalResult(NamedTuple):
    """``ids[q]`` are the ranked example ids for query ``q``; ``scores[q]`` their scores (higher is closer)."""

    ids: list[list[str]]
    scores: np.ndarray

    def head(self, k: int) -> "RetrievalResult":
        """The first ``k`` results of every query."""
        return RetrievalResult([list(ids[:k]) for ids in self.ids], self.scores[:, :k])

    @classmethod
    def from_rows(cls, ids: Sequence[Sequence[str]], scores: Sequence[Sequence[float | None]]) -> "RetrievalResult":
        """A result from rankings of any lengths, as JSON files keep them: each query's ids and its scores (a
        shorter score row, or a ``None`` in it, reads as NaN: no score, as for the filled tail of a ranking)."""
        if len(ids) != len(scores):
            raise ValueError(f"{len(ids)} rankings for {len(scores)} rows of scores")
        matrix = np.full((len(ids), max((len(row) for row in ids), default=0)), np.nan, dtype=np.float32)
        for n, row in enumerate(scores):
            if len(row) > len(ids[n]):
                raise ValueError(f"ranking {n}: {len(row)} scores for {len(ids[n])} ids")
            matrix[n, : len(row)] = [np.nan if v is None else v for v in row]
        return cls([list(row) for row in ids], matrix)


FIELDS = ("input", "output", "both")


def example_text(example: Example, field: str) -> str:
    if field == "input":
        return example.input
    if field == "output":
        return example.output
    if field == "both":
        return render_demo(example.input, example.output)
    raise ValueError(f"unknown field '{field}'; expected one of {FIELDS}")


MODELS_DIR = "models"


def unique_ids(ids: Sequence[str]) -> IdList:
    """``ids`` as a retriever holds them (an :class:`~taskret.ids.IdList`); ``ValueError`` naming one that occurs
    twice."""
    held = IdList.of(ids)
    twice = held.first_duplicate()
    if twice is not None:
        raise ValueError(f"ids must be unique ('{twice}' occurs twice)")
    return held


def _is_local_model(value: str, directory: Path) -> bool:
    """Whether ``value`` is a model folder on disk outside ``directory`` (a registered name is not a folder)."""
    path = Path(value)
    if not path.is_dir():
        return False
    try:
        path.resolve().relative_to(directory.resolve())
        return False  # already inside the index
    except ValueError:
        return True


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a model folder, hard-linking files where the file system allows (no second copy of the weights)."""
    import shutil

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=link_or_copy)


#: Retriever classes by ``name``, filled as each subclass is defined: what :meth:`Retriever.load` reads.
REGISTRY: dict[str, type["Retriever"]] = {}

#: The keywords a retriever spec may start with (``bm25``, ``dense:ENCODER``, ``epr:DIR``, ...), tried before a saved
#: index's folder: :func:`taskret.retrieval.make_retriever` builds each (its ``SPEC_BUILDERS`` and ``SPEC_PLUGINS``
#: hold exactly these) and :func:`taskret.retrieval.hybrid.reads_instruction` decides "keyword or folder" by them.
#: Here, below both, so that neither imports the other.
SPEC_KEYWORDS = ("random", "bm25", "sbert", "dense", "hybrid", "epr")


class Retriever(ABC):
    """Index a pool of examples once; retrieve the top-k for many queries.

    ``exclude`` gives, per query, an example id to leave out of its results: a training example
    retrieving from its own training set must not find itself.
    """

    name: str = "retriever"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            REGISTRY[cls.name] = cls

    def __init__(self) -> None:
        self.ids: Sequence[str] = []

    field: str = "input"

    @property
    def reads_instruction(self) -> bool:
        """Whether a query's instruction (``"{instruction} [SEP] {query}"``) can change what this retriever finds: a
        dense encoder reads it; BM25 (unless ``read_instruction``) and a hybrid whose components all drop it do not."""
        return True

    def index(self, examples: Sequence[Example]) -> "Retriever":
        """Index examples by their ``field`` text (input, output or both)."""
        return self.index_texts([e.id for e in examples], [example_text(e, self.field) for e in examples])

    def index_texts(self, ids: Sequence[str], texts: Sequence[str]) -> "Retriever":
        """Index any texts under the given ids (documents of a retrieval corpus, for instance)."""
        if len(ids) != len(texts):
            raise ValueError("ids and texts must have the same length")
        held = unique_ids(ids)
        self._index_texts(list(texts))
        self.ids = held
        return self

    def index_stream(self, ids: Sequence[str], texts: Callable[[], Iterable[str]], plan=None) -> "Retriever":
        """Index texts read in passes, without holding them where the retriever need not: ``texts()`` yields the
        text of each of ``ids`` in order, the same on every call (a corpus file read again). A dense retriever
        encodes them in shards (``plan``, a :class:`~taskret.retrieval.shards.ShardPlan`: where the shards are kept
        so a killed run resumes, and whether Ray encodes them), adding each shard to its FAISS index as it comes;
        the others hold the texts as :meth:`index_texts` does."""
        held = unique_ids(ids)
        self._index_stream(texts, len(held), plan)
        self.ids = held
        return self

    def check_models(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Fail now, before a long job reads its data, if a model this retriever needs is not installed (a clear
        ``ModelNotInstalled``); nothing is loaded."""

    def _index_stream(self, texts: Callable[[], Iterable[str]], n: int, plan) -> None:
        held = list(texts())
        if len(held) != n:
            raise ValueError(f"{n} ids but {len(held)} texts")
        self._index_texts(held)

    @abstractmethod
    def _index_texts(self, texts: list[str]) -> None: ...

    @abstractmethod
    def _search(self, queries: Sequence[str], k: int) -> tuple[list[list[int]], np.ndarray]:
        """Row indices into ``self.ids`` and scores, best first, ``k`` per query (fewer if the pool is small)."""

    def retrieve(self, queries: Sequence[str], k: int, exclude: Sequence[str | None] | None = None) -> RetrievalResult:
        if not self.ids:
            raise RuntimeError(f"{self.name} retriever has no index: call index() or load() first")
        if k < 1:
            raise ValueError("k must be at least 1")
        extra = 1 if exclude is not None else 0
        rows, scores = self._search(list(queries), min(k + extra, len(self.ids)))
        out_ids: list[list[str]] = []
        out_scores = np.full((len(rows), k), np.nan, dtype=np.float32)
        for q, (row_ids, row_scores) in enumerate(zip(rows, scores)):
            skip = exclude[q] if exclude is not None else None
            found = [(self.ids[r], s) for r, s in zip(row_ids, row_scores)]  # each id read once: an IdList decodes it
            kept = [(i, s) for i, s in found if i != skip][:k]
            out_ids.append([i for i, _ in kept])
            out_scores[q, : len(kept)] = [s for _, s in kept]
        return RetrievalResult(out_ids, out_scores)

    def warm_up(self) -> None:
        """Ready this retriever for many queries (a service's start): one query loads what a first search would
        (an encoder; a retriever may compile more)."""
        self.retrieve(["warm up"], k=1)

    # -- persistence -----------------------------------------------------------------------------

    #: Config keys that may name a local model folder (a trained encoder). :meth:`save` puts such a folder
    #: inside the index (``models/KEY``, hard-linked where it can) and records that path relative to the
    #: index, so a copied or moved index loads from any working directory; registered model names stay names.
    model_keys: tuple[str, ...] = ("encoder", "query_encoder")

    def save(self, directory: str | os.PathLike, with_ids: bool = True) -> None:
        """Write the index to ``directory``, ``meta.json`` last. ``with_ids=False``: a hybrid's component, whose ids
        are its hybrid's (:meth:`load` gets them from there), so that an index holds its ids once."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._save_index(directory)
        config = self.config()
        copied: dict[str, str] = {}  # source folder -> its path in the index: a folder used twice is copied once
        for key in self.model_keys:
            value = config.get(key)
            if isinstance(value, str) and _is_local_model(value, directory):
                source = str(Path(value).resolve())
                if source not in copied:
                    copied[source] = f"{MODELS_DIR}/{key}"
                    _copy_tree(Path(source), directory / copied[source])
                config[key] = copied[source]
        if with_ids:  # beside meta.json, not in it: an IdList's files, memory-mapped at load (module ids)
            IdList.of(self.ids).save(directory)
        # meta.json is written last: its presence marks a complete index.
        write_json(directory / "meta.json", {"retriever": self.name, **config})

    #: Whether :meth:`load` memory-maps the index's files where their format allows (bm25s arrays, a FAISS
    #: index) instead of reading them: processes serving one index then share its pages (``taskret serve``).
    mmap: bool = False

    @classmethod
    def load(cls, directory: str | os.PathLike, mmap: bool = False, ids: Sequence[str] | None = None,
             options: dict | None = None) -> "Retriever":
        """The retriever saved in ``directory``; ``ids``: those of a hybrid's component, whose folder holds none (or
        the folder's own, already read); ``options``: constructor settings that replace the saved ones (a BM25
        index searched on another backend: ``{"backend": "pisa"}``)."""
        directory = Path(directory)
        meta_path = directory / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{directory}: not a complete taskret index (no meta.json)")
        meta = read_json(meta_path)
        if meta.get("retriever") not in REGISTRY:
            raise ValueError(f"{meta_path}: unknown retriever '{meta.get('retriever')}'")
        klass = REGISTRY[meta["retriever"]]
        if cls is not Retriever and not issubclass(klass, cls):
            raise ValueError(f"{meta_path}: holds a '{meta['retriever']}' index, not {cls.name}")
        config = {k: v for k, v in meta.items() if k not in ("retriever", "ids")}
        unknown = sorted(set(options or {}) - set(inspect.signature(klass.__init__).parameters) - {"self"})
        if unknown:
            raise ValueError(f"{meta_path}: a '{meta['retriever']}' index takes no option {', '.join(unknown)}")
        config.update(options or {})
        for key in klass.model_keys:  # a model saved inside the index: its path is relative to the index
            value = config.get(key)
            if isinstance(value, str) and value.startswith(f"{MODELS_DIR}/") and (directory / value).is_dir():
                config[key] = str(directory / value)
        if ids is None and "ids" in meta:  # an index saved before its ids had files of their own
            ids = meta["ids"]
        elif ids is None and IdList.saved_in(directory):
            ids = IdList.load(directory, mmap=mmap)
        elif ids is None:
            raise ValueError(f"{meta_path}: holds no ids (a hybrid's component: load the hybrid's folder)")
        retriever = klass(**config)
        retriever.ids = IdList.of(ids)
        retriever.mmap = mmap
        retriever._load_index(directory)
        return retriever

    def config(self) -> dict:
        """Constructor keyword arguments that rebuild this retriever (saved in meta.json)."""
        return {}

    # Hooks for retrievers with files beside meta.json (bm25s/, index.faiss); a seeded random one has none.
    def _save_index(self, directory: Path) -> None:  # noqa: B027 - an optional hook, not abstract
        pass

    def _load_index(self, directory: Path) -> None:  # noqa: B027 - an optional hook, not abstract
        pass
