"""Documents, queries and relevance judgements read from files: the layer below both :mod:`taskret.data`
(examples) and :mod:`taskret.tart.tasks` (retrieval tasks), so that neither imports the other to read a corpus.

- :func:`read_corpus` / :func:`iter_corpus`: a BEIR ``corpus.jsonl`` or any JSONL / CSV / TSV file of documents
  (its fields named), all at once or one document at a time;
- :func:`read_queries`, :func:`read_qrels`, :func:`beir_instructions`, :func:`read_beir_files`: the rest of the
  BEIR layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``, ``instructions.json``);
- :class:`DocumentStream`: a corpus read again on each pass (indexing a corpus larger than memory), with a
  fingerprint of its contents (:func:`fingerprint`, which an example pool's streamed index takes too).

Bad files stop with a :class:`~taskret.io.DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import logging
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from .ids import IdList, IdListBuilder, repeated_hashes, soonest_repeat
from .io import DataError, iter_records, read_json

logger = logging.getLogger(__name__)

__all__ = ["Document", "DocumentStream", "fingerprint", "doc_text", "doc_ids_and_texts", "iter_corpus", "read_corpus",
           "read_queries", "read_qrels", "beir_instructions", "read_beir_files", "INSTRUCTIONS_FILE"]


def _field(path: Path, line: int, record: dict, name: str) -> str:
    if name not in record or record[name] is None:
        raise DataError(path, line, name, "missing field")
    value = record[name]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DataError(path, line, name, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(path, line, name, "empty value")
    return value


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


def doc_ids_and_texts(documents: dict[str, "Document"]) -> tuple[list[str], list[str]]:
    """The ids of ``documents`` in order, and the text a retriever indexes of each (:func:`doc_text`)."""
    ids = list(documents)
    return ids, [doc_text(documents[i]) for i in ids]


def doc_text(doc: Document) -> str:
    """The text a retriever indexes: ``"title text"``, trimmed (just the text when there is no title)."""
    return f"{doc.title.strip()} {doc.text.strip()}".strip()


# --- BEIR layout -----------------------------------------------------------------------------------


def _optional_text(path: Path, line: int, record: dict, name: str) -> str:
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(path, line, name, f"expected a string, got {type(value).__name__}")
    return value


class _SeenIds:
    """The ids one pass over a corpus file has read, to find an id read twice: each id's hash, 8 bytes an id, checked
    for repeats when the pass ends (:func:`~taskret.ids.repeated_hashes`), so a pass reads on past a duplicate and the
    error comes at its end. Only when a hash repeats is the file read again, for the ids behind it and their lines.
    (A dict of the id strings and their lines cost ~140 bytes an id, 1.4 GB through each pass of a 10M-document
    build; the ids' bytes and lines with a lookup built over them at the end, ~70 bytes an id at that moment.)"""

    def __init__(self) -> None:
        self._hashes = array("q")

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, doc_id: str) -> None:
        self._hashes.append(hash(doc_id))

    def duplicate(self, path: Path, id_of: Callable[[int, dict], str]) -> tuple[str, int, int] | None:
        """The id read again soonest: ``(id, its line then, the line it was first read on)``; None if none was.
        ``path`` is read again (``id_of(line, record)``: a record's id, as the pass read it) only when a hash
        repeats."""
        repeated = repeated_hashes(np.frombuffer(self._hashes, dtype=np.int64))
        self._hashes = array("q")
        if not repeated:
            return None
        return soonest_repeat(((id_of(line, record), line) for line, record in iter_records(path)), repeated)


def iter_corpus(path: str | os.PathLike, *, id_field: str | None = "_id", text_field: str = "text",
                title_field: str | None = "title") -> Iterator[Document]:
    """The documents of a JSONL, CSV or TSV file one at a time, as :func:`read_corpus` reads them and with its
    checks (a duplicate id included, found when the pass ends: :class:`_SeenIds`), so a corpus larger than memory
    can be indexed in one pass."""
    path = Path(path)
    seen = _SeenIds()
    ids_from = id_field
    for line, record in iter_records(path):
        if ids_from is None:
            ids_from = next((name for name in ("_id", "id") if name in record), "")
        if not len(seen):
            _warn_unread_fields(path, record, ids_from, text_field, title_field)
        if ids_from and record.get(ids_from) is None:
            raise DataError(path, line, ids_from, "missing field" + fields_hint(
                record, "name the id's field with --id-field, or leave it out to number the documents by line"))
        doc_id = _field(path, line, record, ids_from) if ids_from else str(line)
        if text_field not in record or record[text_field] is None:
            raise DataError(path, line, text_field, "missing field" + fields_hint(
                record, "name the text's field with --text-field"))
        text = _optional_text(path, line, record, text_field)
        title = _optional_text(path, line, record, title_field) if title_field else ""
        if not (text.strip() or title.strip()):
            raise DataError(path, line, text_field, "empty document (no text and no title)")
        seen.add(doc_id)
        yield Document(doc_id, title, text)
    if not len(seen):
        raise DataError(path, None, None, "no documents in file")
    twice = seen.duplicate(path, lambda line, record: _field(path, line, record, ids_from) if ids_from else str(line))
    if twice is not None:
        doc_id, line, first = twice
        raise DataError(path, line, ids_from, f"duplicate id '{doc_id}' (first seen on line {first})")


def read_corpus(path: str | os.PathLike, *, id_field: str | None = "_id", text_field: str = "text",
                title_field: str | None = "title") -> dict[str, Document]:
    """Documents from a JSONL, CSV or TSV file: a BEIR ``corpus.jsonl`` (``_id``, ``text`` and an optional
    ``title`` per line) by default, or any file whose fields are named: ``text_field`` (required),
    ``title_field`` (optional; None: no title), ``id_field`` (None: ``_id`` if the first record has it, else
    ``id``, else the line number)."""
    return {doc.id: doc for doc in iter_corpus(path, id_field=id_field, text_field=text_field,
                                               title_field=title_field)}


def _warn_unread_fields(path: Path, record: dict, ids_from: str, text_field: str, title_field: str | None) -> None:
    """One warning when a corpus falls back while its first record has fields that are not read: ids numbered by
    line beside unread columns (a CSV's ``doc_no``), or no titles beside a column whose name says title."""
    unread = [str(name) for name in record if name not in (ids_from, text_field, title_field)]
    fallbacks = []
    if not ids_from:
        fallbacks.append("no id field ('_id' or 'id'), so ids are line numbers; --id-field names one")
    if (title_field is None or title_field not in record) and any("title" in name.lower() for name in unread):
        fallbacks.append(f"no title field '{title_field}', so no titles; --title-field names one")
    if unread and fallbacks:
        _warn_once(path, "%s: %s (fields not read: %s)", path, "; ".join(fallbacks), ", ".join(unread))


# (file, its size and modification time, message) of every warning given: a corpus is read in several passes (its
# check, its texts, the index's items), and what is said of a file is said once, until the file changes.
_WARNED: set[tuple] = set()


def _warn_once(path: Path, message: str, *args) -> None:
    try:
        stat = path.stat()
        version = (stat.st_size, stat.st_mtime_ns)
    except OSError:
        version = None
    key = (str(path.resolve()), version, message % args)
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message, *args)


def fields_hint(record: dict, advice: str) -> str:
    """``" (fields here: a, b; ADVICE)"``: what a user whose file lacks a field needs, the fields it has and the
    option that names the right one."""
    return f" (fields here: {', '.join(map(str, record)) or 'none'}; {advice})"


def read_queries(path: str | os.PathLike) -> dict[str, str]:
    """A BEIR ``queries.jsonl``: ``_id`` and ``text`` per line."""
    path = Path(path)
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line, record in iter_records(path):
        qid = _field(path, line, record, "_id")
        text = _field(path, line, record, "text")
        if qid in queries:
            raise DataError(path, line, "_id", f"duplicate id '{qid}' (first seen on line {first_line[qid]})")
        queries[qid] = text
        first_line[qid] = line
    if not queries:
        raise DataError(path, None, None, "no queries in file")
    return queries


_QRELS_COLUMNS = ("query-id", "corpus-id", "score")


def read_qrels(path: str | os.PathLike, queries: dict[str, str] | None = None,
               corpus: dict[str, Document] | None = None) -> dict[str, dict[str, int]]:
    """A BEIR qrels file: tab-separated ``query-id, corpus-id, score`` (integer), with an optional header.

    With ``queries``/``corpus`` given, every id must name one of them.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    for line_no, raw_line in enumerate(raw.splitlines(), start=1):
        try:
            line = raw_line.decode("utf-8-sig" if line_no == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise DataError(path, line_no, None, f"not valid UTF-8 ({err.reason})") from err
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("\t")]
        if line_no == 1 and cells[0] == "query-id":
            continue  # header
        if len(cells) != 3:
            raise DataError(path, line_no, None, f"expected 3 tab-separated columns (query-id, corpus-id, score), "
                            f"got {len(cells)}")
        qid, doc_id, score_text = cells
        for name, value in zip(_QRELS_COLUMNS, cells):
            if not value:
                raise DataError(path, line_no, name, "empty value")
        try:
            score = int(score_text)
        except ValueError:
            raise DataError(path, line_no, "score", f"expected an integer relevance, got '{score_text}'") from None
        if queries is not None and qid not in queries:
            raise DataError(path, line_no, "query-id", f"unknown query id '{qid}' (not in the queries file)")
        if corpus is not None and doc_id not in corpus:
            raise DataError(path, line_no, "corpus-id", f"unknown document id '{doc_id}' (not in the corpus file)")
        if (qid, doc_id) in seen:
            raise DataError(path, line_no, "corpus-id", f"duplicate judgement of ('{qid}', '{doc_id}') "
                            f"(first on line {seen[qid, doc_id]})")
        seen[qid, doc_id] = line_no
        qrels.setdefault(qid, {})[doc_id] = score
    if not qrels:
        raise DataError(path, None, None, "no relevance judgements in file")
    return qrels


INSTRUCTIONS_FILE = "instructions.json"


def beir_instructions(folder: str | os.PathLike, split: str) -> list[str]:
    """The instructions a BEIR folder carries in ``instructions.json``: a list (every split), or
    ``{"train": [...], "test": [...]}`` (a ``dev`` split without a list of its own uses ``test``'s).
    No file: no instructions."""
    path = Path(folder) / INSTRUCTIONS_FILE
    if not path.exists():
        return []
    data = read_json(path)
    if isinstance(data, dict):
        if split not in data and split == "dev":
            split = "test"
        if split not in data:
            raise DataError(path, None, split, f"no instructions for split '{split}' "
                            f"(keys: {', '.join(map(str, data)) or 'none'})")
        data, where = data[split], split
    else:
        where = None
    if not isinstance(data, list) or not data:
        raise DataError(path, None, where, "expected a non-empty list of instructions, or {split: [instructions]}")
    for n, instruction in enumerate(data):
        if not isinstance(instruction, str) or not instruction.strip():
            raise DataError(path, None, f"{where or ''}[{n}]", "expected a non-empty instruction string")
    return [i.strip() for i in data]


def read_beir_files(folder: str | os.PathLike, split: str = "test") -> tuple[dict[str, Document], dict[str, str],
                                                                          dict[str, dict[str, int]]]:
    """``(corpus, queries, qrels)`` of a folder in the BEIR layout: the whole corpus, the queries judged in
    ``split`` (as BEIR evaluates) and their judgements, every id checked against the files it names."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (expected corpus.jsonl, queries.jsonl, qrels/)")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        raise FileNotFoundError(f"{qrels_path}: no qrels for split '{split}' (available: {', '.join(available) or 'none'})")
    corpus = read_corpus(folder / "corpus.jsonl")
    all_queries = read_queries(folder / "queries.jsonl")
    qrels = read_qrels(qrels_path, all_queries, corpus)
    return corpus, {qid: text for qid, text in all_queries.items() if qid in qrels}, qrels


# --- a corpus read in passes ------------------------------------------------------------------------


@dataclass
class DocumentStream:
    """A corpus to index without holding it: ``read()`` yields its documents, in the same order on every pass
    (a file is read again each time). ``name`` and ``instructions`` are what :func:`~taskret.tart.tasks.load_corpus`
    says of it. :meth:`scan` reads it once, checking every document, and returns its ids and fingerprint."""

    name: str
    read: Callable[[], Iterator[Document]]
    instructions: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Document]:
        return self.read()

    def texts(self) -> Iterator[str]:
        """The text a retriever indexes of each document (:func:`doc_text`), in order."""
        return (doc_text(doc) for doc in self.read())

    def scan(self, progress: Callable[[int], None] | None = None) -> tuple[IdList, str]:
        """The ids in order (an :class:`~taskret.ids.IdList`: compact at millions of documents) and a fingerprint
        of the contents (:func:`fingerprint` of every id, title and text): a resumed job compares it to tell whether
        its partial work is of this corpus."""
        ids = IdListBuilder()

        def rows() -> Iterator[tuple[str, ...]]:
            for doc in self.read():
                ids.append(doc.id)
                yield doc.id, doc.title, doc.text

        digest = fingerprint(rows(), progress)
        return ids.build(), digest


def fingerprint(rows: Iterable[Sequence[str]], progress: Callable[[int], None] | None = None) -> str:
    """SHA-256 (hex) of ``rows``' strings in order, each ended by a NUL byte, ``progress(1)`` after each row: what a
    resumed job compares to tell whether its partial work (:class:`~taskret.retrieval.shards.ShardPlan`'s shards) is
    of these texts (a corpus's ids, titles and texts; an example pool's ids and indexed texts)."""
    digest = hashlib.sha256()
    for row in rows:
        for part in row:
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\0")
        if progress is not None:
            progress(1)
    return digest.hexdigest()
