"""How sure are the SciFact numbers? 95% bootstrap confidence intervals of systems' NDCG@10, and paired ones of
the differences the targets of TART's issue are stated in (a trained TART-dual against its untrained base, with
the instruction against without, the best pipeline against the same pipeline on the untrained base).

``benchmarks/tart_berri.py`` leaves each system's NDCG@10 per query in ``WORK/scifact/per_query.json``
(``{system: {column: {qid: ndcg}}}``); this script resamples those queries (``scipy.stats.bootstrap``, percentile
intervals; a difference is resampled PAIRED: the same claims for both systems) and writes::

    {"systems": {"SYSTEM@COLUMN": {"label", "mean", "ci95": [low, high], "n_queries"}},
     "differences": {"A@COLUMN - B@COLUMN": {"label", "mean", "ci95", "share_above_zero", "n_queries"}}, ...}

``share_above_zero`` is the share of resamples in which A's mean is above B's (the paired bootstrap's one-sided
confidence that A is better on claims like these). Run it after tart_berri.py::

    python benchmarks/tart_confidence.py --system "pipeline=hybrid+minilm+e5+upr_top20@rerank_instruction" \\
        --difference "TART-dual - MiniLM=tart_dual@no_instruction,minilm@no_instruction"

(``LABEL=`` is optional: the label the report prints.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _common import command_line, machine, parser, write_result
from scipy.stats import bootstrap

from taskret.io import read_json

RESAMPLES = 10_000


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
        raise ValueError(f"{source}: no system {system!r} (run benchmarks/tart_berri.py with it first); "
                         f"it holds {', '.join(sorted(per_query)) or 'none'}")
    if column not in per_query[system]:
        raise ValueError(f"{source}: system {system!r} has no column {column!r}; "
                         f"it has {', '.join(sorted(per_query[system]))}")
    return per_query[system][column]


def _bootstrap(values: np.ndarray, resamples: int, seed: int) -> tuple[dict, np.ndarray]:
    """The mean of ``values`` and its 95% percentile bootstrap interval (with the query count), and the
    resampled means."""
    if len(values) < 2:
        raise ValueError(f"a confidence interval needs two or more queries, got {len(values)}")
    res = bootstrap((values,), np.mean, n_resamples=resamples, method="percentile", confidence_level=0.95,
                    rng=np.random.default_rng(seed))
    return ({"mean": round(float(values.mean()), 2),
             "ci95": [round(float(res.confidence_interval.low), 2), round(float(res.confidence_interval.high), 2)],
             "n_queries": len(values)}, res.bootstrap_distribution)


def interval(scores: dict[str, float], resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """The mean NDCG@10 over the queries and its 95% percentile bootstrap interval."""
    return _bootstrap(np.array(list(scores.values()), dtype=np.float64), resamples, seed)[0]


def paired_difference(first: dict[str, float], second: dict[str, float], resamples: int = RESAMPLES,
                      seed: int = 0) -> dict:
    """Mean of ``first - second`` over the queries both scored, its 95% paired bootstrap interval, and the share
    of resamples in which ``first`` is ahead. Both must score the same queries: a difference over different
    claims would mix systems with samples."""
    if set(first) != set(second):
        only = sorted(set(first) ^ set(second))
        raise ValueError(f"the two systems scored different queries ({len(only)} differ, e.g. {only[:3]})")
    gaps = np.array([first[q] - second[q] for q in sorted(first)], dtype=np.float64)
    if len(gaps) >= 2 and not gaps.any():  # identical per-query scores: every resample's difference is 0
        return {"mean": 0.0, "ci95": [0.0, 0.0], "share_above_zero": 0.0, "n_queries": len(gaps)}
    summary, means = _bootstrap(gaps, resamples, seed)
    # above a hair over 0: a resample of tied claims can sum to 1e-15 rather than 0
    return {**summary, "share_above_zero": round(float((means > 1e-9).mean()), 4)}


def main() -> None:
    arg_parser = _parser()
    args = arg_parser.parse_args()
    source = Path(args.per_query)
    if not source.exists():
        raise SystemExit(f"{source}: not found; benchmarks/tart_berri.py writes it (--work {source.parent.parent})")
    per_query = read_json(source)
    if not args.system and not args.difference:
        raise SystemExit("nothing to do: give --system SYSTEM@COLUMN and/or --difference A@COLUMN,B@COLUMN")
    result: dict = {"systems": {}, "differences": {}}
    try:
        for entry in args.system or []:
            label, spec = _labelled(entry)
            result["systems"][spec] = {"label": label, **interval(query_scores(per_query, spec, str(source)),
                                                                  args.resamples, args.seed)}
        for entry in args.difference or []:
            label, pair = _labelled(entry)
            first, sep, second = pair.partition(",")
            if not sep:
                raise ValueError(f"--difference: expected [LABEL=]A@COLUMN,B@COLUMN, got {entry!r}")
            first, second = first.strip(), second.strip()
            result["differences"][f"{first} - {second}"] = {"label": label, **paired_difference(
                query_scores(per_query, first, str(source)), query_scores(per_query, second, str(source)),
                args.resamples, args.seed)}
    except ValueError as error:
        raise SystemExit(str(error)) from None
    result.update(resamples=args.resamples, seed=args.seed, method="percentile bootstrap (scipy.stats.bootstrap)",
                  source=str(source), machine=machine(), commands=[command_line(args, arg_parser)])
    write_result(args.out, result)
    print(json.dumps({k: result[k] for k in ("systems", "differences")}, indent=1))


def _parser():
    p = parser(__doc__, out="benchmarks/results/tart_confidence.json", data_dir=False)
    p.add_argument("--per-query", default="runs/bench/tart_berri/scifact/per_query.json",
                   help="per-query NDCG@10 written by benchmarks/tart_berri.py (default: %(default)s)")
    p.add_argument("--system", action="append", default=None, help="[LABEL=]SYSTEM@COLUMN: its mean and 95%% interval (repeatable)")
    p.add_argument("--difference", action="append", default=None,
                   help="[LABEL=]A@COLUMN,B@COLUMN: the paired interval of A - B (repeatable)")
    p.add_argument("--resamples", type=int, default=RESAMPLES)
    p.add_argument("--seed", type=int, default=0)
    return p


if __name__ == "__main__":
    main()
