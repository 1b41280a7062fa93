"""Does an HNSW graph over the IVF-PQ index's centroids bring a 10M-vector query under 5 ms at the same recall
(issue 78)? A query first finds the ``nprobe`` lists nearest it: with the flat quantizer a scan of every centroid
(16,384 x 384 floats at 10M, 25 MB read a query, ~1 ms of ~5.4), with ``taskret.retrieval.ivfpq.use_hnsw_quantizer``
a search of a graph over them (FAISS's quantizer for large ``nlist``). The vectors stay in the lists the exact scan
gave them; only the search changes.

On compressed_vectors.py's built indexes (``--work``, one folder per size, with their exact top 10s) and its real
queries, each quantizer is searched at the size's default settings (``settings_for``), one query at a time on one
thread, each run in a child process of its own: one uncounted run of each (the page cache), then flat, hnsw, hnsw,
flat; each query's time the mean of its two runs, paired (geometric mean ratio hnsw / flat with 95% t interval,
median difference with bootstrap interval, Wilcoxon p). Recall@10 against exact search for each, and their paired
difference with a bootstrap 95% interval; the graph's build seconds; resident memory after the queries.

    python benchmarks/scale/ivf_quantizer.py --work runs/compressed --sizes 1000000,10000000 \\
        --queries runs/compressed/queries.npy
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_score_array.py, compressed_vectors.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_score_array import RESAMPLES, compare  # noqa: E402
from compressed_vectors import EXACT_FILE, K, recall_at_10  # noqa: E402
from paired import abba, paired_runs  # noqa: E402
from scale import percentiles, resident_kib  # noqa: E402

#: run ABBA after one uncounted run of each (paired.py)
QUANTIZERS = ("flat", "hnsw")


def search(folder: Path, queries: Path, quantizer: str, out: Path) -> dict:
    """Child: the index opened as a served index opens it, with ``quantizer``; each query alone, its ms and top rows
    to ``out``."""
    import faiss

    from taskret.retrieval.ivfpq import open_vectors, search_reranked, set_nprobe, settings_for, use_hnsw_quantizer

    faiss.omp_set_num_threads(1)
    encoded = np.load(queries)
    index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_MMAP)
    settings = settings_for(index.ntotal, index.d)
    started = time.perf_counter()
    if quantizer == "hnsw":
        use_hnsw_quantizer(index)
    graph_s = time.perf_counter() - started
    set_nprobe(index, settings.nprobe)
    vectors = open_vectors(folder / "vectors.npy", random_reads=True)
    times, found = [], []
    for query in encoded:
        started = time.perf_counter()
        rows, _ = search_reranked(index, vectors, query[None, :], K, settings.rerank)
        times.append(time.perf_counter() - started)
        found.append(rows[0])
    out.write_text(json.dumps({"ms": [round(t * 1000, 4) for t in times], "found": found}))
    return {**percentiles(times), "graph_s": round(graph_s, 4), "settings": settings.as_dict(),
            "resident_after_queries_gib": round(resident_kib()["rss"] / 2 ** 20, 3)}


def recall_difference(found: dict[str, list], exact: np.ndarray, seed: int) -> dict:
    """Per-query recall@10 of hnsw minus flat: its mean and a bootstrap 95% interval over the queries."""
    per_query = {q: np.array([len(set(f) & set(e.tolist())) / K for f, e in zip(found[q], exact)]) for q in found}
    difference = per_query["hnsw"] - per_query["flat"]
    rng = np.random.default_rng(seed)
    means = difference[rng.integers(0, len(difference), (RESAMPLES, len(difference)))].mean(axis=1)
    return {"mean": round(float(difference.mean()), 4),
            "ci95": [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)],
            "queries_lower": int((difference < 0).sum()), "queries_higher": int((difference > 0).sum())}


def measure(folder: Path, queries: Path, seed: int) -> dict:
    exact = np.load(folder / EXACT_FILE)
    runs = paired_runs(QUANTIZERS, lambda quantizer, out, counted: ["--child", str(folder), str(queries), quantizer,
                                                                    str(out)], __file__, label=f"{folder.name} ")
    found = {q: got.first["found"] for q, got in runs.items()}
    return {"folder": str(folder), "settings": runs["flat"].runs[0]["settings"],
            "quantizers": {q: {"runs": runs[q].runs, **percentiles(list(runs[q].ms / 1000)),
                               "recall_at_10": round(recall_at_10(found[q], exact), 4)} for q in QUANTIZERS},
            "paired": compare(runs["hnsw"].ms, runs["flat"].ms, seed, names=("hnsw", "flat")),
            "recall_difference": recall_difference(found, exact, seed), "queries": len(exact)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        folder, queries, quantizer, out = sys.argv[2:]
        print(json.dumps(search(Path(folder), Path(queries), quantizer, Path(out))), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/ivf_quantizer.json", data_dir=False, seed=0)
    options.add_argument("--work", default="runs/compressed", help="compressed_vectors.py's --work (default: %(default)s)")
    options.add_argument("--sizes", default="1000000,10000000", help="its sizes to search (default: %(default)s)")
    options.add_argument("--queries", required=True, help="the encoded queries (.npy) its exact top 10s are of")
    args = options.parse_args()
    folders = [Path(args.work) / s for s in args.sizes.split(",") if s]
    for folder in folders:
        if not (folder / "index.faiss").is_file() or not (folder / EXACT_FILE).is_file():
            raise SystemExit(f"{folder}: no index.faiss or {EXACT_FILE} (run compressed_vectors.py first)")
    os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    sizes = {folder.name: measure(folder, Path(args.queries), args.seed) for folder in folders}
    write_result(args.out, {"benchmark": "ivf_quantizer", "command": command_line(args, options), "machine": started,
                            "finished_load_average": list(os.getloadavg()), "threads": 1, "order": abba(QUANTIZERS),
                            "sizes": sizes})


if __name__ == "__main__":
    main()
