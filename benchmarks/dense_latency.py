"""FAISS dense retrieval latency: exact inner product (IndexFlatIP) against HNSW (IndexHNSWFlat, inner-product
metric), single query and batched, on 10K/50K/200K-vector indexes, with HNSW recall@k against exact search.

The vectors are synthetic, 384-d (MiniLM's width), L2-normalised, seeded:

- ``random``: i.i.d. Gaussian directions. Latency depends only on the count and width, so this is what
  a MiniLM-encoded pool of the same size costs; but random directions have no neighbourhood structure,
  the hardest case for HNSW, so its recall here is a lower bound.
- ``clustered``: points around 2,000 random centres (the nearest neighbours of a point are mostly in its
  cluster, as with real sentence embeddings); queries drawn the same way.

    python benchmarks/dense_latency.py --sizes 10000,50000,200000 --data random,clustered
"""

from __future__ import annotations

import os
import time

import numpy as np
from _common import command_line, machine, parser, write_result

from taskret.retrieval.dense import build_faiss_index


def _unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x, dtype=np.float32)


def make_vectors(kind: str, n: int, n_queries: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        return _unit(rng.standard_normal((n, dim), dtype=np.float32)), \
            _unit(rng.standard_normal((n_queries, dim), dtype=np.float32))
    if kind == "clustered":
        centres = _unit(rng.standard_normal((2000, dim), dtype=np.float32))
        noise = 0.6 / np.sqrt(dim)  # a point is ~0.85 cosine from its centre, centres are ~0 from each other

        def draw(m: int) -> np.ndarray:
            return _unit(centres[rng.integers(0, len(centres), m)] + noise * rng.standard_normal((m, dim), dtype=np.float32))

        return draw(n), draw(n_queries)
    raise ValueError(f"unknown data kind '{kind}'")


def _single(index, queries: np.ndarray, k: int) -> dict:
    times = []
    for q in queries:
        start = time.perf_counter()
        index.search(q[None, :], k)
        times.append(time.perf_counter() - start)
    ms = np.asarray(times) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "mean_ms": round(float(ms.mean()), 4)}


def _batched(index, queries: np.ndarray, k: int, repeats: int) -> dict:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries, k)
        times.append(time.perf_counter() - start)
    best = min(times)
    return {"batch": len(queries), "batch_ms": round(best * 1000, 3),
            "per_query_ms": round(best * 1000 / len(queries), 4), "queries_per_s": round(len(queries) / best, 1)}


def _batched_blas(index, queries: np.ndarray, k: int, repeats: int) -> dict:
    """Batched exact search forced onto BLAS (sgemm). FAISS >= 1.14 uses BLAS only from nq * d >= 128,000
    (d=384: 334 queries), a cut tuned for many OpenMP threads; with one thread BLAS wins far earlier."""
    import faiss

    saved = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 0
    try:
        return _batched(index, queries, k, repeats)
    finally:
        faiss.cvar.distance_compute_blas_threshold = saved


def _recall(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    k = exact_ids.shape[1]
    return float(np.mean([len(set(a) & set(e)) / k for a, e in zip(approx_ids.tolist(), exact_ids.tolist())]))


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/dense_latency.json", data_dir=False, seed=0)
    options.add_argument("--sizes", default="10000,50000,200000")
    options.add_argument("--data", default="random", help="comma-separated: random, clustered")
    options.add_argument("--dim", type=int, default=384)
    options.add_argument("--k", type=int, default=10)
    options.add_argument("--single-queries", type=int, default=200, help="queries timed one at a time")
    options.add_argument("--batch", type=int, default=256, help="queries per batched search (also the recall set)")
    options.add_argument("--repeats", type=int, default=2, help="batched searches timed (best kept)")
    options.add_argument("--hnsw-m", type=int, default=32)
    options.add_argument("--ef-construction", type=int, default=80)
    options.add_argument("--ef-search", default="16,64,256")
    options.add_argument("--search-threads", type=int, default=1, help="FAISS (OpenMP) threads while searching")
    options.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    options.add_argument("--hnsw-max-n", type=int, default=None,
                        help="build HNSW only up to this many vectors (its build is the slow part; default: all)")
    args = options.parse_args()

    import faiss

    measured_on = machine(threads=args.search_threads, faiss=faiss.__version__)

    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [s.strip() for s in args.data.split(",") if s.strip()]
    efs = [int(s) for s in args.ef_search.split(",")]
    n_queries = max(args.single_queries, args.batch)
    runs = []
    for kind in kinds:
        for n in sizes:
            vectors, queries = make_vectors(kind, n, n_queries, args.dim, args.seed)
            faiss.omp_set_num_threads(args.build_threads)
            start = time.perf_counter()
            flat = build_faiss_index(vectors, "flat")
            flat_build = time.perf_counter() - start
            hnsw, hnsw_build = None, None
            if args.hnsw_max_n is None or n <= args.hnsw_max_n:
                start = time.perf_counter()
                hnsw = build_faiss_index(vectors, "hnsw", hnsw_m=args.hnsw_m, ef_construction=args.ef_construction)
                hnsw_build = time.perf_counter() - start
            faiss.omp_set_num_threads(args.search_threads)
            _, exact_ids = flat.search(queries[: args.batch], args.k)
            entry = {"data": kind, "n": n, "flat": {"build_s": round(flat_build, 3),
                                                    "single": _single(flat, queries[: args.single_queries], args.k),
                                                    "batched": _batched(flat, queries[: args.batch], args.k, args.repeats),
                                                    "batched_blas": _batched_blas(flat, queries[: args.batch], args.k,
                                                                                  args.repeats)},
                     "hnsw": {"build_s": round(hnsw_build, 2), "by_ef_search": []} if hnsw is not None else
                     {"skipped": f"n > --hnsw-max-n {args.hnsw_max_n}"}}
            for ef in efs if hnsw is not None else ():
                hnsw.hnsw.efSearch = ef
                _, approx_ids = hnsw.search(queries[: args.batch], args.k)
                entry["hnsw"]["by_ef_search"].append({
                    "ef_search": ef, f"recall@{args.k}": round(_recall(approx_ids, exact_ids), 4),
                    "single": _single(hnsw, queries[: args.single_queries], args.k),
                    "batched": _batched(hnsw, queries[: args.batch], args.k, args.repeats)})
            runs.append(entry)
            best = entry["hnsw"].get("by_ef_search", [])
            print(f"{kind:9s} n={n:>7d}: flat single p50 {entry['flat']['single']['p50_ms']:.3f} ms, batched "
                  f"{entry['flat']['batched']['per_query_ms']:.4f} ms/q (BLAS {entry['flat']['batched_blas']['per_query_ms']:.4f})"
                  + (f" | hnsw build {hnsw_build:.1f}s, " + ", ".join(
                      f"ef{b['ef_search']} p50 {b['single']['p50_ms']:.3f} ms R@{args.k} {b[f'recall@{args.k}']:.3f}"
                      for b in best) if hnsw is not None else " | hnsw skipped"), flush=True)
            del flat, hnsw, vectors
            # After every size: a stopped run keeps what it measured.
            write_result(args.out, _result(args, command_line(args, options), measured_on, faiss, runs), quiet=True)
    print(f"-> {args.out}")


def _result(args, command: str, measured_on: dict, faiss, runs: list[dict]) -> dict:
    return {
        "benchmark": "dense_latency",
        "command": command,
        "machine": measured_on,
        "vectors": "synthetic L2-normalised 384-d (see the module docstring): latency is what a MiniLM pool of the "
                   "same size costs; recall on 'random' is HNSW's worst case",
        "dim": args.dim, "k": args.k, "single_queries": args.single_queries, "batch": args.batch,
        "search_threads": args.search_threads, "build_threads": args.build_threads,
        "faiss_blas_threshold": faiss.cvar.distance_compute_blas_threshold,
        "hnsw": {"M": args.hnsw_m, "ef_construction": args.ef_construction, "metric": "inner product"},
        "runs": runs,
    }


if __name__ == "__main__":
    main()
