"""How deep should a BM25 search on PISA look first (issue 78)? ``backend=pisa`` takes PISA's top ``k + PISA_MARGIN``
by quantized score, re-scores them exactly, and searches again 4x deeper (from the start) until no document left out
can reach the k-th score. At 10M documents tie groups of copied documents outrun a margin of 10 and send many
queries deeper; a larger first depth costs every query a little and saves those a second search.

On one built index with its PISA index (bm25_pisa.py made it) and its real queries, each margin is searched one query
at a time on one thread, each run a child process of its own: one uncounted run per margin (the page cache; it counts
each query's PISA searches), then the margins in order and reversed (A B C ... C B A), each query's time the mean of
its two runs. The queries are split in two by a seeded permutation: on the tuning half each margin is paired with the
current one (geometric mean ratio with 95% t interval, Wilcoxon p, Holm-corrected over the family), and the fastest
margin significantly faster (corrected p < 0.05) is chosen, else the current one stays; the held-out half reports the
chosen margin against the current one. The top 10s of every margin are checked equal (ids and scores).

    python benchmarks/scale/bm25_pisa_depth.py --index runs/bm25_single/10000000/shards-1/index/shard-0 \\
        --queries runs/bm25_single/queries.json --margins 10,30,100,300
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_score_array.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_score_array import compare  # noqa: E402
from paired import paired_runs  # noqa: E402
from scale import K, percentiles, resident_kib  # noqa: E402

from taskret.icl.compare import holm_adjusted  # noqa: E402


def searched(index: Path, queries: Path, out: Path, count: bool):
    """Child: the index on PISA (as set up by the caller), each query alone; per-query ms and top 10s go to ``out``,
    with each query's number of PISA searches where ``count`` (an uncounted run: the wrapper is not timed). Returns
    the timings' answer and the retriever."""
    from taskret.retrieval.base import Retriever
    from taskret.retrieval.bm25_pisa import PisaCandidates

    searches = [0]
    if count:
        plain = PisaCandidates.search

        def counted(self, term_ids, depth):
            searches[0] += 1
            return plain(self, term_ids, depth)

        PisaCandidates.search = counted
    texts = json.loads(queries.read_text())
    retriever = Retriever.load(index, mmap=True, options={"backend": "pisa"})
    retriever.warm_up()
    retriever.retrieve(texts[:1], k=K)
    times, tops, per_query = [], [], []
    for text in texts:
        searches[0] = 0
        started = time.perf_counter()
        found = retriever.retrieve([text], k=K)
        times.append(time.perf_counter() - started)
        per_query.append(searches[0])
        tops.append({"ids": found.ids[0], "scores": [float(s) for s in found.scores[0]]})
    out.write_text(json.dumps({"ms": [round(t * 1000, 4) for t in times], "tops": tops,
                               "searches": per_query if count else None}))
    return {**percentiles(times), "resident_after_queries_gib": round(resident_kib()["rss"] / 2 ** 20, 3)}, retriever


def search(index: Path, queries: Path, margin: int, out: Path, count: bool) -> dict:
    """Child: :func:`searched` with a first depth of k + ``margin``."""
    from taskret.retrieval import bm25

    bm25.PISA_MARGIN = margin
    answer, retriever = searched(index, queries, out, count)
    return {**answer, "documents": len(retriever.ids)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        index, queries, margin, out, count = sys.argv[2:]
        print(json.dumps(search(Path(index), Path(queries), int(margin), Path(out), count == "1")), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_pisa_depth.json", data_dir=False, seed=0)
    options.add_argument("--index", required=True, help="a saved BM25 index folder with its pisa/ folder")
    options.add_argument("--queries", required=True, help="a JSON list of query texts")
    options.add_argument("--margins", default="10,30,100,300", help="first depths past k; the first is the "
                         "current one, each other paired with it (default: %(default)s)")
    args = options.parse_args()
    index, queries = Path(args.index), Path(args.queries)
    if not (index / "pisa").is_dir():
        raise SystemExit(f"{index}: no pisa folder (make it with bm25_pisa.py or a save with backend pisa)")
    margins = [int(m) for m in args.margins.split(",") if m]
    current = margins[0]
    os.environ.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    runs = paired_runs([str(m) for m in margins],
                       lambda margin, out, counted: ["--child", str(index), str(queries), margin, str(out),
                                                     "0" if counted else "1"], __file__, label="margin ")
    mean = {m: runs[str(m)].ms for m in margins}
    searches = {m: runs[str(m)].first["searches"] for m in margins}
    tops = {m: runs[str(m)].first["tops"] for m in margins}
    order = np.random.default_rng(args.seed).permutation(len(mean[current]))
    tuning, held_out = order[: len(order) // 2], order[len(order) // 2:]
    paired = {m: compare(mean[m][tuning], mean[current][tuning], args.seed, names=(f"margin{m}", f"margin{current}"))
              for m in margins[1:]}
    adjusted = holm_adjusted({m: row["wilcoxon_p"] for m, row in paired.items()})
    ratio = {m: paired[m][f"ratio_margin{m}_over_margin{current}"] for m in paired}
    faster = [m for m in paired if adjusted[m] < 0.05 and ratio[m] < 1]
    chosen = min(faster, key=ratio.get) if faster else current
    settings = {str(m): {"runs": runs[str(m)].runs, "tuning": percentiles(list(mean[m][tuning] / 1000)),
                         "held_out": percentiles(list(mean[m][held_out] / 1000)),
                         "mean_ms_held_out": round(float(mean[m][held_out].mean()), 3),
                         "queries_searched_again": int(sum(s > 1 for s in searches[m])),
                         "pisa_searches": int(sum(searches[m])),
                         "same_top10_as_current": float(np.mean([a == b for a, b in zip(tops[m], tops[current])]))}
                for m in margins}
    held = compare(mean[chosen][held_out], mean[current][held_out], args.seed,
                   names=(f"margin{chosen}", f"margin{current}")) if chosen != current else None
    write_result(args.out, {"benchmark": "bm25_pisa_depth", "command": command_line(args, options), "machine": started,
                            "finished_load_average": list(os.getloadavg()), "threads": 1, "k": K, "index": str(index),
                            "documents": runs[str(current)].runs[0]["documents"],
                            "queries": len(order), "current_margin": current, "settings": settings,
                            "tuning": {str(m): {**paired[m], "wilcoxon_p_holm": adjusted[m]} for m in paired},
                            "chosen_margin": chosen, "held_out": held})
    print(f"chosen margin {chosen}" + (f": held out {held}" if held else " (the current one)"), flush=True)


if __name__ == "__main__":
    main()
