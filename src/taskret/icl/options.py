"""Classification and multiple choice by the options' likelihood, not by free generation.

A task with answer options (a classification task's label set, :attr:`taskret.data.Task.options`, or a multiple-choice
example's own, :attr:`taskret.data.Example.options`) is answered as EPR's successors answer it: the prompt is built as
for generation (retrieved demonstrations, each ``"{input}\\t{gold option}"``, then ``"{test input}\\t"``), the LM scores
each option as the continuation of that prompt (:meth:`taskret.backends.base.LMBackend.score`), and the highest
scoring option is the prediction. Accuracy is the share of test inputs whose chosen option is the gold one.

How an option's score is made (``normalisation``):

* ``mean`` (the default): the mean log-probability of the option's tokens. UDR's rule (KaiLv69/UDR ``inference.py``
  ``cls_forward``: allennlp's ``sequence_cross_entropy_with_logits`` averaged over the label tokens only, its
  ``pad_mask``; ``cls_test.py`` keeps the option of lowest loss).
* ``sum``: the summed log-probability, the option's likelihood itself; favours short options.

CEIL (HKUNLP/icl-ceil ``src/models/model.py`` ``ppl_generate``) takes the mean cross-entropy over the whole sequence,
prompt and option together; with one prompt for all options this ranks like ``mean`` only when the options have one
length, and is not offered here. Ties go to the option listed first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..backends.base import LMBackend, TargetScore
from ..data import Example, Task
from ..retrieval import RetrievalResult, Retriever
from .inference import Prediction, build_prompts
from .prompt import DEFAULT_CONTEXT_WINDOW, PromptBuilder, prompt_token_budget

__all__ = ["OPTION_NORMALISATIONS", "DEFAULT_NORMALISATION", "OptionPrediction", "option_score", "choose_options",
           "options_of", "answer_room", "predict_options"]

OPTION_NORMALISATIONS = ("mean", "sum")
DEFAULT_NORMALISATION = "mean"  # UDR's


@dataclass(frozen=True)
class OptionPrediction(Prediction):
    """A prediction chosen among ``options``; ``option_scores[i]`` is option i's score (``normalisation``)."""

    options: tuple[str, ...]
    option_scores: list[float]


def option_score(score: TargetScore, normalisation: str = DEFAULT_NORMALISATION) -> float:
    """An option's score from its log-probability: the mean over its tokens, or the sum."""
    if normalisation == "mean":
        return score.mean
    if normalisation == "sum":
        return score.logprob
    raise ValueError(f"unknown option normalisation '{normalisation}'; known: {', '.join(OPTION_NORMALISATIONS)}")


def options_of(task: Task, examples: Sequence[Example]) -> list[tuple[str, ...]]:
    """Each example's answer options; an example without any, in a task that has them, is refused naming it."""
    found = []
    for example in examples:
        options = task.answer_options(example)
        if not options:
            raise ValueError(f"task '{task.name}': example '{example.id}' has no answer options while the task is "
                             f"scored by options (give every example options, or the task a label set)")
        found.append(options)
    return found


def answer_room(lm: LMBackend, options: Sequence[tuple[str, ...]]) -> int:
    """Tokens the longest option takes: what the prompt must leave free in the context window."""
    return max(lm.count_tokens(option) for option in {o for row in options for o in row})


def _per_example_progress(progress: Callable[[int], None] | None, counts: Sequence[int]) -> Callable[[int], None] | None:
    """Turn the LM's progress in (prompt, option) pairs into progress in examples: an example counts once all its
    options are scored."""
    if progress is None:
        return None
    ends, total = [], 0
    for count in counts:
        total += count
        ends.append(total)
    state = {"pairs": 0, "examples": 0}

    def advance(pairs: int) -> None:
        state["pairs"] += pairs
        done = state["examples"]
        while done < len(ends) and ends[done] <= state["pairs"]:
            done += 1
        if done > state["examples"]:
            progress(done - state["examples"])
            state["examples"] = done

    return advance


def choose_options(lm: LMBackend, prompts: Sequence[str], options: Sequence[tuple[str, ...]],
                   normalisation: str = DEFAULT_NORMALISATION, progress: Callable[[int], None] | None = None,
                   ) -> list[tuple[int, list[float]]]:
    """For each prompt, the index of its best option and every option's score. All (prompt, option) pairs go to the
    LM in one :meth:`~taskret.backends.base.LMBackend.score_shared` call, so a backend batches them as it likes, and
    computes the demonstrations (the prompt up to its last line, the test input) once for all of a prompt's options,
    each option then running only the test input and itself on top. The scores equal :meth:`score`'s up to float
    rounding."""
    option_score(TargetScore(0.0, 1), normalisation)  # an unknown normalisation fails before the LM runs
    pair_prompts = [prompt for prompt, row in zip(prompts, options) for _ in row]
    pair_prefixes = [prompt[:prompt.rfind("\n") + 1] for prompt in pair_prompts]  # "" without demonstrations
    pair_targets = [option for row in options for option in row]
    scores = lm.score_shared(pair_prefixes, pair_prompts, pair_targets,
                             progress=_per_example_progress(progress, [len(r) for r in options]))
    chosen, start = [], 0
    for row in options:
        row_scores = [option_score(s, normalisation) for s in scores[start:start + len(row)]]
        start += len(row)
        best = max(range(len(row)), key=lambda i: (row_scores[i], -i))  # ties: the option listed first
        chosen.append((best, row_scores))
    return chosen


def predict_options(task: Task, retriever: Retriever | None, lm: LMBackend, examples: Sequence[Example], *,
                    context_window: int = DEFAULT_CONTEXT_WINDOW, answer_tokens: int = 0,
                    max_demos: int | None = None, n_candidates: int = 100, retrieved: RetrievalResult | None = None,
                    normalisation: str = DEFAULT_NORMALISATION, progress: Callable[[int], None] | None = None,
                    ) -> list[OptionPrediction]:
    """Each example's option of highest score after a prompt of up to ``max_demos`` retrieved demonstrations (their
    gold options as outputs). The prompt leaves room for the longest option, or ``answer_tokens`` if more."""
    options = options_of(task, examples)
    room = max(answer_room(lm, options), answer_tokens)
    budget = prompt_token_budget(context_window, room, lm.context_length)
    builder = PromptBuilder(lm.count_tokens, budget=budget, max_demos=max_demos)
    prompts, ids, scores = build_prompts(task, retriever, examples, builder, n_candidates=n_candidates,
                                          retrieved=retrieved)
    chosen = choose_options(lm, [p.text for p in prompts], options, normalisation, progress)
    return [
        OptionPrediction(example=e, retrieved_ids=i, retrieved_scores=s, prompt=p, prediction=row[best],
                         raw_generation=row[best], options=row, option_scores=[round(v, 6) for v in row_scores])
        for e, i, s, p, row, (best, row_scores) in zip(examples, ids, scores, prompts, options, chosen)
    ]
