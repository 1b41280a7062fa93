"""Tasks of (id, input, output) examples, read from JSONL or CSV files with named fields.

Every reader stops at the first bad record with a :class:`DataError` naming the file, the line
and the field, so that a user can fix their data instead of debugging a stack trace.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from .corpus import _field, fields_hint, read_beir_files
from .formats import BREAK_FORMAT, OutputFormat, break_from_prompt, break_to_prompt
from .io import DataError, iter_records

logger = logging.getLogger(__name__)

__all__ = [
    "DataError",
    "Example",
    "OutputFormat",
    "Task",
    "TaskSpec",
    "BUILTIN_TASKS",
    "BENCHMARK_TASKS",
    "GENERATION_TASKS",
    "LABEL_WORDS",
    "read_examples",
    "load_task",
    "load_beir_task",
    "default_data_dir",
    "break_to_prompt",
    "break_from_prompt",
]


@dataclass(frozen=True)
class Example:
    id: str
    input: str
    output: str
    #: A multiple-choice example's answer options (its output is one of them); None for the others. A classification
    #: task's options are one label set for every example: :attr:`Task.options`.
    options: tuple[str, ...] | None = None


@dataclass
class Task:
    """A named in-context-learning task: the pool to retrieve demonstrations from, and test inputs."""

    name: str
    train: list[Example]
    test: list[Example]
    output_format: OutputFormat = field(default_factory=OutputFormat)
    #: A classification task's label set, as the prompt shows each label (its verbaliser). A task with options (these,
    #: or each example's own for multiple choice) is scored by the options' likelihood, not by generation
    #: (:mod:`taskret.icl.options`).
    options: tuple[str, ...] | None = None

    def prompt_output(self, example: Example) -> str:
        return self.output_format.to_prompt(example.output)

    def answer_options(self, example: Example) -> tuple[str, ...] | None:
        """The options ``example``'s answer is chosen among: its own (multiple choice), else the task's label set."""
        return example.options if example.options is not None else self.options

    @property
    def has_options(self) -> bool:
        """Whether the task is answered by choosing among options (classification, multiple choice)."""
        return self.options is not None or any(e.options is not None for e in self.test)


@dataclass(frozen=True)
class TaskSpec:
    """Where a built-in task's files live (relative to the data directory) and which fields to read."""

    name: str
    train: str
    test: str
    input_field: str
    output_field: str
    id_field: str | None
    output_format: OutputFormat = field(default_factory=OutputFormat)
    options: tuple[str, ...] | None = None  # a classification task's label set (verbalised), checked on reading
    options_field: str | None = None  # the field holding a multiple-choice example's own options
    description: str = ""


BUILTIN_TASKS: dict[str, TaskSpec] = {
    "mtop": TaskSpec("mtop", "mtop/train.jsonl", "mtop/test.jsonl", "question", "logical_form", "idx"),
    "break": TaskSpec(
        "break", "break/train.csv", "break/test.csv", "question_text", "decomposition", "question_id",
        BREAK_FORMAT,
    ),
    "smcalflow": TaskSpec(
        "smcalflow", "smcalflow/train.jsonl", "smcalflow/test.jsonl", "user_utterance", "lispress", "idx",
    ),
}

#: Generation tasks built from the berri-lite retrieval collection (its BEIR folders) for in-context learning:
#: name -> what the input and the output are. A query is the input, its relevant document the output; the train
#: qrels give the pool, the dev qrels the test set (:func:`load_beir_task`). Exact match says little on them
#: (a command or a sentence can be right in many spellings): they report chrF beside it
#: (:data:`taskret.icl.evaluation.TASK_GRADED`).
GENERATION_TASKS: dict[str, str] = {
    "berri-lite/nl2bash": "English description of a shell task -> the Bash one-liner",
    "berri-lite/conala": "programming intent (a rewritten StackOverflow question) -> the Python snippet",
    "berri-lite/asset_simplification": "complex Wikipedia sentence -> its simplification",
}

#: How the classification tasks show each label to the LM: UDR's verbalisers and templates (KaiLv69/UDR,
#: Channel_LM_Prompting/util.py ``get_one_prompt``: SST-2 and SST-5 template 1 "It was %s . ", TREC template 3
#: "Answer: %s . "), the template's trailing space dropped (a prompt line ends at the option). Label -> option text.
LABEL_WORDS: dict[str, dict[str, str]] = {
    "sst2": {"0": "It was terrible .", "1": "It was great ."},
    "sst5": {"0": "It was terrible .", "1": "It was bad .", "2": "It was okay .", "3": "It was good .",
             "4": "It was great ."},
    # TREC's coarse classes in UDR's order; "Expression" is ABBR (abbreviation: "What does NASA stand for?").
    "trec": {"DESC": "Answer: Description .", "ENTY": "Answer: Entity .", "ABBR": "Answer: Expression .",
             "HUM": "Answer: Human .", "LOC": "Answer: Location .", "NUM": "Answer: Number ."},
}


def _benchmark(name: str, description: str, options: tuple[str, ...] | None = None) -> TaskSpec:
    """A task ``taskret data download NAME`` lays out as ``NAME/{train,test}.jsonl`` with id/input/output fields."""
    return TaskSpec(name, f"{name}/train.jsonl", f"{name}/test.jsonl", "input", "output", "id", options=options,
                    description=description)


#: Public in-context-learning tasks of the kinds EPR's successors report on (UDR, CEIL): semantic parsing, scored by
#: exact match of the program (runs of whitespace collapsed), and classification, scored by accuracy of the option the
#: LM finds most likely (:mod:`taskret.icl.options`). Each is downloaded by ``taskret data download NAME``
#: (:mod:`taskret.download`, which says where from). Kept apart from :data:`BUILTIN_TASKS`, whose formats
#: ``--format`` names.
BENCHMARK_TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    _benchmark("geoquery", "GeoQuery, question split (text2sql-data): US-geography question -> SQL query"),
    _benchmark("atis", "ATIS, question split (text2sql-data): flight-booking request -> SQL query"),
    _benchmark("sst2", "SST-2 (binary Stanford Sentiment Treebank, sentences): movie-review sentence -> "
               "negative/positive, by option likelihood", tuple(LABEL_WORDS["sst2"].values())),
    _benchmark("sst5", "SST-5 (fine-grained Stanford Sentiment Treebank, sentences): movie-review sentence -> one of "
               "5 sentiment grades, by option likelihood", tuple(LABEL_WORDS["sst5"].values())),
    _benchmark("trec", "TREC question classification (Li & Roth, coarse): question -> one of 6 answer types, by "
               "option likelihood", tuple(LABEL_WORDS["trec"].values())),
)}

# Field names of known formats, so `--format smcalflow` works on any file in that layout.
FORMAT_FIELDS: dict[str, tuple[str, str, str | None]] = {
    name: (spec.input_field, spec.output_field, spec.id_field) for name, spec in BUILTIN_TASKS.items()
}

_PACKAGE_DEMO = Path(__file__).parent / "resources" / "demo"


def download_dir() -> Path:
    """Where downloads go by default: ``$TASKRET_DATA_DIR``, else ``$XDG_CACHE_HOME/taskret/data``
    (``~/.cache/taskret/data``)."""
    env = os.environ.get("TASKRET_DATA_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "taskret" / "data"


def default_data_dir() -> Path:
    """Where built-in tasks are read from: ``$TASKRET_DATA_DIR`` if set; else ``../shared/data`` beside the
    working directory when that folder exists (a development checkout's shared data); else the folder
    ``taskret data download`` fills, ``$XDG_CACHE_HOME/taskret/data`` (``~/.cache/taskret/data``)."""
    shared = Path.cwd().parent / "shared" / "data"
    if not os.environ.get("TASKRET_DATA_DIR") and shared.is_dir():
        return shared
    return download_dir()


def read_examples(
    path: str | os.PathLike,
    input_field: str = "input",
    output_field: str = "output",
    id_field: str | None = None,
    options_field: str | None = None,
    label_set: Sequence[str] | None = None,
) -> list[Example]:
    """Read examples from a JSONL/CSV/TSV file.

    Without ``id_field`` (or when the records lack it) ids are ``"{file stem}-{line}"``.
    Duplicate ids, missing or empty fields and malformed lines raise :class:`DataError`.
    An output must be one line (a prompt shows each example as ``input<TAB>output`` and the LM's answer is cut at
    its first newline): a multi-line output raises :class:`DataError` too. An id field that is not read (none given
    while the file has an ``id`` or ``_id`` field, or one given that the file lacks) is logged as a warning naming
    the file's fields.

    ``options_field`` (multiple choice): the field holding each example's answer options, a JSON list of one-line
    strings with the output among them. ``label_set`` (classification): the outputs a record may have. A record that
    breaks either raises :class:`DataError` naming the file, line and field.
    """
    path = Path(path)
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for line, record in iter_records(path):
        if not examples:
            _warn_unread_id(path, line, record, id_field)
        if id_field is not None and id_field in record:
            example_id = _field(path, line, record, id_field)
        else:
            example_id = f"{path.stem}-{line}"
        if example_id in seen:
            raise DataError(path, line, id_field, f"duplicate id '{example_id}' (first seen on line {seen[example_id]})")
        seen[example_id] = line
        for name in (input_field, output_field):
            if record.get(name) is None:
                raise DataError(path, line, name, "missing field" + fields_hint(
                    record, "name yours with --input-field / --output-field"))
        output = _field(path, line, record, output_field)
        if "\n" in output.strip() or "\r" in output.strip():
            raise DataError(path, line, output_field, f"the output spans {len(output.strip().splitlines())} lines; it "
                            f"must be one line (a prompt shows each example as input<TAB>output and the LM's answer "
                            f"is cut at its first newline): join its lines, e.g. with '; '")
        options = _options(path, line, record, options_field, output) if options_field else None
        if label_set is not None and output not in label_set:
            raise DataError(path, line, output_field, f"'{output}' is not one of the task's labels "
                            f"({', '.join(repr(label) for label in label_set)})")
        examples.append(Example(example_id, _field(path, line, record, input_field), output, options))
    if not examples:
        raise DataError(path, None, None, "no examples in file")
    return examples


def _options(path: Path, line: int, record: dict, options_field: str, output: str) -> tuple[str, ...]:
    """A multiple-choice record's options: a list of two or more distinct one-line strings, the output among them."""
    options = record.get(options_field)
    if not isinstance(options, list) or len(options) < 2:
        raise DataError(path, line, options_field, "expected a list of two or more answer options" + fields_hint(
            record, "name yours with options_field"))
    for i, option in enumerate(options):
        if not isinstance(option, str) or not option.strip() or "\n" in option.strip():
            raise DataError(path, line, options_field, f"option {i} is not a non-empty one-line string: {option!r}")
    if len(set(options)) != len(options):
        raise DataError(path, line, options_field, "two options are the same text: the LM could not tell them apart")
    if output not in options:
        raise DataError(path, line, options_field, f"the output '{output}' is not one of the options")
    return tuple(options)


def _warn_unread_id(path: Path, line: int, record: dict, id_field: str | None) -> None:
    """One warning when a file's ids will be its line numbers although it seems to hold ids of its own."""
    fields = ", ".join(map(str, record))
    if id_field is None:
        own = next((name for name in ("id", "_id") if name in record), None)
        if own is not None:
            logger.warning("%s: ids are the file's name and line ('%s-%d', ...), not its field '%s' (--id-field %s "
                           "reads it)", path, path.stem, line, own, own)
    elif id_field not in record:
        logger.warning("%s: no id field '%s' (fields here: %s), so ids are the file's name and line ('%s-%d', ...)",
                       path, id_field, fields, path.stem, line)


def _not_installed(name: str, missing: Path, base: Path) -> str:
    """What to do when a built-in task's file is not in the data folder it is read from."""
    into = "" if base == download_dir() else f" --data-dir {base}"
    return (f"{missing}: the '{name}' data set is not installed; download it with `taskret data download "
            f"{name}{into}` (Python: taskret.download.download('{name}'{', data_dir' if into else ''})), or point "
            f"--data-dir / data_dir= / $TASKRET_DATA_DIR at the folder that holds {name}/; `taskret data list` "
            f"shows what is installed")


def load_beir_task(folder: str | os.PathLike, name: str | None = None, train_split: str = "train",
                   test_split: str = "dev") -> Task:
    """An in-context-learning task from a folder in the BEIR layout (``corpus.jsonl``, ``queries.jsonl``,
    ``qrels/{split}.tsv``): each judged query is an example whose input is the query and whose output is the
    text of its relevant document (the most relevant; on a tie the first listed in the qrels file; a document's
    title, if any, is left out). The pool is ``train_split``'s queries, the test set ``test_split``'s; ids are the
    query ids. What turns a retrieval task whose documents are *answers* (a command, a code snippet, a simpler
    sentence) into a generation task; a bad file is refused naming the file, line and field."""
    folder = Path(folder)
    splits = {}
    for split in (train_split, test_split):
        corpus, queries, qrels = read_beir_files(folder, split)
        examples = []
        for qid, judged in qrels.items():
            positive = max(judged, key=lambda doc_id: judged[doc_id])  # max keeps the first of equal scores
            if judged[positive] <= 0:
                continue  # judged, but nothing relevant: no output to show
            examples.append(Example(qid, queries[qid], corpus[positive].text))
        if not examples:
            raise DataError(folder / "qrels" / f"{split}.tsv", None, "score", "no query with a relevant document")
        splits[split] = examples
    return Task(name=name or folder.name, train=splits[train_split], test=splits[test_split])


def load_task(
    name: str | None = None,
    *,
    train: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    input_field: str | None = None,
    output_field: str | None = None,
    id_field: str | None = None,
    data_dir: str | os.PathLike | None = None,
) -> Task:
    """Load a built-in task by name (``mtop``, ``break``, ``smcalflow``, ``demo``, a berri-lite generation task of
    :data:`GENERATION_TASKS` such as ``berri-lite/nl2bash``, a public benchmark task of :data:`BENCHMARK_TASKS` such
    as ``geoquery`` or ``sst2``) or any files.

    ``name`` picks the field names and output format; ``train``/``test`` override the files, and
    the ``*_field`` arguments override the field names, so a new task needs no code.
    """
    if name in GENERATION_TASKS and train is None and test is None:
        base = Path(data_dir) if data_dir is not None else default_data_dir()
        folder = base / name
        if not (folder / "qrels").is_dir():
            raise FileNotFoundError(f"{folder}: the '{name}' task is read from the berri-lite collection, which is "
                                    f"not in this data folder; point --data-dir / data_dir= / $TASKRET_DATA_DIR at "
                                    f"the folder that holds berri-lite/")
        return load_beir_task(folder, name=name)
    if name == "demo":
        task = load_task("mtop", train=_PACKAGE_DEMO / "mtop_train.jsonl", test=_PACKAGE_DEMO / "mtop_test.jsonl")
        return replace(task, name="demo")
    if name is not None and name not in BUILTIN_TASKS and name not in BENCHMARK_TASKS:
        raise ValueError(f"unknown task '{name}'; built-in tasks: "
                         f"{', '.join(sorted(BUILTIN_TASKS) + ['demo'] + list(GENERATION_TASKS) + list(BENCHMARK_TASKS))} "
                         f"(your own data: give train and test files, --train/--test on the command line)")
    spec = (BUILTIN_TASKS.get(name) or BENCHMARK_TASKS.get(name)) if name else None
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    if spec is not None:
        for given, relative in ((train, spec.train), (test, spec.test)):
            if given is None and not (base / relative).exists():
                raise FileNotFoundError(_not_installed(spec.name, base / relative, base))
        train = train or base / spec.train
        test = test or base / spec.test
        input_field = input_field or spec.input_field
        output_field = output_field or spec.output_field
        id_field = id_field or spec.id_field
    if train is None or test is None:
        raise ValueError("give a task name or both --train and --test files")
    input_field = input_field or "input"
    output_field = output_field or "output"
    options_field = spec.options_field if spec else None
    label_set = spec.options if spec else None
    return Task(
        name=name or Path(train).stem,
        train=read_examples(train, input_field, output_field, id_field, options_field, label_set),
        test=read_examples(test, input_field, output_field, id_field, options_field, label_set),
        output_format=spec.output_format if spec else OutputFormat(),
        options=label_set,
    )


def sample(examples: Iterable[Example], n: int | None, seed: int = 0) -> list[Example]:
    """The first ``n`` examples of a fixed seeded shuffle: the same sample for every method."""
    import random

    pool = list(examples)
    if n is None or n >= len(pool):
        return pool
    rng = random.Random(seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    return [pool[i] for i in sorted(order[:n])]
