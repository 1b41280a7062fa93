"""Prompt assembly: demonstrations ``"{input}\\t{output}"`` joined by newlines, most similar last,
then ``"{test input}\\t"``, filled greedily in retrieval order up to a token budget."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from ..formats import demonstration, render_query

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class Prompt:
    text: str
    demo_ids: list[str]  # in prompt order: the most similar is last
    n_tokens: int


class PromptBuilder:
    """Fills a prompt with demonstrations up to ``budget`` tokens (prompt only, answer excluded).

    ``count_tokens`` is the inference LM's tokenizer length. ``max_demos`` caps how many are used
    (``1`` gives the one-shot setting).
    """

    def __init__(self, count_tokens: Callable[[str], int], budget: int, max_demos: int | None = None):
        if budget < 1:
            raise ValueError("the prompt token budget must be positive")
        self.count_tokens = count_tokens
        self.budget = budget
        self.max_demos = max_demos

    def build(self, test_input: str, demos: Sequence[tuple[str, str, str]]) -> Prompt:
        """``demos``: (id, input, output-as-shown) tuples in retrieval order, best first."""
        query = render_query(test_input)
        used = self.count_tokens(query)
        chosen: list[tuple[str, str]] = []
        for demo_id, demo_input, demo_output in demos:
            if self.max_demos is not None and len(chosen) >= self.max_demos:
                break
            text = demonstration(demo_input, demo_output)
            cost = self.count_tokens(text)
            if used + cost > self.budget:
                break
            chosen.append((demo_id, text))
            used += cost
        if not chosen and demos:
            logger.warning("test input too long for any demonstration within %d tokens; running zero-shot", self.budget)
        chosen.reverse()  # most similar last, next to the test input
        text = "".join(t for _, t in chosen) + query
        # Tokens can merge across the joins, so check the whole prompt and drop the farthest if over.
        n_tokens = self.count_tokens(text)
        while n_tokens > self.budget and chosen:
            chosen.pop(0)
            text = "".join(t for _, t in chosen) + query
            n_tokens = self.count_tokens(text)
        return Prompt(text=text, demo_ids=[i for i, _ in chosen], n_tokens=n_tokens)
