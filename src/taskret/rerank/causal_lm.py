"""The causal-LM backend: zero-shot reranking by query likelihood (UPR, Sachan et al. 2022).

A document is scored by how well it lets the LM write the query: ``log P(query | prompt(document))``,
summed over the query's tokens. The LM reads the query and the document together, which a sentence
encoder turned cross-encoder has to learn from relevance data; this needs none. On SciFact the bundled
SmolLM2-135M reranking the top 10 of BM25 + MiniLM and interpolated with it gives 73.2 NDCG@10 (BM25 68.6;
``benchmarks/results/tart_berri.json``).

Instructions: TART queries arrive as ``"{instruction} [SEP] {query}"`` (:func:`taskret.formats.format_query`).
The instruction then goes into the prompt (it says what kind of query this document should produce) and
only the query is scored; without one the prompt asks for a question, as UPR does.
``ensemble_bare=True`` scores an instructed query under both prompts and averages the two log-likelihoods
(a prompt ensemble: the instruction guides the score without deciding it alone, for instructions unlike
any the LM has read).

Documents are cut to ``max_doc_tokens`` of the LM's tokenizer (UPR and our measurement used 200): the
cost is linear in prompt length, and a passage's start carries most of what a query asks about. A spec
sets it after a ``?``: ``upr:smollm2-135m?max_doc_tokens=384`` (where documents run longer, as SciFact's
abstracts do: median 290 SmolLM2 tokens).

Scoring reports its progress (pairs/s, ETA) on stderr within :func:`taskret.progress.reporting`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..formats import split_query
from ..progress import stage
from .base import Reranker

__all__ = ["CausalLMReranker", "UPR_PROMPT", "UPR_INSTRUCTED_PROMPT"]

UPR_PROMPT = "Passage: {document}\nPlease write a question based on this passage.\nQuestion:"
UPR_INSTRUCTED_PROMPT = "Passage: {document}\nTask: {instruction}\nQuery:"


def _boolean(value: str) -> bool:
    if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(value)
    return value.lower() in ("true", "1")


_boolean.__name__ = "true or false"


def _parse_lm_spec(spec: str) -> tuple[str, dict]:
    """``"smollm2-135m?max_doc_tokens=384&ensemble_bare=true"`` -> ("smollm2-135m", the options); the options
    follow the last ``?``."""
    from ..retrieval.hybrid import parse_spec_options, token_count

    lm, _, query = spec.rpartition("?")
    return lm, parse_spec_options("upr reranker", f"upr:{spec}", query,
                                  {"max_doc_tokens": token_count(1), "ensemble_bare": _boolean})


class CausalLMReranker(Reranker):
    """Rerank with a causal LM's query likelihood: ``lm`` is an LM spec (``smollm2-135m``, a folder,
    ``openai:URL#MODEL``...; see :func:`taskret.backends.load_lm`) or a loaded
    :class:`~taskret.backends.base.LMBackend`."""

    name = "upr"

    def __init__(self, lm: str = "smollm2-135m", max_doc_tokens: int = 200, prompt: str = UPR_PROMPT,
                 instructed_prompt: str = UPR_INSTRUCTED_PROMPT, device: str | None = None,
                 batch_size: int | None = None, ensemble_bare: bool = False):
        """``batch_size``: the most pairs per LM forward pass, for an LM loaded here from a spec (the reranker
        interface's batch size, as a distillation teacher gets it); the LM's own default when None."""
        if isinstance(lm, str) and "?" in lm:  # "LM?max_doc_tokens=N": a spec's options win over the defaults
            lm, options = _parse_lm_spec(lm)
            max_doc_tokens = options.get("max_doc_tokens", max_doc_tokens)
            ensemble_bare = options.get("ensemble_bare", ensemble_bare)
        if max_doc_tokens < 1:
            raise ValueError(f"max_doc_tokens must be positive, got {max_doc_tokens}")
        for template, fields in ((prompt, ("{document}",)), (instructed_prompt, ("{document}", "{instruction}"))):
            missing = [f for f in fields if f not in template]
            if missing:
                raise ValueError(f"reranking prompt {template!r} lacks {', '.join(missing)}")
        if isinstance(lm, str):
            from ..backends.base import load_lm

            self.lm_name = lm
            lm = load_lm(lm, device=device, max_batch_size=batch_size)
        else:
            self.lm_name = getattr(lm, "name", "lm")
        self.lm = lm
        self.max_doc_tokens, self.prompt, self.instructed_prompt = max_doc_tokens, prompt, instructed_prompt
        self.ensemble_bare = bool(ensemble_bare)
        self.name = f"upr:{self.lm_name}"

    def _cut(self, document: str) -> str:
        tokenizer = getattr(self.lm, "tokenizer", None)
        if tokenizer is not None:
            ids = tokenizer(document, add_special_tokens=False)["input_ids"]
            return document if len(ids) <= self.max_doc_tokens else tokenizer.decode(ids[: self.max_doc_tokens])
        # A remote LM: words as a stand-in for tokens (about 1.3 tokens a word in English).
        words = document.split()
        return document if len(words) * 4 <= self.max_doc_tokens * 3 else " ".join(words[: self.max_doc_tokens * 3 // 4])

    def prompt_and_target(self, query: str, document: str) -> tuple[str, str]:
        """The prompt the LM reads and the text it is scored on, for one pair."""
        prompt, target, _ = self._prompts(query, document)
        return prompt, target

    def _prompts(self, query: str, document: str) -> tuple[str, str, str | None]:
        """:meth:`prompt_and_target`, plus the bare prompt over the same cut document when the query carries an
        instruction (None without one): the document is cut, which tokenizes it, once for both."""
        instruction, bare = split_query(query)  # (None, query) without one
        document = self._cut(document.strip())
        bare_prompt = self.prompt.format(document=document)
        if instruction:
            return self.instructed_prompt.format(document=document, instruction=instruction), " " + bare, bare_prompt
        return bare_prompt, " " + bare, None

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        prompts, targets, bare_prompts = map(list, zip(*(self._prompts(q, d) for q, d in pairs)))
        # the bare prompt's twins of the instructed pairs, scored in the same LM call (ensemble_bare)
        twins = [i for i, twin in enumerate(bare_prompts) if twin is not None] if self.ensemble_bare else []
        for i in twins:
            prompts.append(bare_prompts[i])
            targets.append(targets[i])
        with stage(len(prompts), f"reranking with {self.name}", unit="pairs") as advance:
            scores = np.asarray([s.logprob for s in self.lm.score(prompts, targets, progress=advance)],
                                dtype=np.float32)
        if twins:
            scores[twins] = (scores[twins] + scores[len(pairs):]) / 2
        return scores[:len(pairs)]
