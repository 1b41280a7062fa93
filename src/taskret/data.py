"""Tasks of (id, input, output) examples, read from JSONL or CSV files with named fields.

Every reader stops at the first bad record with a :class:`DataError` naming the file, the line
and the field, so that a user can fix their data instead of debugging a stack trace.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

__all__ = [
    "DataError",
    "Example",
    "OutputFormat",
    "Task",
    "TaskSpec",
    "BUILTIN_TASKS",
    "read_examples",
    "load_task",
    "default_data_dir",
    "break_to_prompt",
    "break_from_prompt",
]


class DataError(ValueError):
    """A bad input file: says which file, which line and which field."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Example:
    id: str
    input: str
    output: str


def _identity(text: str) -> str:
    return text


@dataclass(frozen=True)
class OutputFormat:
    """How a task's outputs are shown to the LM and read back from its generations.

    ``to_prompt`` turns a gold output into the text placed in a demonstration; ``from_prompt``
    maps a generation back to the task's own notation, so that metrics compare like with like.
    """

    to_prompt: Callable[[str], str] = _identity
    from_prompt: Callable[[str], str] = _identity


# --- Break: QDMR decompositions are shown to the LM as "1#) step 2#) step ..." -----------------

_SPACES = re.compile(r"\s+")
_BREAK_STEP_MARK = re.compile(r"\s*\d+#\)\s*")


def break_to_prompt(decomposition: str) -> str:
    steps = [_SPACES.sub(" ", step).strip() for step in decomposition.split(";")]
    return " ".join(f"{i}#) {step}" for i, step in enumerate(steps, start=1))


def break_from_prompt(text: str) -> str:
    steps = [step.strip() for step in _BREAK_STEP_MARK.split(text) if step.strip()]
    return " ;".join(steps)


BREAK_FORMAT = OutputFormat(to_prompt=break_to_prompt, from_prompt=break_from_prompt)


@dataclass
class Task:
    """A named in-context-learning task: the pool to retrieve demonstrations from, and test inputs."""

    name: str
    train: list[Example]
    test: list[Example]
    output_format: OutputFormat = field(default_factory=OutputFormat)

    def prompt_output(self, example: Example) -> str:
        return self.output_format.to_prompt(example.output)


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

# Field names of known formats, so `--format smcalflow` works on any file in that layout.
FORMAT_FIELDS: dict[str, tuple[str, str, str | None]] = {
    name: (spec.input_field, spec.output_field, spec.id_field) for name, spec in BUILTIN_TASKS.items()
}

_PACKAGE_DEMO = Path(__file__).parent / "resources" / "demo"


def default_data_dir() -> Path:
    """``$TASKRET_DATA_DIR`` if set, else ``../shared/data`` beside the working directory."""
    env = os.environ.get("TASKRET_DATA_DIR")
    if env:
        return Path(env)
    return Path.cwd().parent / "shared" / "data"


def iter_records(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) from a .jsonl or .csv file."""
    suffix = path.suffix.lower()
    try:
        # utf-8-sig: a byte-order mark (as Excel writes) is not part of the first field name.
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    with handle:
        try:
            if suffix in (".jsonl", ".json"):
                for line_no, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise DataError(path, line_no, None, f"malformed JSON ({err.msg})") from err
                    if not isinstance(record, dict):
                        raise DataError(path, line_no, None, "expected a JSON object")
                    yield line_no, record
            elif suffix in (".csv", ".tsv"):
                reader = csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ",")
                for record in reader:
                    # line_num is where the record ends; a multi-line quoted field spans lines.
                    yield reader.line_num, record
            else:
                raise DataError(path, None, None, f"unknown file type '{suffix}' (expected .jsonl, .csv or .tsv)")
        except UnicodeDecodeError as err:
            # err.start counts from the decoder's current chunk, not the file: find the real place.
            line, offset, reason = _locate_bad_utf8(path, err)
            raise DataError(path, line, None, f"not valid UTF-8 ({reason} at byte {offset})") from err


def _locate_bad_utf8(path: Path, err: UnicodeDecodeError) -> tuple[int | None, int, str]:
    """(line number, byte offset in the file, reason) of the first invalid UTF-8 sequence."""
    offset = 0
    with open(path, "rb") as raw:
        for line_no, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                return line_no, offset + bad.start, bad.reason
            offset += len(line)
    return None, err.start, err.reason


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


def read_examples(
    path: str | os.PathLike,
    input_field: str = "input",
    output_field: str = "output",
    id_field: str | None = None,
) -> list[Example]:
    """Read examples from a JSONL/CSV/TSV file.

    Without ``id_field`` (or when the records lack it) ids are ``"{file stem}-{line}"``.
    Duplicate ids, missing or empty fields and malformed lines raise :class:`DataError`.
    """
    path = Path(path)
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for line, record in iter_records(path):
        if id_field is not None and id_field in record:
            example_id = _field(path, line, record, id_field)
        else:
            example_id = f"{path.stem}-{line}"
        if example_id in seen:
            raise DataError(path, line, id_field, f"duplicate id '{example_id}' (first seen on line {seen[example_id]})")
        seen[example_id] = line
        examples.append(
            Example(example_id, _field(path, line, record, input_field), _field(path, line, record, output_field))
        )
    if not examples:
        raise DataError(path, None, None, "no examples in file")
    return examples


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
    """Load a built-in task by name (``mtop``, ``break``, ``smcalflow``, ``demo``) or any files.

    ``name`` picks the field names and output format; ``train``/``test`` override the files, and
    the ``*_field`` arguments override the field names, so a new task needs no code.
    """
    if name == "demo":
        task = load_task("mtop", train=_PACKAGE_DEMO / "mtop_train.jsonl", test=_PACKAGE_DEMO / "mtop_test.jsonl")
        return replace(task, name="demo")
    if name is not None and name not in BUILTIN_TASKS:
        raise ValueError(f"unknown task '{name}'; built-in tasks: {', '.join(sorted(BUILTIN_TASKS) + ['demo'])}")
    spec = BUILTIN_TASKS.get(name) if name else None
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    if spec is not None:
        train = train or base / spec.train
        test = test or base / spec.test
        input_field = input_field or spec.input_field
        output_field = output_field or spec.output_field
        id_field = id_field or spec.id_field
    if train is None or test is None:
        raise ValueError("give a task name or both --train and --test files")
    input_field = input_field or "input"
    output_field = output_field or "output"
    return Task(
        name=name or Path(train).stem,
        train=read_examples(train, input_field, output_field, id_field),
        test=read_examples(test, input_field, output_field, id_field),
        output_format=spec.output_format if spec else OutputFormat(),
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
