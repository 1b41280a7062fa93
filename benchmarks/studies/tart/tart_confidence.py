"""How sure are the SciFact numbers? 95% bootstrap confidence intervals of systems' NDCG@10, and paired ones of
the differences the targets of TART's issue are stated in (a trained TART-dual against its untrained base, with
the instruction against without, the best pipeline against the same pipeline on the untrained base).

``benchmarks/documents/tart_berri.py`` leaves each system's NDCG@10 per query in ``WORK/scifact/per_query.json``
(``{system: {column: {qid: ndcg}}}``); this script resamples those queries (``scipy.stats.bootstrap``, percentile
intervals; a difference is resampled PAIRED: the same claims for both systems) and writes::

    {"systems": {"SYSTEM@COLUMN": {"label", "mean", "ci95": [low, high], "n_queries"}},
     "differences": {"A@COLUMN - B@COLUMN": {"label", "mean", "ci95", "share_above_zero", "n_queries"}}, ...}

``share_above_zero`` is the share of resamples in which A's mean is above B's (the paired bootstrap's one-sided
confidence that A is better on claims like these). Run it after tart_berri.py::

    python benchmarks/studies/tart/tart_confidence.py --system "pipeline=hybrid+minilm+e5+upr_top20@rerank_instruction" \\
        --difference "TART-dual - MiniLM=tart_dual@no_instruction,minilm@no_instruction"

(``LABEL=`` is optional: the label the report prints.)

Several tasks: ``benchmarks/studies/tart/tart_held_out.py`` leaves one ``per_query.json`` per held-out task under
``WORK/eval/TASK/``; give each with ``--per-query`` and the statistic is the mean of the task means (the held-out
mean of its table), each task's queries resampled among themselves (a stratified bootstrap)::

    python benchmarks/studies/tart/tart_confidence.py --out benchmarks/results/tart_confidence_held_out.json \
        --per-query runs/bench/tart_held_out/eval/argkp/per_query.json --per-query ... \
        --difference "instruction - none=tart_dual@instruction,tart_dual@no_instruction"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser, write_result  # noqa: E402
from scipy.stats import bootstrap  # noqa: E402

from taskret.io import read_json

RESAMPLES = 10_000
DEFAULT_PER_QUERY = "runs/bench/tart_berri/scifact/per_query.json"


def parse_system(spec: str) -> tuple[str, str]:
    """``SYSTEM@COLUMN`` -> (system, column); the column is tart_berri.py's (no_instruction, instruction, ...)."""
    system, sep, column = spec.rpartition("@")
    if not sep or not system or not column:
        raise ValueError(f"expected SYSTEM@COLUMN (e.g. bm25@no_instruction), got {spec!r}")
    return system, column


def _labelled(entry: str) -> tuple[str | None, str]:
    """``LABEL=SPEC`` -> (label, spec); a bare ``SPEC`` has no label."""
    label, sep, spec = entry.partition("=")
    return (label.strip(), spec.strip()) if sep else (None, entry.strip())


def query_scores(per_query: dict, spec: str, source: str = "per_query.json") -> dict[str, float]:
    """The per-query NDCG@10 of ``spec`` (``SYSTEM@COLUMN``) in ``per_query``; a clear error names what is missing
    and what there is."""
    system, column = parse_system(spec)
    if system not in per_query:
        raise ValueError(f"{source}: no system {system!r} (run benchmarks/documents/tart_berri.py with it first); "
                         f"it holds {', '.join(sorted(per_query)) or 'none'}")
    if column not in per_query[system]:
        raise ValueError(f"{source}: system {system!r} has no column {column!r}; "
                         f"it has {', '.join(sorted(per_query[system]))}")
    return per_query[system][column]


Strata = list[dict[str, float]]  # per-query scores, one dict per task: a task's queries are resampled among themselves


def _strata(scores: dict[str, float] | Strata) -> Strata:
    return [scores] if isinstance(scores, dict) else list(scores)


def _mean_of_means(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([sample.mean(axis=axis) for sample in samples], axis=0)


def _bootstrap(groups: list[np.ndarray], resamples: int, seed: int) -> tuple[dict, np.ndarray]:
    """The mean of the groups' means (one group: the plain mean) and its 95% percentile bootstrap interval, each
    group resampled on its own (stratified: a task's share of the mean stays fixed, as in a mean over tasks), with
    the query count; and the resampled means."""
    if any(len(values) < 2 for values in groups):
        raise ValueError(f"a confidence interval needs two or more queries per task, got {[len(v) for v in groups]}")
    res = bootstrap(tuple(groups), _mean_of_means, n_resamples=resamples, method="percentile",
                    confidence_level=0.95, rng=np.random.default_rng(seed))
    return ({"mean": round(float(_mean_of_means(*groups)), 2),
             "ci95": [round(float(res.confidence_interval.low), 2), round(float(res.confidence_interval.high), 2)],
             "n_queries": sum(len(values) for values in groups)}, res.bootstrap_distribution)


def interval(scores: dict[str, float] | Strata, resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """The mean NDCG@10 over the queries (over several tasks: the mean of the task means) and its 95% percentile
    bootstrap interval."""
    groups = [np.array(list(task.values()), dtype=np.float64) for task in _strata(scores)]
    return _bootstrap(groups, resamples, seed)[0]


def paired_difference(first: dict[str, float] | Strata, second: dict[str, float] | Strata,
                      resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """Mean of ``first - second`` over the queries both scored (over several tasks: the mean of the task means),
    its 95% paired bootstrap interval, and the share of resamples in which ``first`` is ahead. Both must score the
    same queries: a difference over different claims would mix systems with samples."""
    first, second = _strata(first), _strata(second)
    if len(first) != len(second):
        raise ValueError(f"the two systems' scores cover {len(first)} and {len(second)} tasks: pair them task by task")
    gaps = []
    for one, other in zip(first, second):
        if set(one) != set(other):
            only = sorted(set(one) ^ set(other))
            raise ValueError(f"the two systems scored different queries ({len(only)} differ, e.g. {only[:3]})")
        gaps.append(np.array([one[q] - other[q] for q in sorted(one)], dtype=np.float64))
    if all(len(g) >= 2 for g in gaps) and not any(g.any() for g in gaps):  # identical: every resample gives 0
        return {"mean": 0.0, "ci95": [0.0, 0.0], "n_queries": sum(map(len, gaps)), "share_above_zero": 0.0}
    summary, means = _bootstrap(gaps, resamples, seed)
    # above a hair over 0: a resample of tied claims can sum to 1e-15 rather than 0
    return {**summary, "share_above_zero": round(float((means > 1e-9).mean()), 4)}


def main() -> None:
    arg_parser = _parser()
    args = arg_parser.parse_args()
    sources = [Path(p) for p in args.per_query or [DEFAULT_PER_QUERY]]
    if len({source.resolve() for source in sources}) < len(sources):
        raise SystemExit(f"--per-query: a file is given twice ({', '.join(map(str, sources))}): its task would "
                         "count double in the mean")
    for source in sources:
        if not source.exists():
            raise SystemExit(f"{source}: not found; benchmarks/documents/tart_berri.py or tart_held_out.py writes it "
                             f"(under --work)")
    per_query = [read_json(source) for source in sources]
    if not args.system and not args.difference:
        raise SystemExit("nothing to do: give --system SYSTEM@COLUMN and/or --difference A@COLUMN,B@COLUMN")

    def strata(spec: str, like: str | None = None) -> Strata:
        """``spec``'s scores, one dict per file (a file is one task's queries); with ``like``, each file must hold
        the same queries for both (a paired difference), or the error names the file."""
        out = []
        for scores, source in zip(per_query, sources):
            values = query_scores(scores, spec, str(source))
            if len(values) < 2:
                raise ValueError(f"{source}: {spec} scored {len(values)} query; an interval needs two or more")
            if like is not None and set(values) != set(other := query_scores(scores, like, str(source))):
                raise ValueError(f"{source}: {spec} and {like} scored different queries "
                                 f"({len(set(values) ^ set(other))} differ)")
            out.append(values)
        return out

    result: dict = {"systems": {}, "differences": {}}
    try:
        for entry in args.system or []:
            label, spec = _labelled(entry)
            result["systems"][spec] = {"label": label, **interval(strata(spec), args.resamples, args.seed)}
        for entry in args.difference or []:
            label, pair = _labelled(entry)
            first, sep, second = pair.partition(",")
            if not sep:
                raise ValueError(f"--difference: expected [LABEL=]A@COLUMN,B@COLUMN, got {entry!r}")
            first, second = first.strip(), second.strip()
            result["differences"][f"{first} - {second}"] = {"label": label, **paired_difference(
                strata(first, like=second), strata(second), args.resamples, args.seed)}
    except ValueError as error:
        raise SystemExit(str(error)) from None
    result.update(resamples=args.resamples, seed=args.seed, method="percentile bootstrap (scipy.stats.bootstrap)"
                  + (", stratified by task: the mean of the task means" if len(sources) > 1 else ""),
                  source=str(sources[0]) if len(sources) == 1 else [str(source) for source in sources],
                  machine=machine(), commands=[command_line(args, arg_parser)])
    write_result(args.out, result)
    print(json.dumps({k: result[k] for k in ("systems", "differences")}, indent=1))


def _parser():
    p = parser(__doc__, out="benchmarks/results/tart_confidence.json", data_dir=False)
    p.add_argument("--per-query", action="append", default=None,
                   help=f"per-query NDCG@10 written by benchmarks/documents/tart_berri.py (default: {DEFAULT_PER_QUERY}) or "
                        "tart_held_out.py; repeat it for several tasks: their mean of means, each task resampled "
                        "on its own")
    p.add_argument("--system", action="append", default=None, help="[LABEL=]SYSTEM@COLUMN: its mean and 95%% interval (repeatable)")
    p.add_argument("--difference", action="append", default=None,
                   help="[LABEL=]A@COLUMN,B@COLUMN: the paired interval of A - B (repeatable)")
    p.add_argument("--resamples", type=int, default=RESAMPLES)
    p.add_argument("--seed", type=int, default=0)
    return p


if __name__ == "__main__":
    main()
