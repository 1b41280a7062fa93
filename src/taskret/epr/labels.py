"""Labels: per training example, the top-k candidates as positives and the bottom-k as hard negatives.

The same format serves EPR (scores from the scoring LM), DR-BM25 (BM25 scores) and CBR (token-set
F1 between outputs), so one training stage learns from any of them.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from ..data import Example

# A small English stop-word list for CBR's token-set F1 (the paper removes stop words).
STOP_WORDS = frozenset("""a an the of to in on at for from by with and or is are was were be been it its this that these
those what which who whom whose how when where why me my i you your we our they their he she his her them do does did
not no as into than then there here all any each some""".split())
_TOKEN = re.compile(r"\w+")


def top_bottom(scored: Sequence[tuple[str, float]], k: int) -> tuple[list[str], list[str]]:
    """Top-k ids as positives (best first) and the bottom-k as negatives, never overlapping."""
    ranked = sorted(scored, key=lambda x: -x[1])  # stable: ties keep candidate (BM25) order
    positives = [i for i, _ in ranked[:k]]
    negatives = [i for i, _ in ranked[max(k, len(ranked) - k):]]
    return positives, negatives


def mean_logprob(candidate: dict) -> float:
    """A scored candidate's log-probability per output token: the score LLM-R, UDR and CEIL rank by. One input's
    candidates share its output, so the order is the sum's; only a loss that reads the values sees a change."""
    return candidate["logprob"] / max(int(candidate.get("n_tokens", 1)), 1)


def lm_labels(score_rows: Sequence[dict], k: int = 5, normalize: bool = False) -> list[dict]:
    """EPR labels from scoring-LM log-probabilities (sum over the output's tokens, or mean if normalize)."""
    out = []
    for row in score_rows:
        scored = [(c["id"], c["logprob"] / max(c["n_tokens"], 1) if normalize else c["logprob"])
                  for c in row["candidates"]]
        positives, negatives = top_bottom(scored, k)
        out.append({"id": row["id"], "positives": positives, "negatives": negatives})
    return out


def bm25_labels(candidate_rows: Sequence[dict], k: int = 5) -> list[dict]:
    """DR-BM25: the BM25 scores themselves as the label signal."""
    out = []
    for row in candidate_rows:
        positives, negatives = top_bottom(list(zip(row["candidates"], row["bm25"])), k)
        out.append({"id": row["id"], "positives": positives, "negatives": negatives})
    return out


def _token_set(text: str) -> set[str]:
    return {t for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS}


def token_f1(a: str, b: str) -> float:
    ta, tb = _token_set(a), _token_set(b)
    common = len(ta & tb)
    if not common:
        return 0.0
    precision, recall = common / len(ta), common / len(tb)
    return 2 * precision * recall / (precision + recall)


def cbr_labels(candidate_rows: Sequence[dict], examples: Mapping[str, Example], k: int = 5) -> list[dict]:
    """CBR: token-set F1 between the example's output and each candidate's output."""
    out = []
    for row in candidate_rows:
        gold = examples[row["id"]].output
        scored = [(c, token_f1(examples[c].output, gold)) for c in row["candidates"]]
        positives, negatives = top_bottom(scored, k)
        out.append({"id": row["id"], "positives": positives, "negatives": negatives})
    return out
