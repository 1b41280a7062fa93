"""FAISS dense retrieval on real MiniLM vectors: exact inner product (IndexFlatIP) against HNSW (IndexHNSWFlat,
inner-product metric), single query and batched, with HNSW recall@k against exact search; what
:data:`taskret.retrieval.dense.AUTO_HNSW_FROM` and the HNSW defaults were chosen on.

The vectors are MiniLM-L6 embeddings (as ``dense:minilm-l6`` encodes them: the encoder's dtype, float32 unit
vectors) of real short texts from the shared data: MTOP and Break inputs and outputs, AmbigQA questions and their
disambiguated rewrites, and the berri-lite tasks' queries; deduplicated, shuffled with the seed, the first
``--pool`` are indexed and the next ``--queries`` search them (so no query finds itself). Encoding ~50K short texts
takes minutes on 2 cores, so the vectors are cached under ``runs/dense_latency/`` (keyed by the texts, the encoder
and its dtype) and a rerun skips it. Earlier versions of this benchmark used random vectors, HNSW's worst case
(recall@10 0.63 at ef_search 64): real embeddings have neighbourhoods, and the settings below are chosen on them.

    python benchmarks/serve/dense_latency.py --sizes 5000,10000,20000,50000 --hnsw-m 16,32 --ef-search 16,32,64,128,256
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.retrieval.dense import (
    AUTO_HNSW_FROM,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    DenseRetriever,
    build_faiss_index,
)

CACHE_DIR = Path("runs/dense_latency")


def _jsonl_texts(path: Path, field: str) -> list[str]:
    with path.open(encoding="utf-8") as lines:
        return [row[field] for row in map(json.loads, lines) if isinstance(row.get(field), str)]


def real_texts(data_dir: Path) -> dict[str, list[str]]:
    """Short real texts by source: what an example index or a query stream holds."""
    from taskret.data import load_task

    sources: dict[str, list[str]] = {}
    for task in ("mtop", "break"):
        loaded = load_task(task, data_dir=data_dir)
        examples = list(loaded.train) + list(loaded.test)
        sources[task] = [e.input for e in examples] + [e.output for e in examples]
    ambig = json.loads((data_dir / "ambigqa" / "dev_light.json").read_text(encoding="utf-8"))
    sources["ambigqa"] = [item["question"] for item in ambig] + [
        pair["question"] for item in ambig for note in item.get("annotations", ())
        for pair in note.get("qaPairs", ()) if isinstance(pair.get("question"), str)]
    berri = data_dir / "berri-lite"
    sources["berri-lite queries"] = [text for folder in sorted(berri.iterdir()) if (folder / "queries.jsonl").is_file()
                                     for text in _jsonl_texts(folder / "queries.jsonl", "text")]
    return sources


def pool_and_queries(data_dir: Path, n_pool: int, n_queries: int, seed: int) -> tuple[list[str], list[str], dict]:
    sources = real_texts(data_dir)
    seen: set[str] = set()
    texts = []
    for source in sources.values():
        for text in source:
            text = " ".join(text.split())
            if text and text not in seen:
                seen.add(text)
                texts.append(text)
    random.Random(seed).shuffle(texts)
    if len(texts) < n_pool + n_queries:
        raise SystemExit(f"only {len(texts)} distinct texts; ask for fewer (--pool, --queries)")
    counts = {name: len(source) for name, source in sources.items()}
    return texts[:n_pool], texts[n_pool:n_pool + n_queries], {"by_source": counts, "distinct": len(texts)}


def encode_cached(texts: list[str], encoder: str) -> tuple[np.ndarray, str, float | None]:
    """MiniLM vectors of ``texts`` (float32 unit rows), from the cache when these texts were encoded before."""
    retriever = DenseRetriever(encoder)
    key = hashlib.sha256("\n".join([encoder, retriever.dtype, *texts]).encode()).hexdigest()[:16]
    path = CACHE_DIR / f"{encoder.replace('/', '_')}-{retriever.dtype}-{len(texts)}-{key}.npy"
    if path.exists():
        return np.load(path), retriever.dtype, None
    start = time.perf_counter()
    vectors = retriever.encode(texts, report=True)
    seconds = time.perf_counter() - start
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors, retriever.dtype, seconds


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


def _recall(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    k = exact_ids.shape[1]
    return float(np.mean([len(set(a) & set(e)) / k for a, e in zip(approx_ids.tolist(), exact_ids.tolist())]))


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/dense_latency.json", seed=0)
    options.add_argument("--encoder", default="minilm-l6")
    options.add_argument("--pool", type=int, default=50_000, help="texts indexed (the largest size)")
    options.add_argument("--queries", type=int, default=1000, help="held-out texts searched (recall and timing)")
    options.add_argument("--sizes", default="5000,10000,20000,50000", help="pool sizes (first N of the pool)")
    options.add_argument("--k", type=int, default=10)
    options.add_argument("--single-queries", type=int, default=500, help="queries timed one at a time")
    options.add_argument("--batch", type=int, default=256, help="queries per batched search")
    options.add_argument("--repeats", type=int, default=2, help="batched searches timed (best kept)")
    options.add_argument("--hnsw-m", default="16,32", help="HNSW links per node to try")
    options.add_argument("--ef-construction", default="80,200")
    options.add_argument("--ef-search", default="16,32,64,128,256")
    options.add_argument("--search-threads", type=int, default=1, help="FAISS (OpenMP) threads while searching")
    options.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    args = options.parse_args()

    import faiss

    pool, query_texts, counts = pool_and_queries(Path(args.data_dir), args.pool, args.queries, args.seed)
    vectors, dtype, encode_s = encode_cached(pool + query_texts, args.encoder)
    base, queries = vectors[: len(pool)], vectors[len(pool):]
    measured_on = machine(threads=args.search_threads, faiss=faiss.__version__)
    print(f"{len(pool)} pool + {len(query_texts)} query vectors ({dtype}; "
          f"{'cached' if encode_s is None else f'encoded in {encode_s:.0f} s'})", flush=True)

    sizes = [int(s) for s in args.sizes.split(",")]
    configs = [(int(m), int(c)) for m in args.hnsw_m.split(",") for c in args.ef_construction.split(",")]
    efs = [int(s) for s in args.ef_search.split(",")]
    runs = []
    for n in sizes:
        faiss.omp_set_num_threads(args.build_threads)
        flat = build_faiss_index(base[:n], "flat")
        faiss.omp_set_num_threads(args.search_threads)
        _, exact_ids = flat.search(queries, args.k)
        entry = {"n": n, "flat": {"single": _single(flat, queries[: args.single_queries], args.k),
                                  "batched": _batched(flat, queries[: args.batch], args.k, args.repeats)},
                 "hnsw": []}
        print(f"n={n:>6d}: flat single p50 {entry['flat']['single']['p50_ms']:.3f} ms", flush=True)
        for m, ef_construction in configs:
            faiss.omp_set_num_threads(args.build_threads)
            start = time.perf_counter()
            hnsw = build_faiss_index(base[:n], "hnsw", hnsw_m=m, ef_construction=ef_construction)
            build_s = time.perf_counter() - start
            faiss.omp_set_num_threads(args.search_threads)
            config = {"M": m, "ef_construction": ef_construction, "build_s": round(build_s, 2), "by_ef_search": []}
            for ef in efs:
                hnsw.hnsw.efSearch = ef
                _, approx_ids = hnsw.search(queries, args.k)
                config["by_ef_search"].append({
                    "ef_search": ef, f"recall@{args.k}": round(_recall(approx_ids, exact_ids), 4),
                    "single": _single(hnsw, queries[: args.single_queries], args.k),
                    "batched": _batched(hnsw, queries[: args.batch], args.k, args.repeats)})
            entry["hnsw"].append(config)
            print(f"  hnsw M={m} efC={ef_construction} build {build_s:.1f}s: " + ", ".join(
                f"ef{b['ef_search']} p50 {b['single']['p50_ms']:.3f} ms R@{args.k} {b[f'recall@{args.k}']:.4f}"
                for b in config["by_ef_search"]), flush=True)
            del hnsw
        runs.append(entry)
        del flat
        # After every size: a stopped run keeps what it measured.
        write_result(args.out, _result(args, command_line(args, options), measured_on, dtype, counts, runs),
                     quiet=True)
    print(f"-> {args.out}")


def _chosen(runs: list[dict], k: int) -> dict | None:
    """At the largest size: the fastest HNSW setting (single-query p50) with recall@k >= 0.99."""
    if not runs:
        return None
    largest = runs[-1]
    candidates = [(b["single"]["p50_ms"], c, b) for c in largest["hnsw"] for b in c["by_ef_search"]
                  if b[f"recall@{k}"] >= 0.99]
    if not candidates:
        return None
    p50, config, best = min(candidates, key=lambda t: t[0])
    return {"n": largest["n"], "M": config["M"], "ef_construction": config["ef_construction"],
            "ef_search": best["ef_search"], f"recall@{k}": best[f"recall@{k}"], "single_p50_ms": p50,
            "flat_single_p50_ms": largest["flat"]["single"]["p50_ms"], "build_s": config["build_s"]}


def _defaults(runs: list[dict], k: int) -> list[dict]:
    """What the defaults of ``dense:`` (HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH) measured at each size."""
    rows = []
    for run in runs:
        for config in run["hnsw"]:
            if (config["M"], config["ef_construction"]) != (HNSW_M, HNSW_EF_CONSTRUCTION):
                continue
            for b in config["by_ef_search"]:
                if b["ef_search"] == HNSW_EF_SEARCH:
                    rows.append({"n": run["n"], f"recall@{k}": b[f"recall@{k}"], "single_p50_ms": b["single"]["p50_ms"],
                                 "flat_single_p50_ms": run["flat"]["single"]["p50_ms"], "build_s": config["build_s"]})
    return rows


def _result(args, command: str, measured_on: dict, dtype: str, counts: dict, runs: list[dict]) -> dict:
    import faiss

    return {
        "benchmark": "dense_latency",
        "command": command,
        "machine": measured_on,
        "vectors": f"real: {args.encoder} ({dtype}) embeddings of short texts from the shared data (MTOP, Break "
                   "inputs and outputs, AmbigQA questions and rewrites, berri-lite queries), deduplicated and "
                   "shuffled; held-out texts as queries",
        "texts": counts, "encoder": args.encoder, "dtype": dtype, "n_queries": args.queries,
        "k": args.k, "single_queries": args.single_queries, "batch": args.batch,
        "search_threads": args.search_threads, "build_threads": args.build_threads,
        "faiss_blas_threshold": faiss.cvar.distance_compute_blas_threshold,
        "hnsw_metric": "inner product",
        "auto_hnsw_from": AUTO_HNSW_FROM,
        "fastest_reaching_0.99": _chosen(runs, args.k),
        "defaults": {"M": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH,
                     "by_n": _defaults(runs, args.k)},
        "runs": runs,
    }


if __name__ == "__main__":
    main()
