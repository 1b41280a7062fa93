"""How long the fast document setup takes to index a real corpus, with MiniLM in float32 (the old way) and in the
dtype ``auto`` picks (bfloat16 on a CPU with native bf16: AVX512-BF16 / AMX; float32 elsewhere), and what the
choice costs in quality.

SciFact's 5,183 abstracts are indexed with ``hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4`` (BM25 + MiniLM,
the dense component's dtype set one way, then the other) through the library's own evaluation
(:func:`taskret.tart.evaluation.evaluate_retriever`), which times the indexing and scores SciFact's 300 test claims
(the queries alone, no instruction): NDCG@10, Recall@100, MRR@10 for each way. Both ways run in one process, in
``--rounds`` rounds whose order alternates (float32 first, then the new way first, ...), after a warm-up that loads
MiniLM in both dtypes. Other work on the machine only slows a run down, so each way is scored by its best run and
the speedup is that paired ratio, while the docs/s of one run say little about another machine or another moment. The BM25 part alone is timed once (its
share of each indexing), and the two ways' document vectors are compared (cosine).

    python benchmarks/speed/index_speed.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, round_metrics, write_result  # noqa: E402

SPEC = "hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4"


def cpu_flags() -> dict:
    """Whether the CPU computes bfloat16 natively (what ``auto`` reads)."""
    try:
        flags = set(next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        flags = set()
    return {flag: flag in flags for flag in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")}


def with_dtype(dtype: str):
    """A ``make`` for evaluate_retriever: the spec's retriever, its dense components encoding in ``dtype``."""
    from taskret.retrieval import DenseRetriever, make_retriever

    def make(spec: str):
        retriever = make_retriever(spec)
        for part in [retriever, *getattr(retriever, "components", [])]:
            if isinstance(part, DenseRetriever):
                part.dtype = dtype
        return retriever

    return make


def dense_vectors(indexes: dict) -> np.ndarray:
    """The document vectors of the one dense component among the built indexes (``evaluate_retriever``'s cache)."""
    from taskret.retrieval import DenseRetriever

    (retriever, _), = indexes.values()
    dense = next(part for part in retriever.components if isinstance(part, DenseRetriever))
    return dense._index.reconstruct_n(0, dense._index.ntotal)


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/index_speed.json")
    options.add_argument("--retriever", default=SPEC, help="the document setup to index (default: %(default)s)")
    options.add_argument("--new-dtype", default="auto", help="the new way's dtype (default: %(default)s)")
    options.add_argument("--rounds", type=int, default=2, help="rounds of both ways, the order alternating")
    options.add_argument("--limit", type=int, default=None, help="a seeded sample of N test queries (default: all)")
    args = options.parse_args()

    import torch

    from taskret.models import dtype_name
    from taskret.retrieval import make_retriever
    from taskret.retrieval.dense import load_encoder
    from taskret.tart.evaluation import METRICS, evaluate_retriever
    from taskret.tart.tasks import load_retrieval_task

    task = load_retrieval_task("scifact", args.data_dir, "test").sample(args.limit, seed=0)
    ids, texts = task.doc_ids_and_texts()
    new_dtype = dtype_name(args.new_dtype, "cpu")
    ways = {"float32": "float32", "new": new_dtype}
    measured_on = machine(cpu_flags=cpu_flags(), mkldnn=torch.backends.mkldnn.is_available())
    print(f"{len(ids)} documents, {len(task.queries)} queries; the new way: {args.new_dtype} -> {new_dtype}",
          flush=True)

    for dtype in ways.values():  # warm-up: weights read from disk once, each dtype's kernels set up
        load_encoder("minilm-l6", "cpu", dtype).encode(texts[:64], batch_size=64)
    start = time.perf_counter()
    make_retriever("bm25").index_texts(ids, texts)
    bm25_s = time.perf_counter() - start

    runs, vectors = [], {}
    for n in range(args.rounds):
        order = list(ways) if n % 2 == 0 else list(reversed(ways))
        for way in order:
            indexes: dict = {}
            cpu_start = time.process_time()
            result = evaluate_retriever(args.retriever, [task], use_instruction=False, k=100, indexes=indexes,
                                        make=with_dtype(ways[way]))
            cpu_s = time.process_time() - cpu_start
            entry = result["settings"]["closed"][task.name]
            vectors.setdefault(way, dense_vectors(indexes))
            runs.append({"round": n, "way": way, "dtype": ways[way], "index_s": entry["index_s"],
                         "docs_per_s": round(len(ids) / entry["index_s"], 1), "query_s": entry["query_s"],
                         "cpu_s": round(cpu_s, 1),
                         "metrics": round_metrics(entry["metrics"]),
                         "load_average_after": [round(x, 2) for x in os.getloadavg()]})
            print(f"round {n} {way:7s} ({ways[way]}): indexed in {entry['index_s']:.1f}s "
                  f"({len(ids) / entry['index_s']:.1f} docs/s), NDCG@10 {entry['metrics']['ndcg@10']:.2f}", flush=True)
            # After every run: a stopped benchmark keeps what it measured.
            result = _result(args, command_line(args, options), measured_on, ways, bm25_s, task, len(ids), runs,
                             vectors, METRICS)
            write_result(args.out, result, quiet=True)
    print(f"speedup {result['speedup']}x ({result['float32']['docs_per_s']} -> {result['new']['docs_per_s']} docs/s), "
          f"NDCG@10 {result['float32']['metrics']['ndcg@10']} -> {result['new']['metrics']['ndcg@10']} "
          f"({result['delta']['ndcg@10']:+.2f}) -> {args.out}")


def _result(args, command: str, measured_on: dict, ways: dict, bm25_s: float, task, n_docs: int, runs: list[dict],
            vectors: dict, metrics) -> dict:
    result = {
        "benchmark": "index_speed",
        "command": command,
        "machine": measured_on,
        "note": "timings are paired within this one run (both ways in one process, rounds alternating the order, "
                "after a warm-up): other work shared the 2 cores and only ever slows a run down, so each way is "
                "scored by its best (least disturbed) run and compared with the other way, not with another run; "
                "load_average_after says how busy the machine was. index_s: the whole hybrid index (BM25 + MiniLM "
                "encoding + FAISS), wall clock; docs_per_s = n_docs / index_s_best; cpu_s: this process's CPU time "
                "for the evaluation (index and 300 queries), less sensitive to others' load; speedup = best float32 "
                "index_s / best new index_s (speedup_median and speedup_cpu beside it)",
        "retriever": args.retriever, "task": task.name, "n_docs": n_docs,
        "n_queries": len([q for q in task.queries if q in task.qrels]), "instruction": None,
        "new_dtype": {"asked": args.new_dtype, "chosen": ways["new"]},
        "bm25_index_s": round(bm25_s, 2),
        "runs": runs,
    }
    for way, dtype in ways.items():
        mine = [r for r in runs if r["way"] == way]
        if mine:
            best = min(r["index_s"] for r in mine)
            result[way] = {"dtype": dtype, "index_s_best": best, "docs_per_s": round(n_docs / best, 1),
                           "index_s_median": round(statistics.median(r["index_s"] for r in mine), 2),
                           "cpu_s_best": min(r["cpu_s"] for r in mine), "metrics": mine[-1]["metrics"]}
    if "float32" in result and "new" in result:
        old, new = result["float32"], result["new"]
        result["speedup"] = round(old["index_s_best"] / new["index_s_best"], 2)
        result["speedup_median"] = round(old["index_s_median"] / new["index_s_median"], 2)
        result["speedup_cpu"] = round(old["cpu_s_best"] / new["cpu_s_best"], 2)
        result["delta"] = {m: round(new["metrics"][m] - old["metrics"][m], 2) for m in metrics}
        result["target"] = {"speedup_at_least": 2.0, "abs_ndcg_delta_at_most": 0.2,
                            "met": result["speedup"] >= 2.0 and abs(result["delta"]["ndcg@10"]) <= 0.2}
    if len(vectors) == 2:
        cosines = (vectors["float32"] * vectors["new"]).sum(axis=1)
        result["document_vector_cosine"] = {"min": round(float(cosines.min()), 5), "mean": round(float(cosines.mean()), 6)}
    return result


if __name__ == "__main__":
    main()
