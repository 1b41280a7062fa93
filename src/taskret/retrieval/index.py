"""Index folders that can be served: a saved retriever plus the texts it indexes.

An *example index* (written by :func:`save_index`, i.e. ``taskret index``) holds::

    examples.jsonl     one {"id", "input", "output"} per indexed example, in index order
    index_info.json    what was indexed: task, retriever spec, output format, the LM whose tokenizer
                       counts prompt tokens (optional), number of examples
    meta.json, ...     the retriever (Retriever.save): bm25s/ for BM25, index.faiss for dense retrievers

A *document index* (written by ``taskret tart index``) holds ``docs.jsonl`` ({"id", "title", "text"}) and
``tart.json`` instead. Both keep ``meta.json`` as the last file written, the mark of a complete index.

:func:`load_index` checks every file before anything is served and refuses a partial or mismatched
folder with an :class:`InvalidIndex` error that names the offending file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..data import Example
from ..formats import BREAK_FORMAT, break_to_prompt
from ..io import DataError, iter_records, read_json, write_json, write_jsonl
from .base import REGISTRY as RETRIEVERS
from .base import Retriever

__all__ = ["EXAMPLES_FILE", "INFO_FILE", "DOCS_FILE", "TART_META", "InvalidIndex", "IndexRecord", "LoadedIndex",
           "save_index", "load_index", "output_format_name", "make_token_counter"]

EXAMPLES_FILE = "examples.jsonl"
INFO_FILE = "index_info.json"
DOCS_FILE = "docs.jsonl"  # taskret tart index
TART_META = "tart.json"  # taskret tart index
INDEX_FORMAT = "taskret-index/1"

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


@dataclass
class LoadedIndex:
    directory: Path
    retriever: Retriever
    kind: str  # "examples" or "documents"
    records: dict[str, IndexRecord]
    info: dict = field(default_factory=dict)

    @property
    def lm(self) -> str | None:
        return self.info.get("lm")

    @property
    def output_format(self) -> str:
        return self.info.get("output_format", "plain")

    def prompt_output(self, record: IndexRecord) -> str:
        """The output as a demonstration shows it (Break's ``1#) step 2#) step``, others unchanged)."""
        return OUTPUT_FORMATS[self.output_format](record.output or "")

    def examples(self) -> list[Example]:
        return [Example(r.id, r.text, r.output or "") for r in (self.records[i] for i in self.retriever.ids)]


def output_format_name(fmt) -> str:
    return "break" if fmt is BREAK_FORMAT else "plain"


# -- writing -------------------------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_index(out: str | os.PathLike, retriever: Retriever, examples: Sequence[Example], *, task: str | None = None,
               retriever_spec: str | None = None, output_format: str = "plain", lm: str | None = None) -> Path:
    """Save an indexed retriever with its examples' texts, atomically: everything is written to a
    temporary folder beside ``out`` and renamed onto it, so ``out`` never holds a partial index.

    An existing index at ``out`` is replaced; an existing non-empty folder that is not an index is refused.
    """
    out = Path(out)
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format '{output_format}'; expected one of {', '.join(OUTPUT_FORMATS)}")
    if [e.id for e in examples] != list(retriever.ids):
        raise ValueError("the retriever must be indexed over exactly these examples, in this order")
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"{out}: exists and is not a folder")
        if any(out.iterdir()) and not (out / "meta.json").exists():
            raise ValueError(f"{out}: a non-empty folder that is not a taskret index; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        write_jsonl(tmp / EXAMPLES_FILE, ({"id": e.id, "input": e.input, "output": e.output} for e in examples))
        write_json(tmp / INFO_FILE, {"format": INDEX_FORMAT, "kind": "examples", "task": task,
                                     "retriever": retriever_spec or retriever.name, "n": len(examples),
                                     "output_format": output_format, "lm": lm})
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


# -- loading and checking ------------------------------------------------------------------------------


def _read_meta(directory: Path) -> dict:
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise InvalidIndex(f"{meta_path}: missing; {directory} is not a complete taskret index (a partial write, "
                           f"or not written by `taskret index` / `taskret tart index`)")
    try:
        meta = read_json(meta_path)
    except DataError as err:
        raise InvalidIndex(str(err)) from err
    if not isinstance(meta, dict):
        raise InvalidIndex(f"{meta_path}: expected a JSON object")
    if meta.get("retriever") not in RETRIEVERS:
        raise InvalidIndex(f"{meta_path}: unknown retriever {meta.get('retriever')!r}; expected one of "
                           f"{', '.join(RETRIEVERS)}")
    ids = meta.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InvalidIndex(f"{meta_path}: 'ids' must be a non-empty list of strings")
    if len(set(ids)) != len(ids):
        raise InvalidIndex(f"{meta_path}: 'ids' holds duplicates")
    return meta


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


def _read_records(directory: Path) -> tuple[str, Path, dict[str, IndexRecord]]:
    if (directory / EXAMPLES_FILE).is_file():
        kind, path = "examples", directory / EXAMPLES_FILE
    elif (directory / DOCS_FILE).is_file():
        kind, path = "documents", directory / DOCS_FILE
    else:
        raise InvalidIndex(f"{directory}: holds no texts ({EXAMPLES_FILE} or {DOCS_FILE}); re-create it with "
                           f"`taskret index ... --out {directory}` (or `taskret tart index` for a corpus)")
    records: dict[str, IndexRecord] = {}
    try:
        for line, row in iter_records(path):
            record_id = row.get("id")
            if isinstance(record_id, (int, float)) and not isinstance(record_id, bool):
                record_id = str(record_id)
            if not isinstance(record_id, str) or not record_id:
                raise InvalidIndex(f"{path}, line {line}: field 'id' must be a non-empty string")
            if record_id in records:
                raise InvalidIndex(f"{path}, line {line}: duplicate id '{record_id}'")
            if kind == "examples":
                records[record_id] = IndexRecord(record_id, _string(path, line, row, "input"),
                                                 output=_string(path, line, row, "output"))
            else:
                text = _string(path, line, row, "text", required=False) or ""
                records[record_id] = IndexRecord(record_id, text, title=_string(path, line, row, "title", False))
    except DataError as err:
        raise InvalidIndex(str(err)) from err
    return kind, path, records


def _read_info(directory: Path, kind: str) -> dict:
    path = directory / (INFO_FILE if kind == "examples" else TART_META)
    if not path.exists():
        return {}
    try:
        info = read_json(path)
    except DataError as err:
        raise InvalidIndex(str(err)) from err
    if not isinstance(info, dict):
        raise InvalidIndex(f"{path}: expected a JSON object")
    if kind == "examples":
        if info.get("output_format", "plain") not in OUTPUT_FORMATS:
            raise InvalidIndex(f"{path}: unknown output_format {info.get('output_format')!r}")
        if info.get("lm") is not None and not isinstance(info["lm"], str):
            raise InvalidIndex(f"{path}: 'lm' must be a string or null")
    return info


def load_index(directory: str | os.PathLike) -> LoadedIndex:
    """Load and check an index folder: meta.json, the retriever's files, the texts, and that they agree."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InvalidIndex(f"{directory}: no such folder")
    meta = _read_meta(directory)
    _check_retriever_files(directory, meta)
    kind, texts_path, records = _read_records(directory)
    ids = meta["ids"]
    if len(records) != len(ids):
        raise InvalidIndex(f"{texts_path}: holds {len(records)} records but {directory / 'meta.json'} lists "
                           f"{len(ids)} ids (mismatched or partial index)")
    missing = next((i for i in ids if i not in records), None)
    if missing is not None:
        raise InvalidIndex(f"{texts_path}: has no record for id '{missing}' listed in {directory / 'meta.json'} "
                           f"(mismatched index)")
    info = _read_info(directory, kind)
    try:
        retriever = Retriever.load(directory)
    except InvalidIndex:
        raise
    except (ValueError, FileNotFoundError, KeyError, TypeError, OSError, RuntimeError) as err:
        raise InvalidIndex(f"{directory}: cannot load the {meta['retriever']} index ({err})") from err
    counted = _count_indexed(directory, retriever)
    if counted is not None and counted[0] != len(ids):
        raise InvalidIndex(f"{counted[1]}: holds {counted[0]} items but {directory / 'meta.json'} lists {len(ids)} "
                           f"ids (mismatched or partial index)")
    return LoadedIndex(directory=directory, retriever=retriever, kind=kind, records=records, info=info)


# -- token counting --------------------------------------------------------------------------------------


def whitespace_tokens(text: str) -> int:
    """The fallback count: whitespace-separated words. LM tokenizers split words into sub-words, so this
    undercounts (by ~1.3-2x on English, more on logical forms); give the index an LM for exact budgets."""
    return len(text.split())


def make_token_counter(lm: str | None) -> tuple[Callable[[str], int], str]:
    """``(count_tokens, description)``: the LM's own tokenizer (as ``CausalLM.count_tokens`` counts, no
    special tokens) when an LM is named, else :func:`whitespace_tokens`."""
    if not lm:
        return whitespace_tokens, "whitespace"
    from transformers import AutoTokenizer

    from ..models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(lm)))

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return count, f"tokenizer:{lm}"
