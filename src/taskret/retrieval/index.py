"""Index folders that can be served: a saved retriever plus the texts it indexes, in one format.

Every ``index`` command (``taskret index``, ``taskret epr index``, ``taskret tart index``) writes, through
:func:`save_index`, a ``taskret-index/2`` folder::

    items.jsonl        the indexed texts in index order: {"id", "input", "output"} per example, or
                       {"id", "title", "text"} per document
    items.offsets.npy  where each line of items.jsonl starts, and its size last (int64): a memory-mapped load
                       reads a record only when it is asked for (LazyRecords)
    index_info.json    {"format": "taskret-index/2", "kind": "examples" | "documents", "task", "retriever"
                       (the spec it was built from), "n", "output_format", "lm" (whose tokenizer counts prompt
                       tokens), "instruction" (TART: the task's instruction), ...; an index of an EPR run adds
                       the run's "context_window", "max_new_tokens" and, for a run trained for a selection
                       (CEIL's DPP), "selection": {"method", "weight", "n_candidates", "encoder"}}
    meta.json, ...     the retriever (Retriever.save): bm25s/ for BM25, index.faiss for dense retrievers;
                       meta.json is written last, the mark of a complete index

The folder is written beside its destination and renamed onto it, so a reader never sees half an index.

:func:`load_index` reads that format and the layouts older versions left on disk: ``taskret-index/1``
example indexes (``examples.jsonl`` + ``index_info.json``) and TART document indexes (``docs.jsonl`` +
``tart.json``). It checks every file before anything is served and refuses a partial or mismatched folder
with an :class:`InvalidIndex` error that names the offending file. Memory-mapped (``mmap=True``, as ``taskret
serve`` loads it), the texts of a taskret-index/2 folder are not read up front: :class:`LazyRecords` parses a record
when it is asked for, so each line is checked then.
"""

from __future__ import annotations

import codecs
import json
import logging
import mmap as mmap_module
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..corpus import fingerprint
from ..data import Example
from ..formats import BREAK_FORMAT, break_to_prompt
from ..ids import IDS_FILE, IdList, IdLookup
from ..io import DataError, iter_records, read_json, write_json, write_jsonl
from .base import REGISTRY as RETRIEVERS
from .base import Retriever, example_text
from .budget import MemoryBudget
from .set_selection import Selection, trained_for
from .shards import SHARD_SIZE, SHARDS_DIR, ShardPlan

__all__ = ["INDEX_FORMAT", "ITEMS_FILE", "OFFSETS_FILE", "INFO_FILE", "KINDS", "InvalidIndex", "IndexRecord",
           "LazyRecords", "LoadedIndex", "save_index", "index_documents", "index_examples", "load_index",
           "output_format_name"]

logger = logging.getLogger(__name__)

INDEX_FORMAT = "taskret-index/2"
ITEMS_FILE = "items.jsonl"
OFFSETS_FILE = "items.offsets.npy"  # where each record of items.jsonl starts (LazyRecords)
INFO_FILE = "index_info.json"
META_FILE = "meta.json"  # Retriever.save writes it last
KINDS = ("examples", "documents")
# Older layouts, read by load_index and written by nothing any more.
EXAMPLES_FILE = "examples.jsonl"  # taskret-index/1 (taskret index): examples.jsonl + index_info.json
DOCS_FILE = "docs.jsonl"  # taskret tart index before taskret-index/2: docs.jsonl + tart.json
TART_META = "tart.json"
_WRITTEN_BY = "`taskret index`, `taskret epr index` or `taskret tart index`"

# Files bm25s writes (BM25Retriever saves them under bm25s/); the non-occurrence array only for BM25L/BM25+.
_BM25S_FILES = ("params.index.json", "vocab.index.json", "data.csc.index.npy", "indices.csc.index.npy",
                "indptr.csc.index.npy")
OUTPUT_FORMATS: dict[str, Callable[[str], str]] = {"plain": lambda text: text, "break": break_to_prompt}


class InvalidIndex(ValueError):
    """A folder that is not a complete, consistent taskret index; the message names the file."""


@dataclass(frozen=True)
class IndexRecord:
    """One indexed item: an example (``text`` = its input, ``output``) or a document (``title``, ``text``)."""

    id: str
    text: str
    output: str | None = None
    title: str | None = None

    @property
    def indexed_text(self) -> str:
        """The text a retriever or reranker reads: a document's ``"title text"`` (as
        :func:`~taskret.tart.tasks.doc_text` joins them), or an example's input."""
        return f"{(self.title or '').strip()} {self.text.strip()}".strip()


@dataclass
class LoadedIndex:
    directory: Path
    retriever: Retriever
    kind: str  # "examples" or "documents" ("retriever": a bare retriever, no records; see load_index)
    records: Mapping[str, IndexRecord]  # a dict, or LazyRecords when loaded memory-mapped
    info: dict = field(default_factory=dict)  # index_info.json (older layouts: mapped onto its keys)

    @property
    def lm(self) -> str | None:
        return self.info.get("lm")

    @property
    def output_format(self) -> str:
        return self.info.get("output_format") or "plain"

    @property
    def instruction(self) -> str | None:
        return self.info.get("instruction")

    @property
    def context_window(self) -> int | None:
        """The LM context its prompts were built for (an index of an EPR run records the run's), else None."""
        return self.info.get("context_window")

    @property
    def max_new_tokens(self) -> int | None:
        return self.info.get("max_new_tokens")

    @property
    def selection(self):
        """The :class:`~taskret.retrieval.set_selection.Selection` the index records (an EPR run trained for CEIL's
        DPP), which the service's ``/prompt`` and the LangChain selector apply by default; else None."""
        recorded = self.info.get("selection")
        return None if recorded is None else Selection.from_record(recorded)

    def prompt_output(self, record: IndexRecord) -> str:
        """The output as a demonstration shows it (Break's ``1#) step 2#) step``, others unchanged)."""
        return OUTPUT_FORMATS[self.output_format](record.output or "")

    def records_of(self, record_ids: Sequence[str]) -> list[IndexRecord]:
        """The records of ``record_ids`` (a ranking's), in their order: a memory-mapped index finds them all in one
        search (:meth:`LazyRecords.take`)."""
        if isinstance(self.records, LazyRecords):
            return self.records.take(record_ids)
        return [self.records[i] for i in record_ids]

    def examples(self) -> list[Example]:
        return [Example(r.id, r.text, r.output or "") for r in (self.records[i] for i in self.retriever.ids)]

    def use_query_encoder(self, name: str) -> None:
        """Encode queries with ``name`` from now on: a query encoder distilled over this dense index's frozen
        document vectors (``taskret tart distil --freeze-documents``), so the corpus is not encoded again.
        ``ValueError`` for an index that is not dense, or for a model that encodes the first indexed item
        differently from the index (:meth:`~taskret.retrieval.dense.DenseRetriever.use_query_encoder`)."""
        from .dense import DenseRetriever

        if not isinstance(self.retriever, DenseRetriever):
            raise ValueError(f"{self.directory}: a query encoder needs a dense index, this one is "
                             f"{self.retriever.name}")
        ids = self.retriever.ids
        if ids and ids[0] not in self.records:
            raise ValueError(f"{self.directory}: the index holds no texts ({ITEMS_FILE}) to check query encoder "
                             f"'{name}' against; rebuild it with `taskret tart index`")
        self.retriever.use_query_encoder(name, self.records[ids[0]].indexed_text if ids else None)


def output_format_name(fmt) -> str:
    return "break" if fmt is BREAK_FORMAT else "plain"


# -- writing -------------------------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _item_row(kind: str, item) -> dict:
    """items.jsonl's row of an :class:`~taskret.data.Example`, a document (anything with ``id``, ``title``
    and ``text``, e.g. :class:`~taskret.tart.tasks.Document`) or an :class:`IndexRecord`."""
    if kind == "examples":
        if isinstance(item, IndexRecord):
            return {"id": item.id, "input": item.text, "output": item.output or ""}
        return {"id": item.id, "input": item.input, "output": item.output}
    return {"id": item.id, "title": item.title or "", "text": item.text}


PROMPT_SETTINGS = ("context_window", "max_new_tokens")


def run_prompt_settings(spec: str) -> dict:
    """The prompt settings (``context_window``, ``max_new_tokens``) of the EPR run behind ``epr:DIR`` (DIR: the work
    folder, its ``index/`` or ``retriever/``), read from its ``pipeline_config.json``, and the ``selection`` its
    retriever was trained for (:func:`~taskret.retrieval.set_selection.trained_for`: a set-training run's DPP, as
    ``taskret evaluate --retriever epr:DIR`` applies it); ``{}`` for any other spec or a folder without them.
    :func:`save_index` gets them as ``extra``, so ``taskret serve`` builds the prompts the run was evaluated with."""
    from ..io import read_json

    if not spec.startswith("epr:"):
        return {}
    trained = trained_for(spec)
    settings = {"selection": trained.record()} if trained is not None else {}
    folder = Path(spec[len("epr:"):])
    for candidate in (folder, folder.parent):
        config = candidate / "pipeline_config.json"
        if config.is_file():
            saved = read_json(config)
            return {**{key: saved[key] for key in PROMPT_SETTINGS if isinstance(saved.get(key), int)}, **settings}
    return settings


def check_destination(out: Path) -> None:
    """Refuse to write an index over a file or a non-empty folder that is not an index (one holding only the
    shards of an interrupted :func:`index_documents` is its own)."""
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"{out}: exists and is not a folder")
        if any(p.name != SHARDS_DIR for p in out.iterdir()) and not (out / META_FILE).exists():
            raise ValueError(f"{out}: a non-empty folder that is not a taskret index; refusing to overwrite it")


def _rows_in_order(kind: str, items: Iterable, ids: Sequence[str]) -> Iterator[dict]:
    """items.jsonl's rows, each item checked to be the next of ``ids`` (items read in a pass are checked as they
    are written: the folder is dropped if one is not)."""
    count = 0
    for count, item in enumerate(items, start=1):
        if count > len(ids) or item.id != ids[count - 1]:
            raise ValueError(f"the retriever must be indexed over exactly these {kind}, in this order (item "
                             f"{count} is '{item.id}')")
        yield _item_row(kind, item)
    if count != len(ids):
        raise ValueError(f"the retriever must be indexed over exactly these {kind}: {count} items for {len(ids)} ids")


def save_index(out: str | os.PathLike, retriever: Retriever, items: Iterable, *, kind: str = "examples",
               task: str | None = None, retriever_spec: str | None = None, output_format: str | None = None,
               lm: str | None = None, instruction: str | None = None, extra: dict | None = None) -> Path:
    """Save an indexed retriever with the texts it indexes (``items``: examples, or documents with
    ``kind="documents"``, a sequence or anything read in one pass, such as a
    :class:`~taskret.corpus.DocumentStream`) as a ``taskret-index/2`` folder, atomically: everything is written to a temporary
    folder beside ``out`` and renamed onto it, so ``out`` never holds a partial index. ``extra`` adds keys
    to index_info.json.

    An existing index at ``out`` is replaced; an existing non-empty folder that is not an index is refused.
    """
    out = Path(out)
    if kind not in KINDS:
        raise ValueError(f"unknown index kind '{kind}'; expected one of {', '.join(KINDS)}")
    if kind == "examples":
        output_format = output_format or "plain"
        if output_format not in OUTPUT_FORMATS:
            raise ValueError(f"unknown output format '{output_format}'; expected one of {', '.join(OUTPUT_FORMATS)}")
    elif output_format is not None or lm is not None:
        raise ValueError("output_format and lm describe prompts built from examples; a document index has neither")
    if isinstance(items, Sequence) and [item.id for item in items] != list(retriever.ids):
        raise ValueError(f"the retriever must be indexed over exactly these {kind}, in this order")
    check_destination(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        # The offsets are counted as the rows are written, not scanned from the file after: a scan of the
        # memory-mapped file kept every page of it resident (~0.5 KB a document: ~5 GiB at 10M).
        offsets = write_jsonl(tmp / ITEMS_FILE, _rows_in_order(kind, items, retriever.ids))
        with open(tmp / OFFSETS_FILE, "wb") as handle:
            np.save(handle, np.frombuffer(offsets, dtype=np.int64), allow_pickle=False)
        write_json(tmp / INFO_FILE, {**(extra or {}), "format": INDEX_FORMAT, "kind": kind, "task": task,
                                     "retriever": retriever_spec or retriever.name, "n": len(retriever.ids),
                                     "output_format": output_format, "lm": lm, "instruction": instruction})
        retriever.save(tmp)  # meta.json last
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes the folder private
        if out.exists():
            old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def index_documents(out: str | os.PathLike, retriever: Retriever, documents, *, retriever_spec: str | None = None,
                    instruction: str | None = None, extra: dict | None = None, shard_size: int = SHARD_SIZE,
                    ray=None, memory_budget: MemoryBudget = MemoryBudget()) -> Path:
    """Index a corpus read in passes (``documents``: a :class:`~taskret.corpus.DocumentStream`, from
    :func:`~taskret.tart.tasks.open_corpus`) into the document index ``out``, holding no more than the index: one
    pass checks every document and takes the corpus's ids and fingerprint, the retriever indexes the texts of
    another (:meth:`~taskret.retrieval.base.Retriever.index_stream`: a dense encoder's vectors go to
    ``out/.shards/`` shard by shard, so a killed run started again resumes from them; ``ray``, a
    :class:`~taskret.epr.distributed.RayOptions`, encodes them on Ray actors), and :func:`save_index` writes the
    folder from a last one, atomically (the shards go with the folder it replaces). ``memory_budget`` (a
    :class:`~taskret.retrieval.budget.MemoryBudget`, default 8 GiB) sets the dense index type and BM25's segments.
    Each stage reports its progress under :func:`~taskret.progress.reporting`. Shards of another corpus or encoder
    are refused (:class:`~taskret.retrieval.shards.ShardMismatch`)."""
    out = Path(out)
    _index_in_shards(out, retriever, documents.scan, documents.texts, None, f"reading {documents.name}", "documents",
                     shard_size, ray, memory_budget)
    return save_index(out, retriever, documents, kind="documents", task=documents.name, retriever_spec=retriever_spec,
                      instruction=instruction, extra=extra)


def index_examples(out: str | os.PathLike, retriever: Retriever, examples: Sequence[Example], *,
                   task: str | None = None, retriever_spec: str | None = None, output_format: str | None = None,
                   lm: str | None = None, extra: dict | None = None, shard_size: int = SHARD_SIZE,
                   ray=None, memory_budget: MemoryBudget = MemoryBudget()) -> Path:
    """Index an example pool into the example index ``out``, as :func:`index_documents` indexes a corpus: the texts
    the retriever reads of each example (its ``field``: input, output or both, as
    :meth:`~taskret.retrieval.base.Retriever.index` takes them) are fingerprinted with the ids, a dense encoder's
    vectors go to ``out/.shards/`` shard by shard (on Ray actors with ``ray``), so a killed run started again
    resumes from them and shards of another pool or encoder are refused
    (:class:`~taskret.retrieval.shards.ShardMismatch`), and :func:`save_index` writes the folder atomically, the same
    folder ``retriever.index(examples)`` and :func:`save_index` would write. Each stage reports its progress under
    :func:`~taskret.progress.reporting`."""
    out = Path(out)
    indexed = retriever.field

    def texts() -> Iterator[str]:
        return (example_text(example, indexed) for example in examples)

    def scan(advance: Callable[[int], None]) -> tuple[list[str], str]:
        return [example.id for example in examples], fingerprint(zip((e.id for e in examples), texts()), advance)

    _index_in_shards(out, retriever, scan, texts, len(examples), f"reading {task or 'the pool'}", "examples",
                     shard_size, ray, memory_budget)
    return save_index(out, retriever, examples, task=task, retriever_spec=retriever_spec, output_format=output_format,
                      lm=lm, extra=extra)


def _index_in_shards(out: Path, retriever: Retriever, scan: Callable, texts: Callable[[], Iterable[str]],
                     total: int | None, description: str, unit: str, shard_size: int, ray,
                     memory_budget: MemoryBudget) -> None:
    """The retriever of :func:`index_documents` and :func:`index_examples` indexed: ``out`` and the retriever's models
    checked before anything is read, ``scan(advance)`` for the ids and fingerprint (one progress stage of ``total``
    ``unit``), then :meth:`~taskret.retrieval.base.Retriever.index_stream` of ``texts`` in shards under
    ``out/.shards/`` that carry that fingerprint."""
    from ..progress import stage

    check_destination(out)
    retriever.check_models()  # an encoder that is not installed fails before the texts are read
    with stage(total, description, unit=unit) as advance:
        ids, digest = scan(advance)
    retriever.index_stream(ids, texts, ShardPlan(out / SHARDS_DIR, digest, shard_size, ray, memory_budget))


# -- loading and checking ------------------------------------------------------------------------------


def _read_meta(directory: Path) -> dict:
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise InvalidIndex(f"{meta_path}: missing; {directory} is not a complete taskret index (no meta.json: a "
                           f"partial write, or not written by {_WRITTEN_BY})")
    meta = _read_json_object(meta_path)
    if meta.get("retriever") not in RETRIEVERS:
        raise InvalidIndex(f"{meta_path}: unknown retriever {meta.get('retriever')!r}; expected one of "
                           f"{', '.join(RETRIEVERS)}")
    return meta


def _read_ids(directory: Path, meta: dict, mmap: bool) -> tuple[IdList, IdLookup, Path]:
    """The index's ids, checked, their lookup (kept for :class:`LazyRecords`: the ids hashed once) and the file they
    were read from: their own (:mod:`taskret.ids`), or meta.json where an index saved before those files holds
    them."""
    if "ids" in meta or not IdList.saved_in(directory):
        where, ids = directory / META_FILE, meta.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidIndex(f"{where}: 'ids' must be a non-empty list of strings")
        ids = IdList.of(ids)
    else:
        where = directory / IDS_FILE
        try:
            ids = IdList.load(directory, mmap=mmap)
        except (OSError, ValueError) as err:
            raise InvalidIndex(f"{where}: unreadable ids ({err})") from err
    if not len(ids):
        raise InvalidIndex(f"{where}: holds no ids")
    lookup = IdLookup(ids)
    twice = lookup.first_duplicate()
    if twice is not None:
        raise InvalidIndex(f"{where}: 'ids' holds duplicates (e.g. '{twice}')")
    return ids, lookup, where


def _check_retriever_files(directory: Path, meta: dict) -> None:
    name = meta["retriever"]
    if name == "bm25":
        for file in _BM25S_FILES:
            if not (directory / "bm25s" / file).is_file():
                raise InvalidIndex(f"{directory / 'bm25s' / file}: missing; the BM25 index is partial")
    elif name in ("dense", "sbert"):
        if not (directory / "index.faiss").is_file():
            raise InvalidIndex(f"{directory / 'index.faiss'}: missing; the dense index is partial")


def _count_indexed(directory: Path, retriever: Retriever) -> tuple[int, Path] | None:
    """How many items the retriever's own files hold, and which file says so."""
    if retriever.name == "bm25":
        return int(retriever._bm25.scores["num_docs"]), directory / "bm25s" / "params.index.json"
    if retriever.name in ("dense", "sbert"):
        return int(retriever._index.ntotal), directory / "index.faiss"
    return None


def _string(path: Path, line: int, record: dict, name: str, required: bool = True) -> str | None:
    value = record.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidIndex(f"{path}, line {line}: field '{name}' must be a non-empty string")
    return value


def _read_json_object(path: Path) -> dict:
    try:
        info = read_json(path)
    except DataError as err:
        raise InvalidIndex(str(err)) from err
    if not isinstance(info, dict):
        raise InvalidIndex(f"{path}: expected a JSON object")
    return info


def _layout(directory: Path) -> tuple[str, Path, dict] | None:
    """``(kind, texts file, info)`` of the index's layout: taskret-index/2, or an older one (its info mapped
    onto taskret-index/2's keys); None for a bare retriever (Retriever.save alone)."""
    if (directory / ITEMS_FILE).is_file():
        info_path = directory / INFO_FILE
        if not info_path.is_file():
            raise InvalidIndex(f"{info_path}: missing; the index is partial")
        info = _read_json_object(info_path)
        if info.get("kind") not in KINDS:
            raise InvalidIndex(f"{info_path}: 'kind' must be one of {', '.join(KINDS)} (got {info.get('kind')!r})")
        return info["kind"], directory / ITEMS_FILE, info
    if (directory / EXAMPLES_FILE).is_file():  # taskret-index/1
        info_path = directory / INFO_FILE
        info = _read_json_object(info_path) if info_path.is_file() else {}
        return "examples", directory / EXAMPLES_FILE, {**info, "kind": "examples"}
    if (directory / DOCS_FILE).is_file():  # taskret tart index before taskret-index/2
        tart_path = directory / TART_META
        tart = _read_json_object(tart_path) if tart_path.is_file() else {}
        instructions = tart.get("instructions") or []
        return "documents", directory / DOCS_FILE, {
            **tart, "format": "tart-docs", "kind": "documents", "n": tart.get("n_docs"),
            "instruction": instructions[0] if isinstance(instructions, list) and instructions else None}
    return None


def _check_info(directory: Path, kind: str, info: dict) -> None:
    path = directory / (TART_META if info.get("format") == "tart-docs" else INFO_FILE)
    if kind == "examples":
        if (info.get("output_format") or "plain") not in OUTPUT_FORMATS:
            raise InvalidIndex(f"{path}: unknown output_format {info.get('output_format')!r}")
        if info.get("lm") is not None and not isinstance(info["lm"], str):
            raise InvalidIndex(f"{path}: 'lm' must be a string or null")
    if info.get("instruction") is not None and not isinstance(info["instruction"], str):
        raise InvalidIndex(f"{path}: 'instruction' must be a string or null")
    if info.get("selection") is not None:
        if kind != "examples":
            raise InvalidIndex(f"{path}: 'selection' chooses demonstrations; a {kind} index has none")
        try:
            Selection.from_record(info["selection"])
        except ValueError as err:
            raise InvalidIndex(f"{path}: 'selection': {err}") from None


def _record(path: Path, line: int, row: dict, kind: str) -> IndexRecord:
    """The record of one row of a texts file, its fields checked."""
    record_id = row.get("id")
    if isinstance(record_id, (int, float)) and not isinstance(record_id, bool):
        record_id = str(record_id)
    if not isinstance(record_id, str) or not record_id:
        raise InvalidIndex(f"{path}, line {line}: field 'id' must be a non-empty string")
    if kind == "examples":
        return IndexRecord(record_id, _string(path, line, row, "input"), output=_string(path, line, row, "output"))
    text = _string(path, line, row, "text", required=False) or ""
    return IndexRecord(record_id, text, title=_string(path, line, row, "title", False))


def _read_records(path: Path, kind: str) -> dict[str, IndexRecord]:
    records: dict[str, IndexRecord] = {}
    try:
        for line, row in iter_records(path):
            record = _record(path, line, row, kind)
            if record.id in records:
                raise InvalidIndex(f"{path}, line {line}: duplicate id '{record.id}'")
            records[record.id] = record
    except DataError as err:
        raise InvalidIndex(str(err)) from err
    return records


try:  # a record is parsed per result a service returns: orjson (the serve extra) parses one ~4x faster
    from orjson import loads as _loads  # its JSONDecodeError is json's
except ImportError:  # pragma: no cover - the standard library's
    _loads = json.loads


class LazyRecords(Mapping[str, IndexRecord]):
    """An index's records by id, as :attr:`LoadedIndex.records`, each parsed from the memory-mapped texts file only
    when it is asked for: the workers of ``taskret serve`` share the texts in the page cache instead of each
    holding its own copy. Record ``i`` is the ``i``-th of ``ids`` (the retriever's, in index order) and starts at
    byte ``offsets[i]`` (``offsets[-1]``: the file's size); ``lines`` gives their line numbers where blank lines
    make them other than ``i + 1``. A line is checked when it is read: a malformed one, or one holding another
    id, raises :class:`InvalidIndex` naming the file and line."""

    def __init__(self, path: Path, kind: str, texts, offsets: np.ndarray, ids: Sequence[str],
                 lines: np.ndarray | None = None, lookup: IdLookup | None = None):
        self.path, self.kind, self.ids = path, kind, ids
        self._texts, self._offsets, self._lines = texts, offsets, lines
        # A lookup by id is a binary search over the ids' hashes: 16 bytes an id, where a dict would add ~70 to
        # each worker (a million ids: 16 MB against 70 MB). ``lookup``: one already made over these ids.
        self._lookup = lookup if lookup is not None else IdLookup(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __contains__(self, record_id) -> bool:
        return self.position(record_id) is not None

    def __getitem__(self, record_id: str) -> IndexRecord:
        position = self.position(record_id)
        if position is None:
            raise KeyError(record_id)
        return self.at(position)

    def position(self, record_id: str) -> int | None:
        """Where ``record_id`` is in index order, or None; nothing is parsed."""
        return self._lookup.position(record_id)

    def take(self, record_ids: Sequence[str]) -> list[IndexRecord]:
        """The records of ``record_ids`` in their order (KeyError for an id the index lacks): their hashes' places
        found in one search, not one each."""
        positions = self._lookup.positions(record_ids)
        missing = next((i for i, position in zip(record_ids, positions) if position is None), None)
        if missing is not None:
            raise KeyError(missing)
        return [self.at(position) for position in positions]

    def at(self, position: int) -> IndexRecord:
        """The record at ``position`` in index order, parsed and checked now."""
        if not 0 <= position < len(self.ids):
            raise IndexError(f"record {position} of an index of {len(self.ids)}")
        start, end = int(self._offsets[position]), int(self._offsets[position + 1])
        newline = self._texts.find(b"\n", start, end)  # blank lines after the record belong to none
        raw = self._texts[start:end if newline < 0 else newline]
        line = position + 1 if self._lines is None else int(self._lines[position])
        try:
            row = _loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise InvalidIndex(f"{self.path}, line {line}: not valid UTF-8 ({err.reason} at byte "
                               f"{start + err.start})") from None
        except json.JSONDecodeError as err:
            raise InvalidIndex(f"{self.path}, line {line}: malformed JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise InvalidIndex(f"{self.path}, line {line}: expected a JSON object")
        record = _record(self.path, line, row, self.kind)
        if record.id != self.ids[position]:
            raise InvalidIndex(f"{self.path}, line {line}: holds id '{record.id}' where the index lists "
                               f"'{self.ids[position]}' (mismatched index)")
        return record


# Newlines are found this many bytes of the texts at a time: the scan's memory stays bounded, whatever the file.
_SCAN_BLOCK = 1 << 26


def _scan_offsets(texts) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each record of a JSONL file's bytes ``texts`` starts, and its size last (int64, one more than the
    records), found in one pass over its newlines, nothing parsed; and the records' line numbers where blank lines
    (skipped, as :func:`~taskret.io.iter_records` skips them) make them other than position + 1, else None."""
    data = np.frombuffer(texts, dtype=np.uint8)
    size = len(data)
    newlines = [np.flatnonzero(data[at:at + _SCAN_BLOCK] == ord("\n")) + at for at in range(0, size, _SCAN_BLOCK)]
    first = len(codecs.BOM_UTF8) if bytes(data[:3]) == codecs.BOM_UTF8 else 0  # as iter_records's utf-8-sig
    starts = np.concatenate([[first], *(found + 1 for found in newlines)]).astype(np.int64)
    starts = starts[starts < size]
    ends = np.append(starts[1:], size)
    # A record's line starts with "{": only the few lines that do not are read, to find the blank ones.
    unusual = np.flatnonzero(data[starts] != ord("{"))
    blank = [i for i in unusual if not bytes(data[starts[i]:ends[i]]).decode("utf-8", "replace").strip()]
    kept = np.ones(len(starts), dtype=bool)
    kept[blank] = False
    offsets = np.append(starts[kept], size).astype(np.int64)
    return offsets, (np.flatnonzero(kept) + 1 if blank else None)


def _map_file(path: Path):
    """The file's bytes, memory-mapped read-only (an empty file, which cannot be mapped: ``b""``)."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return b""
        return mmap_module.mmap(handle.fileno(), 0, access=mmap_module.ACCESS_READ)


def _saved_offsets(path: Path, size: int, count: int) -> np.ndarray | None:
    """The offsets :func:`save_index` wrote, memory-mapped (the workers share them too), if they fit a texts file
    of ``size`` bytes holding ``count`` records; else None."""
    if not path.is_file():
        return None  # an index saved before the offsets were: its texts are scanned
    try:
        offsets = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        logger.warning("%s: unreadable (%s); scanning the texts instead", path, err)
        return None
    if (offsets.dtype != np.int64 or offsets.shape != (count + 1,) or offsets[0] < 0 or offsets[-1] != size
            or not np.all(offsets[1:] > offsets[:-1])):
        # The texts were rewritten after the index was saved: they are what the index holds, the offsets not.
        logger.warning("%s: does not fit %s (%d records, %d bytes); scanning the texts instead", path,
                       path.with_name(ITEMS_FILE), count, size)
        return None
    return offsets


def _map_records(texts_path: Path, count: int) -> tuple[object, np.ndarray, np.ndarray | None]:
    """A texts file memory-mapped, where its records start (the saved offsets, or a scan) and their line numbers
    (:func:`_scan_offsets`), for :class:`LazyRecords`; ``count``: the records the index lists."""
    texts = _map_file(texts_path)
    offsets = _saved_offsets(texts_path.with_name(OFFSETS_FILE), len(texts), count)
    if offsets is not None:
        return texts, offsets, None
    return (texts, *_scan_offsets(texts))


def load_index(directory: str | os.PathLike, *, texts_required: bool = True, mmap: bool = False) -> LoadedIndex:
    """Load and check an index folder (any layout a taskret ``index`` command has written): meta.json, the
    retriever's files, the texts and what was indexed, and that they agree.

    A bare retriever folder (``Retriever.save`` alone, as the EPR pipeline's ``index/``) holds no texts: it
    is refused, or with ``texts_required=False`` loaded as kind ``"retriever"`` with no records.

    ``mmap``: memory-map the retriever's files where their format allows (bm25s's arrays, a FAISS index)
    instead of reading them into each process (:attr:`~taskret.retrieval.base.Retriever.mmap`), and the texts
    (items.jsonl) too: the records are a :class:`LazyRecords` that parses each when it is asked for, so the
    workers of ``taskret serve --workers N`` share one copy of everything in the page cache. The count of records
    is checked at load, each line's fields and id only when it is read. (Older layouts' texts are read whole.)
    Off by default: a mapped index must not be rewritten in place while it is in use (``save_index`` replaces a
    folder by renaming, which is safe)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InvalidIndex(f"{directory}: no such folder (so no meta.json); write an index with {_WRITTEN_BY}")
    meta = _read_meta(directory)
    _check_retriever_files(directory, meta)
    ids, lookup, ids_file = _read_ids(directory, meta, mmap)
    layout = _layout(directory)
    mapped = None  # (texts, offsets, line numbers) of texts left in their file
    if layout is None:
        if texts_required:
            raise InvalidIndex(f"{directory}: holds no texts ({ITEMS_FILE}), only a retriever; re-create it with "
                               f"{_WRITTEN_BY}")
        kind, info, records = "retriever", {}, {}
    else:
        kind, texts_path, info = layout
        # Only items.jsonl is mapped: save_index wrote it in the retriever's order, which an older layout's file
        # need not follow.
        if mmap and texts_path.name == ITEMS_FILE:
            mapped = _map_records(texts_path, len(ids))
            count = len(mapped[1]) - 1
        else:
            records = _read_records(texts_path, kind)
            count = len(records)
        if count != len(ids):
            raise InvalidIndex(f"{texts_path}: holds {count} records but {ids_file} lists "
                               f"{len(ids)} ids (mismatched or partial index)")
        missing = next((i for i in ids if i not in records), None) if mapped is None else None
        if missing is not None:
            raise InvalidIndex(f"{texts_path}: has no record for id '{missing}' listed in {directory / META_FILE} "
                               f"(mismatched index)")
    _check_info(directory, kind, info)
    try:
        retriever = Retriever.load(directory, mmap=mmap, ids=ids)
    except InvalidIndex:
        raise
    except (ValueError, FileNotFoundError, KeyError, TypeError, OSError, RuntimeError) as err:
        raise InvalidIndex(f"{directory}: cannot load the {meta['retriever']} index ({err})") from err
    counted = _count_indexed(directory, retriever)
    if counted is not None and counted[0] != len(ids):
        raise InvalidIndex(f"{counted[1]}: holds {counted[0]} items but {ids_file} lists {len(ids)} "
                           f"ids (mismatched or partial index)")
    if mapped is not None:  # by the retriever's ids: one list of them in the process, not two
        records = LazyRecords(texts_path, kind, *mapped[:2], retriever.ids, lines=mapped[2],
                              lookup=lookup if retriever.ids is ids else None)
    return LoadedIndex(directory=directory, retriever=retriever, kind=kind, records=records, info=info)
