"""Metrics and evaluation runs that write ``predictions.jsonl`` and ``summary.json``.

Exact match (``em``) is always computed: per example it is the ``correct`` field, which the paired tests read.
Generation tasks (code, simplification) are rarely matched exactly, so a *graded* metric can be reported beside
it: ``chrf``, sacrebleu's chrF (character 6-grams, recall weighted by beta = 2; Popovic 2015), on by default for
the berri-lite generation tasks (:data:`TASK_GRADED`) and asked for anywhere with ``metrics=("chrf",)``
(``taskret evaluate --metric chrf``). The summary holds the *corpus* chrF, as sacrebleu's ``corpus_chrf``
computes it (n-gram statistics summed over the examples, not a mean of sentence scores); each prediction row
holds its own sentence chrF. sacrebleu is an optional dependency: ``pip install 'taskret[metrics]'``.

Break reports two match metrics beside exact match: ``lf_em``, the paper's logical-form exact match as Break's
evaluator computes it (:mod:`taskret.icl.lf_em`; the headline, :data:`TASK_HEADLINE`), and ``normalized_match``,
a stricter string-level stand-in kept for comparison with earlier runs. LF-EM reads the question too, and needs
the ``break`` extra (spaCy, its English model, inflect) and WordNet: ``pip install 'taskret[break]'``.

A task with answer options (classification, multiple choice: :attr:`taskret.data.Task.has_options`) is not generated
for: the LM scores each option after the prompt and the best is the prediction (:mod:`taskret.icl.options`). Its
metric is ``accuracy`` (the chosen option is the gold one), which is also each row's ``correct``, so the paired tests
read it as they read exact match; each row holds the options and their scores beside it.
"""

from __future__ import annotations

import math
import os
import string
import time
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

from ..backends.base import LMBackend
from ..data import GENERATION_TASKS, Example, Task, sample
from ..formats import normalize_whitespace
from ..io import read_jsonl, write_json, write_jsonl
from ..models import MissingDependency, machine_info
from ..retrieval import RetrievalResult, Retriever
from .inference import Prediction, predict
from .options import DEFAULT_NORMALISATION, OptionPrediction, answer_room, options_of, predict_options
from .prompt import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_NEW_TOKENS, PromptBuilder, prompt_token_budget
from .selection import Selection, select_demonstrations


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

    A string-level stand-in for the paper's LF-EM (:func:`break_lf_em`), which parses each step into a logical
    form (operator and arguments) and compares the resulting graphs; LF-EM also forgives different step orders
    and paraphrased operator phrasing, which this does not.
    """
    steps_p = [_normalize_step(s) for s in prediction.split(";") if s.strip()]
    steps_g = [_normalize_step(s) for s in gold.split(";") if s.strip()]
    return steps_p == steps_g


def break_lf_em(prediction: str, gold: str, question: str | None = None) -> bool:
    """Break's logical-form exact match of two ``return ... ;return #1 ...`` decompositions of ``question``
    (:func:`taskret.icl.lf_em.lf_em`): equal logical-form graphs, whatever the order of their steps."""
    from .lf_em import lf_em

    return lf_em(prediction, gold, question)


METRICS: dict[str, Callable[[str, str], bool]] = {"em": exact_match}
TASK_METRICS: dict[str, dict[str, Callable[[str, str], bool]]] = {
    "break": {"em": exact_match, "lf_em": break_lf_em, "normalized_match": break_normalized_match},
}
#: Match metrics that read the example's input too: called as ``fn(prediction, gold, input)``.
INPUT_METRICS = frozenset({"lf_em"})
#: The metric a task's results are quoted by, where it is not exact match.
TASK_HEADLINE: dict[str, str] = {"break": "lf_em"}


#: The metric of a task answered by choosing among options: the chosen option is the gold one.
OPTION_METRIC = "accuracy"


def option_match(prediction: str, gold: str) -> bool:
    """A chosen option against the gold one: the same text (both are among the example's options)."""
    return prediction == gold


def metrics_for(task: Task) -> dict[str, Callable[[str, str], bool]]:
    if task.has_options:
        return {OPTION_METRIC: option_match}
    return TASK_METRICS.get(task.name, METRICS)


def headline_metric(task: Task) -> str:
    """The metric ``task``'s results are quoted by: accuracy for a task with options, Break's LF-EM, else exact
    match."""
    if task.has_options:
        return OPTION_METRIC
    return TASK_HEADLINE.get(task.name, "em")


def _correct_metric(task: Task) -> str:
    """The match metric that is each row's ``correct`` (what the paired tests read): exact match, or accuracy."""
    return OPTION_METRIC if task.has_options else "em"


def match(name: str, fn: Callable[..., bool], prediction: str, gold: str, input_text: str) -> bool:
    """One match metric of one example; those of :data:`INPUT_METRICS` are given the input as well."""
    return bool(fn(prediction, gold, input_text) if name in INPUT_METRICS else fn(prediction, gold))


def check_match_metrics(task: Task) -> None:
    """Fail before the LM runs when a task's match metric lacks what it needs (LF-EM: the ``break`` extra and
    WordNet), with the command that installs it."""
    if "lf_em" in metrics_for(task):
        try:
            from .lf_em import load_resources

            load_resources()
        except ImportError as err:  # the break extra (spaCy, its model, inflect, networkx); WordNet says itself
            raise MissingDependency(str(err) if "taskret[" in str(err) else
                                    f"LF-EM needs the break extra: pip install 'taskret[break]' ({err})") from None


# -- graded metrics ------------------------------------------------------------------------------------------

METRICS_INSTALL = "pip install 'taskret[metrics]'"


class GradedMetric(NamedTuple):
    """A metric with a score per example (``sentence(prediction, gold)``) and one over the whole set
    (``corpus(predictions, golds)``), both 0-100."""

    sentence: Callable[[str, str], float]
    corpus: Callable[[Sequence[str], Sequence[str]], float]


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError as err:
        raise ImportError(f"the chrf metric needs sacrebleu: {METRICS_INSTALL}") from err
    return sacrebleu


def chrf_sentence(prediction: str, gold: str) -> float:
    """sacrebleu's sentence chrF of one prediction against its gold output."""
    return float(_sacrebleu().sentence_chrf(prediction, [gold]).score)


def chrf_corpus(predictions: Sequence[str], golds: Sequence[str]) -> float:
    """sacrebleu's corpus chrF (one reference per prediction); 0 for no predictions."""
    if not predictions:
        return 0.0
    return float(_sacrebleu().corpus_chrf(list(predictions), [list(golds)]).score)


GRADED_METRICS: dict[str, GradedMetric] = {"chrf": GradedMetric(chrf_sentence, chrf_corpus)}
#: Graded metrics a task reports by default: the generation tasks built from berri-lite (taskret.data).
TASK_GRADED: dict[str, tuple[str, ...]] = {name: ("chrf",) for name in GENERATION_TASKS}


def graded_metrics_for(task: Task, metrics: Sequence[str] = ()) -> list[str]:
    """The graded metrics to report for ``task``: its defaults (:data:`TASK_GRADED`) and those asked for.
    Exact match and the task's own match metrics are always reported, so naming them changes nothing."""
    names = list(TASK_GRADED.get(task.name, ()))
    known = set(GRADED_METRICS) | set(metrics_for(task))
    for name in metrics:
        if name not in known:
            raise ValueError(f"unknown metric '{name}' for task '{task.name}'; known: {', '.join(sorted(known))}")
        if name in GRADED_METRICS and name not in names:
            names.append(name)
    for name in names:
        if name == "chrf":
            _sacrebleu()  # fail before the LM runs, not after
    return names


def score_predictions(task: Task, predictions: Sequence[Prediction], graded: Sequence[str] = ()) -> dict[str, float]:
    """Match metrics in % of examples, then the ``graded`` metrics over the whole set (:data:`GRADED_METRICS`)."""
    metrics = metrics_for(task)
    n = max(len(predictions), 1)
    scores = {name: 100.0 * sum(match(name, fn, p.prediction, p.example.output, p.example.input)
                                for p in predictions) / n
              for name, fn in metrics.items()}
    for name in graded:
        scores[name] = GRADED_METRICS[name].corpus([p.prediction for p in predictions],
                                                   [p.example.output for p in predictions])
    return scores


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


def prediction_rows(task: Task, predictions: Sequence[Prediction], graded: Sequence[str] = ()) -> list[dict]:
    metrics = metrics_for(task)
    correct = _correct_metric(task)
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
        "correct": metrics[correct](p.prediction, p.example.output),
        **{name: match(name, fn, p.prediction, p.example.output, p.example.input)
           for name, fn in metrics.items() if name not in ("em", correct)},
        **({"options": list(p.options), "option_scores": p.option_scores} if isinstance(p, OptionPrediction) else {}),
        **{name: round(GRADED_METRICS[name].sentence(p.prediction, p.example.output), 4) for name in graded},
    } for p in predictions]


def evaluate(task: Task, retriever: Retriever | None, lm: LMBackend, examples: Sequence[Example], out_dir: str | Path, *,
             retriever_name: str, context_window: int = DEFAULT_CONTEXT_WINDOW,
             max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, max_demos: int | None = None,
             progress: Callable[[int], None] | None = None, extra: dict | None = None,
             retrieved: RetrievalResult | None = None, metrics: Sequence[str] = (),
             selection: Selection | None = None, option_normalisation: str = DEFAULT_NORMALISATION) -> dict:
    """Run in-context learning on ``examples`` and write predictions.jsonl and summary.json to ``out_dir``.

    ``metrics``: graded metrics to report beside exact match (``chrf``; module docstring). ``selection``: choose
    each prompt's demonstrations as a set (DPP or MMR over the top candidates, :mod:`taskret.icl.selection`)
    instead of the top of the ranking; the summary records its settings under ``selection``.

    A task with answer options is answered by their likelihood (:mod:`taskret.icl.options`, ``option_normalisation``
    ``mean`` or ``sum``), the room left for the answer being the longest option's tokens when that exceeds
    ``max_new_tokens``."""
    out_dir = Path(out_dir)
    if task.has_options:
        max_new_tokens = max(max_new_tokens, answer_room(lm, options_of(task, examples)))
    budget = prompt_token_budget(context_window, max_new_tokens, lm.context_length)  # refuses no room early
    graded = graded_metrics_for(task, metrics)
    check_match_metrics(task)
    load_at_start = os.getloadavg()[0]  # beside the wall time: other work on the machine slows it
    start = time.perf_counter()
    selected = None
    if selection is not None:
        builder = PromptBuilder(lm.count_tokens, budget=budget, max_demos=max_demos)
        retrieved, selected = select_demonstrations(task, retriever, examples, selection, builder, retrieved)
    predictions = _predict(task, retriever, lm, examples, context_window=context_window, max_new_tokens=max_new_tokens,
                           max_demos=max_demos, progress=progress, retrieved=retrieved,
                           option_normalisation=option_normalisation)
    wall = time.perf_counter() - start
    scored_by_options = task.has_options
    summary = {
        "task": task.name,
        "retriever": retriever_name,
        "lm": lm.name,
        "n": len(predictions),
        "metrics": score_predictions(task, predictions, graded),
        **({"headline_metric": headline_metric(task)} if task.name in TASK_HEADLINE or scored_by_options else {}),
        **({"answered_by": "option likelihood", "option_normalisation": option_normalisation,
            "options_per_s": round(sum(len(p.options) for p in predictions) / wall, 2) if wall > 0 else None}
           if scored_by_options else {}),
        "context_window": budget + max_new_tokens,  # capped by the LM's context
        "max_new_tokens": max_new_tokens,
        "token_budget": budget,
        "max_demos": max_demos,
        "mean_demos": sum(len(p.prompt.demo_ids) for p in predictions) / max(len(predictions), 1),
        "mean_prompt_tokens": sum(p.prompt.n_tokens for p in predictions) / max(len(predictions), 1),
        "wall_time_s": round(wall, 2),
        "load_average_at_start": round(load_at_start, 2),
        "examples_per_s": round(len(predictions) / wall, 3) if wall > 0 else None,
        "prompt_tokens_per_s": round(sum(p.prompt.n_tokens for p in predictions) / wall, 1) if wall > 0 else None,
        "generated_tokens_per_s": round(sum(lm.count_tokens(p.raw_generation) + 1 for p in predictions) / wall, 2)
        if wall > 0 and not scored_by_options else None,  # options are scored, not generated
        "max_batch_tokens": getattr(lm, "max_batch_tokens", None),
        "lm_backend": lm.backend,
        # What the LM's greedy outputs depend on beyond the prompts: compare evaluations made on one machine only.
        "machine": {**machine_info(), **lm.runtime()},
        **({"selection": selected} if selected is not None else {}),
        **(extra or {}),
    }
    write_jsonl(out_dir / "predictions.jsonl", prediction_rows(task, predictions, graded))
    write_json(out_dir / "summary.json", summary)
    return summary


def _predict(task: Task, retriever: Retriever | None, lm: LMBackend, examples: Sequence[Example], *,
             context_window: int, max_new_tokens: int, max_demos: int | None, retrieved: RetrievalResult | None,
             progress: Callable[[int], None] | None, option_normalisation: str = DEFAULT_NORMALISATION,
             ) -> list[Prediction]:
    """Greedy generation, or, for a task with answer options, the most likely option (:mod:`taskret.icl.options`)."""
    if task.has_options:
        return predict_options(task, retriever, lm, examples, context_window=context_window,
                               answer_tokens=max_new_tokens, max_demos=max_demos, retrieved=retrieved,
                               normalisation=option_normalisation, progress=progress)
    return predict(task, retriever, lm, examples, context_window=context_window, max_new_tokens=max_new_tokens,
                   max_demos=max_demos, progress=progress, retrieved=retrieved)


#: The parts of a summary's ``machine`` that an LM's greedy outputs depend on (``engine``: the LM backend's engine,
#: transformers or llama.cpp; summaries written before it was recorded ran on transformers).
MACHINE_KEYS = ("cpu", "cpu_flags", "torch", "transformers", "dtype", "engine")


def machine_differences(summary: dict, dtype: str | None = None, against: dict | None = None,
                        engine: str | None = None) -> dict[str, tuple]:
    """How the machine an evaluation ``summary`` was made on differs from this one, ``{key: (then, here)}``
    (empty: the same). ``dtype`` and ``engine``: the LM's precision (:func:`taskret.models.dtype_name`) and engine
    (:func:`taskret.backends.base.engine_of`) here, where known. A summary written before machines were recorded
    differs by ``machine``: nothing says where it ran. ``against``: another summary's ``machine`` to compare with
    instead of this one (evaluations meant to be read side by side)."""
    recorded = summary.get("machine")
    here = against if against is not None else {**machine_info(), **({"dtype": dtype} if dtype is not None else {}),
                                                **({"engine": engine} if engine is not None else {})}
    if not isinstance(recorded, dict):
        return {"machine": ("not recorded", here.get("cpu"))}
    recorded = {"engine": "transformers", **recorded}
    return {key: (recorded.get(key), here[key]) for key in MACHINE_KEYS
            if key in here and recorded.get(key) != here[key]}


def choose_selection_weight(task: Task, retriever: Retriever, lm: LMBackend, selection: Selection,
                            weights: Sequence[float], *, n: int = 100, seed: int = 0, metric: str = "em",
                            context_window: int = DEFAULT_CONTEXT_WINDOW, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                            max_demos: int | None = None, progress: Callable[[int], None] | None = None,
                            ) -> tuple[float, dict[float, float]]:
    """The selection weight among ``weights`` that scores best on ``n`` held-out *training* examples (a seeded
    sample; each retrieves from the rest of the pool, itself excluded), never on the test set; and every weight's
    score. ``metric``: ``em`` (or the task's match metrics) or a graded one (``chrf``). Ties go to the weight
    listed first. Costs ``len(weights) * n`` LM generations: one evaluation of ``n`` inputs per weight."""
    if not weights:
        raise ValueError("give at least one weight to choose from")
    if task.has_options and metric == "em":
        metric = OPTION_METRIC  # the chosen option is the gold one: a task with options' exact match
    graded = [metric] if metric in GRADED_METRICS else []
    graded_metrics_for(task, [metric])  # refuses an unknown metric before the LM runs
    check_match_metrics(task)
    held_out = sample(task.train, n, seed=seed)
    budget = prompt_token_budget(context_window, max_new_tokens, lm.context_length)
    builder = PromptBuilder(lm.count_tokens, budget=budget, max_demos=max_demos)
    candidates = retriever.retrieve([e.input for e in held_out], k=selection.n_candidates,
                                    exclude=[e.id for e in held_out])
    scores: dict[float, float] = {}
    for weight in weights:
        chosen = Selection(selection.method, weight, selection.n_candidates, selection.encoder)
        retrieved, _ = select_demonstrations(task, retriever, held_out, chosen, builder, candidates)
        predictions = _predict(task, None, lm, held_out, context_window=context_window, max_new_tokens=max_new_tokens,
                               max_demos=max_demos, retrieved=retrieved, progress=progress)
        scores[weight] = score_predictions(task, predictions, graded)[metric]
    best = max(weights, key=lambda w: (scores[w], -list(weights).index(w)))
    return best, scores
