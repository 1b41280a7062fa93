"""The HNSW libraries engines.py compares on the same vectors and graph (faiss, usearch, hnswlib), run in its child
processes: the vectors prepared once (with their exact top 10), then each library built and searched at several
ef_search values, recall@10 counted by score as ann-benchmarks counts."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py
from scale import K, corpus_texts, docs_fast_dense, percentiles, timed_results  # noqa: E402

#: The HNSW graph every dense library builds: taskret's (:mod:`taskret.retrieval.dense`).
HNSW_M, EF_CONSTRUCTION = 32, 200
EF_SEARCH = (16, 32, 64, 128, 256, 512)
DENSE_LIBS = ("faiss-hnsw", "usearch", "hnswlib")


def prepare_vectors(size_folder: Path, corpus: Path, queries: list[str], folder: Path) -> dict:
    """The document vectors (docs-fast's, read back from scale.py's index, else encoded here), the queries' (MiniLM's
    query side, float32) and their exact top 10 (faiss flat), under ``folder``."""
    import faiss

    from taskret.progress import reporting
    from taskret.retrieval import DenseRetriever

    folder.mkdir(parents=True, exist_ok=True)
    built = size_folder / "docs-fast" / "component_1"
    if (built / "index.faiss").is_file():
        dense = docs_fast_dense(size_folder / "docs-fast")
        index = faiss.downcast_index(dense._index)
        storage = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
        vectors = storage.reconstruct_n(0, storage.ntotal)
        source = f"{built} (scale.py's docs-fast index, {dense.encoder_name}, {dense.dtype})"
    else:
        dense = DenseRetriever(encoder="minilm-l6", index_type="flat")  # docs-fast's encoder
        with reporting():  # an hour or more at 1M: its progress on stderr, which the parent passes on
            vectors = dense.encode(list(corpus_texts(corpus)), report=True)
        source = f"encoded here with {dense.encoder_name} ({dense.dtype}): no docs-fast index under {size_folder}"
    np.save(folder / "doc_vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    query_vectors = dense.encode(queries, queries=True)
    np.save(folder / "query_vectors.npy", query_vectors)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, ids = exact.search(query_vectors, K)
    np.save(folder / "exact_top10.npy", ids)
    np.save(folder / "exact_scores10.npy", scores)
    return {"source": source, "n": int(vectors.shape[0]), "dim": int(vectors.shape[1]),
            "vectors_gib": round(vectors.nbytes / 2**30, 4)}


class FaissHnsw:
    def __init__(self, dim: int, threads: int):
        import faiss

        self.faiss, self.threads = faiss, threads
        self.index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION

    def build(self, vectors: np.ndarray) -> None:
        self.faiss.omp_set_num_threads(self.threads)
        self.index.add(vectors)

    def save(self, path: Path) -> None:
        self.faiss.write_index(self.index, str(path))

    def set_ef(self, ef: int) -> None:
        self.index.hnsw.efSearch = ef

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(vectors, K)[1]


class Usearch:
    def __init__(self, dim: int, threads: int):
        from usearch.index import Index

        # f32: the vectors as the others hold them (usearch would pick f16 or bf16 where the CPU has it)
        self.index = Index(ndim=dim, metric="ip", dtype="f32", connectivity=HNSW_M, expansion_add=EF_CONSTRUCTION)
        self.threads = threads

    def build(self, vectors: np.ndarray) -> None:
        self.index.add(np.arange(len(vectors)), vectors, threads=self.threads)

    def save(self, path: Path) -> None:
        self.index.save(str(path))

    def set_ef(self, ef: int) -> None:
        self.index.expansion_search = ef

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        found = self.index.search(vectors, K, threads=threads)
        return np.asarray(found.keys).reshape(len(vectors), K)


class Hnswlib:
    def __init__(self, dim: int, threads: int):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.threads = threads

    def build(self, vectors: np.ndarray) -> None:
        self.index.init_index(max_elements=len(vectors), ef_construction=EF_CONSTRUCTION, M=HNSW_M)
        self.index.add_items(vectors, np.arange(len(vectors)), num_threads=self.threads)

    def save(self, path: Path) -> None:
        self.index.save_index(str(path))

    def set_ef(self, ef: int) -> None:
        self.index.set_ef(ef)

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        return self.index.knn_query(vectors, k=K, num_threads=threads)[0]


DENSE = {"faiss-hnsw": FaissHnsw, "usearch": Usearch, "hnswlib": Hnswlib}


def recall_at_10(exact: np.ndarray, approx: np.ndarray) -> float:
    """The share of the exact top 10's ids an index returned (by id: a tie at rank 10 can count as a miss)."""
    return round(float(np.mean([len(set(e) & set(a)) / K for e, a in zip(exact, approx)])), 4)


#: How far below the exact 10th score an approximate result may score and still count (float32 rounding differs
#: between a flat index's matrix product and one dot product).
TIE_EPSILON = 1e-5


def recall_at_10_by_score(tenth_scores: np.ndarray, vectors: np.ndarray, queries: np.ndarray,
                          approx: np.ndarray) -> float:
    """ann-benchmarks' recall: the share of an index's 10 results that score at least the exact 10th score. The 1M
    corpus holds identical documents (resampled sentences), so an index that returns another copy of a top document
    found it; by id it would count as a miss. Ids below 0 (fewer than 10 found) are misses."""
    hits = []
    for tenth, query, row in zip(tenth_scores, queries, approx):
        found = row[row >= 0]
        scores = vectors[found] @ query if len(found) else np.zeros(0)
        hits.append(int((scores >= tenth - TIE_EPSILON).sum()) / K)
    return round(float(np.mean(hits)), 4)


def measure_dense(lib: str, vectors_folder: Path, index_path: Path, threads: int, efs: Sequence[int]) -> dict:
    vectors = np.load(vectors_folder / "doc_vectors.npy")
    queries = np.load(vectors_folder / "query_vectors.npy")
    exact = np.load(vectors_folder / "exact_top10.npy")
    if (vectors_folder / "exact_scores10.npy").is_file():
        tenth = np.load(vectors_folder / "exact_scores10.npy")[:, K - 1]
    else:  # vectors prepared before the scores were kept
        tenth = np.einsum("qd,qd->q", vectors[exact[:, K - 1]], queries)
    index = DENSE[lib](vectors.shape[1], threads)
    start = time.perf_counter()
    index.build(vectors)
    build_s = time.perf_counter() - start
    index.save(index_path)
    curve = []
    for ef in efs:
        index.set_ef(ef)
        index.search(queries[:2], 1)  # warm
        single, tops = timed_results(lambda v: index.search(v[None], 1)[0], queries)
        start = time.perf_counter()
        index.search(queries, threads)
        batched_s = time.perf_counter() - start
        tops = np.array(tops)
        curve.append({"ef": ef, "recall_at_10": recall_at_10_by_score(tenth, vectors, queries, tops),
                      "recall_at_10_by_id": recall_at_10(exact, tops), **percentiles(single),
                      "batched_qps": round(len(queries) / batched_s, 1)})
    return {"curve": curve, "build_s": round(build_s, 2), "disk_gib": round(index_path.stat().st_size / 2**30, 4)}


