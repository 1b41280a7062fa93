"""Prompt assembly: demonstrations ``"{input}\\t{output}"`` joined by newlines, most similar last,
then ``"{test input}\\t"``, filled greedily in retrieval order up to a token budget.

The budget is :func:`prompt_token_budget` (the context window minus room for the answer, capped by the
LM's context) everywhere a prompt is built: ``taskret evaluate``, the EPR pipeline and ``taskret serve``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from ..formats import demonstration, render_query

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_WINDOW = 2048  # the paper's LM context (GPT-Neo); SmolLM2 allows 8192
DEFAULT_MAX_NEW_TOKENS = 128


def prompt_token_budget(context_window: int = DEFAULT_CONTEXT_WINDOW, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                        lm_context_length: int | None = None) -> int:
    """Tokens a prompt may use: the context window (capped by the LM's own context length, when known)
    minus the ``max_new_tokens`` left for the answer."""
    if context_window < 1 or max_new_tokens < 0:
        raise ValueError(f"context_window must be positive and max_new_tokens not negative (got {context_window} "
                         f"and {max_new_tokens})")
    window = context_window if lm_context_length is None else min(context_window, lm_context_length)
    budget = window - max_new_tokens
    if budget < 1:
        raise ValueError(f"no room for a prompt: a {window}-token context window minus {max_new_tokens} tokens "
                         f"for the answer leaves {budget}")
    return budget


#: Tokens the answer may run past the training outputs' length (:func:`max_new_tokens_for`).
OUTPUT_MARGIN = 16
#: The share of training outputs the answer room fits: the longest but for the top 1%, whose outliers (a 190-token
#: bash pipeline among 5,000 commands of 16 tokens' median) would otherwise set the room for every answer.
OUTPUT_QUANTILE = 0.99


def max_new_tokens_for(outputs: Sequence[str], count_tokens: Callable[[str], int], margin: int = OUTPUT_MARGIN,
                       quantile: float = OUTPUT_QUANTILE, sample_size: int = 2000, seed: int = 0) -> tuple[int, int]:
    """Room for an answer as the task's training outputs need it: ``(length + margin, length)``, ``length`` the token
    count that a ``quantile`` share of the outputs fit in (1.0: the longest). What ``taskret evaluate`` leaves for
    the answer when ``--max-new-tokens`` is not given, so that greedy decoding that loops (``-o -o -o ...``) stops
    soon after a real answer would have ended, not at a fixed 128 tokens. ``outputs``: as demonstrations show
    them; more than ``sample_size`` are counted on a seeded sample."""
    import math
    import random

    if not outputs:
        raise ValueError("no training outputs to size the answer by")
    counted = list(outputs) if len(outputs) <= sample_size else random.Random(seed).sample(list(outputs), sample_size)
    lengths = sorted(count_tokens(text) for text in counted)
    length = lengths[min(len(lengths) - 1, max(0, math.ceil(quantile * len(lengths)) - 1))]
    return length + margin, length


# -- token counting --------------------------------------------------------------------------------------


def whitespace_tokens(text: str) -> int:
    """The fallback count: whitespace-separated words. LM tokenizers split words into sub-words, so this
    undercounts (by ~1.3-2x on English, more on logical forms); name an LM for exact budgets."""
    return len(text.split())


class TokenCounter(NamedTuple):
    """How prompt tokens are counted without loading an LM: ``count(text)``, a ``name`` that says how
    (``tokenizer:LM`` or ``whitespace``), and the LM's context length (None when unknown)."""

    count: Callable[[str], int]
    name: str
    context_length: int | None = None


def make_token_counter(lm: str | None) -> TokenCounter:
    """The LM's own tokenizer (as ``CausalLM.count_tokens`` counts, no special tokens) and context length
    when an LM is named, else :func:`whitespace_tokens`."""
    if not lm:
        return TokenCounter(whitespace_tokens, "whitespace")
    from transformers import AutoConfig, AutoTokenizer

    from ..models import resolve_model

    folder = str(resolve_model(lm))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    context_length = getattr(AutoConfig.from_pretrained(folder), "max_position_embeddings", None)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return TokenCounter(count, f"tokenizer:{lm}", int(context_length) if context_length else None)


# -- assembly --------------------------------------------------------------------------------------------


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
