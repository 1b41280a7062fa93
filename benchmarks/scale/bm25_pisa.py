"""Is BM25 over millions of documents faster searched by PISA's MaxScore (``bm25?backend=pisa``) than by bm25s, with the
same ranking (issue 78)?

``backend=pisa`` (taskret.retrieval.bm25_pisa) indexes bm25s's own scores, quantized, in PISA and re-scores PISA's
candidates exactly, so its top k is bm25s's: this measures what that costs and saves on one built index (a saved BM25
index folder, e.g. bm25_shards.py's single index ``runs/bm25_single/N/shards-1/index/shard-0``) and its real queries:
1. derive: the PISA index made from the bm25s arrays (its folder deleted first), in a child process of its own:
   seconds, peak RSS, disk beside the bm25s index's;
2. search: the index opened memory-mapped as ``taskret serve`` opens it, on bm25s (``numba``, what ``auto`` chose before) or
   on PISA, each query alone on one thread, each in a child of its own, in the order bm25s, pisa, pisa, bm25s after
   one uncounted run of each (the pages into the page cache); per query the two runs averaged, then paired as
   bm25_score_array.py pairs (geometric mean ratio pisa / bm25s with 95% t interval, median difference with bootstrap
   interval, Wilcoxon p); p50 / p99 and resident memory after the queries;
3. the top 10s of the two, query by query: the share whose ids and scores are equal (the claim: all).

    python benchmarks/scale/bm25_pisa.py --index runs/bm25_single/1000000/shards-1/index/shard-0,runs/bm25_single/10000000/shards-1/index/shard-0 \\
        --queries runs/bm25_single/queries.json --out benchmarks/results/bm25_pisa.json
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_score_array.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_score_array import compare  # noqa: E402
from paired import abba, paired_runs  # noqa: E402
from scale import K, disk_gib, in_child, percentiles, resident_kib  # noqa: E402

#: the settings (a BM25 index's backend), run ABBA after one uncounted run of each (paired.py)
SETTINGS = ("bm25s", "pisa")
BACKEND = {"bm25s": "numba", "pisa": "pisa"}  # not auto: auto searches an index with a PISA index on it


def derive(index: Path) -> dict:
    """Child: the index opened with backend pisa, which makes its PISA index where there is none."""
    from taskret.retrieval.base import Retriever
    from taskret.retrieval.bm25_pisa import FOLDER

    started = time.perf_counter()
    retriever = Retriever.load(index, mmap=True, options={"backend": "pisa"})
    return {"derive_s": round(time.perf_counter() - started, 1), "disk_gib": round(disk_gib(index / FOLDER), 3),
            "documents": len(retriever.ids)}


def search(index: Path, queries: Path, setting: str, out: Path) -> dict:
    """Child: each query alone on one thread; per-query ms and the top 10s (ids, scores) go to ``out``."""
    from taskret.retrieval.base import Retriever

    texts = json.loads(queries.read_text())
    retriever = Retriever.load(index, mmap=True, options={"backend": BACKEND[setting]})
    retriever.warm_up()
    retriever.retrieve(texts[:1], k=K)  # numba compiles its scorer at a first query
    times, tops = [], []
    for text in texts:
        started = time.perf_counter()
        found = retriever.retrieve([text], k=K)
        times.append(time.perf_counter() - started)
        tops.append({"ids": found.ids[0], "scores": [float(s) for s in found.scores[0]]})
    out.write_text(json.dumps({"ms": [round(t * 1000, 4) for t in times], "tops": tops}))
    resident = resident_kib()["rss"] / 2 ** 20
    return {**percentiles(times), "queries": len(texts), "resident_after_queries_gib": round(resident, 3),
            "searched_on_pisa": retriever.uses_pisa()}


def measure(index: Path, queries: Path, seed: int) -> dict:
    from taskret.retrieval.bm25_pisa import FOLDER

    shutil.rmtree(index / FOLDER, ignore_errors=True)
    derived, peak = in_child(["--child", "derive", str(index)], __file__)
    derived["peak_rss_gib"] = round(peak, 3)
    print(f"{index}: PISA index made in {derived['derive_s']} s at {peak:.2f} GiB peak", flush=True)
    runs = paired_runs(SETTINGS, lambda setting, out, counted: ["--child", "search", str(index), str(queries),
                                                                setting, str(out)], __file__)
    for setting, got in runs.items():
        for answer in [got.first_answer, *got.runs]:
            if answer["searched_on_pisa"] != (setting == "pisa"):
                raise SystemExit(f"{index}: the {setting} run searched on "
                                 f"{'PISA' if answer['searched_on_pisa'] else 'bm25s'}")
    answers = {s: [{**{k: v for k, v in r.items() if k != "peak_rss_gib"}, "search_peak_rss_gib": r["peak_rss_gib"]}
                   for r in got.runs] for s, got in runs.items()}
    same = [a == b for a, b in zip(runs["bm25s"].first["tops"], runs["pisa"].first["tops"])]
    return {"index": str(index), "documents": derived.pop("documents"), "bm25s_disk_gib": round(disk_gib(index / "bm25s"), 3),
            "derive": derived,
            "settings": {s: {"runs": answers[s], **percentiles(list(runs[s].ms / 1000))} for s in SETTINGS},
            "paired": compare(runs["pisa"].ms, runs["bm25s"].ms, seed, names=("pisa", "bm25s")),
            "same_top10_share": round(sum(same) / len(same), 4), "queries": len(same)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, *rest = sys.argv[2:]
        result = derive(Path(rest[0])) if step == "derive" else \
            search(Path(rest[0]), Path(rest[1]), rest[2], Path(rest[3]))
        print(json.dumps(result), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_pisa.json", data_dir=False, seed=0)
    options.add_argument("--index", required=True, help="saved BM25 index folders, comma-separated (smallest first)")
    options.add_argument("--queries", required=True, help="a JSON list of query texts")
    args = options.parse_args()
    indexes = [Path(p) for p in args.index.split(",") if p]
    for index in indexes:
        if not (index / "bm25s").is_dir():
            raise SystemExit(f"{index}: no bm25s folder (a saved BM25 index, e.g. bm25_shards.py's shard-0)")
    os.environ.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    sizes = {}
    for index in indexes:
        row = measure(index, Path(args.queries), args.seed)
        sizes[str(row["documents"])] = row
    write_result(args.out, {"benchmark": "bm25_pisa", "command": command_line(args, options), "machine": started,
                            "finished_load_average": list(os.getloadavg()), "threads": 1, "order": abba(SETTINGS),
                            "sizes": sizes})


if __name__ == "__main__":
    main()
