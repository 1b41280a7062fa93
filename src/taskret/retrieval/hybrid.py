"""Hybrid retrieval: several first stages fused into one ranking, what a practitioner deploys.

``hybrid:bm25+dense:minilm-l6`` fuses BM25 with a dense encoder. Two fusions:

- ``rrf`` (reciprocal-rank fusion, Cormack et al. 2009): ``sum_c 1 / (rrf_k + rank_c(d))``; needs no
  tuning and ignores score scales. A document missing from a component's top ``depth`` gets nothing
  from it.
- ``convex``: each component's top-``depth`` scores are min-max normalised per query to [0, 1] (a
  document missing from a component's list gets 0 there), then ``sum_c weight_c * score_c``. With two
  components ``weight`` is the FIRST component's share (BM25's in ``hybrid:bm25+dense:...``). Choose it
  on the dev data of training tasks, never on the evaluation task (``taskret tart tune-weight``,
  :func:`taskret.tart.fusion.tune_weight`). With more components ``weights`` gives every share, in
  order: ``hybrid:bm25+dense:minilm-l6+dense:e5-small?fusion=convex&weights=0.4,0.3,0.3``
  (``tune-weight --second A --second B`` chooses them).

Options follow the spec after ``?``: ``hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.3&depth=100``.

Instructions: a TART query ``"{instruction} [SEP] {query}"`` reaches each component as given, except that BM25
components read the query alone: an instruction's words only add noise to a lexical match (BM25 loses 4.0
NDCG@10 on SciFact with them). ``read_instruction`` says it per component, in order, ``1`` to read the
instruction and ``0`` to drop it: ``hybrid:bm25+dense:TART_DUAL+dense:e5-small?...&read_instruction=0,1,0``
gives it to the instruction-trained TART-dual only, since an untrained encoder can lose with it (on SciFact, alone,
e5 14.5 points and MiniLM 6.5). Bare queries pass through unchanged. The instruction ends at the query's first
``" [SEP] "`` (:func:`taskret.formats.split_query`). An index saved before this option existed loads with the
default, so its BM25 no longer reads the instruction (``read_instruction=1,...`` gives the old behaviour back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..data import Example
from ..formats import split_query
from ..io import read_json
from .base import SPEC_KEYWORDS, RetrievalResult, Retriever, example_text

__all__ = ["FUSIONS", "HybridRetriever", "parse_hybrid_spec", "parse_spec_options", "fuse_rrf", "fuse_convex",
           "fuse_results", "parse_switches", "reads_instruction", "strip_instructions"]

FUSIONS = ("rrf", "convex")


def _numbers(value: str) -> list[float]:
    return [float(part) for part in value.split(",")]


_numbers.__name__ = "comma-separated list of numbers"


def token_count(minimum: int) -> Callable[[str], int]:
    """A spec option's converter for a whole number of tokens >= ``minimum`` (its name is the error's hint)."""
    def convert(value: str) -> int:
        if not value.isdigit() or int(value) < minimum:
            raise ValueError(value)
        return int(value)

    convert.__name__ = f"whole number of tokens >= {minimum}"
    return convert


def parse_switches(value: str) -> list[bool]:
    """``"0,1,0"`` -> ``[False, True, False]`` (``read_instruction``); ValueError for anything else."""
    parts = value.split(",")
    if not all(part in ("0", "1") for part in parts):
        raise ValueError(value)
    return [part == "1" for part in parts]


parse_switches.__name__ = "comma-separated list of 0 and 1"

_OPTIONS = {"fusion": str, "weight": float, "weights": _numbers, "rrf_k": float, "depth": int,
            "read_instruction": parse_switches}


def reads_instruction(spec: str) -> bool:
    """Whether a hybrid's component given by ``spec`` reads the instruction by default: all but BM25, a saved
    BM25 index folder included (its ``meta.json`` names the retriever), so the default tuned and the default built
    are the same."""
    name = spec.partition(":")[0]
    if name in SPEC_KEYWORDS or not spec:  # decided as make_retriever decides: a keyword before a folder
        return name != "bm25"
    try:
        meta = read_json(Path(spec) / "meta.json") if (Path(spec) / "meta.json").is_file() else None
    except OSError:  # not a path this system can hold (too long): not a saved index either
        meta = None
    return not (isinstance(meta, dict) and meta.get("retriever") == "bm25")


def strip_instructions(queries: Sequence[str]) -> list[str]:
    """The queries without their instructions (:func:`taskret.formats.split_query`); bare ones unchanged."""
    return [bare if instruction is not None else query for query, (instruction, bare) in
            zip(queries, map(split_query, queries))]


def parse_spec_options(owner: str, spec: str, query: str, table: dict[str, Callable[[str], Any]]) -> dict:
    """The ``key=value&...`` options after a spec's ``?``, each converted by ``table[key]`` (its ``__name__``
    says what a bad value should have been); ``owner`` names the spec's kind in errors (``hybrid retriever``)."""
    options: dict = {}
    for item in filter(None, query.split("&")):
        key, sep, value = item.partition("=")
        if not sep or key not in table:
            raise ValueError(f"{owner} '{spec}': unknown option '{item}'; expected "
                             f"{', '.join(k + '=...' for k in table)}")
        try:
            options[key] = table[key](value)
        except ValueError:
            raise ValueError(f"{owner} '{spec}': option {key} needs a {table[key].__name__}, "
                             f"got '{value}'") from None
    return options


def parse_hybrid_spec(spec: str) -> tuple[list[str], dict]:
    """``"bm25+dense:minilm-l6?fusion=convex&weight=0.3"`` -> (component specs, options)."""
    body, _, query = spec.partition("?")
    components = [part.strip() for part in body.split("+")]
    if len(components) < 2 or not all(components):
        raise ValueError(f"hybrid retriever '{spec}': expected two or more retriever specs joined by '+', "
                         f"e.g. hybrid:bm25+dense:minilm-l6")
    return components, parse_spec_options("hybrid retriever", spec, query, _OPTIONS)


def fuse_rrf(rankings: Sequence[list[int]], rrf_k: float = 60.0) -> dict[int, float]:
    """Reciprocal-rank fusion of one query's component rankings (row indices, best first)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (rrf_k + rank)
    return fused


def fuse_convex(rankings: Sequence[Sequence], scores: Sequence[Sequence[float]],
                weights: Sequence[float]) -> dict:
    """Convex combination of one query's min-max normalised component scores (0 where a component
    did not return the document; 1 for all of a component's hits when their scores are all equal)."""
    fused = {row: 0.0 for ranking in rankings for row in ranking}
    for ranking, row_scores, weight in zip(rankings, scores, weights):
        values = np.asarray(row_scores[: len(ranking)], dtype=np.float64)
        finite = values[np.isfinite(values)]
        low, span = (float(finite.min()), float(finite.max() - finite.min())) if finite.size else (0.0, 0.0)
        for row, value in zip(ranking, values):
            fused[row] += weight * ((float(value) - low) / span if span > 0 and np.isfinite(value) else 1.0)
    return fused


def fuse_results(results: Sequence[RetrievalResult], weights: Sequence[float] | None = None,
                 fusion: str = "convex", rrf_k: float = 60.0) -> RetrievalResult:
    """Fusion of rankings of the same queries by document id (e.g. a first stage and its reranking: TART-full
    interpolated with BM25), best first: convex with ``weights`` (:func:`fuse_convex`) or reciprocal-rank
    (``fusion="rrf"``, no weights; :func:`fuse_rrf`)."""
    if fusion not in FUSIONS:
        raise ValueError(f"unknown fusion '{fusion}'; expected one of {FUSIONS}")
    if fusion == "rrf":
        if weights is not None:
            raise ValueError("reciprocal-rank fusion takes no weights")
        weights = [1.0] * len(results)
    if weights is None or len(results) != len(weights) or not results:
        raise ValueError(f"{len(results)} rankings for {None if weights is None else len(weights)} weights")
    n_queries = len(results[0].ids)
    if any(len(r.ids) != n_queries for r in results):
        raise ValueError("the rankings to fuse are of different numbers of queries")
    fused_rows = []
    for q in range(n_queries):
        fused = (fuse_rrf([r.ids[q] for r in results], rrf_k) if fusion == "rrf" else
                 fuse_convex([r.ids[q] for r in results], [r.scores[q] for r in results], weights))
        fused_rows.append((sorted(fused, key=lambda doc: -fused[doc]), fused))  # stable: ties keep first ranking's order
    width = max((len(best) for best, _ in fused_rows), default=0)  # the union of the rankings
    out_ids, out_scores = [], np.full((n_queries, width), np.nan, dtype=np.float32)
    for q, (best, fused) in enumerate(fused_rows):
        out_ids.append(best)
        out_scores[q, : len(best)] = [fused[doc] for doc in best]
    return RetrievalResult(out_ids, out_scores)


class HybridRetriever(Retriever):
    """Fuse the rankings of several retrievers over the same texts (see the module docstring)."""

    name = "hybrid"

    def __init__(self, components: Sequence[Retriever] = (), specs: Sequence[str] = (), fusion: str = "rrf",
                 weight: float | None = None, weights: Sequence[float] | None = None, rrf_k: float = 60.0,
                 depth: int = 100, field: str = "input", read_instruction: Sequence[bool] | None = None):
        super().__init__()
        example_text(Example("", "", ""), field)
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion '{fusion}'; expected one of {FUSIONS}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.components = list(components)
        self.specs = list(specs) or [c.name for c in self.components]
        n = len(self.specs)
        if weights is None:
            if weight is not None:
                if n != 2:
                    raise ValueError("weight= applies to two components; give weights= for more")
                weights = [weight, 1.0 - weight]
            else:
                weights = [1.0 / n] * n if n else []
        if len(weights) != n or any(w < 0 for w in weights):
            raise ValueError(f"weights must be {n} non-negative numbers, got {list(weights)}")
        if read_instruction is None:  # the default, also for an index saved before the option existed
            # by the built component where there is one (a saved BM25 folder is BM25 too), else by its spec
            read_instruction = ([component.name != "bm25" for component in self.components] if self.components
                                else [reads_instruction(spec) for spec in self.specs])
        if len(read_instruction) != n or not all(switch in (0, 1) for switch in read_instruction):
            raise ValueError(f"read_instruction needs one switch per component, each 0 or 1 (True or False): {n} for "
                             f"{self.specs}, got {list(read_instruction)}")
        self.fusion, self.weights, self.rrf_k, self.depth, self.field = fusion, list(weights), rrf_k, depth, field
        self.read_instruction = [bool(switch) for switch in read_instruction]

    @property
    def reads_instruction(self) -> bool:
        return any(self.read_instruction)

    def _index_texts(self, texts: list[str]) -> None:
        if not self.components:
            raise RuntimeError("a hybrid retriever needs its component retrievers to index")
        # Components index the same texts under row numbers, so their hits map straight back to our rows.
        rows = [str(i) for i in range(len(texts))]
        for _, component in self._distinct_components():
            component.index_texts(rows, texts)

    def _distinct_components(self) -> list[tuple[int, Retriever]]:
        """Each component object once, at its first position: one object may fill two (a spec given twice)."""
        return [(position, component) for position, component in enumerate(self.components)
                if not any(component is earlier for earlier in self.components[:position])]

    def check_models(self) -> None:
        for component in self.components:
            component.check_models()

    def _index_stream(self, texts: Callable, n: int, plan) -> None:
        if not self.components:
            raise RuntimeError("a hybrid retriever needs its component retrievers to index")
        rows = [str(i) for i in range(n)]
        for position, component in self._distinct_components():
            component.index_stream(rows, texts, plan.child(f"component_{position}") if plan is not None else None)

    def _search(self, queries: Sequence[str], k: int):
        depth = min(max(self.depth, k), len(self.ids))
        bare = strip_instructions(queries) if not all(self.read_instruction) else None
        results = [component._search(list(queries) if reads else bare, depth)
                   for component, reads in zip(self.components, self.read_instruction)]
        out_rows, out_scores = [], np.full((len(queries), k), np.nan, dtype=np.float32)
        for q in range(len(queries)):
            rankings = [[int(r) for r in rows[q]] for rows, _ in results]
            if self.fusion == "rrf":
                fused = fuse_rrf(rankings, self.rrf_k)
            else:
                fused = fuse_convex(rankings, [scores[q] for _, scores in results], self.weights)
            best = sorted(fused, key=lambda row: (-fused[row], row))[:k]
            out_rows.append(best)
            out_scores[q, : len(best)] = [fused[row] for row in best]
        return out_rows, out_scores

    def warm_up(self) -> None:
        for _, component in self._distinct_components():
            component.warm_up()

    def config(self) -> dict:
        return {"specs": self.specs, "fusion": self.fusion, "weights": self.weights, "rrf_k": self.rrf_k,
                "depth": self.depth, "field": self.field, "read_instruction": self.read_instruction}

    # One component object may fill two positions (``make_retriever`` builds a spec given twice once: the same
    # encoder reading the instructed and the bare query, ``read_instruction=1,0``): it is indexed and saved once,
    # and a position without its own folder shares the earlier one with its spec when loaded.

    def _save_index(self, directory: Path) -> None:
        for position, component in self._distinct_components():
            component.save(directory / f"component_{position}", with_ids=False)  # the hybrid's meta.json has them

    def _load_index(self, directory: Path) -> None:
        self.components = []
        for n, spec in enumerate(self.specs):
            folder = directory / f"component_{n}"
            if folder.is_dir():
                self.components.append(Retriever.load(folder, mmap=self.mmap, ids=self.ids))
            elif spec in self.specs[:n]:
                self.components.append(self.components[self.specs.index(spec)])
            else:
                raise FileNotFoundError(f"{folder}: missing, and no earlier component has its spec '{spec}'")
