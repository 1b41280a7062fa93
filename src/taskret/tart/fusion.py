"""Choosing fusion weights on the dev data of training tasks, never on the task evaluated.

A hybrid first stage (``hybrid:bm25+dense:MODEL?fusion=convex&weight=W``) and a reranker interpolated
with its first stage both mix two rankings with one weight. :func:`choose_weight` picks it
(:func:`choose_weights` the shares of three or more, over :func:`simplex_grid`): each
component ranks each dev task's queries ONCE (:func:`rank_tasks`), every weight of a grid fuses those
rankings (:func:`taskret.retrieval.hybrid.fuse_convex`: min-max normalised scores, a missing document
scores 0), and the weight with the best NDCG@10 averaged over tasks wins (ties: the weight nearest 0.5,
then the smaller). The evaluation task never enters: a weight picked on it would be an upper bound.

A reranker's weight is *guarded* (:func:`choose_rerank_weight`, which :func:`tune_weight` uses; ``confidence``
0.95 by default): a dev gain of a few tenths over a hundred queries is noise, and a weight picked for noise moved
SciFact below its first stage (a fine-tuned SmolLM2 TART-full: +0.2 on dev, -0.2 on SciFact). So the reranker
gets a share only when a paired
bootstrap over the dev queries (resampled within each task, the statistic the mean over tasks, as the choice
itself) finds the best weight above the first stage alone in at least ``confidence`` of the resamples
(:func:`gain_confidence`); otherwise the weight is 1, the first stage's order. And the first stage always keeps
a share (:data:`RERANK_GRID` starts at 0.1): a reranking alone, chosen on dev tasks, is the one choice that can
throw a good first stage away entirely. The bootstrap is of the weight that won on the same queries, so it is
optimistic; the guard removes noise-sized gains, it proves nothing about the evaluation task.

:func:`tune_weight` does the whole job from specs (``taskret tart tune-weight`` on the command line): a first
stage fused with a second retriever (the ``weight`` of ``hybrid:FIRST+SECOND?fusion=convex&weight=W``) or
reranked (the ``--rerank-weight`` of ``taskret tart evaluate/search``).

Dev tasks must be held out of a trained component's training too (:func:`dev_overlap`): a model's dev
scores on a task it trained on are in-domain, so the weights favour it. A MiniLM student distilled on every
berri-lite task, fused with BM25 and e5, got BM25 a share of 0 from berri-lite dev tasks and 69.1 on SciFact,
below the 72.4 of untrained MiniLM in its place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..formats import format_query
from ..io import read_json
from ..retrieval.base import RetrievalResult, Retriever
from ..retrieval.hybrid import fuse_convex, parse_hybrid_spec, reads_instruction
from .evaluation import compute_metrics
from .tasks import RetrievalTask, doc_text

__all__ = ["WeightChoice", "WeightsChoice", "rank_tasks", "rerank_tasks", "fused_ndcg", "choose_weight",
           "choose_rerank_weight", "choose_weights", "best_shares", "gain_confidence", "simplex_grid", "tune_weight", "tune_weights",
           "training_tasks", "dev_overlap", "DevOverlapWarning", "DEFAULT_GRID", "RERANK_GRID", "DEFAULT_CONFIDENCE"]

DEFAULT_GRID = tuple(round(w, 2) for w in np.linspace(0.0, 1.0, 11))
# the first stage's share against a reranker: never 0, so the first stage always informs the order
RERANK_GRID = DEFAULT_GRID[1:]
DEFAULT_CONFIDENCE = 0.95  # a reranker's share needs its dev gain in 95% of the bootstrap resamples
BOOTSTRAP_RESAMPLES = 2000


class WeightsChoice(NamedTuple):
    """The chosen shares of several rankings, in order, and the mean NDCG@10 over tasks of every share tried
    (``per_task[shares][task]`` too)."""

    weights: tuple[float, ...]
    mean_ndcg: dict[tuple[float, ...], float]
    per_task: dict[tuple[float, ...], dict[str, float]]


class WeightChoice(NamedTuple):
    """The chosen weight of the FIRST ranking, and the mean NDCG@10 over tasks of every weight tried
    (``per_task[weight][task]`` too). With a guard (``confidence``), ``best`` is the weight that scored best
    and ``confidence`` the share of bootstrap resamples in which it beat the first ranking alone (1 when ``best``
    is 1 itself: nothing to guard): ``weight`` is ``best`` when that share reaches the guard's, else 1."""

    weight: float
    mean_ndcg: dict[float, float]
    per_task: dict[float, dict[str, float]]
    best: float | None = None
    confidence: float | None = None


def rank_tasks(make: Callable[[], object], tasks: Sequence[RetrievalTask], depth: int = 100,
               use_instruction: bool = False) -> dict[str, tuple[list[str], RetrievalResult]]:
    """``{task: (query ids, ranking)}``: a fresh retriever from ``make()`` indexes each task's corpus and
    ranks its judged queries (with the task's instruction when ``use_instruction``)."""
    return {task.name: _rank(make().index_texts(*task.doc_ids_and_texts()), task, depth, use_instruction)
            for task in tasks}


def _rank(retriever: Retriever, task: RetrievalTask, depth: int,
          use_instruction: bool) -> tuple[list[str], RetrievalResult]:
    """(query ids, ranking) of ``task``'s judged queries by ``retriever``, indexed on the task's corpus."""
    qids = [q for q in task.queries if q in task.qrels]
    instruction = task.instruction if use_instruction else None
    return qids, retriever.retrieve([format_query(instruction, task.queries[q]) for q in qids],
                                    k=min(depth, len(task.corpus)))


Rankings = dict[str, tuple[list[str], RetrievalResult]]  # {task: (query ids, ranking)}, as rank_tasks gives


def _rank_components(specs: Sequence[str], reads: Sequence[bool], tasks: Sequence[RetrievalTask],
                     depth: int) -> list[Rankings]:
    """Each hybrid component's rankings (:func:`rank_tasks`), component ``n`` reading the instruction if
    ``reads[n]``; a spec given twice (one encoder reading the instructed and the bare query) indexes each task once,
    as the hybrid it tunes does."""
    from ..retrieval import BM25Retriever, make_retriever

    out: list[Rankings] = [{} for _ in specs]
    for task in tasks:
        for spec in dict.fromkeys(specs):  # one index alive at a time: encoders and their indexes can be large
            retriever = make_retriever(spec).index_texts(*task.doc_ids_and_texts())
            if isinstance(retriever, BM25Retriever):  # reads[n] decides, as the hybrid's switch does for BM25
                retriever.read_instruction = True
            for n in (n for n, other in enumerate(specs) if other == spec):
                out[n][task.name] = _rank(retriever, task, depth, reads[n])
    return out


def _fused_run(rankings: Sequence[RetrievalResult], qids: Sequence[str],
               weights: Sequence[float]) -> dict[str, dict[str, float]]:
    return {qid: fuse_convex([r.ids[q] for r in rankings], [r.scores[q] for r in rankings], weights)
            for q, qid in enumerate(qids)}


def _query_ndcgs(rankings: Sequence[Rankings], tasks: Sequence[RetrievalTask],
                 weights: Sequence[float]) -> dict[str, np.ndarray]:
    """NDCG@10 of each judged query of each task (in qrels order) under the convex fusion with ``weights``."""
    out = {}
    for task in tasks:
        qids = rankings[0][task.name][0]
        if any(r[task.name][0] != qids for r in rankings[1:]):
            raise ValueError(f"task '{task.name}': the rankings to fuse are of different queries")
        run = _fused_run([r[task.name][1] for r in rankings], qids, weights)
        rows = compute_metrics({q: task.qrels[q] for q in qids}, run, per_query=True)["per_query"]
        out[task.name] = np.array([row["ndcg@10"] for row in rows.values()], dtype=np.float64)
    return out


def _fused_ndcgs(rankings: Sequence[Rankings], tasks: Sequence[RetrievalTask],
                 weights: Sequence[float]) -> dict[str, float]:
    return {name: float(values.mean()) if len(values) else 0.0
            for name, values in _query_ndcgs(rankings, tasks, weights).items()}


def fused_ndcg(first: Rankings, second: Rankings, tasks: Sequence[RetrievalTask], weight: float) -> dict[str, float]:
    """NDCG@10 per task of the convex fusion ``weight * first + (1 - weight) * second``."""
    return _fused_ndcgs([first, second], tasks, [weight, 1 - weight])


def simplex_grid(n: int, step: float = 0.1) -> list[tuple[float, ...]]:
    """Every ``n`` shares that are multiples of ``step`` and sum to 1 (66 for three components at 0.1)."""
    units = round(1 / step)
    if n < 2 or units < 1 or abs(units * step - 1) > 1e-9:
        raise ValueError(f"a weight grid needs two or more components and a step dividing 1, got {n} and {step}")

    def splits(left: int, parts: int):
        if parts == 1:
            yield (left,)
            return
        for k in range(left, -1, -1):
            for rest in splits(left - k, parts - 1):
                yield (k, *rest)

    return [tuple(round(k / units, 6) for k in split) for split in splits(units, n)]


def choose_weights(rankings: Sequence[Rankings], tasks: Sequence[RetrievalTask],
                   grid: Sequence[Sequence[float]] | None = None) -> WeightsChoice:
    """The shares of ``rankings`` (grid: :func:`simplex_grid` at 0.1) whose convex fusion has the best mean
    NDCG@10 over ``tasks``; ties go to the shares nearest equal, then to the smaller first shares."""
    if not tasks:
        raise ValueError("choosing a fusion weight needs at least one dev task")
    grid = [tuple(float(w) for w in weights) for weights in (grid or simplex_grid(len(rankings)))]
    if any(len(w) != len(rankings) or any(not 0.0 <= x <= 1.0 for x in w) for w in grid):
        raise ValueError(f"fusion weights must be {len(rankings)} shares in [0, 1], got {grid}")
    per_task = {weights: _fused_ndcgs(rankings, tasks, weights) for weights in grid}
    mean = {w: sum(v.values()) / len(v) for w, v in per_task.items()}
    return WeightsChoice(best_shares(mean), mean, per_task)


def best_shares(mean_ndcg: dict[tuple[float, ...], float]) -> tuple[float, ...]:
    """The shares with the best mean NDCG@10 (equal to 9 digits counts as a tie); ties go to the shares nearest
    equal, then to the smaller first shares: the rule every weight choice here follows."""
    equal = 1 / len(next(iter(mean_ndcg)))
    return max(mean_ndcg, key=lambda w: (round(mean_ndcg[w], 9), -sum((x - equal) ** 2 for x in w), [-x for x in w]))


def gain_confidence(first: Rankings, second: Rankings, tasks: Sequence[RetrievalTask], weight: float,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> float:
    """The share of paired bootstrap resamples of the dev queries in which the fusion ``weight * first +
    (1 - weight) * second`` has a higher mean NDCG@10 over tasks than ``first`` alone. Queries are resampled
    within each task, so every task keeps its weight in the mean, as in :func:`choose_weight`."""
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    fused = _query_ndcgs([first, second], tasks, [weight, 1 - weight])
    alone = _query_ndcgs([first, second], tasks, [1.0, 0.0])
    rng = np.random.default_rng(seed)
    total = np.zeros(resamples)
    judged = [task.name for task in tasks if len(fused[task.name])]
    if not judged:
        return 0.0
    for name in judged:
        gains = fused[name] - alone[name]
        total += gains[rng.integers(0, len(gains), size=(resamples, len(gains)))].mean(axis=1)
    return float((total / len(judged) > 0).mean())


def choose_weight(first: Rankings, second: Rankings, tasks: Sequence[RetrievalTask],
                  grid: Sequence[float] = DEFAULT_GRID, confidence: float | None = None,
                  resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> WeightChoice:
    """The grid weight of ``first`` whose fusion with ``second`` has the best mean NDCG@10 over ``tasks``
    (ties: the weight nearest 0.5, then the smaller).

    With ``confidence`` (0-1; for a reranker's weight, ``second`` the reranking of ``first``), that weight is
    kept only when it beats ``first`` alone in at least that share of bootstrap resamples of the dev queries
    (:func:`gain_confidence`); otherwise the weight is 1: the first stage's own order."""
    if not grid or any(not 0.0 <= w <= 1.0 for w in grid):
        raise ValueError(f"fusion weights must lie in [0, 1], got {list(grid)}")
    if confidence is not None and not 0.0 <= confidence <= 1.0:
        raise ValueError(f"confidence must lie in [0, 1], got {confidence}")
    if confidence is not None and 1.0 not in grid:  # the first stage alone is the guard's fallback: score it too
        grid = [*grid, 1.0]
    choice = choose_weights([first, second], tasks, grid=[(float(w), 1 - float(w)) for w in grid])
    mean = {w[0]: m for w, m in choice.mean_ndcg.items()}
    per_task = {w[0]: t for w, t in choice.per_task.items()}
    best = choice.weights[0]
    if confidence is None:
        return WeightChoice(best, mean, per_task)
    sure = 1.0 if best == 1.0 else gain_confidence(first, second, tasks, best, resamples=resamples, seed=seed)
    return WeightChoice(best if sure >= confidence else 1.0, mean, per_task, best, sure)


def choose_rerank_weight(first: Rankings, reranked: Rankings, tasks: Sequence[RetrievalTask],
                         grid: Sequence[float] = RERANK_GRID, confidence: float = DEFAULT_CONFIDENCE) -> WeightChoice:
    """The first stage's share against its reranking ``reranked`` (``--rerank-weight``), chosen the way a
    reranker's weight is: over :data:`RERANK_GRID` (the first stage keeps at least 0.1) and guarded at
    ``confidence`` (:func:`choose_weight`; 0 takes the best weight however small its gain)."""
    return choose_weight(first, reranked, tasks, grid=grid, confidence=confidence)


def rerank_tasks(reranker, first: dict[str, tuple[list[str], RetrievalResult]], tasks: Sequence[RetrievalTask],
                 top_k: int = 10, use_instruction: bool = False) -> dict[str, tuple[list[str], RetrievalResult]]:
    """Each task's ranking in ``first`` with its top ``top_k`` reordered by ``reranker`` (the reranker's own
    scores, not interpolated: that is what :func:`choose_weight` then weighs)."""
    out = {}
    for task in tasks:
        qids, ranking = first[task.name]
        instruction = task.instruction if use_instruction else None
        queries = [format_query(instruction, task.queries[q]) for q in qids]
        out[task.name] = (qids, reranker.rerank(queries, ranking, lambda d, corpus=task.corpus: doc_text(corpus[d]),
                                                top_k=top_k))
    return out


class DevOverlapWarning(UserWarning):
    """A model whose weight is being chosen was trained on one of the dev tasks choosing it."""


def _warn_dev_overlap(specs: Sequence[str | None], tasks: Sequence[RetrievalTask]) -> None:
    import warnings

    for folder, shared in dev_overlap(specs, tasks).items():
        warnings.warn(f"{folder} was trained on {', '.join(shared)}: its scores on those dev tasks are in-domain, "
                      "so the weights favour it; choose them on tasks held out of its training",
                      DevOverlapWarning, stacklevel=3)


def _component_reads(specs: Sequence[str], use_instruction: bool,
                     read_instruction: Sequence[bool] | None) -> list[bool]:
    """Whether each of a hybrid's would-be components reads the instruction, as the hybrid will give it
    (``read_instruction``, or its default: all but BM25)."""
    if read_instruction is not None and len(read_instruction) != len(specs):
        raise ValueError(f"read_instruction needs one switch per component ({len(specs)}: {list(specs)}), got "
                         f"{list(read_instruction)}")
    if read_instruction is not None and not use_instruction:
        raise ValueError("read_instruction says which components read the instruction: give it with "
                         "use_instruction=True")
    defaults = [reads_instruction(spec) for spec in specs]
    return [use_instruction and bool(reads) for reads in (read_instruction or defaults)]


def tune_weight(first: str, tasks: Sequence[RetrievalTask], second: str | None = None, reranker=None,
                rerank_depth: int = 10, depth: int = 100, use_instruction: bool = False,
                grid: Sequence[float] | None = None, confidence: float = DEFAULT_CONFIDENCE,
                read_instruction: Sequence[bool] | None = None) -> WeightChoice:
    """The weight of the retriever spec ``first`` against ``second`` (another retriever spec: a hybrid's
    ``weight``; grid :data:`DEFAULT_GRID`) or against ``reranker`` (a :class:`~taskret.rerank.Reranker` or a
    name :func:`~taskret.rerank.load_reranker` takes, reordering ``first``'s top ``rerank_depth``: the first
    stage's share, ``--rerank-weight``; grid :data:`RERANK_GRID`, guarded by ``confidence``, 0 to take the best
    weight however small its gain), chosen on ``tasks`` (dev tasks, never the one you will evaluate). With
    ``second``, each component reads the instruction as the hybrid will give it: ``read_instruction`` (two
    switches) or the hybrid's default (BM25 reads the query alone). Warns (:class:`DevOverlapWarning`) when a
    trained model named here was trained on one of ``tasks``."""
    from ..retrieval import make_retriever

    if (second is None) == (reranker is None):
        raise ValueError("give exactly one of second (a retriever to fuse with) or reranker (to interpolate with)")
    if second is not None and any(s.startswith("hybrid:") for s in (first, second)):
        raise ValueError("a hybrid's weight is tuned between two plain retrievers (e.g. first='bm25', "
                         "second='dense:minilm-l6'); a hybrid is a first stage to tune a reranker against")
    if rerank_depth < 1 or depth < 1:
        raise ValueError("depth and rerank_depth must be at least 1")
    if not tasks:
        raise ValueError("choosing a fusion weight needs at least one dev task")
    _warn_dev_overlap([first, second, reranker if isinstance(reranker, str) else None], tasks)
    if second is not None:
        reads = _component_reads([first, second], use_instruction, read_instruction)
        first_rankings, other = _rank_components([first, second], reads, tasks, depth)
        return choose_weight(first_rankings, other, tasks, grid=DEFAULT_GRID if grid is None else grid)
    if read_instruction is not None:
        raise ValueError("read_instruction says which of a hybrid's components read the instruction: give it with "
                         "second (a reranker reads the instruction as use_instruction says)")
    first_rankings = rank_tasks(lambda: make_retriever(first), tasks, depth=depth, use_instruction=use_instruction)
    from ..rerank import load_reranker

    other = rerank_tasks(load_reranker(reranker), first_rankings, tasks, top_k=rerank_depth,
                         use_instruction=use_instruction)
    return choose_rerank_weight(first_rankings, other, tasks, grid=RERANK_GRID if grid is None else grid,
                                confidence=confidence)


def tune_weights(specs: Sequence[str], tasks: Sequence[RetrievalTask], depth: int = 100, use_instruction: bool = False,
                 grid: Sequence[Sequence[float]] | None = None,
                 read_instruction: Sequence[bool] | None = None) -> WeightsChoice:
    """The shares of two or more plain retriever specs in ``hybrid:A+B+C?fusion=convex&weights=...``, chosen on
    ``tasks`` (dev tasks, never the one you will evaluate): each ranks each task once, then every grid point fuses.
    Each reads the instruction (``use_instruction``) as the hybrid will give it: ``read_instruction``, one switch
    per spec, or the hybrid's default (BM25 reads the query alone). Warns (:class:`DevOverlapWarning`) when a
    trained model named here was trained on one of ``tasks``."""
    if len(specs) < 2 or any(s.startswith("hybrid:") for s in specs):
        raise ValueError("a hybrid's weights are tuned between two or more plain retrievers (e.g. bm25, "
                         "dense:minilm-l6, dense:e5-small)")
    if depth < 1:
        raise ValueError("depth must be at least 1")
    _warn_dev_overlap(specs, tasks)
    reads = _component_reads(specs, use_instruction, read_instruction)
    return choose_weights(_rank_components(specs, reads, tasks, depth), tasks, grid=grid)


def training_tasks(folder: str | os.PathLike) -> set[str] | None:
    """The tasks a model trained here was trained on, read from its run's records: the ``train_tasks`` of its
    training summary (``tart_dual_config.json``, ``tart_full_config.json``, ``tart_distil_config.json``, or a
    soup's ``soup.json``, in the folder or, for a ``model/`` folder, beside it), else the ``per_task`` counts
    of ``train_stats.json`` that ``taskret tart run`` writes in its work folder. None for anything else (a
    registered model, a folder with no records)."""
    from ..training.soup import SOUP_FILE
    from .cross_encoder import CONFIG_FILE as FULL_FILE
    from .distil import CONFIG_FILE as DISTIL_FILE
    from .dual import CONFIG_FILE as DUAL_FILE

    path = Path(folder)
    if not path.is_dir():
        return None
    for run in (path, path.parent):
        for name in (DUAL_FILE, FULL_FILE, DISTIL_FILE, SOUP_FILE):
            tasks = read_json(run / name).get("train_tasks") if (run / name).is_file() else None
            if tasks:
                return set(tasks)
    for run in (path, path.parent, path.parent.parent):
        if (run / "train_stats.json").is_file():
            return set(read_json(run / "train_stats.json").get("per_task", {})) or None
    return None


def _named_folders(spec: str) -> list[str]:
    """The local folders a retriever or reranker spec names: a hybrid's components, ``KIND:FOLDER``, a
    folder, and folders given as option values (``?query_encoder=FOLDER``)."""
    spec = str(spec)
    if spec.startswith("hybrid:"):
        components, _ = parse_hybrid_spec(spec[len("hybrid:"):])
        return [folder for component in components for folder in _named_folders(component)]
    body, _, options = spec.partition("?")
    candidates = [body, body.partition(":")[2], *(item.partition("=")[2] for item in options.split("&"))]
    return list(dict.fromkeys(c for c in candidates if c and Path(c).is_dir()))


def dev_overlap(specs: Sequence[str | None], tasks: Sequence[RetrievalTask]) -> dict[str, list[str]]:
    """``{folder: [dev task, ...]}`` for every trained model that ``specs`` name (retrievers, hybrids, a
    reranker) whose training tasks include one of ``tasks``: weights chosen on those tasks favour that model."""
    names = {task.name for task in tasks}
    overlap: dict[str, list[str]] = {}
    for spec in filter(None, specs):
        for folder in _named_folders(spec):
            shared = sorted(names & (training_tasks(folder) or set()))
            if shared:
                overlap[folder] = shared
    return overlap
