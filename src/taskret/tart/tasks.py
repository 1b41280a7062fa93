"""Retrieval tasks for instruction-following retrieval: a corpus, queries, relevance judgements and the
instructions that say what the user wants.

``read_beir`` reads the BEIR layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``); the
builders cast non-retrieval data into retrieval tasks, as TART's BERRI collection does:

- ``mtop``: a command -> its TOP parse (corpus: every distinct parse of the split);
- ``break``: a question -> its QDMR decomposition (corpus: every distinct decomposition);
- ``ambigqa``: an ambiguous question -> its disambiguated rewrites (corpus: every rewrite);
- ``scifact``: a claim -> the abstracts that support or refute it (BEIR SciFact, train or test split).

Bad files stop with a :class:`~taskret.data.DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from ..corpus import (
    INSTRUCTIONS_FILE,
    Document,
    DocumentStream,
    beir_instructions,
    doc_ids_and_texts,
    doc_text,
    iter_corpus,
    read_beir_files,
    read_corpus,
    read_qrels,
    read_queries,
)
from ..data import default_data_dir, read_examples, sample
from ..io import DataError

logger = logging.getLogger(__name__)

__all__ = [
    "Document",
    "RetrievalTask",
    "doc_text",
    "read_beir",
    "Corpus",
    "load_corpus",
    "open_corpus",
    "read_corpus",
    "read_queries",
    "read_qrels",
    "read_instructions",
    "mtop_task",
    "break_task",
    "ambigqa_task",
    "scifact_task",
    "RETRIEVAL_TASKS",
    "load_retrieval_task",
    "load_training_tasks",
    "split_task_spec",
    "task_source",
    "MTOP_INSTRUCTIONS",
    "BREAK_INSTRUCTIONS",
    "AMBIGQA_INSTRUCTIONS",
    "SCIFACT_TRAIN_INSTRUCTIONS",
    "SCIFACT_TEST_INSTRUCTIONS",
]


@dataclass
class RetrievalTask:
    """A corpus, queries with graded relevance judgements (``qrels[qid][doc_id] = relevance``), and the
    instructions that describe the task; ``instructions[0]`` is the one evaluation uses."""

    name: str
    corpus: dict[str, Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    instructions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for qid, judged in self.qrels.items():
            if qid not in self.queries:
                raise ValueError(f"task '{self.name}': qrels name query '{qid}', which is not among its queries")
            for doc_id in judged:
                if doc_id not in self.corpus:
                    raise ValueError(f"task '{self.name}': qrels of query '{qid}' name document '{doc_id}', "
                                     f"which is not in its corpus")

    @property
    def instruction(self) -> str | None:
        """The evaluation instruction (the first one), or None when the task has none."""
        return self.instructions[0] if self.instructions else None

    def doc_ids_and_texts(self) -> tuple[list[str], list[str]]:
        return doc_ids_and_texts(self.corpus)

    def sample(self, n: int | None, seed: int = 0) -> "RetrievalTask":
        """The same task with a fixed seeded sample of ``n`` of its queries; the corpus stays whole."""
        if n is None or n >= len(self.queries):
            return self
        if n < 1:
            raise ValueError("a query sample needs at least one query")
        kept = sample(list(self.queries), n, seed=seed)
        return replace(self, queries={q: self.queries[q] for q in kept},
                       qrels={q: self.qrels[q] for q in kept if q in self.qrels})

    def with_instructions(self, instructions: Sequence[str]) -> "RetrievalTask":
        return replace(self, instructions=list(instructions))

    def summary(self) -> dict:
        return {"name": self.name, "n_docs": len(self.corpus), "n_queries": len(self.queries),
                "n_judgements": sum(len(j) for j in self.qrels.values()), "instruction": self.instruction}


# --- instructions ------------------------------------------------------------------------------------
# Written in the style of TART's BERRI instructions (intent, domain, unit), since none of these four
# datasets is in BERRI. The first instruction of an evaluation task is the paper's own (Table 9,
# instructions/eval_instructions.json), so zero-shot numbers use exactly the paper's wording.

MTOP_INSTRUCTIONS = [
    "Retrieve the semantic parse of this command to a virtual assistant",
    "Find the task-oriented parse with intents and slots that represents this user request",
    "Map this request to a virtual assistant to its logical form",
    "I want to know what this command asks the assistant to do. Find its structured representation",
]
# The X^2-style twin of MTOP: the same commands as queries, but the user wants *other commands*, not parses.
# Pooled with MTOP, only the instruction says which of the two kinds of document to return.
MTOP_SIMILAR_INSTRUCTIONS = [
    "Retrieve other requests to a virtual assistant that ask for the same thing as this command",
    "Find commands a user gave a virtual assistant with the same intent and arguments as this one",
    "I want examples of users asking the assistant for this. Retrieve similar commands",
]
BREAK_INSTRUCTIONS = [
    "Retrieve the step-by-step decomposition of this question",
    "Find the sequence of simpler steps that answers this complex question",
    "Map this question to its question decomposition meaning representation",
    "You need to break this question down into reasoning steps. Find the matching decomposition",
]
AMBIGQA_INSTRUCTIONS = [
    "Retrieve a question that is similar to this",  # the paper's X^2-retrieval instruction for AmbigQA
    "This question is ambiguous. Find its disambiguated rewrites",
    "Find a more specific version of this ambiguous open-domain question",
    "Retrieve a question that clarifies one possible meaning of the following question",
]
SCIFACT_TRAIN_INSTRUCTIONS = [
    "Find a scientific paper abstract that supports or refutes this claim",
    "I want to know if this scientific claim is true. Retrieve a research abstract with evidence for or against it",
    "Retrieve a biomedical paper whose findings confirm or contradict the following statement",
    "You need to fact-check this claim. Find the abstract of a scientific study about it",
]
SCIFACT_TEST_INSTRUCTIONS = [
    "Retrieve a scientific paper sentence to verify if the following claim is true",  # paper, BEIR SciFact
    "Retrieve scientific evidence to verify this claim",  # paper, X^2-retrieval SciFact
    "Find a research paper abstract that supports or refutes the following scientific claim",
]


def read_instructions(path: str | os.PathLike) -> dict[str, list[str]]:
    """Instructions per dataset from the TART files.

    ``.tsv`` (``berri_instructions.tsv``): a header ``dataset, prompt_1, ...`` and one row per dataset
    with up to 8 paraphrases (empty cells are skipped) -> ``{dataset: [instruction, ...]}``.
    ``.json`` (``eval_instructions.json``): ``{group: {dataset: instruction}}`` ->
    ``{"group/dataset": [instruction]}``, e.g. ``"beir/scifact"``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _read_eval_instructions(path)
    if suffix != ".tsv":
        raise DataError(path, None, None, f"unknown instruction file type '{suffix}' (expected .tsv or .json)")
    try:
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    out: dict[str, list[str]] = {}
    with handle:
        try:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
        except UnicodeDecodeError as err:
            raise DataError(path, None, None, f"not valid UTF-8 ({err.reason})") from err
    if not rows or not rows[0] or rows[0][0].strip() != "dataset":
        raise DataError(path, 1, "dataset", "expected a header line starting with 'dataset'")
    for line_no, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        name = row[0].strip()
        if not name:
            raise DataError(path, line_no, "dataset", "empty dataset name")
        if name in out:
            raise DataError(path, line_no, "dataset", f"duplicate dataset '{name}'")
        instructions = [cell.strip() for cell in row[1:] if cell.strip()]
        if not instructions:
            raise DataError(path, line_no, "prompt_1", f"dataset '{name}' has no instruction")
        out[name] = instructions
    return out


def _read_eval_instructions(path: Path) -> dict[str, list[str]]:
    from ..io import read_json

    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(path, None, None, "expected a JSON object {group: {dataset: instruction}}")
    out: dict[str, list[str]] = {}
    for group, datasets in data.items():
        if not isinstance(datasets, dict):
            raise DataError(path, None, group, "expected an object {dataset: instruction}")
        for name, instruction in datasets.items():
            if not isinstance(instruction, str) or not instruction.strip():
                raise DataError(path, None, f"{group}.{name}", "expected a non-empty instruction string")
            out[f"{group}/{name}"] = [instruction.strip()]
    return out


def read_beir(folder: str | os.PathLike, split: str = "test", instructions: Sequence[str] | None = None,
              name: str | None = None) -> RetrievalTask:
    """A task in the BEIR layout: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{split}.tsv``.

    The task's queries are those judged in the split (as BEIR evaluates); the corpus is the whole file.
    ``instructions`` default to the folder's own ``instructions.json`` (:func:`beir_instructions`).
    """
    folder = Path(folder)
    corpus, queries, qrels = read_beir_files(folder, split)
    if instructions is None:
        instructions = beir_instructions(folder, split)
    return RetrievalTask(name or folder.name, corpus, queries, qrels, list(instructions))


# --- non-retrieval data cast as retrieval ---------------------------------------------------------

_SPACES = re.compile(r"\s+")


def _collapse(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def _pairs_task(name: str, pairs: Sequence[tuple[str, str, str]], target_title: str,
                instructions: Sequence[str]) -> RetrievalTask:
    """(query id, query, target) triples -> a task whose corpus holds each distinct target once, named
    by the first query that has it; every query's one relevant document is its own target."""
    corpus: dict[str, Document] = {}
    by_text: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for qid, query, target in pairs:
        text = _collapse(target)
        if text not in by_text:
            by_text[text] = qid
            corpus[qid] = Document(qid, target_title, text)
        queries[qid] = query
        qrels[qid] = {by_text[text]: 1}
    return RetrievalTask(name, corpus, queries, qrels, list(instructions))


def mtop_task(path: str | os.PathLike, instructions: Sequence[str] = MTOP_INSTRUCTIONS,
              name: str = "mtop") -> RetrievalTask:
    """MTOP (``idx, question, logical_form`` JSONL): a command -> its parse, among all distinct parses.

    Identical parses are one document (shared by the commands that have it), so a query is never
    penalised for ranking another command's copy of its own parse first.
    """
    examples = read_examples(path, "question", "logical_form", "idx")
    return _pairs_task(name, [(e.id, e.input, e.output) for e in examples], "", instructions)


def parse_template(logical_form: str) -> str:
    """A TOP parse with its slot values removed: ``[IN:GET_WEATHER [SL:LOCATION paris ] ]`` ->
    ``[IN:GET_WEATHER [SL:LOCATION ] ]`` (intents and slot labels, which say what is asked, in order)."""
    tokens = logical_form.split()
    return " ".join(t for t in tokens if t.startswith("[") or t == "]")


def mtop_similar_task(path: str | os.PathLike, corpus_path: str | os.PathLike,
                      instructions: Sequence[str] = MTOP_SIMILAR_INSTRUCTIONS,
                      name: str = "mtop-similar") -> RetrievalTask:
    """MTOP's commands (``path``) -> the commands of ``corpus_path`` (MTOP train) that ask for the same
    thing: the same parse template (intents and slot labels; slot values may differ, see
    :func:`parse_template`). A query in the corpus itself (the train split) is judged 0, not relevant;
    queries whose template no other command has are left out. Pooled with :func:`mtop_task` it makes an
    X^2-style pair: one query, two intents, and only the instruction tells a parse from a similar command."""
    commands = read_examples(corpus_path, "question", "logical_form", "idx")
    corpus = {e.id: Document(e.id, "", _collapse(e.input)) for e in commands}
    by_template: dict[str, list[str]] = {}
    for e in commands:
        by_template.setdefault(parse_template(e.output), []).append(e.id)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for e in read_examples(path, "question", "logical_form", "idx"):
        relevant = {d: 1 for d in by_template.get(parse_template(e.output), []) if d != e.id}
        if relevant:
            queries[e.id] = e.input
            # A command in its own corpus (the train split) is judged, not relevant: never its own
            # positive, and never mined as its own hard or random negative either.
            qrels[e.id] = {**relevant, e.id: 0} if e.id in corpus else relevant
    if not queries:
        raise DataError(Path(path), None, "logical_form", f"no command shares a parse template with {corpus_path}")
    return RetrievalTask(name, corpus, queries, qrels, list(instructions))


def break_task(path: str | os.PathLike, instructions: Sequence[str] = BREAK_INSTRUCTIONS,
               name: str = "break") -> RetrievalTask:
    """Break QDMR (``question_id, question_text, decomposition`` CSV): a question -> its decomposition
    (steps separated by ``;``, runs of spaces collapsed), among all distinct decompositions."""
    examples = read_examples(path, "question_text", "decomposition", "question_id")
    return _pairs_task(name, [(e.id, e.input, e.output) for e in examples], "", instructions)


def ambigqa_task(path: str | os.PathLike, instructions: Sequence[str] = AMBIGQA_INSTRUCTIONS,
                 name: str = "ambigqa") -> RetrievalTask:
    """AmbigNQ light (a JSON list of ``{id, question, annotations}``): an ambiguous question -> its
    disambiguated rewrites (``annotations[].qaPairs[].question`` of ``multipleQAs`` annotations).

    Questions with no ``multipleQAs`` annotation (unambiguous ones) are left out; the corpus is every
    distinct rewrite, ids ``{item id}-{n}``.
    """
    from ..io import read_json

    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, None, "expected a JSON list of questions")
    corpus: dict[str, Document] = {}
    by_text: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i, item in enumerate(data):
        where = f"item {i}"
        if not isinstance(item, dict):
            raise DataError(path, None, f"[{i}]", f"{where}: expected an object")
        qid = _json_text(path, item, "id", where)
        question = _json_text(path, item, "question", where)
        where = f"item {i} (id {qid})"
        if qid in queries:
            raise DataError(path, None, f"[{i}].id", f"{where}: duplicate id")
        annotations = item.get("annotations")
        if not isinstance(annotations, list):
            raise DataError(path, None, f"[{i}].annotations", f"{where}: expected a list")
        relevant: dict[str, int] = {}
        n = 0
        for a, annotation in enumerate(annotations):
            if not isinstance(annotation, dict) or annotation.get("type") != "multipleQAs":
                continue
            pairs = annotation.get("qaPairs")
            if not isinstance(pairs, list):
                raise DataError(path, None, f"[{i}].annotations[{a}].qaPairs", f"{where}: expected a list")
            for p, pair in enumerate(pairs):
                rewrite = pair.get("question") if isinstance(pair, dict) else None
                if not isinstance(rewrite, str) or not rewrite.strip():
                    raise DataError(path, None, f"[{i}].annotations[{a}].qaPairs[{p}].question",
                                    f"{where}: expected a non-empty question")
                text = _collapse(rewrite)
                if text not in by_text:
                    doc_id = f"{qid}-{n}"
                    n += 1
                    by_text[text] = doc_id
                    corpus[doc_id] = Document(doc_id, "", text)
                relevant[by_text[text]] = 1
        if relevant:
            queries[qid] = question
            qrels[qid] = relevant
    if not queries:
        raise DataError(path, None, None, "no question has disambiguated rewrites (multipleQAs annotations)")
    return RetrievalTask(name, corpus, queries, qrels, list(instructions))


def _json_text(path: Path, item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, None, key, f"{where}: missing or empty '{key}'")
    return value


def scifact_task(folder: str | os.PathLike, split: str = "test", instructions: Sequence[str] | None = None,
                 name: str = "scifact") -> RetrievalTask:
    """BEIR SciFact: a claim -> the abstracts that support or refute it. ``train`` (809 claims) is for
    training; ``test`` (300 claims) for evaluation only, with the paper's evaluation instructions."""
    if instructions is None:
        instructions = SCIFACT_TEST_INSTRUCTIONS if split == "test" else SCIFACT_TRAIN_INSTRUCTIONS
    return read_beir(folder, split, instructions, name=name)


# --- registry ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskEntry:
    """A built-in task: its splits (split -> path relative to the data directory) and its builder."""

    name: str
    splits: dict[str, str]
    build: Callable[[Path, str], RetrievalTask]
    description: str


RETRIEVAL_TASKS: dict[str, TaskEntry] = {
    "scifact": TaskEntry("scifact", {"train": "scifact", "test": "scifact"},
                         lambda path, split: scifact_task(path, split),
                         "claim -> abstracts that support or refute it (BEIR layout)"),
    "mtop": TaskEntry("mtop", {"train": "mtop/train.jsonl", "test": "mtop/test.jsonl"},
                      lambda path, split: mtop_task(path), "command -> its TOP parse"),
    "mtop-similar": TaskEntry("mtop-similar", {"train": "mtop/train.jsonl", "test": "mtop/test.jsonl"},
                              lambda path, split: mtop_similar_task(path, path.parent / "train.jsonl"),
                              "command -> training commands with the same parse template (MTOP's X^2 twin)"),
    "break": TaskEntry("break", {"train": "break/train.csv", "test": "break/test.csv"},
                       lambda path, split: break_task(path), "question -> its QDMR decomposition"),
    # AmbigNQ's test set is hidden; its dev set is the evaluation split (as in the paper).
    "ambigqa": TaskEntry("ambigqa", {"test": "ambigqa/dev_light.json", "dev": "ambigqa/dev_light.json"},
                         lambda path, split: ambigqa_task(path), "ambiguous question -> its disambiguated rewrites"),
}


def _data_root(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir) if data_dir is not None else default_data_dir()


# berri-lite: a BERRI-style collection of BEIR folders with one instructions.json for all of them.
BERRI_LITE = "berri-lite"
# ict:SOURCE: the inverse cloze task drawn from SOURCE's corpus, built by taskret.tart.ict, which imports this
# module: named by its import path and imported when used, so the two modules do not import each other.
ICT_PREFIX = "ict:"
ICT_TASK = "taskret.tart.ict:ict_task"


def _plugin(path: str) -> Callable:
    import importlib

    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def berri_lite_tasks(data_dir: str | os.PathLike | None = None) -> list[str]:
    """The task specs of the berri-lite collection in ``data_dir`` (``berri-lite/nl2bash``, ...), sorted."""
    root = _data_root(data_dir) / BERRI_LITE
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: berri-lite not found; set --data-dir or $TASKRET_DATA_DIR")
    return [f"{BERRI_LITE}/{p.parent.parent.name}" for p in sorted(root.glob("*/qrels/train.tsv"))]


def _berri_lite_folder(name: str, data_dir: str | os.PathLike | None) -> Path:
    """The folder of ``berri-lite/TASK``; an unknown TASK is refused with the list of known ones."""
    root = _data_root(data_dir) / BERRI_LITE
    task = name.split("/", 1)[1]
    folder = root / task
    if not folder.is_dir() or not task:
        known = sorted(p.name for p in root.glob("*") if (p / "corpus.jsonl").is_file()) if root.is_dir() else []
        raise FileNotFoundError(f"{folder}: no berri-lite task '{task}'; " + (
            f"known tasks: {', '.join(known)}" if known else f"{root} holds none: set --data-dir or $TASKRET_DATA_DIR"))
    return folder


def _berri_lite_task(name: str, data_dir: str | os.PathLike | None, split: str) -> RetrievalTask:
    """``berri-lite/TASK``: its dev qrels are the held-out split (``test`` reads them too); its instructions
    come from the collection's ``instructions.json`` (``{task: [instructions]}``)."""
    folder = _berri_lite_folder(name, data_dir)
    return read_beir(folder, "dev" if split == "test" else split, _berri_lite_instructions(name, data_dir),
                     name=folder.name)


def _berri_lite_instructions(name: str, data_dir: str | os.PathLike | None) -> list[str]:
    """The instructions of ``berri-lite/TASK``, from the collection's ``instructions.json`` (``{task: [...]}``)."""
    from ..io import read_json

    task = name.split("/", 1)[1]
    instructions_path = _data_root(data_dir) / BERRI_LITE / INSTRUCTIONS_FILE
    table = read_json(instructions_path) if instructions_path.exists() else {}
    if not isinstance(table, dict) or not isinstance(table.get(task, []), list):
        raise DataError(instructions_path, None, task, "expected {task: [instructions]}")
    return list(table.get(task, []))


def load_retrieval_task(name: str, data_dir: str | os.PathLike | None = None, split: str = "test") -> RetrievalTask:
    """A built-in task (``scifact``, ``mtop``, ``mtop-similar``, ``break``, ``ambigqa``, ``berri-lite/TASK``)
    read from ``data_dir`` (default :func:`taskret.data.default_data_dir`), or any folder in the BEIR layout
    given by path (named after the folder, with the instructions of its ``instructions.json`` if any). A folder
    without ``qrels/test.tsv`` but with ``qrels/dev.tsv`` is evaluated on dev for ``split="test"``, as the berri-lite
    tasks are, with a warning that says so."""
    if name.startswith(BERRI_LITE + "/"):
        return _berri_lite_task(name, data_dir, split)
    if name.startswith(ICT_PREFIX):
        return _plugin(ICT_TASK)(name[len(ICT_PREFIX):], data_dir, split)
    if name not in RETRIEVAL_TASKS:
        if Path(name).is_dir():
            qrels = Path(name) / "qrels"
            if split == "test" and not (qrels / "test.tsv").exists() and (qrels / "dev.tsv").exists():
                logger.warning("%s has no test qrels: evaluating on its dev qrels (%s)", name, qrels / "dev.tsv")
                split = "dev"
            return read_beir(name, split)
        raise ValueError(f"unknown retrieval task '{name}'; built-in tasks: {', '.join(RETRIEVAL_TASKS)}, "
                         f"{BERRI_LITE}/TASK (or the path of a folder in the BEIR layout; to index or search a "
                         f"corpus without queries, `taskret tart index --corpus PATH`)")
    entry = RETRIEVAL_TASKS[name]
    if split not in entry.splits:
        raise ValueError(f"task '{name}' has no split '{split}'; splits: {', '.join(entry.splits)}")
    base = _data_root(data_dir)
    path = base / entry.splits[split]
    if not path.exists():
        raise FileNotFoundError(f"{path}: data of task '{name}' ({split}) not found; set --data-dir or $TASKRET_DATA_DIR")
    return entry.build(path, split)


class Corpus(NamedTuple):
    """A corpus to index: its name, its documents by id, and the instructions that came with it (none for a
    bare file)."""

    name: str
    documents: dict[str, Document]
    instructions: list[str]

    def doc_ids_and_texts(self) -> tuple[list[str], list[str]]:
        return doc_ids_and_texts(self.documents)


def load_corpus(source: str | os.PathLike, data_dir: str | os.PathLike | None = None, split: str = "test", *,
                id_field: str | None = None, text_field: str = "text", title_field: str | None = "title") -> Corpus:
    """The documents of ``source``, with or without queries and qrels (those are for evaluation only):

    - a built-in task (``scifact``, ``mtop``, ...; ``split`` picks MTOP's and Break's corpus) or
      ``berri-lite/TASK``, with its instructions;
    - a folder holding ``corpus.jsonl`` (the BEIR layout; qrels optional), with its ``instructions.json`` if any;
    - a file: a BEIR ``corpus.jsonl``, or any JSONL / CSV / TSV whose fields are named by ``text_field``,
      ``title_field`` and ``id_field`` (see :func:`read_corpus`).

    :func:`open_corpus` reads the same sources without holding them.
    """
    stream = open_corpus(source, data_dir, split, id_field=id_field, text_field=text_field, title_field=title_field)
    return Corpus(stream.name, {doc.id: doc for doc in stream}, stream.instructions)


def open_corpus(source: str | os.PathLike, data_dir: str | os.PathLike | None = None, split: str = "test", *,
                id_field: str | None = None, text_field: str = "text", title_field: str | None = "title"
                ) -> DocumentStream:
    """The documents of ``source`` (what :func:`load_corpus` reads) as a :class:`~taskret.corpus.DocumentStream`:
    a corpus file (or a folder's ``corpus.jsonl``) is read again, checked, on every pass and never held whole;
    a built-in task, whose builder reads it whole, is held."""
    text = str(source)
    if text in RETRIEVAL_TASKS:
        splits = RETRIEVAL_TASKS[text].splits
        task = load_retrieval_task(text, data_dir, split if split in splits else next(iter(splits)))
        return DocumentStream(task.name, lambda: iter(task.corpus.values()), task.instructions)
    if text.startswith(BERRI_LITE + "/"):
        folder = _berri_lite_folder(text, data_dir)
        return DocumentStream(folder.name, lambda: iter_corpus(folder / "corpus.jsonl"),
                              _berri_lite_instructions(text, data_dir))
    path = Path(source)
    fields = {"id_field": id_field, "text_field": text_field, "title_field": title_field}
    if path.is_dir():
        corpus_path = path / "corpus.jsonl"
        if not corpus_path.is_file():
            raise FileNotFoundError(f"{corpus_path}: missing; a corpus folder holds corpus.jsonl (the BEIR layout), "
                                    f"or give the corpus file itself with --text-field / --title-field")
        return DocumentStream(path.name, lambda: iter_corpus(corpus_path, **fields), _folder_instructions(path, split))
    if path.is_file():
        return DocumentStream(path.parent.name if path.name == "corpus.jsonl" else path.stem,
                              lambda: iter_corpus(path, **fields), [])
    raise FileNotFoundError(f"{source}: not a built-in task ({', '.join(RETRIEVAL_TASKS)}, {BERRI_LITE}/TASK), a "
                            f"folder with corpus.jsonl, or a JSONL / CSV file of documents")


def _folder_instructions(folder: Path, split: str) -> list[str]:
    """A corpus folder's instructions for ``split``, or its first list when it has none for that split."""
    try:
        return beir_instructions(folder, split)
    except DataError:
        from ..io import read_json

        data = read_json(folder / INSTRUCTIONS_FILE)
        lists = [v for v in data.values() if isinstance(v, list) and v] if isinstance(data, dict) else []
        return [str(i).strip() for i in lists[0]] if lists else []


def split_task_spec(spec: str, default_split: str) -> tuple[str, str]:
    """``"name"`` -> (name, default_split); ``"name:split"`` -> (name, split), e.g. ``"ambigqa:dev"``
    (only when ``name`` is a built-in task or an existing folder, so a path holding ``:`` still works)."""
    name, sep, split = spec.rpartition(":")
    known = (name in RETRIEVAL_TASKS or name.startswith((BERRI_LITE + "/", ICT_PREFIX)) or Path(name).is_dir())
    if sep and split and known and not Path(spec).is_dir():
        return name, split
    return spec, default_split


def task_source(name: str, split: str, data_dir: str | os.PathLike | None = None) -> tuple[str, ...]:
    """What a task's split is read from, to tell whether two task splits are the same data: the resolved
    file (MTOP, Break, AmbigQA, whose dev and test are one file) or the folder and split (BEIR)."""
    if name in RETRIEVAL_TASKS:
        entry = RETRIEVAL_TASKS[name]
        if split not in entry.splits:
            raise ValueError(f"task '{name}' has no split '{split}'; splits: {', '.join(entry.splits)}")
        path = _data_root(data_dir) / entry.splits[split]
    elif name.startswith(BERRI_LITE + "/"):
        root = _data_root(data_dir) / BERRI_LITE
        return (str((root / name.split("/", 1)[1]).resolve()), "dev" if split == "test" else split)
    elif name.startswith(ICT_PREFIX):
        source = name[len(ICT_PREFIX):]
        where = _data_root(data_dir) / source if source.startswith(BERRI_LITE + "/") else Path(source)
        return (ICT_PREFIX, str(where.resolve()) if where.exists() else source, "dev" if split == "test" else split)
    else:
        path = Path(name)
    path = path.resolve()
    return (str(path), split) if path.is_dir() else (str(path),)


def load_training_tasks(specs: Sequence[str], data_dir: str | os.PathLike | None = None, split: str = "train",
                        limit: int | None = None, seed: int = 0,
                        instructions: dict[str, Sequence[str]] | None = None,
                        task_limits: dict[str, int] | None = None) -> tuple[list[RetrievalTask], list[str]]:
    """The tasks of ``specs`` (``"name"`` or ``"name:split"``, see :func:`split_task_spec`; ``split`` by
    default; ``berri-lite`` stands for every task of that collection), each a seeded sample of ``limit`` queries, and a message for each built-in task skipped
    because it lacks the split (AmbigQA has no ``train``). ``instructions`` gives tasks (by name)
    instructions of their own: a BEIR folder has none, and training needs some. ``task_limits`` caps some tasks
    (by name, e.g. ``nl2bash`` or ``mtop``) at their own number of queries instead of ``limit``, so that no task
    dominates a multi-task mixture. Raises ``ValueError`` if no task is left.
    """
    loaded, skipped = [], []
    specs = [s for spec in specs for s in (berri_lite_tasks(data_dir) if spec == BERRI_LITE else [spec])]
    for spec in specs:
        name, task_split = split_task_spec(spec, split)
        if name in RETRIEVAL_TASKS and task_split not in RETRIEVAL_TASKS[name].splits:
            skipped.append(f"task '{name}' has no split '{task_split}' "
                           f"(splits: {', '.join(RETRIEVAL_TASKS[name].splits)})")
            continue
        task = load_retrieval_task(name, data_dir, task_split)
        task = task.sample((task_limits or {}).get(task.name, limit), seed=seed)
        if instructions and task.name in instructions:
            task = task.with_instructions(instructions[task.name])
        loaded.append(task)
    if not loaded:
        raise ValueError(f"no task has a '{split}' split")
    return loaded, skipped


# --- a pooled corpus: every task's documents in one index -----------------------------------------

POOLED = "*pooled*"


def pooled_id(task_name: str, doc_id: str) -> str:
    return f"{task_name}/{doc_id}"


def split_pooled_id(pooled: str) -> tuple[str, str]:
    task_name, _, doc_id = pooled.partition("/")
    return task_name, doc_id


def check_task_names(tasks: Sequence[RetrievalTask]) -> None:
    names = [t.name for t in tasks]
    if not names:
        raise ValueError("no tasks to evaluate")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"task names must be unique; repeated: {', '.join(duplicates)}")
    bad = [n for n in names if "/" in n]
    if bad:
        raise ValueError(f"task names may not contain '/': {', '.join(bad)}")


def pooled_corpus(tasks: Sequence[RetrievalTask]) -> tuple[list[str], list[str]]:
    """Ids (``"{task}/{doc id}"``) and texts of every task's corpus, merged into one."""
    check_task_names(tasks)
    ids: list[str] = []
    texts: list[str] = []
    for task in tasks:
        task_ids, task_texts = task.doc_ids_and_texts()
        ids.extend(pooled_id(task.name, d) for d in task_ids)
        texts.extend(task_texts)
    return ids, texts
