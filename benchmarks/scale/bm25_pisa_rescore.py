"""Does a BM25 search on PISA gain by re-scoring only the candidates within reach of the top k (issue 78)? A query
on an index in parts takes every part's k best (~70 at 10M in 7 parts) and re-scores each exactly from the bm25s
index, a search of every query term's postings per candidate; ``taskret.retrieval.bm25_pisa.within_reach`` keeps
only those whose impact sum is within ``2 x terms`` units of the k-th highest (the others score below k of them).

On one built index with its PISA index and its real queries, both ways (``all``: within_reach replaced by one that
keeps every candidate, as before; ``within_reach``) are searched one query at a time on one thread, each run a child
of its own, ABBA after one uncounted run each (paired.py), and paired over every query (geometric mean ratio with 95%
t interval, median difference with bootstrap interval, Wilcoxon p); the top 10s are checked equal (ids and scores).

    python benchmarks/scale/bm25_pisa_rescore.py --index runs/bm25_single/10000000/shards-1/index/shard-0 \\
        --queries runs/bm25_single/queries.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_score_array.py, bm25_pisa_depth.py, paired.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_pisa_depth import searched  # noqa: E402
from bm25_score_array import compare  # noqa: E402
from paired import abba, paired_runs  # noqa: E402
from scale import K, percentiles  # noqa: E402

SETTINGS = ("all", "within_reach")


def search(index: Path, queries: Path, setting: str, out: Path, count: bool) -> dict:
    """Child: bm25_pisa_depth.py's search, every candidate re-scored (``all``) or those within reach."""
    from taskret.retrieval import bm25_pisa

    if setting == "all":
        bm25_pisa.within_reach = lambda sums, k, n_terms: np.ones(len(sums), dtype=bool)
    answer, retriever = searched(index, queries, out, count)
    return {**answer, "documents": len(retriever.ids), "parts": retriever._pisa_candidates().parts}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        index, queries, setting, out, count = sys.argv[2:]
        print(json.dumps(search(Path(index), Path(queries), setting, Path(out), count == "1")), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_pisa_rescore.json", data_dir=False, seed=0)
    options.add_argument("--index", required=True, help="a saved BM25 index folder with its pisa/ folder")
    options.add_argument("--queries", required=True, help="a JSON list of query texts")
    args = options.parse_args()
    index, queries = Path(args.index), Path(args.queries)
    if not (index / "pisa").is_dir():
        raise SystemExit(f"{index}: no pisa folder (a save with backend pisa, or auto from 10M documents)")
    os.environ.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    runs = paired_runs(SETTINGS, lambda setting, out, counted: ["--child", str(index), str(queries), setting,
                                                                str(out), "0" if counted else "1"], __file__)
    tops = {s: runs[s].first["tops"] for s in SETTINGS}
    paired = compare(runs["within_reach"].ms, runs["all"].ms, args.seed, names=("within_reach", "all"))
    write_result(args.out, {
        "benchmark": "bm25_pisa_rescore", "command": command_line(args, options), "machine": started,
        "finished_load_average": list(os.getloadavg()), "threads": 1, "k": K, "index": str(index),
        "documents": runs["all"].runs[0]["documents"], "parts": runs["all"].runs[0]["parts"],
        "queries": len(runs["all"].ms), "order": abba(SETTINGS),
        "settings": {s: {"runs": runs[s].runs, **percentiles(list(runs[s].ms / 1000)),
                         "mean_ms": round(float(runs[s].ms.mean()), 3)} for s in SETTINGS},
        "paired": paired, "same_top10_share": float(np.mean([a == b for a, b in zip(tops["all"], tops["within_reach"])]))})
    print(f"within_reach over all: {paired}", flush=True)


if __name__ == "__main__":
    main()
