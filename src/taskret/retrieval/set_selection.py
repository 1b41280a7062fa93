"""Set-level selection's settings and orderings: which of a retriever's top K form a set that is relevant *and* not
redundant (CEIL-style), from their scores and vectors alone. :mod:`taskret.icl.selection` applies them to prompts.

Why: a retriever ranks examples one at a time, so its top 10-15 can repeat one pattern many times; the prompt
is a *set*. Two methods, both with a ``weight`` in [0, 1], the share of relevance (1: the retriever's own order):

- ``dpp``: greedy MAP inference of a determinantal point process whose kernel is CEIL's (Ye et al., ICML 2023,
  "Compositional Exemplars for In-context Learning"; github.com/HKUNLP/icl-ceil ``dense_retriever.py``
  ``get_kernel`` and ``src/models/biencoder.py`` ``calc_dpp_loss``)::

      r_i  = (cos(x, e_i) + 1) / 2                    relevance in [0, 1] (a dense retriever's score)
      q_i  = exp((r_i - max r) / (2 * theta))          quality; theta is CEIL's scale_factor (0.1 by default)
      S_ij = (cos(e_i, e_j) + 1) / 2                  similarity of the examples, non-negative
      L    = diag(q) S diag(q)

  CEIL selects with ``fast_map_dpp`` (Chen, Zhang and Zhou, NeurIPS 2018, "Fast Greedy MAP Inference for
  Determinantal Point Process to Improve Recommendation Diversity": incremental Cholesky, O(K n^2) for n of K).
  Here ``weight`` is Chen et al.'s relevance/diversity trade-off theta_C (their section 4): the greedy gain of
  item j is ``weight * r_j + (1 - weight) * log d_j^2`` with ``d_j^2`` its conditional variance under S,
  which is the gain of L above with ``theta = (1 - weight) / weight`` (:func:`ceil_scale_factor`); CEIL's 0.1
  is ``weight = 1/1.1 = 0.909`` (:data:`DEFAULT_WEIGHTS`). The greedy runs on S and adds the relevance in log
  space, so a weight near 1 does not underflow ``q``. Scores that are not cosines (BM25, a hybrid's fused
  scores) are min-max scaled to [0, 1] first.
- ``mmr``: maximal marginal relevance (Carbonell and Goldstein, 1998): the gain of j is
  ``weight * rel_j - (1 - weight) * max_{i chosen} cos(e_j, e_i)``, relevance min-max scaled over the K.

The settings (:class:`Selection`) are what an index records and a set-training run was trained for
(:func:`trained_for`), so they sit in the retrieval layer, below the prompts that use them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

import numpy as np

from ..io import read_json

__all__ = ["SELECT_METHODS", "DEFAULT_WEIGHTS", "DEFAULT_CANDIDATES", "TRAINED_SELECTION_FILE", "Selection",
           "greedy_map", "dpp_order", "mmr_order", "ceil_scale_factor", "weight_for_scale_factor", "trained_selection",
           "trained_for"]

SelectMethod = Literal["dpp", "mmr"]
SELECT_METHODS: tuple[str, ...] = ("dpp", "mmr")
#: dpp: CEIL's scale factor 0.1 (1 / 1.1); mmr: the better of the two weights measured on MTOP (issue 48).
DEFAULT_WEIGHTS: dict[str, float] = {"dpp": 1 / 1.1, "mmr": 0.7}
#: How many of the retriever's results the selection chooses from (the issue's MMR run used 50; CEIL 100).
DEFAULT_CANDIDATES = 50
#: A candidate whose conditional variance under S falls below this is (numerically) in the span of the chosen
#: ones: the greedy MAP stops and the rest follow in relevance order.
MIN_VARIANCE = 1e-9

#: What a set-training run (:func:`taskret.epr.sets.train_set_encoder`) records of the DPP it trained for, in its
#: output folder (``WORK/sets/retriever``).
TRAINED_SELECTION_FILE = "ceil_config.json"


def ceil_scale_factor(weight: float) -> float:
    """CEIL's ``scale_factor`` (theta of ``q = exp(r / (2 theta))``) equal to relevance weight ``weight``."""
    if not 0 < weight <= 1:
        raise ValueError(f"a DPP relevance weight in (0, 1] has a CEIL scale factor (got {weight})")
    return (1 - weight) / weight


def weight_for_scale_factor(theta: float) -> float:
    """The relevance weight that CEIL's ``scale_factor`` ``theta`` (> 0) amounts to: ``1 / (1 + theta)``."""
    if theta <= 0:
        raise ValueError(f"CEIL's scale factor must be positive (got {theta})")
    return 1 / (1 + theta)


def _greedy(kernel: np.ndarray, bonus: np.ndarray, n: int | None) -> list[int]:
    """Chen et al.'s Algorithm 1 (incremental Cholesky): pick ``argmax_j bonus_j + log d_j^2`` until ``n`` are
    chosen or every remaining ``d_j^2`` is below :data:`MIN_VARIANCE`; ``d_j^2`` is j's variance given the chosen
    items under ``kernel``. O(K n^2) for n of K items, against O(K n^4) for determinants from scratch."""
    size = kernel.shape[0]
    n = size if n is None else min(n, size)
    cis = np.zeros((n, size))
    variances = np.array(np.diag(kernel), dtype=np.float64)
    chosen: list[int] = []
    available = np.ones(size, dtype=bool)
    while len(chosen) < n:
        usable = available & (variances > MIN_VARIANCE)
        if not usable.any():
            break
        gains = np.where(usable, bonus + np.log(np.maximum(variances, MIN_VARIANCE)), -np.inf)
        j = int(np.argmax(gains))
        k = len(chosen)
        e = (kernel[j] - cis[:k, j] @ cis[:k]) / math.sqrt(variances[j])
        cis[k] = e
        variances = variances - e ** 2
        chosen.append(j)
        available[j] = False
    return chosen


def greedy_map(kernel: np.ndarray, n: int | None = None) -> list[int]:
    """Greedy MAP of a DPP with kernel ``kernel`` (K x K, positive semi-definite): the indices in the order
    chosen, each maximising ``det(L_chosen)``, at most ``n`` (default: until the determinant stops growing)."""
    kernel = np.asarray(kernel, dtype=np.float64)
    return _greedy(kernel, np.zeros(kernel.shape[0]), n)


def _check_inputs(relevance: np.ndarray, vectors: np.ndarray, weight: float) -> tuple[np.ndarray, np.ndarray]:
    relevance = np.asarray(relevance, dtype=np.float64)
    vectors = np.asarray(vectors, dtype=np.float64)
    if relevance.ndim != 1 or vectors.ndim != 2 or len(relevance) != len(vectors):
        raise ValueError(f"one relevance score per vector needed (got {relevance.shape} scores, {vectors.shape} "
                         f"vectors)")
    if not 0 <= weight <= 1:
        raise ValueError(f"the relevance weight must be in [0, 1] (got {weight})")
    if not np.isfinite(relevance).all():
        raise ValueError("relevance scores must be finite")
    return relevance, vectors


def _min_max(values: np.ndarray) -> np.ndarray:
    span = values.max() - values.min() if len(values) else 0.0
    return (values - values.min()) / span if span > 0 else np.ones_like(values)


def _by_relevance(relevance: np.ndarray, skip: Sequence[int] = ()) -> list[int]:
    skipped = set(skip)
    return [i for i in sorted(range(len(relevance)), key=lambda i: -relevance[i]) if i not in skipped]


def dpp_order(relevance: np.ndarray, vectors: np.ndarray, weight: float = DEFAULT_WEIGHTS["dpp"],
              cosine_scores: bool = True) -> list[int]:
    """All candidates, ordered: the greedy MAP of CEIL's kernel first (module docstring), then, once the
    kernel is exhausted (near-duplicates), the rest by relevance. ``relevance``: the retriever's scores;
    ``cosine_scores``: they are cosines (a dense retriever's), mapped to [0, 1] as CEIL does, else min-max scaled.
    ``vectors``: unit vectors of the candidates. ``weight`` 1 keeps the retriever's order."""
    relevance, vectors = _check_inputs(relevance, vectors, weight)
    if weight == 1 or len(relevance) <= 1:
        return _by_relevance(relevance)
    scaled = (np.clip(relevance, -1, 1) + 1) / 2 if cosine_scores else _min_max(relevance)
    similarity = (vectors @ vectors.T + 1) / 2
    # gain = weight * r + (1 - weight) * log d^2, divided by (1 - weight): log q_j^2 + log d_j^2 under L = DSD
    chosen = _greedy(similarity, weight / (1 - weight) * scaled, None)
    return chosen + _by_relevance(relevance, chosen)


def mmr_order(relevance: np.ndarray, vectors: np.ndarray, weight: float = DEFAULT_WEIGHTS["mmr"]) -> list[int]:
    """All candidates in maximal-marginal-relevance order: relevance min-max scaled over the candidates,
    redundancy the largest cosine with an example chosen before. ``weight`` 1 keeps the retriever's order."""
    relevance, vectors = _check_inputs(relevance, vectors, weight)
    scaled = _min_max(relevance)
    similarity = vectors @ vectors.T
    redundancy = np.full(len(scaled), -np.inf)
    available = np.ones(len(scaled), dtype=bool)
    chosen: list[int] = []
    while available.any():
        gains = weight * scaled - (1 - weight) * np.where(np.isfinite(redundancy), redundancy, 0.0)
        # ties (weight 1, equal scores) go to the retriever's earlier rank, as argmax takes the first
        j = int(np.argmax(np.where(available, gains, -np.inf)))
        chosen.append(j)
        available[j] = False
        redundancy = np.maximum(redundancy, similarity[j])
    return chosen


# -- the settings ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """What to select and how: ``method`` (``dpp`` or ``mmr``), ``weight`` (relevance's share in [0, 1]; None:
    the method's default, :data:`DEFAULT_WEIGHTS`), ``n_candidates`` (how many of the retriever's results to
    choose from) and ``encoder`` (the vectors of retrievers without their own)."""

    method: SelectMethod = "dpp"
    weight: float | None = None
    n_candidates: int = DEFAULT_CANDIDATES
    encoder: str = "minilm-l6"

    def __post_init__(self) -> None:
        if self.method not in SELECT_METHODS:
            raise ValueError(f"unknown selection '{self.method}'; expected one of {', '.join(SELECT_METHODS)}")
        if self.weight is not None and not 0 <= self.weight <= 1:
            raise ValueError(f"the selection weight must be in [0, 1] (got {self.weight})")
        if self.n_candidates < 1:
            raise ValueError(f"selection needs at least one candidate (got n_candidates={self.n_candidates})")

    @property
    def trade_off(self) -> float:
        return DEFAULT_WEIGHTS[self.method] if self.weight is None else self.weight

    def order(self, scores: Sequence[float], vectors: np.ndarray, cosine_scores: bool) -> list[int]:
        """The candidates' indices in selection order (every candidate once)."""
        if self.method == "dpp":
            return dpp_order(np.asarray(scores), vectors, self.trade_off, cosine_scores=cosine_scores)
        return mmr_order(np.asarray(scores), vectors, self.trade_off)

    def describe(self) -> dict:
        """The settings as a summary records them."""
        described = {"method": self.method, "weight": round(self.trade_off, 4), "n_candidates": self.n_candidates}
        if self.method == "dpp":
            described["ceil_scale_factor"] = round(ceil_scale_factor(self.trade_off), 4) if self.trade_off else None
        return described

    def record(self) -> dict:
        """The settings as an index records them (``index_info.json``'s ``selection``), read by
        :meth:`from_record`: the weight at full precision."""
        return {"method": self.method, "weight": self.trade_off, "n_candidates": self.n_candidates,
                "encoder": self.encoder}

    @classmethod
    def from_record(cls, record: Mapping) -> "Selection":
        """The selection :meth:`record` (or :meth:`describe`) wrote; ``ValueError`` for one that is not."""
        if not isinstance(record, Mapping) or not isinstance(record.get("method"), str):
            raise ValueError(f"a selection record is an object with a 'method' (got {record!r})")
        weight, n_candidates = record.get("weight"), record.get("n_candidates", DEFAULT_CANDIDATES)
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))):
            raise ValueError(f"a selection's 'weight' is a number (got {weight!r})")
        if isinstance(n_candidates, bool) or not isinstance(n_candidates, int):
            raise ValueError(f"a selection's 'n_candidates' is an integer (got {n_candidates!r})")
        return cls(record["method"], None if weight is None else float(weight), n_candidates,
                   str(record.get("encoder") or "minilm-l6"))


def trained_selection(epr_dir: str | os.PathLike) -> Selection | None:
    """The DPP selection an EPR work folder's set training (``WORK/sets/retriever``, or that folder itself) was
    trained for, or None: ``dpp`` at the weight of its ``scale_factor`` over its ``n_candidates``. ``taskret
    evaluate --retriever epr:WORK`` selects with it unless told otherwise."""
    path = Path(epr_dir) / "sets" / "retriever" / TRAINED_SELECTION_FILE
    if not path.exists():
        path = Path(epr_dir) / TRAINED_SELECTION_FILE  # the set training's own output folder
    if not path.exists():
        return None
    trained = read_json(path)
    return Selection("dpp", weight_for_scale_factor(trained["scale_factor"]), trained["n_candidates"])


def trained_for(spec: str) -> Selection | None:
    """The selection the retriever ``spec`` was trained for, or None: an ``epr:DIR`` run with set training (CEIL),
    DIR its work folder or the set training's output, is trained for its DPP
    (:func:`trained_selection`). ``taskret evaluate``, ``taskret index`` (which records it for the
    service) and the LangChain selector apply it by default."""
    if not spec.startswith("epr:"):
        return None
    return trained_selection(spec[len("epr:"):])
