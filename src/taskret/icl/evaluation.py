"""Metrics and evaluation runs that write ``predictions.jsonl`` and ``summary.json``."""

from __future__ import annotations

import math
import string
import time
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

from ..backends.base import LMBackend
from ..data import Example, Task
from ..formats import normalize_whitespace
from ..io import read_jsonl, write_json, write_jsonl
from ..retrieval import RetrievalResult, Retriever
from .inference import Prediction, predict
from .prompt import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_NEW_TOKENS, prompt_token_budget


def exact_match(prediction: str, gold: str) -> bool:
    """Exact string match after collapsing runs of whitespace (Break's gold has double spaces)."""
    return normalize_whitespace(prediction) == normalize_whitespace(gold)


_ARTICLES = {"a", "an", "the"}
_PUNCT = str.maketrans({c: " " for c in string.punctuation if c != "#"})


def _normalize_step(step: str) -> str:
    words = step.lower().translate(_PUNCT).split()
    return " ".join(w for w in words if w not in _ARTICLES)


def break_normalized_match(prediction: str, gold: str) -> bool:
    """Break decompositions equal step by step after lower-casing, dropping punctuation and articles.

    This is a string-level approximation of the paper's LF-EM, which parses each step into a logical
    form (operator and arguments) and compares the resulting graphs; LF-EM also forgives different
    step orders and paraphrased operator phrasing, which this does not, so it is stricter than LF-EM.
    """
    steps_p = [_normalize_step(s) for s in prediction.split(";") if s.strip()]
    steps_g = [_normalize_step(s) for s in gold.split(";") if s.strip()]
    return steps_p == steps_g


METRICS: dict[str, Callable[[str, str], bool]] = {"em": exact_match}
TASK_METRICS: dict[str, dict[str, Callable[[str, str], bool]]] = {
    "break": {"em": exact_match, "normalized_match": break_normalized_match},
}


def metrics_for(task: Task) -> dict[str, Callable[[str, str], bool]]:
    return TASK_METRICS.get(task.name, METRICS)


def score_predictions(task: Task, predictions: Sequence[Prediction]) -> dict[str, float]:
    metrics = metrics_for(task)
    n = max(len(predictions), 1)
    return {name: 100.0 * sum(fn(p.prediction, p.example.output) for p in predictions) / n
            for name, fn in metrics.items()}


class PairedTest(NamedTuple):
    """Two systems on the same examples: how many only ``a`` solves, only ``b`` solves, and McNemar's p."""

    only_a: int
    only_b: int
    p_value: float


def mcnemar(a: Mapping[str, bool], b: Mapping[str, bool]) -> PairedTest:
    """Exact two-sided McNemar test of two systems' per-example correctness (a binomial test on the
    discordant examples): whether their EM on the same examples really differs. Both maps must hold the
    same example ids."""
    if a.keys() != b.keys():
        raise ValueError(f"paired test needs the same examples: {len(a.keys() - b.keys())} ids only in a, "
                         f"{len(b.keys() - a.keys())} only in b")
    only_a = sum(bool(a[k]) and not b[k] for k in a)
    only_b = sum(bool(b[k]) and not a[k] for k in a)
    n = only_a + only_b
    if n == 0:
        return PairedTest(0, 0, 1.0)
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return PairedTest(only_a, only_b, min(1.0, 2 * tail))


def read_correct(path: str | Path) -> dict[str, bool]:
    """Per-example correctness (the ``correct`` field) of a ``predictions.jsonl`` that :func:`evaluate` wrote."""
    return {row["id"]: bool(row["correct"]) for row in read_jsonl(path)}


def prediction_rows(task: Task, predictions: Sequence[Prediction]) -> list[dict]:
    metrics = metrics_for(task)
    return [{
        "id": p.example.id,
        "input": p.example.input,
        "retrieved_ids": p.retrieved_ids,
        "retrieved_scores": p.retrieved_scores,
        "prompt_ids": p.prompt.demo_ids,
        "prompt_tokens": p.prompt.n_tokens,
        "prompt": p.prompt.text,
        "generation": p.raw_generation,
        "prediction": p.prediction,
        "gold": p.example.output,
        "correct": metrics["em"](p.prediction, p.example.output),
        **{name: fn(p.prediction, p.example.output) for name, fn in metrics.items() if name != "em"},
    } for p in predictions]


def evaluate(task: Task, retriever: Retriever | None, lm: LMBackend, examples: Sequence[Example], out_dir: str | Path, *,
             retriever_name: str, context_window: int = DEFAULT_CONTEXT_WINDOW,
             max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, max_demos: int | None = None,
             progress: Callable[[int], None] | None = None, extra: dict | None = None,
             retrieved: RetrievalResult | None = None) -> dict:
    """Run in-context learning on ``examples`` and write predictions.jsonl and summary.json to ``out_dir``."""
    out_dir = Path(out_dir)
    budget = prompt_token_budget(context_window, max_new_tokens, lm.context_length)  # refuses no room early
    start = time.perf_counter()
    predictions = predict(task, retriever, lm, examples, context_window=context_window, max_new_tokens=max_new_tokens,
                          max_demos=max_demos, progress=progress, retrieved=retrieved)
    wall = time.perf_counter() - start
    summary = {
        "task": task.name,
        "retriever": retriever_name,
        "lm": lm.name,
        "n": len(predictions),
        "metrics": score_predictions(task, predictions),
        "context_window": budget + max_new_tokens,  # capped by the LM's context
        "max_new_tokens": max_new_tokens,
        "token_budget": budget,
        "max_demos": max_demos,
        "mean_demos": sum(len(p.prompt.demo_ids) for p in predictions) / max(len(predictions), 1),
        "mean_prompt_tokens": sum(p.prompt.n_tokens for p in predictions) / max(len(predictions), 1),
        "wall_time_s": round(wall, 2),
        "examples_per_s": round(len(predictions) / wall, 3) if wall > 0 else None,
        "prompt_tokens_per_s": round(sum(p.prompt.n_tokens for p in predictions) / wall, 1) if wall > 0 else None,
        "generated_tokens_per_s": round(sum(lm.count_tokens(p.raw_generation) + 1 for p in predictions) / wall, 2)
        if wall > 0 else None,
        "max_batch_tokens": getattr(lm, "max_batch_tokens", None),
        "lm_backend": lm.backend,
        **(extra or {}),
    }
    write_jsonl(out_dir / "predictions.jsonl", prediction_rows(task, predictions))
    write_json(out_dir / "summary.json", summary)
    return summary
