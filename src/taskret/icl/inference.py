"""In-context learning: retrieve demonstrations, assemble prompts, decode greedily."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..backends.base import LMBackend
from ..data import Example, Task
from ..retrieval import RetrievalResult, Retriever
from .prompt import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_NEW_TOKENS, Prompt, PromptBuilder, prompt_token_budget

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MAX_NEW_TOKENS", "Prediction", "build_prompts", "predict"]


@dataclass(frozen=True)
class Prediction:
    example: Example
    retrieved_ids: list[str]
    retrieved_scores: list[float]
    prompt: Prompt
    prediction: str  # in the task's own notation (e.g. Break's "step ;step")
    raw_generation: str


def build_prompts(task: Task, retriever: Retriever | None, examples: Sequence[Example], builder: PromptBuilder,
                  n_candidates: int = 100, exclude_self: bool = False, retrieved: RetrievalResult | None = None,
                  ) -> tuple[list[Prompt], list[list[str]], list[list[float]]]:
    """Retrieve ``n_candidates`` per example (enough to fill the budget) and assemble the prompts.

    ``retrieved`` replaces the retriever with rankings made elsewhere (the oracles, BruteForce).
    """
    pool = {e.id: e for e in task.train}
    result = retrieved if retrieved is not None else retriever.retrieve(
        [e.input for e in examples], k=n_candidates, exclude=[e.id for e in examples] if exclude_self else None)
    unknown = {i for ids in result.ids for i in ids if i not in pool}
    if unknown:
        raise ValueError(f"the retriever's index holds ids that are not in the training set of '{task.name}' "
                         f"(e.g. '{next(iter(unknown))}'): it was built from another pool")
    prompts = []
    for example, ids in zip(examples, result.ids):
        demos = [(i, pool[i].input, task.prompt_output(pool[i])) for i in ids]
        prompts.append(builder.build(example.input, demos))
    return prompts, result.ids, [[float(s) for s in row[: len(ids)]] for row, ids in zip(result.scores, result.ids)]


def predict(task: Task, retriever: Retriever | None, lm: LMBackend, examples: Sequence[Example], *,
            context_window: int = DEFAULT_CONTEXT_WINDOW, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
            max_demos: int | None = None, n_candidates: int = 100, retrieved: RetrievalResult | None = None,
            progress: Callable[[int], None] | None = None) -> list[Prediction]:
    """Greedy predictions for ``examples``, each prompt filled with up to ``max_demos`` of ``n_candidates``
    retrieved demonstrations within :func:`~taskret.icl.prompt.prompt_token_budget`."""
    budget = prompt_token_budget(context_window, max_new_tokens, lm.context_length)
    builder = PromptBuilder(lm.count_tokens, budget=budget, max_demos=max_demos)
    prompts, ids, scores = build_prompts(task, retriever, examples, builder, n_candidates=n_candidates,
                                          retrieved=retrieved)
    generations = lm.generate([p.text for p in prompts], max_new_tokens=max_new_tokens, progress=progress)
    return [
        Prediction(example=e, retrieved_ids=i, retrieved_scores=s, prompt=p,
                   prediction=task.output_format.from_prompt(g), raw_generation=g)
        for e, i, s, p, g in zip(examples, ids, scores, prompts, generations)
    ]
