"""One EPR retriever for several tasks (UDR: Li et al., ACL 2023, "Unified Demonstration Retriever for
In-Context Learning"): each task's LM labels (an EPR run's ``labels.jsonl``), every query written with its
task's instruction in front, ``"{instruction} [SEP] {input}"`` (:func:`taskret.formats.format_query`, the form
TART, the service and the LangChain/DSPy integrations already send), trained as one contrastive dual encoder.

Why: a user with a new task and no budget to score it with an LM writes one instruction and retrieves with a
retriever that learned from other tasks what a helpful demonstration is. The examples the retriever indexes are
encoded as they are (no instruction); only the query says which task it is, so one index per task serves.

Files (``out_dir``): ``labels.jsonl`` (every task's rows, ids written ``TASK/ID``), ``tasks.json`` (each task's
name, instruction, labels file and row count), and :func:`~taskret.epr.training.train_dual_encoder`'s outputs
(``model/``, ``training_log.jsonl``, ``epr_config.json``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..data import Example, Task
from ..formats import format_query
from ..io import iter_records, write_json, write_jsonl
from .training import TrainingConfig, train_dual_encoder

if TYPE_CHECKING:
    from .listwise import ListwiseConfig

__all__ = ["LabelledTask", "TASKS_FILE", "merge_labelled_tasks", "train_multitask"]

TASKS_FILE = "tasks.json"


@dataclass(frozen=True)
class LabelledTask:
    """A task's training pool, the labels an EPR run made for it, and the instruction its queries carry."""

    task: Task
    labels: Path
    instruction: str
    name: str | None = None  # what its ids are prefixed with (default: the task's name)
    scores: Path | None = None  # the run's scores.jsonl: what UDR's listwise objective learns from

    def __post_init__(self) -> None:
        if not self.instruction.strip():
            raise ValueError(f"task '{self.key}': the instruction is empty")

    @property
    def key(self) -> str:
        return self.name or self.task.name


def _namespaced(labelled: LabelledTask, example_id: str) -> str:
    return f"{labelled.key}/{example_id}"


def merge_labelled_tasks(tasks: Sequence[LabelledTask]) -> tuple[list[Example], list[dict], dict[str, str]]:
    """The tasks' pools and labels as one: examples and labels rows with ids ``TASK/ID``, and each example's
    query text (its task's instruction, ``[SEP]``, its input) by namespaced id."""
    names = [t.key for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"a task is named twice: {', '.join(names)} (give each a name)")
    examples, rows, queries = [], [], {}
    for labelled in tasks:
        task = labelled.task
        for example in task.train:
            key = _namespaced(labelled, example.id)
            examples.append(Example(id=key, input=example.input, output=example.output))
            queries[key] = format_query(labelled.instruction, example.input)
        for _, row in iter_records(Path(labelled.labels)):
            rows.append({**row, "id": _namespaced(labelled, row["id"]),
                         "positives": [_namespaced(labelled, i) for i in row.get("positives", [])],
                         "negatives": [_namespaced(labelled, i) for i in row.get("negatives", [])]})
    return examples, rows, queries


def _namespaced_scores(tasks: Sequence[LabelledTask]) -> list[dict]:
    from .scoring import read_scores

    rows = []
    for labelled in tasks:
        if labelled.scores is None:
            raise ValueError(f"task '{labelled.key}': the listwise objective needs the run's scores.jsonl")
        for row in read_scores(labelled.scores):
            rows.append({"id": _namespaced(labelled, row["id"]),
                         "candidates": [{**c, "id": _namespaced(labelled, c["id"])} for c in row["candidates"]]})
    return rows


def _write_tasks(tasks: Sequence[LabelledTask], out_dir: Path) -> None:
    write_json(out_dir / TASKS_FILE, [{"task": t.key, "instruction": t.instruction, "labels": str(t.labels),
                                       "rows": sum(1 for _ in iter_records(Path(t.labels)))} for t in tasks])


def train_multitask(tasks: Sequence[LabelledTask], out_dir: str | os.PathLike, config: TrainingConfig | None = None,
                    progress: bool = True, listwise: "ListwiseConfig | None" = None) -> Path:
    """Train one dual encoder on every task's labels (module docstring); return ``out_dir / "model"``.
    Batches mix the tasks (the rows are shuffled as in single-task training), so a query's in-batch negatives
    come from other tasks too; its hard negatives come from its own task's labels. ``listwise``: UDR's objective
    instead (:mod:`taskret.epr.listwise`), on every task's scores (``config`` is then not read)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    examples, rows, queries = merge_labelled_tasks(tasks)
    if listwise is not None:
        from ..progress import progress_bar
        from .listwise import train_listwise

        scored = _namespaced_scores(tasks)
        _write_tasks(tasks, out_dir)
        with progress_bar(len(scored) * listwise.epochs, "listwise training", unit="inputs",
                          enabled=progress) as advance:
            return train_listwise(examples, scored, out_dir, listwise, progress=advance,
                                  query_text=lambda example: queries[example.id])
    write_jsonl(out_dir / "labels.jsonl", rows)
    _write_tasks(tasks, out_dir)
    return train_dual_encoder(examples, out_dir / "labels.jsonl", out_dir, config, progress=progress,
                              query_text=lambda example: queries[example.id])
