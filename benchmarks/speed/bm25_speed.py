"""Candidate search speed: bm25s against rank_bm25, top-50 for every Break training example
against the Break training set (by output, as EPR mines candidates), same tokens for both.

    python benchmarks/speed/bm25_speed.py --data-dir ../shared/data
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.data import load_task


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/bm25_speed.json")
    options.add_argument("--k", type=int, default=50)
    args = options.parse_args()

    import bm25s
    import Stemmer
    from rank_bm25 import BM25Okapi

    train = load_task("break", data_dir=args.data_dir).train
    texts = [e.output for e in train]
    stemmer = Stemmer.Stemmer("english")
    # One tokenisation for both libraries, so only indexing and search are timed.
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)

    start = time.perf_counter()
    fast = bm25s.BM25(k1=1.5, b=0.75)
    fast.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    fast_ids, _ = fast.retrieve(tokens, k=args.k, show_progress=False, n_threads=1)
    bm25s_s = time.perf_counter() - start

    start = time.perf_counter()
    slow = BM25Okapi(tokens, k1=1.5, b=0.75)
    slow_ids = [np.argsort(-slow.get_scores(q), kind="stable")[: args.k] for q in tokens]
    rank_bm25_s = time.perf_counter() - start

    # The two libraries differ slightly in IDF (rank_bm25 floors negative IDF with epsilon), so report overlap.
    overlap = float(np.mean([len(set(a) & set(b)) / args.k for a, b in zip(fast_ids.tolist(), slow_ids)]))
    result = {
        "benchmark": "bm25_speed",
        "command": command_line(args, options),
        "machine": machine(threads=1),
        "n_queries": len(texts), "n_docs": len(texts), "k": args.k,
        "bm25s_s": round(bm25s_s, 2), "rank_bm25_s": round(rank_bm25_s, 2),
        "speedup": round(rank_bm25_s / bm25s_s, 1),
        "bm25s_queries_per_s": round(len(texts) / bm25s_s, 1),
        "rank_bm25_queries_per_s": round(len(texts) / rank_bm25_s, 1),
        "top50_overlap": round(overlap, 3),
    }
    print(result)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
