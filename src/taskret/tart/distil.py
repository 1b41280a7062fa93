"""Distil TART-full (the cross-encoder) into a TART-dual encoder with a KL loss.

For each training row, the teacher scores the instructed query against the row's positive and
``n_negatives`` of its negatives; the student (one shared sentence-transformers encoder, as TART-dual)
scores the same candidates as ``scale * cosine(query, document)``, and training minimises
``KL(softmax(teacher / temperature) || softmax(student))`` over each row's candidates
(sentence-transformers' ``DistillKLDivLoss``). The student starts from ``base_model``: MiniLM, or
better a trained TART-dual (its run folder or its ``model/``).

Public API::

    TartDistilConfig                                        # hyperparameters, JSON round-trip
    teacher_scores(rows, teacher, config)                   # {(query text, document text): teacher logit}
    build_distillation_rows(rows, scores, teacher, config, epoch)  # -> anchor, positive, negative_1.., label
    distillation_sampler(scores, teacher, config)           # how one epoch's examples are drawn
    train_tart_distil(rows, teacher, out_dir, config)       # -> out_dir / "model"
    distillation_kl(model, columns, config)                 # the objective, no gradients

Design notes
------------
* The teacher scores every (query, positive or negative) pair of the usable rows ONCE, before training
  (raw logits, its queries formatted as it was trained: with the instruction or not); each epoch then
  draws ``n_negatives`` of a row's negatives (seeded by ``(seed, epoch)``). A row with fewer negatives
  repeats some of them to fill its ``1 + n_negatives`` columns: the loss needs a fixed number, and a
  repeated candidate weighs twice in both distributions alike.
* The teacher pass shows progress and appends each chunk of scores to ``out_dir/teacher_scores.{hash of the
  teacher's name}.jsonl`` (:func:`teacher_cache_path`): an LM teacher on a CPU can take hours, and a stopped run
  resumes where its teacher pass was. Scores made elsewhere (a GPU) can be put there before the run.
* Output: ``out_dir/model`` (a SentenceTransformer, use it as ``dense:OUT/model``),
  ``out_dir/training_log.jsonl`` and, last, ``out_dir/tart_distil_config.json``, which marks a finished run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from ..formats import format_query
from ..io import DataError
from ..training.encoders import trained_at_length
from ..training.fit import LOG_FILE, RUN_KEYS
from ..training.trainer import ModelRecipe, RowSampler, TrainingRow
from .config import TartSettings
from .training_data import anchor_text, draw_negatives, train_on_rows, usable_rows

__all__ = ["TartDistilConfig", "teacher_cache_path", "teacher_scores", "build_distillation_rows", "distillation_sampler",
           "train_tart_distil", "distillation_kl", "scaled_cos_sim", "student_model_folder", "CONFIG_FILE", "LOG_FILE"]

CONFIG_FILE = "tart_distil_config.json"

#: Keys of ``tart_distil_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("teacher", "n_rows", "n_used", "n_skipped", "train_tasks", "n_examples", "n_teacher_pairs",
               "teacher_s", "teacher_pairs_per_s", *RUN_KEYS)


@dataclass
class TartDistilConfig(TartSettings):
    """Hyperparameters of distillation: ``batch_size`` rows (of ``1 + n_negatives`` candidates) per step;
    the student's scores are ``scale * cosine``, the teacher's logits are divided by ``temperature``.
    ``instruction_dropout``: the share of anchors the student reads without their instruction (as TART-dual's).
    ``exclude_instruction_from_pooling``: the student's query vector averages the query's tokens only, not its
    instruction's (INSTRUCTOR-style, :mod:`taskret.retrieval.pooling`); saved as ``Pooling(include_prompt=False)``.
    ``max_seq_length`` truncates while training; the saved student encodes with the base's own length.
    ``freeze_documents``: only the query encoder trains (a query/document Router whose document encoder stays the
    base): documents keep the base's vectors, so a corpus encoded with the base serves the student as it is
    (``DenseRetriever(encoder=BASE, query_encoder=STUDENT)``), and a step costs about half (documents run forward
    only, with no gradients)."""

    batch_size: int = 32
    n_negatives: int = 4
    max_seq_length: int = 128
    scale: float = 20.0
    temperature: float = 1.0
    teacher_batch_size: int = 32
    instruction_dropout: float = 0.0
    exclude_instruction_from_pooling: bool = False
    freeze_documents: bool = False

    RESULT_KEYS: ClassVar[tuple[str, ...]] = RESULT_KEYS
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "n_negatives", "max_seq_length",
                                                "logging_steps", "teacher_batch_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.temperature < float("inf"):
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if not 0.0 <= self.instruction_dropout <= 1.0:
            raise ValueError(f"instruction_dropout must be in [0, 1], got {self.instruction_dropout}")
        if self.freeze_documents and self.exclude_instruction_from_pooling:
            raise ValueError("freeze_documents and exclude_instruction_from_pooling cannot be combined: instruction "
                             "pooling needs a shared encoder, freezing documents a query/document Router")


def scaled_cos_sim(a, b, scale: float = 20.0):
    """``scale * cosine`` of paired rows: the student's score, as TART-dual's contrastive loss uses it."""
    from sentence_transformers.util import pairwise_cos_sim

    return scale * pairwise_cos_sim(a, b)


def student_model_folder(spec: str | os.PathLike) -> str:
    """A TART-dual (or distillation) run folder -> its ``model/``; anything else as it is."""
    path = Path(spec)
    if (path / "model").is_dir() and not (path / "modules.json").exists():
        return str(path / "model")
    return str(spec)


def _teacher_query(row: dict, teacher) -> str:
    return format_query(row["instruction"] if teacher.use_instruction else None, row["query"])


def _pair_key(query: str, document: str) -> str:
    return hashlib.sha1(f"{query}\0{document}".encode()).hexdigest()[:20]


def _read_score_cache(path: Path) -> dict[str, float]:
    """The scores a teacher pass appended to ``path``. A last line cut short (the pass was killed mid-write) is
    dropped and cut from the file, so its chunk is scored again and the next append starts on a fresh line."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    complete = text[: text.rfind("\n") + 1]
    if len(complete) < len(text):
        with open(path, "r+", encoding="utf-8") as f:
            f.truncate(len(complete.encode("utf-8")))
    known = {}
    for number, line in enumerate(complete.splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(path, number, None, f"not JSON ({err.msg}); delete the file to score every pair "
                                                "again") from None
        for field in ("key", "score"):
            if not isinstance(row, dict) or field not in row:
                raise DataError(path, number, field, "missing; delete the file to score every pair again")
        known[row["key"]] = float(row["score"])
    return known


def teacher_scores(rows: Sequence[dict], teacher, config: TartDistilConfig | None = None, *,
                   source: str = "rows", cache: str | os.PathLike | None = None, progress: bool = False,
                   chunk_size: int = 512) -> dict[tuple[str, str], float]:
    """The teacher's logit for every (its query text, document text) pair of the usable rows.

    With ``cache`` (a JSONL file) each chunk of ``chunk_size`` scored pairs is appended as it is done (``{"key":
    hash of query and document, "score"}``), and the pairs already there are not scored again: a teacher pass
    that is stopped (an LM teacher on a CPU can take hours) resumes where it was. A cache written for another
    teacher must not be reused: :func:`train_tart_distil` names it after the teacher."""
    config = config or TartDistilConfig()
    usable, _ = usable_rows(rows, config.negative_kinds, source)
    pairs = list(dict.fromkeys((_teacher_query(row, teacher), text) for row, negatives in usable
                               for text in [row["positive_text"], *(n["text"] for n in negatives)]))
    keys = [_pair_key(q, d) for q, d in pairs]
    wanted = set(keys)
    known = {k: v for k, v in _read_score_cache(Path(cache)).items() if k in wanted} if cache is not None else {}
    todo = [i for i, key in enumerate(keys) if key not in known]
    from ..progress import progress_bar, report_resumed

    with progress_bar(len(pairs), "teacher", unit="pairs", enabled=progress) as advance:
        report_resumed(advance, len(pairs) - len(todo))
        out = None
        if cache is not None:
            Path(cache).parent.mkdir(parents=True, exist_ok=True)
            out = open(cache, "a", encoding="utf-8")
        try:
            for start in range(0, len(todo), chunk_size):
                chunk = todo[start:start + chunk_size]
                scores = np.asarray(teacher.score_pairs([pairs[i] for i in chunk]), dtype=np.float64).reshape(-1)
                if len(scores) != len(chunk):
                    raise ValueError(f"the teacher returned {len(scores)} scores for {len(chunk)} pairs")
                for i, score in zip(chunk, scores):
                    known[keys[i]] = float(score)
                if out is not None:
                    out.writelines(json.dumps({"key": keys[i], "score": float(s)}) + "\n" for i, s in zip(chunk, scores))
                    out.flush()
                advance(len(chunk))
        finally:
            if out is not None:
                out.close()
    return {pair: known[key] for pair, key in zip(pairs, keys)}


def _column_names(config: TartDistilConfig) -> tuple[str, ...]:
    return ("anchor", "positive", *(f"negative_{i + 1}" for i in range(config.n_negatives)))


def distillation_sampler(scores: dict[tuple[str, str], float], teacher,
                         config: TartDistilConfig) -> RowSampler[tuple[dict, list[dict]]]:
    """Draws, per usable row (a training row, its negatives of ``config.negative_kinds``), one example: the
    student's query, the positive, ``config.n_negatives`` negatives (repeated to fill when the row has fewer)
    and the teacher's logits of those ``1 + n`` candidates (from ``scores``, keyed by the teacher's query)."""
    names = _column_names(config)

    def draw(usable_row: tuple[dict, list[dict]], rng) -> list[TrainingRow]:
        row, negatives = usable_row
        query = _teacher_query(row, teacher)
        docs = [row["positive_text"], *(n["text"] for n in draw_negatives(rng, negatives, config.n_negatives, True))]
        values = {"anchor": anchor_text(row, config, rng),
                  **dict(zip(names[1:], docs)), "label": [scores[query, text] for text in docs]}
        return [TrainingRow(values)]

    return RowSampler((*names, "label"), draw)


def build_distillation_rows(rows: Sequence[dict], scores: dict[tuple[str, str], float], teacher,
                            config: TartDistilConfig, epoch: int = 0, *, source: str = "rows") -> dict[str, list]:
    """One epoch of distillation examples in row order: ``anchor`` (the student's query), ``positive``,
    ``negative_1..n`` and ``label`` (the teacher's ``1 + n`` logits, from :func:`teacher_scores`)."""
    usable, _ = usable_rows(rows, config.negative_kinds, source)
    return distillation_sampler(scores, teacher, config).epoch(usable, config.seed, epoch).columns


def _loss(model, config: TartDistilConfig):
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss

    return DistillKLDivLoss(model, similarity_fct=functools.partial(scaled_cos_sim, scale=config.scale),
                            temperature=1.0, teacher_temperature=config.temperature)


def distillation_kl(model, columns: dict[str, list], config: TartDistilConfig, batch_size: int = 64) -> float:
    """The distillation objective (mean KL over the rows of ``columns``), without gradients."""
    import torch

    loss = _loss(model, config)
    names = [name for name in columns if name != "label"]
    kwargs = dict(batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    total = 0.0
    with torch.no_grad():
        # The anchor is a query, the rest documents: a query/document Router encodes each with its own branch.
        embeddings = [(model.encode_query if name == "anchor" else model.encode_document)(list(columns[name]), **kwargs)
                      .float().cpu() for name in names]
        labels = torch.tensor(columns["label"], dtype=torch.float32)
        for start in range(0, len(labels), batch_size):
            part = [e[start:start + batch_size] for e in embeddings]
            total += float(loss.compute_loss_from_embeddings(part, labels[start:start + batch_size])) * len(part[0])
    return total / len(labels)


def teacher_cache_path(out_dir: str | os.PathLike, teacher) -> Path:
    """Where :func:`train_tart_distil` keeps ``teacher``'s scores: beside the run, named after the teacher, so a
    stopped run resumes its teacher pass and another teacher starts anew."""
    return Path(out_dir) / f"teacher_scores.{hashlib.sha1(teacher.name.encode()).hexdigest()[:10]}.jsonl"


def train_tart_distil(rows: Sequence[dict], teacher, out_dir: str | os.PathLike,
                      config: TartDistilConfig | None = None, progress: bool = True, source: str = "rows") -> Path:
    """Distil ``teacher`` (a TART-full folder or a :class:`~taskret.rerank.Reranker`) into a dual
    encoder initialised from ``config.base_model``; return ``out_dir / "model"``.

    A failed run leaves no ``model`` folder of its own (an older one stays) and no config file.
    """
    from ..rerank import load_reranker

    config = config or TartDistilConfig()
    started = time.perf_counter()
    teacher_name = str(teacher) if not hasattr(teacher, "score_pairs") else getattr(teacher, "name", "teacher")
    teacher = load_reranker(teacher, batch_size=config.teacher_batch_size)
    usable, n_skipped = usable_rows(rows, config.negative_kinds, source)
    teacher_start = time.perf_counter()
    cache = teacher_cache_path(out_dir, teacher)
    scores = teacher_scores([row for row, _ in usable], teacher, config, source=source, cache=cache,
                            progress=progress)
    teacher_s = time.perf_counter() - teacher_start
    student = student_model_folder(config.base_model)
    build, restore_length = trained_at_length(student, config.max_seq_length,
                                              exclude_instruction=config.exclude_instruction_from_pooling,
                                              freeze_documents=config.freeze_documents)
    # A query/document Router reads the anchor with its query encoder and every candidate with its document one.
    routes = {name: "query" if name == "anchor" else "document" for name in _column_names(config)}
    recipe = ModelRecipe(build, lambda model: _loss(model, config), finish=restore_length,
                         router_mapping=routes if config.freeze_documents else None)

    return train_on_rows(rows, config, distillation_sampler(scores, teacher, config), recipe, out_dir, CONFIG_FILE,
                         "n_examples", usable=usable, n_skipped=n_skipped, started=started, progress=progress,
                         extra_counts=lambda epochs: {
                             "teacher": teacher_name, "n_teacher_pairs": len(scores), "teacher_s": round(teacher_s, 3),
                             "teacher_pairs_per_s": round(len(scores) / teacher_s, 1) if teacher_s > 0 else None})
