"""Set-level selection of demonstrations: a stage between retrieval and prompt building that picks, from the
retriever's top K, a set that is relevant *and* not redundant (CEIL-style, untrained).

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

The examples' vectors ``e`` are a dense retriever's own (read back from its FAISS index, no encoding), otherwise
those of a named encoder (``minilm-l6`` by default), encoded once per example.

How the set meets the prompt budget (:func:`select_for_prompts`): the candidates are offered to the
:class:`~taskret.icl.prompt.PromptBuilder` in greedy order, so the set is the longest greedy prefix that fits the
token budget (and ``max_demos``); that set is then placed in the prompt by relevance, most relevant last, as every
other taskret prompt. CEIL instead selects a fixed number (50) and cuts the least relevant to fit; here the set the
DPP chose is the set the LM sees. Neither method calls the LM: the cost is a K x K similarity and a few ms per input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from ..data import Example, Task
from ..retrieval import RetrievalResult, Retriever
from .prompt import PromptBuilder

__all__ = ["SELECT_METHODS", "DEFAULT_WEIGHTS", "DEFAULT_CANDIDATES", "RECORDED", "Selection", "BoundSelection",
           "VectorLookup", "greedy_map", "dpp_order", "mmr_order", "ceil_scale_factor", "weight_for_scale_factor",
           "retriever_vectors", "encoder_vectors", "example_vectors", "select_set", "prompt_fit", "select_for_prompts",
           "select_demonstrations", "trained_for", "resolve_selection"]

SelectMethod = Literal["dpp", "mmr"]
SELECT_METHODS: tuple[str, ...] = ("dpp", "mmr")
#: dpp: CEIL's scale factor 0.1 (1 / 1.1); mmr: the better of the two weights measured on MTOP (issue 48).
DEFAULT_WEIGHTS: dict[str, float] = {"dpp": 1 / 1.1, "mmr": 0.7}
#: How many of the retriever's results the selection chooses from (the issue's MMR run used 50; CEIL 100).
DEFAULT_CANDIDATES = 50
#: A candidate whose conditional variance under S falls below this is (numerically) in the span of the chosen
#: ones: the greedy MAP stops and the rest follow in relevance order.
MIN_VARIANCE = 1e-9

#: ``resolve_selection(RECORDED, ...)``: the selection an index (or a trained run) records, as ``taskret evaluate`` and
#: the service apply it by default (the same word as :data:`taskret.tart.search.RECORDED` for rerankers).
RECORDED = "recorded"

#: Unit vectors of examples by id, one row per id, in the order asked.
VectorLookup = Callable[[Sequence[str]], np.ndarray]


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


# -- example vectors --------------------------------------------------------------------------------------


def retriever_vectors(retriever: Retriever) -> VectorLookup | None:
    """A dense retriever's own example vectors, read back from its FAISS index (no encoding); None for a
    retriever that holds no vectors (BM25, random, a hybrid)."""
    from ..retrieval import DenseRetriever

    retriever = getattr(retriever, "wrapped", retriever)  # an InstructedRetriever reads its retriever's vectors
    index = getattr(retriever, "_index", None) if isinstance(retriever, DenseRetriever) else None
    if index is None:
        return None
    rows = {example_id: row for row, example_id in enumerate(retriever.ids)}

    def lookup(ids: Sequence[str]) -> np.ndarray:
        vectors = np.stack([index.reconstruct(rows[i]) for i in ids]) if ids else np.zeros((0, index.d))
        vectors = np.asarray(vectors, dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return lookup


def encoder_vectors(pool: Mapping[str, Example], encoder: str = "minilm-l6", field: str = "input",
                    device: str | None = None) -> VectorLookup:
    """Vectors of ``pool``'s examples (their ``field`` text) by a named encoder, encoded once per example: for
    retrievers without vectors of their own. Asking for many ids at once encodes them in one batch."""
    from ..retrieval import DenseRetriever
    from ..retrieval.base import example_text

    dense = DenseRetriever(encoder=encoder, field=field, device=device)
    cache: dict[str, np.ndarray] = {}

    def lookup(ids: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(i for i in ids if i not in cache))
        if missing:
            unknown = next((i for i in missing if i not in pool), None)
            if unknown is not None:
                raise ValueError(f"example '{unknown}' is not in the pool whose vectors are asked for")
            for example_id, vector in zip(missing, dense.encode([example_text(pool[i], field) for i in missing])):
                cache[example_id] = vector
        return np.stack([cache[i] for i in ids]) if ids else np.zeros((0, 1), dtype=np.float32)

    return lookup


def example_vectors(retriever: Retriever | None, pool: Mapping[str, Example], encoder: str = "minilm-l6",
                    device: str | None = None) -> tuple[VectorLookup, str]:
    """The vectors selection compares examples with, and where they come from (recorded in summaries): the
    dense retriever's own, else ``encoder``'s."""
    own = retriever_vectors(retriever) if retriever is not None else None
    if own is not None:
        return own, "retriever"
    return encoder_vectors(pool, encoder, device=device), f"encoder:{encoder}"


# -- the stage -----------------------------------------------------------------------------------------------


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


def trained_for(spec: str) -> Selection | None:
    """The selection the retriever ``spec`` was trained for, or None: an ``epr:DIR`` run with set training (CEIL),
    DIR its work folder or the set training's output, is trained for its DPP
    (:func:`taskret.epr.sets.trained_selection`). ``taskret evaluate``, ``taskret index`` (which records it for the
    service) and the LangChain selector apply it by default."""
    if not spec.startswith("epr:"):
        return None
    from ..epr.sets import trained_selection

    return trained_selection(spec[len("epr:"):])


def resolve_selection(select, recorded: Selection | None) -> Selection | None:
    """The selection to apply, given as the service and the LangChain selector take it: :data:`RECORDED` (the one
    ``recorded`` by the index or the run), None or ``"none"`` (the ranking's top), a :class:`Selection`, or a
    :meth:`Selection.record` dict (JSON, as ``taskret serve``'s workers receive it)."""
    if isinstance(select, str) and select == RECORDED:
        return recorded
    if select is None or (isinstance(select, str) and select == "none"):
        return None
    if isinstance(select, Selection):
        return select
    if isinstance(select, Mapping):
        return Selection.from_record(select)
    raise ValueError(f"select: '{RECORDED}', 'none', a Selection or its record (got {select!r})")


class BoundSelection:
    """A :class:`Selection` bound to one retriever and its pool, for callers that select one query at a time (the
    service's ``/prompt``, the LangChain selector; an evaluation binds one per run): the vectors it compares the
    examples with (:func:`example_vectors`) and whether the retriever's scores are cosines (a dense retriever's;
    any other's are min-max scaled)."""

    def __init__(self, selection: Selection, retriever: Retriever | None, pool: Mapping[str, Example],
                 device: str | None = None):
        from ..retrieval import DenseRetriever

        self.selection = selection
        self.vectors, self.source = example_vectors(retriever, pool, selection.encoder, device=device)
        self.cosine = isinstance(retriever, DenseRetriever)

    def select(self, ids: Sequence[str], scores: Sequence[float], fit: Callable[[list[str]], Sequence[str]]) -> list[int]:
        """One query's selected set (:func:`select_set`): positions in ``ids``, best first."""
        return select_set(ids, scores, self.selection, self.vectors, fit, self.cosine)

    def describe(self) -> dict:
        """The settings, where the vectors come from and how relevance is read: what a summary, ``/health`` and
        ``/prompt`` record."""
        relevance = "cosine" if self.cosine and self.selection.method == "dpp" else "min-max"
        return {**self.selection.describe(), "vectors": self.source, "relevance": relevance}


def select_set(ids: Sequence[str], scores: Sequence[float], selection: Selection, vectors: VectorLookup,
               fit: Callable[[list[str]], Sequence[str]], cosine_scores: bool) -> list[int]:
    """One query's selected set: the positions in ``ids`` (the retriever's ranking, best first; its top
    ``selection.n_candidates`` are the candidates, ``scores`` theirs) of the candidates ``fit`` keeps when offered
    them in the selection's order, in the retriever's order. ``fit`` returns the ids of those it takes: a prompt's
    longest prefix within its budget (:func:`prompt_fit`), or the first k."""
    ids = list(ids[: selection.n_candidates])
    if not ids:
        return []
    order = selection.order([float(s) for s in scores[: len(ids)]], vectors(ids), cosine_scores)
    fitted = set(fit([ids[i] for i in order]))
    return [i for i in range(len(ids)) if ids[i] in fitted]


def prompt_fit(builder: PromptBuilder, test_input: str,
               demo: Callable[[str], tuple[str, str, str]]) -> Callable[[list[str]], list[str]]:
    """:func:`select_set`'s ``fit`` for a prompt: the ids ``builder`` takes for ``test_input`` when offered them in
    that order, ``demo(id)`` giving each one's ``(id, input, output as shown)``."""
    return lambda ordered: builder.build(test_input, [demo(i) for i in ordered]).demo_ids


def select_for_prompts(task: Task, examples: Sequence[Example], result: RetrievalResult, selection: Selection,
                       vectors: VectorLookup, builder: PromptBuilder, cosine_scores: bool) -> RetrievalResult:
    """Each example's candidates (``result``, best first) reduced to the selected set that fits ``builder``'s
    budget, ordered by the retriever's score, best first: what :func:`~taskret.icl.inference.predict` takes as
    ``retrieved`` (it fills the prompt in that order and places the best last). Module docstring: how."""
    pool = {e.id: e for e in task.train}
    unknown = next((i for ids in result.ids for i in ids[: selection.n_candidates] if i not in pool), None)
    if unknown is not None:
        raise ValueError(f"the candidates hold ids that are not in the training set of '{task.name}' (e.g. "
                         f"'{unknown}'): they were retrieved from another pool")
    vectors([i for ids in result.ids for i in ids[: selection.n_candidates]])  # one batch for an encoder

    def demo(example_id: str) -> tuple[str, str, str]:
        return example_id, pool[example_id].input, task.prompt_output(pool[example_id])

    out_ids: list[list[str]] = []
    out_scores = np.full((len(result.ids), max((len(i) for i in result.ids), default=0)), np.nan, dtype=np.float32)
    for q, (example, ids) in enumerate(zip(examples, result.ids)):
        kept = select_set(ids, result.scores[q], selection, vectors, prompt_fit(builder, example.input, demo),
                          cosine_scores)
        out_ids.append([ids[i] for i in kept])
        out_scores[q, : len(kept)] = [result.scores[q, i] for i in kept]
    return RetrievalResult(out_ids, out_scores)


def select_demonstrations(task: Task, retriever: Retriever | None, examples: Sequence[Example], selection: Selection,
                          builder: PromptBuilder, retrieved: RetrievalResult | None = None,
                          exclude_self: bool = False, device: str | None = None) -> tuple[RetrievalResult, dict]:
    """The selection stage of an evaluation: ``selection.n_candidates`` candidates per example (from
    ``retriever``, or ``retrieved``, a ranking made elsewhere), reduced to the selected sets
    (:func:`select_for_prompts`); and what a summary records of it (settings, where the vectors came from, time).
    ``exclude_self``: an example retrieving from its own pool (held-out training examples) does not find itself."""
    import time

    start = time.perf_counter()
    if retrieved is None:
        if retriever is None:
            raise ValueError("selection needs a retriever or a ranking (retrieved=) to choose from")
        retrieved = retriever.retrieve([e.input for e in examples], k=selection.n_candidates,
                                       exclude=[e.id for e in examples] if exclude_self else None)
    # only a dense retriever's own ranking has cosine scores; a ranking made elsewhere is min-max scaled
    bound = BoundSelection(selection, retriever, {e.id: e for e in task.train}, device=device)
    selected = select_for_prompts(task, examples, retrieved, selection, bound.vectors, builder,
                                  cosine_scores=bound.cosine)
    return selected, {**bound.describe(), "select_s": round(time.perf_counter() - start, 3)}
