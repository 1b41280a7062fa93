"""Set-level selection of demonstrations: a stage between retrieval and prompt building that picks, from the
retriever's top K, a set that is relevant *and* not redundant (CEIL-style, untrained): ``dpp`` or ``mmr``, each with
a ``weight`` in [0, 1], the share of relevance (1: the retriever's own order). Why: a retriever ranks examples one at
a time, so its top 10-15 can repeat one pattern many times; the prompt is a *set*.

The settings (:class:`Selection`) and the orderings, arithmetic on scores and vectors, are
:mod:`taskret.retrieval.set_selection`'s (an index records the settings; that module's docstring gives the DPP's
and MMR's formulas); this module gives them the examples' vectors and the prompt's budget, and re-exports them.

The examples' vectors ``e`` are a dense retriever's own (read back from its FAISS index, no encoding), otherwise
those of a named encoder (``minilm-l6`` by default), encoded once per example.

How the set meets the prompt budget (:func:`select_for_prompts`): the candidates are offered to the
:class:`~taskret.icl.prompt.PromptBuilder` in greedy order, so the set is the longest greedy prefix that fits the
token budget (and ``max_demos``); that set is then placed in the prompt by relevance, most relevant last, as every
other taskret prompt. CEIL instead selects a fixed number (50) and cuts the least relevant to fit; here the set the
DPP chose is the set the LM sees. Neither method calls the LM: the cost is a K x K similarity and a few ms per input.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ..data import Example, Task
from ..retrieval import DenseRetriever, RetrievalResult, Retriever
from ..retrieval.base import example_text
from ..retrieval.set_selection import (  # noqa: F401 (re-exported: the selection's public names are this module's)
    DEFAULT_CANDIDATES,
    DEFAULT_WEIGHTS,
    SELECT_METHODS,
    Selection,
    ceil_scale_factor,
    dpp_order,
    greedy_map,
    mmr_order,
    trained_for,
    weight_for_scale_factor,
)
from .prompt import PromptBuilder

__all__ = ["SELECT_METHODS", "DEFAULT_WEIGHTS", "DEFAULT_CANDIDATES", "RECORDED", "Selection", "BoundSelection",
           "VectorLookup", "greedy_map", "dpp_order", "mmr_order", "ceil_scale_factor", "weight_for_scale_factor",
           "retriever_vectors", "encoder_vectors", "example_vectors", "select_set", "prompt_fit", "select_for_prompts",
           "select_demonstrations", "trained_for", "resolve_selection"]

#: ``resolve_selection(RECORDED, ...)``: the selection an index (or a trained run) records, as ``taskret evaluate`` and
#: the service apply it by default (the same word as :data:`taskret.tart.search.RECORDED` for rerankers).
RECORDED = "recorded"

#: Unit vectors of examples by id, one row per id, in the order asked.
VectorLookup = Callable[[Sequence[str]], np.ndarray]


# -- example vectors --------------------------------------------------------------------------------------


def retriever_vectors(retriever: Retriever) -> VectorLookup | None:
    """A dense retriever's own example vectors, read back from its FAISS index (no encoding); None for a
    retriever that holds no vectors (BM25, random, a hybrid)."""
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
