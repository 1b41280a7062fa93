"""Do dense shards on a multi-node Ray cluster find what the single dense index finds (issue 78)? The single index is
scale.py's ``docs-fast`` build of the same corpus (its dense component: MiniLM vectors in FAISS, HNSW at 1M); the
corpus's parts, cut as ray_shards.py cuts them, are indexed by Ray tasks on a real local cluster (``ray start --head``
and worker nodes, each a process of its own, one CPU each), one task a shard, then searched by one actor per shard
(``RayShards``: each encodes the query with the index's encoder and answers its top k) and merged by score.

A dense score needs nothing shared between shards, so a shard is its rows of the corpus's vectors indexed as the
single index was (the same index type, HNSW's M, efConstruction and efSearch) with ``DenseRetriever.index_vectors``.
The vectors are read back from the single index (an HNSW or flat index stores them whole), not encoded again:
encoding 1M documents takes ~1.6 h on 2 cores and gives the same vectors; the shards' build time here is therefore
the index's alone, and a user who encodes per shard adds the encoding (scale.py's ``encode_docs_per_s``).

Measured on ``--queries`` real queries (each encoded once here with the index's query encoder, as the actors encode
it): recall@10 against exact search over all N vectors of the single index (one search per query, one thread) and of
the merged shards; their difference (``recall_delta``: shards minus single; the issue's target is within 0.005); the
share of queries whose merged top 10 holds the single index's ten; one query at a time through the actors (p50 /
p99 ms) beside the single index's; the shards' build seconds on Ray.

    python benchmarks/scale/dense_shards.py --data-dir ../shared/data --size 1000000 --shards 3 --work runs/scale \\
        --out benchmarks/results/dense_shards.json
    python benchmarks/scale/dense_shards.py --size 300 --queries 20 --work /tmp/ds --out /tmp/ds.json

The single index is built first where ``--work``/SIZE/docs-fast holds none (scale.py's build, resumable: hours at
1M); a shards build whose ``shards.json`` exists is searched again without being built again. The vectors and the
encoded queries stay in the shards' folder (``vectors.npy``, ``queries.npy``): compressed_vectors.py's ``--base`` and
``--queries``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_shards.py, ray_shards.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, write_result  # noqa: E402
from bm25_shards import split_corpus  # noqa: E402
from ray_shards import local_cluster, prepare, shard_folders, shard_options  # noqa: E402
from scale import K, disk_gib, docs_fast_dense, in_child, percentiles  # noqa: E402

#: rows of the single index's vectors read back, and scored by the exact search, at a time
CHUNK = 100_000


def write_vectors(dense, path: Path) -> None:
    """The single index's vectors, read back from its FAISS storage in chunks into ``path`` (a ``.npy``, written to a
    temporary name and renamed: a file there is whole)."""
    import faiss

    index = faiss.downcast_index(dense._index)
    stored = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
    n, dim = stored.ntotal, stored.d
    tmp = path.with_name(path.name + ".tmp")
    vectors = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
    for start in range(0, n, CHUNK):
        vectors[start:start + CHUNK] = stored.reconstruct_n(start, min(CHUNK, n - start))
    vectors.flush()
    del vectors
    os.replace(tmp, path)


def _build_shard(vectors: str, start: int, stop: int, ids: list[str], part: str, settings: dict, out: str) -> str:
    """Ray task: one shard's rows indexed as the single index was, saved as a document index with its texts."""
    from taskret.corpus import iter_corpus
    from taskret.retrieval import DenseRetriever
    from taskret.retrieval.index import save_index

    rows = np.load(vectors, mmap_mode="r")[start:stop]
    retriever = DenseRetriever(**settings).index_vectors(ids, rows)
    save_index(out, retriever, iter_corpus(Path(part)), kind="documents", retriever_spec=f"dense:{settings['encoder']}")
    return out


def build_on_ray(vectors: Path, parts: list[Path], settings: dict, folder: Path) -> dict:
    """Each part's rows indexed by a Ray task of its own on the connected cluster; ``folder/shards.json`` names the
    shards (written last: its presence marks a finished build)."""
    import ray

    from taskret.corpus import iter_corpus

    task = ray.remote(num_cpus=1)(_build_shard)
    started, pending, start = time.perf_counter(), [], 0
    for number, part in enumerate(parts):
        ids = [doc.id for doc in iter_corpus(part)]
        out = folder / "index" / f"shard-{number}"
        pending.append(task.remote(str(vectors), start, start + len(ids), ids, str(part), settings, str(out)))
        start += len(ids)
    done = [Path(p) for p in ray.get(pending)]
    (folder / "shards.json").write_text(json.dumps({"shards": {f.name: f"index/{f.name}" for f in done}}))
    return {"build_s": round(time.perf_counter() - started, 1), "documents": start,
            "disk_gib": round(disk_gib(folder / "index"), 3)}


def recall(found: list[list[str]], exact: list[set[str]]) -> float:
    return round(float(np.mean([len(set(f[:K]) & e) / len(e) for f, e in zip(found, exact)])), 4)


def search_single(dense, queries: list[str]) -> tuple[dict, list[list[str]]]:
    """The single index: one query at a time on one thread (p50 / p99 ms), its top 10 ids each."""
    import faiss

    faiss.omp_set_num_threads(1)
    dense.retrieve(queries[:1], k=K)
    times, found = [], []
    for query in queries:
        started = time.perf_counter()
        found.append(dense.retrieve([query], k=K).ids[0])
        times.append(time.perf_counter() - started)
    return percentiles(times), found


def search_on_ray(folder: Path, queries: list[str]) -> tuple[dict, list[list[str]]]:
    """The shards' actors: one query at a time (p50 / p99 ms, the merge included), their merged top 10 each."""
    from taskret.retrieval.ray_shards import RayShards

    searched = RayShards(shard_folders(folder), timeout_s=600)
    try:
        where = searched.where()
        searched.retrieve(queries[:1], k=K)  # each actor loads its encoder at its first query
        times, found = [], []
        for query in queries:
            started = time.perf_counter()
            found.append(searched.retrieve([query], k=K).result.ids[0])
            times.append(time.perf_counter() - started)
        return {**percentiles(times), "nodes": len({w["node"] for w in where.values()})}, found
    finally:
        searched.close()


def main() -> None:
    options = shard_options(__doc__, "benchmarks/results/dense_shards.json")
    options.add_argument("--work", default="runs/scale", help="scale.py's work folder: the corpus, its docs-fast "
                         "build, the shards (kept: a rerun resumes) (default: %(default)s)")
    args = options.parse_args()
    work, corpus, queries = prepare(args)

    single_folder = work / "docs-fast"
    if not (single_folder / "meta.json").is_file():  # scale.py's build, in a child of its own (resumes its shards)
        in_child(["--child-build", str(corpus), "docs-fast", str(single_folder)], str(HERE / "scale.py"))
    started = machine(threads=1)  # after that build: the load the timings below start at
    from taskret.retrieval.ivfpq import exact_top

    dense = docs_fast_dense(single_folder, mmap=True)
    sharded = work / f"dense-{args.shards}"
    sharded.mkdir(parents=True, exist_ok=True)
    vectors_path = sharded / "vectors.npy"
    if not vectors_path.exists():
        write_vectors(dense, vectors_path)
    vectors = np.load(vectors_path, mmap_mode="r")
    encoded = dense.encode(queries, queries=True)
    np.save(sharded / "queries.npy", encoded)  # the real queries' vectors: compressed_vectors.py's --queries
    exact = [{dense.ids[r] for r in row} for row in exact_top(vectors, encoded, K, CHUNK)]
    single_search, single_found = search_single(dense, queries)
    settings = {"encoder": dense.encoder_name, "query_encoder": dense.query_encoder_name, "field": dense.field,
                "dtype": dense.dtype, "index_type": dense.index_type, "hnsw_m": dense.hnsw_m,
                "ef_construction": dense.ef_construction, "ef_search": dense.ef_search}

    import ray

    parts = split_corpus(corpus, args.shards, sharded)
    with local_cluster(args.shards):
        nodes = len([n for n in ray.nodes() if n["Alive"]])
        record = sharded / "build.json"
        if (sharded / "shards.json").exists() and record.exists():
            built = json.loads(record.read_text())
        else:
            built = build_on_ray(vectors_path, parts, settings, sharded)
            record.write_text(json.dumps(built))
        print(f"built {args.shards} dense shards on {nodes} nodes: {built['build_s']} s", flush=True)
        ray_search, merged = search_on_ray(sharded, queries)
    single_recall, shards_recall = recall(single_found, exact), recall(merged, exact)
    result = {"benchmark": "dense_shards", "command": command_line(args, options), "machine": started,
              "nodes": nodes, "shards": args.shards, "documents": args.size, "queries": len(queries),
              "index": {k: settings[k] for k in ("encoder", "dtype", "index_type", "hnsw_m", "ef_construction",
                                                 "ef_search")},
              "single": {"recall_at_10": single_recall, **single_search, "disk_gib": round(disk_gib(single_folder), 3)},
              "ray": {**built, **ray_search, "recall_at_10": shards_recall},
              "recall_delta": round(shards_recall - single_recall, 4),
              "same_top10_set_share": round(float(np.mean([set(s) == set(m)
                                                           for s, m in zip(single_found, merged)])), 4)}
    write_result(args.out, result)
    print(f"recall@10: single {single_recall}, {args.shards} shards {shards_recall} "
          f"(delta {result['recall_delta']:+.4f})", flush=True)


if __name__ == "__main__":
    main()
