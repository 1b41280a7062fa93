"""Where does a BM25 query's time go as the corpus grows (issue 78)? At 1M documents a query costs ~1.2 ms p50 on one
thread, at 10M ~48-52 ms (``bm25_single.json``): 45x for 10x the documents.

bm25s's numba scorer, which taskret retrieves with from 100K documents on, does three things per query: it makes a
score array of one float per document (``np.zeros``), adds every posting of the query's terms into it, and scans the
whole array for the top k. The first and last are linear in the corpus whatever the query; the middle is linear in
the postings the query's terms hold. This script counts those postings per query (and, for the first queries, the
distinct documents they reach: what a scorer that touched only them would rank), then times each part on one thread
with kernels written as bm25s writes them. The index is memory-mapped, as served: the queries are searched once
first (``bm25s_query_first_pass``, the pass bm25_shards.py times, paying for mapping in the postings it reads), then
each part is timed on a second pass:

    scatter_fresh   np.zeros of N floats, then the postings added (bm25s's scorer: a new array per query)
    scatter_reused  the postings added into one array kept across queries, its touched entries reset after
    top_k_scan      bm25s's heap scan of all N scores for the top 10
    bm25s_query     the index's own retrieve() of the query (tokenising and ranking included)

    python benchmarks/scale/bm25_query_cost.py --index runs/bm25_single/1000000/shards-1/index/shard-0 \\
        --index runs/bm25_single/10000000/shards-1/index/shard-0 --queries runs/bm25_single/queries.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

K = 10


def kernels():
    from numba import njit

    @njit(nogil=True)
    def scatter_fresh(data, indptr, indices, n, terms):
        scores = np.zeros(n, dtype=np.float32)
        for t in terms:
            for j in range(indptr[t], indptr[t + 1]):
                scores[indices[j]] += data[j]
        return scores

    @njit(nogil=True)
    def scatter_reused(data, indptr, indices, scores, terms):
        for t in terms:
            for j in range(indptr[t], indptr[t + 1]):
                scores[indices[j]] += data[j]
        for t in terms:  # reset what was touched: the array is zero again for the next query
            for j in range(indptr[t], indptr[t + 1]):
                scores[indices[j]] = 0.0
        return scores

    return scatter_fresh, scatter_reused


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return (time.perf_counter() - started) * 1000


def p50(values: list[float]) -> float:
    return round(float(np.median(values)), 3)


def measure(folder: Path, texts: list[str], distinct_n: int) -> dict:
    from bm25s.numba.selection import _numba_sorted_top_k

    from taskret.retrieval.bm25 import _tokenize
    from taskret.retrieval.index import load_index

    retriever = load_index(folder, mmap=True).retriever
    retriever.warm_up()
    bm25 = retriever._bm25
    data, indices = np.asarray(bm25.scores["data"]), np.asarray(bm25.scores["indices"])
    indptr, n = np.asarray(bm25.scores["indptr"]), int(bm25.scores["num_docs"])
    vocab = bm25.vocab_dict
    terms = [np.array(sorted({vocab[w] for w in words if w in vocab}), dtype=np.int64)
             for words in _tokenize(texts, return_ids=False)]
    postings = np.array([int((indptr[t + 1] - indptr[t]).sum()) for t in terms])
    scatter_fresh, scatter_reused = kernels()
    reused = np.zeros(n, dtype=np.float32)
    scatter_fresh(data, indptr, indices, n, terms[0])  # compiles each kernel before the timed queries
    scatter_reused(data, indptr, indices, reused, terms[0])
    _numba_sorted_top_k(reused, K)
    retriever.retrieve(texts[:1], k=K)
    # First pass: each query as the benchmark's searches meet it, its postings' pages mapped in as it reads them.
    first = [timed(retriever.retrieve, [text], K) for text in texts]
    parts = {"scatter_fresh": [], "scatter_reused": [], "top_k_scan": [], "bm25s_query": []}
    for text, t in zip(texts, terms):  # second pass: the same queries, their pages mapped
        parts["scatter_fresh"].append(timed(scatter_fresh, data, indptr, indices, n, t))
        parts["scatter_reused"].append(timed(scatter_reused, data, indptr, indices, reused, t))
        parts["top_k_scan"].append(timed(_numba_sorted_top_k, reused, K))
        parts["bm25s_query"].append(timed(retriever.retrieve, [text], K))
    # Counted after the timings: their large temporary arrays grow the heap, and a heap grown past the 40 MB score
    # array lets each query's array come from it instead of fresh pages (2x faster at 10M): what is timed above
    # is the process as a search finds it.
    distinct = [len(np.unique(np.concatenate([indices[indptr[i]:indptr[i + 1]] for i in t]))) if len(t) else 0
                for t in terms[:distinct_n]]
    return {"documents": n, "queries": len(texts),
            "postings_per_query": {"median": int(np.median(postings)), "p90": int(np.percentile(postings, 90)),
                                   "median_share_of_documents": round(float(np.median(postings)) / n, 4)},
            "distinct_documents_per_query": {"queries": len(distinct), "median": int(np.median(distinct)),
                                             "median_share_of_documents": round(float(np.median(distinct)) / n, 4)},
            "p50_ms": {"bm25s_query_first_pass": p50(first), **{name: p50(values) for name, values in parts.items()}}}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/bm25_query_cost.json", data_dir=False)
    options.add_argument("--index", action="append", required=True, type=Path,
                         help="a BM25 index folder (taskret's), repeatable: one row each")
    options.add_argument("--queries", required=True, type=Path, help="a JSON list of query texts")
    options.add_argument("--n", type=int, default=300, help="queries timed (default: %(default)s)")
    options.add_argument("--distinct", type=int, default=100,
                         help="queries whose distinct documents are counted (default: %(default)s)")
    args = options.parse_args()
    texts = json.loads(args.queries.read_text())[:args.n]
    started = machine(threads=1)
    rows = []
    for folder in args.index:
        rows.append({"index": str(folder), **measure(folder, texts, args.distinct)})
        print(json.dumps(rows[-1]), flush=True)
    write_result(args.out, {"benchmark": "bm25_query_cost", "command": command_line(args, options),
                            "machine": started, "rows": rows})


if __name__ == "__main__":
    main()
