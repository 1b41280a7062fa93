"""Does keeping a BM25 query's score array in glibc's heap make a query over 10M documents faster (issue 78)?

bm25s allocates one score per document for each query (40 MB at 10M documents) and frees it. Past 32 MiB glibc maps
such a block on its own and unmaps it when it is freed, so every query has the kernel zero and fault in 10,000 fresh
pages; bm25_query_cost.py put that at ~60% of a 10M query. A BM25 search now raises glibc's thresholds above its
score array (``taskret.allocator.keep_freed_blocks``), so that the array's pages stay in the heap from one query to
the next; ``TASKRET_GLIBC_MALLOC=1`` leaves glibc as it is.

Both are measured on one built index (bm25_shards.py's folder: ``shards.json`` and ``index/``) with its real queries,
by bm25_shards.py's own search (the index served as one, one query at a time on one thread), each in a child process
of its own, in the order default, kept, kept, default (drift reaches both alike), after one run that is not counted
(the index's pages into the page cache). Per query, each setting's two times are averaged; the answer is the
geometric mean of the per-query ratios kept / default with its 95% t interval, the median paired difference in ms
with a bootstrap 95% interval, a Wilcoxon signed-rank p, and each setting's p50 / p99 and resident memory.

    python benchmarks/scale/bm25_score_array.py --folder runs/bm25_single/10000000/shards-1 \\
        --queries runs/bm25_single/queries.json --out benchmarks/results/bm25_score_array.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_shards.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from scale import in_child, percentiles  # noqa: E402

SCRIPT = str(HERE / "bm25_shards.py")
#: The settings, each run in this order after a first uncounted run: ABBA
ORDER = ("default", "kept", "kept", "default")
ENV = {"default": "1", "kept": "0"}  # $TASKRET_GLIBC_MALLOC
RESAMPLES = 10_000


def run(folder: Path, queries: Path, setting: str) -> tuple[list[float], dict]:
    """bm25_shards.py's search child with glibc's thresholds left (default) or raised (kept): per-query ms, and
    the child's answer (p50, p99, resident memory) with its peak RSS."""
    os.environ["TASKRET_GLIBC_MALLOC"] = ENV[setting]
    with tempfile.TemporaryDirectory() as scratch:
        times_file = Path(scratch) / "times.json"
        answer, peak = in_child(["--child", "search", str(folder), str(queries), str(times_file)], SCRIPT)
        return json.loads(times_file.read_text()), {**answer, "search_peak_rss_gib": round(peak, 3)}


def compare(kept: np.ndarray, default: np.ndarray, seed: int, names: tuple[str, str] = ("kept", "default")) -> dict:
    """Per-query times of two settings, paired: the geometric mean ratio (first over second) with its 95% t
    interval, the median difference with a bootstrap 95% interval, a Wilcoxon signed-rank p; ``names`` the keys'."""
    from scipy import stats

    logs = np.log(kept / default)
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    differences = kept - default
    rng = np.random.default_rng(seed)
    medians = np.median(differences[rng.integers(0, len(differences), (RESAMPLES, len(differences)))], axis=1)
    return {f"ratio_{names[0]}_over_{names[1]}": round(float(np.exp(logs.mean())), 3),
            "ratio_ci95": [round(float(np.exp(logs.mean() - half)), 3), round(float(np.exp(logs.mean() + half)), 3)],
            "median_difference_ms": round(float(np.median(differences)), 3),
            "median_difference_ci95_ms": [round(float(np.percentile(medians, 2.5)), 3),
                                          round(float(np.percentile(medians, 97.5)), 3)],
            "wilcoxon_p": float(stats.wilcoxon(kept, default).pvalue),
            "queries": int(len(logs))}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/bm25_score_array.json", data_dir=False, seed=0)
    options.add_argument("--folder", required=True, help="a bm25_shards.py build (shards.json, index/)")
    options.add_argument("--queries", required=True, help="its queries (bm25_shards.py's queries.json)")
    args = options.parse_args()
    folder, queries = Path(args.folder), Path(args.queries)
    if not (folder / "shards.json").is_file():
        raise SystemExit(f"{folder}: no shards.json (build it with bm25_shards.py)")
    os.environ.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    documents = sum(json.loads((p / "index_info.json").read_text())["n"] for p in (folder / "index").iterdir()
                    if (p / "index_info.json").is_file())
    print("warming the page cache (one uncounted run)", flush=True)
    run(folder, queries, "kept")
    times: dict[str, list[list[float]]] = {"default": [], "kept": []}
    answers: dict[str, list[dict]] = {"default": [], "kept": []}
    for setting in ORDER:
        per_query, answer = run(folder, queries, setting)
        times[setting].append(per_query)
        answers[setting].append(answer)
        print(f"{setting}: p50 {answer['p50_ms']} ms", flush=True)
    mean = {setting: np.mean(np.asarray(runs), axis=0) for setting, runs in times.items()}
    settings = {setting: {"runs": answers[setting], **percentiles(list(mean[setting] / 1000))}
                for setting in times}
    write_result(args.out, {"benchmark": "bm25_score_array", "command": command_line(args, options),
                            "machine": started, "finished_load_average": list(os.getloadavg()),
                            "threads": 1, "documents": documents, "order": list(ORDER), "settings": settings,
                            "paired": compare(mean["kept"], mean["default"], args.seed)})


if __name__ == "__main__":
    main()
