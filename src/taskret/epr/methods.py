"""The EPR paper's other methods on the same machinery: rankings made with the scoring LM or with the
gold output at test time. Each returns a :class:`RetrievalResult` for ``evaluate(..., retrieved=...)``.

- BM25-Oracle: BM25 over training outputs, queried with the *gold* test output.
- LM-Oracle: BM25-by-gold-output candidates re-ranked by the scoring LM's log P(y_test | e, x_test).
- BruteForce: ``n_random`` random training examples ranked by the scoring LM without the gold output,
  by log P(x_test | e): how well a candidate demonstration predicts the test input. This is our reading
  of the paper's description (the gold output is not available at test time).
- AnyCorrect-Oracle: one-shot; an example counts as solved if *any* of its top-L candidates, used as the
  single demonstration, makes the inference LM produce the gold output.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import numpy as np

from ..backends.base import LMBackend
from ..data import Example, Task
from ..icl.evaluation import exact_match
from ..retrieval import BM25Retriever, RetrievalResult
from .scoring import demonstration_prefix, scoring_pair

Progress = Callable[[int], None] | None


def _ranked(ids_per_query: list[list[str]], scores_per_query: list[list[float]], k: int) -> RetrievalResult:
    out_ids, out_scores = [], np.full((len(ids_per_query), k), np.nan, dtype=np.float32)
    for q, (ids, scores) in enumerate(zip(ids_per_query, scores_per_query)):
        order = sorted(range(len(ids)), key=lambda i: -scores[i])[:k]  # stable on ties
        out_ids.append([ids[i] for i in order])
        out_scores[q, : len(order)] = [scores[i] for i in order]
    return RetrievalResult(out_ids, out_scores)


def bm25_oracle(task: Task, examples: Sequence[Example], k: int = 100) -> RetrievalResult:
    retriever = BM25Retriever(field="output").index(task.train)
    return retriever.retrieve([e.output for e in examples], k=k)


def lm_rank(task: Task, examples: Sequence[Example], candidates: RetrievalResult, lm: LMBackend,
            gold_output: bool = True, progress: Progress = None) -> RetrievalResult:
    """Re-rank each example's candidates by the LM: log P(y | e, x) with the gold output, else log P(x | e)."""
    pool = {e.id: e for e in task.train}
    prefixes, prompts, targets = [], [], []
    for example, ids in zip(examples, candidates.ids):
        for cand_id in ids:
            if gold_output:
                prompt, target = scoring_pair(pool[cand_id], example, task.output_format)
                prefixes.append(demonstration_prefix(pool[cand_id], task.output_format))
            else:
                cand = pool[cand_id]
                prompt, target = demonstration_prefix(cand, task.output_format), example.input
                prefixes.append("")  # the demonstration is the whole prompt: nothing after it to share it with
            prompts.append(prompt)
            targets.append(target)
    # Candidates recur across test examples: each demonstration is computed once (LMs that share prefixes).
    scores = iter(lm.score_shared(prefixes, prompts, targets, progress=progress))
    ranked_scores = [[next(scores).logprob for _ in ids] for ids in candidates.ids]
    return _ranked(candidates.ids, ranked_scores, k=max((len(i) for i in candidates.ids), default=1))


def lm_oracle(task: Task, examples: Sequence[Example], lm: LMBackend, n_candidates: int = 50,
              progress: Progress = None, fill_to: int = 0) -> RetrievalResult:
    """BM25-Oracle's top ``n_candidates`` re-ranked by the LM with the gold output.

    ``fill_to`` > ``n_candidates`` appends BM25-Oracle's ranks ``n_candidates..fill_to`` after the LM-ranked
    ones (with NaN scores), so a small L still fills the prompt like the other methods: only the order of the
    first L is the LM's. The appended examples sit farthest from the test input in the prompt.
    """
    oracle = bm25_oracle(task, examples, k=max(n_candidates, fill_to))
    head = RetrievalResult([ids[:n_candidates] for ids in oracle.ids], oracle.scores[:, :n_candidates])
    ranked = lm_rank(task, examples, head, lm, gold_output=True, progress=progress)
    if fill_to <= n_candidates:
        return ranked
    return fill_ranking(ranked, oracle)


def fill_ranking(head: RetrievalResult, rest: RetrievalResult) -> RetrievalResult:
    """Each query's ``head`` ranking, then the ids of its ``rest`` ranking that ``head`` lacks, in ``rest``'s
    order (scores NaN): a short re-ranked head (LM-Oracle's top L) filled to a full prompt's worth."""
    if len(head.ids) != len(rest.ids):
        raise ValueError(f"{len(head.ids)} head rankings for {len(rest.ids)} queries")
    ids = []
    for top, more in zip(head.ids, rest.ids):
        seen = set(top)
        ids.append(list(top) + [i for i in more if i not in seen])
    scores = np.full((len(ids), max((len(i) for i in ids), default=0)), np.nan, dtype=np.float32)
    width = min(head.scores.shape[1], scores.shape[1]) if head.scores.ndim == 2 else 0
    scores[:, :width] = head.scores[:, :width]
    return RetrievalResult(ids, scores)


def brute_force(task: Task, examples: Sequence[Example], lm: LMBackend, n_random: int = 200, seed: int = 0,
                progress: Progress = None) -> RetrievalResult:
    rng = random.Random(seed)
    ids = [e.id for e in task.train]
    draws = [rng.sample(ids, min(n_random, len(ids))) for _ in examples]
    candidates = RetrievalResult(draws, np.zeros((len(examples), len(draws[0]) if draws else 0), dtype=np.float32))
    return lm_rank(task, examples, candidates, lm, gold_output=False, progress=progress)


def any_correct_oracle(task: Task, examples: Sequence[Example], lm: LMBackend, candidates: RetrievalResult,
                       max_new_tokens: int = 128, progress: Progress = None) -> dict:
    """One-shot with every candidate; returns the share of examples any candidate solves, and per-example hits."""
    pool = {e.id: e for e in task.train}
    prompts, owners = [], []
    for q, (example, ids) in enumerate(zip(examples, candidates.ids)):
        for cand_id in ids:
            cand = pool[cand_id]
            prompts.append(scoring_pair(cand, example, task.output_format)[0])  # one-shot: the scoring layout
            owners.append((q, cand_id))
    generations = lm.generate(prompts, max_new_tokens=max_new_tokens, progress=progress)
    solved: dict[int, list[str]] = {q: [] for q in range(len(examples))}
    for (q, cand_id), generation in zip(owners, generations):
        if exact_match(task.output_format.from_prompt(generation), examples[q].output):
            solved[q].append(cand_id)
    rows = [{"id": e.id, "solved_by": solved[q]} for q, e in enumerate(examples)]
    return {"any_correct": 100.0 * sum(bool(r["solved_by"]) for r in rows) / max(len(rows), 1), "rows": rows}


TEST_TIME_METHODS = ("bm25-oracle", "lm-oracle", "bruteforce")


def rank_test_examples(method: str, task: Task, examples: Sequence[Example], scoring_lm: LMBackend | None = None,
                       seed: int = 0, progress: Progress = None, n_candidates: int = 50,
                       fill_to: int = 100) -> RetrievalResult:
    """Rankings for the methods that look at each test example itself (``TEST_TIME_METHODS``)."""
    if method == "bm25-oracle":
        return bm25_oracle(task, examples)
    if scoring_lm is None:
        raise ValueError(f"{method} needs a scoring LM")
    if method == "lm-oracle":
        return lm_oracle(task, examples, scoring_lm, n_candidates=n_candidates, progress=progress, fill_to=fill_to)
    if method == "bruteforce":
        return brute_force(task, examples, scoring_lm, seed=seed, progress=progress)
    raise ValueError(f"unknown method '{method}'; expected one of {', '.join(TEST_TIME_METHODS)}")
