"""Compressed dense search for corpora past memory: a FAISS IVF-PQ index whose candidates are re-ranked exactly from
the full vectors, which stay on disk.

An IVF-PQ index keeps each vector as ``m`` one-byte codes (48 bytes for MiniLM's 384 dimensions, against 1,536 in
float32) in ``nlist`` inverted lists; a query visits the ``nprobe`` lists nearest it. Product quantization blurs the
scores, so the index returns ``rerank`` candidates and their exact inner products are computed from ``vectors.npy``
(float32, unit length, read row by row: :class:`VectorRows`): a query reads ``rerank`` rows of it, so the full vectors
need disk, not memory.

The build keeps memory flat in the corpus size: the vectors are written to ``vectors.npy`` as they are encoded (and read
back for the build through a file descriptor, never mapped: a mapping keeps the pages it touched resident), the
coarse quantizer and the codebooks are trained on an evenly spaced sample of them (:data:`TRAIN_PER_LIST` per list,
at most :data:`MAX_TRAIN`), and the index is filled :data:`ADD_CHUNK` rows at a time.

The settings follow FAISS's guidelines, set by the pool's size (:func:`settings_for`): ``nlist`` a power of two near
4 sqrt(N), one byte per 8 dimensions; ``nprobe`` and ``rerank`` as swept on real queries (:data:`LARGE_FROM`): a 16th
of the lists and 100 candidates for a top 10 up to 3M vectors, a 128th and 400 from there; from there too the lists a
query visits are found by an HNSW graph over the centroids rather than a scan of them all (:func:`use_hnsw_quantizer`).
``benchmarks/scale/compressed_vectors.py`` and ``ivf_quantizer.py`` measure their recall@10 against exact search and
their latency.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = ["IVFPQSettings", "VectorFile", "VECTORS_FILE", "settings_for", "build_ivfpq", "search_reranked",
           "ivfpq_recall_at_10", "open_vectors", "move_vectors", "VectorRows", "use_hnsw_quantizer", "set_nprobe"]

#: The full vectors beside ``index.faiss``, float32 and unit length, in NumPy's format (read row by row at search).
VECTORS_FILE = "vectors.npy"
#: Training vectors per inverted list (FAISS warns below 39) and the sample's cap: k-means' time grows with both.
TRAIN_PER_LIST = 64
MAX_TRAIN = 262_144
#: Rows added to the index at a time: what the fill holds in memory besides the index itself.
ADD_CHUNK = 65_536
#: The fewest vectors an IVF-PQ index is built over: its codebooks (256 centroids each) need a few thousand to train.
MIN_VECTORS = 4_096


@dataclass(frozen=True)
class IVFPQSettings:
    """``nlist`` inverted lists, ``m`` one-byte codes per vector, ``nprobe`` lists visited per query, ``rerank``
    candidates re-scored exactly."""

    nlist: int
    m: int
    nprobe: int
    rerank: int

    def as_dict(self) -> dict:
        return asdict(self)


def _codes_per_vector(dim: int) -> int:
    """One byte per 8 dimensions (48 for 384), the largest divisor of ``dim`` not above ``dim // 8`` (FAISS splits
    the vector into ``m`` equal parts)."""
    target = max(1, dim // 8)
    return next(m for m in range(target, 0, -1) if dim % m == 0)


#: ``nprobe`` and ``rerank`` by size, each the fastest pair reaching recall@10 0.95 on half of 1,000 real queries
#: (benchmarks/scale/compressed_vectors.py's sweep of nprobe 64-256 x rerank 100-400; the other half: 0.966 at 1M in
#: 2.5 ms, 0.968 at 10M in 5.6 ms, one thread, 2-core Xeon): below this many vectors a 16th of the lists (256 of
#: 4,096 at 1M) and 100 re-ranked; from it a 128th (128 of 16,384 at 10M) and 400 (sizes between not measured).
LARGE_FROM = 3_000_000


def settings_for(n: int, dim: int, nprobe: int | None = None, rerank: int | None = None) -> IVFPQSettings:
    """The IVF-PQ settings for ``n`` vectors of ``dim`` dimensions (module docstring); ``nprobe`` / ``rerank``
    override the defaults by size."""
    lists = 2 ** round(math.log2(max(16.0, 4 * math.sqrt(n))))
    lists = max(16, min(lists, 65_536, 2 ** int(math.log2(max(16, n // 39)))))  # enough vectors to train each list
    large = n >= LARGE_FROM
    by_size = max(16, min(256, lists // (128 if large else 16)))
    return IVFPQSettings(nlist=lists, m=_codes_per_vector(dim), nprobe=nprobe or by_size,
                         rerank=rerank or (400 if large else 100))


class VectorFile:
    """An ``(n, dim)`` float32 ``.npy`` file written block by block as the vectors are encoded, through a file handle
    (the written pages go to the page cache, not to the process: a memory map of its own kept every page it wrote
    resident, 16.6 GiB at 10M vectors), under a temporary name until :meth:`close` renames it."""

    def __init__(self, path: Path, n: int, dim: int):
        self.path = Path(path)
        self.partial = self.path.with_name(f".{self.path.name}.partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.shape = (n, dim)
        self.file = open(self.partial, "wb")
        np.lib.format.write_array_header_1_0(self.file, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                         "fortran_order": False, "shape": self.shape})
        self.filled = 0

    def write(self, block: np.ndarray) -> None:
        stop = self.filled + len(block)
        if stop > self.shape[0]:
            raise ValueError(f"{self.path}: {stop} vectors written into a file made for {self.shape[0]}")
        self.file.write(np.ascontiguousarray(block, dtype=np.float32).tobytes())
        self.filled = stop

    def close(self) -> "VectorRows | np.ndarray":
        """Close, rename to the final name, and return the file's rows (:class:`VectorRows`: read, not mapped)."""
        if self.filled != self.shape[0]:
            raise ValueError(f"{self.path}: {self.filled} of {self.shape[0]} vectors written")
        self.file.close()
        os.replace(self.partial, self.path)
        return open_vectors(self.path, random_reads=True)

    def discard(self) -> None:
        self.file.close()
        self.partial.unlink(missing_ok=True)


def open_vectors(path: Path, random_reads: bool = False) -> np.ndarray | VectorRows:
    """The full vectors: memory-mapped, for a build or an exact search that reads them in order; with
    ``random_reads``, for a search, which reads ``rerank`` scattered rows a query, a :class:`VectorRows`."""
    if random_reads and hasattr(os, "pread"):
        return VectorRows(path)
    return np.load(path, mmap_mode="r")


class VectorRows:
    """A ``vectors.npy`` whose rows are read when asked for (``os.pread``), not mapped. A mapping's page faults map
    the neighbouring pages too (fault-around, which ``MADV_RANDOM`` did not stop here): at 1M vectors, 1,000 queries
    of 100 re-ranked rows each left 99% of the 1.4 GiB file in the process's resident memory. Read, the rows stay in
    the page cache, which every process serving the index shares, and the process itself holds none of them
    (0.11 GiB resident after the same queries: ``benchmarks/scale/compressed_vectors.py``)."""

    def __init__(self, path: str | os.PathLike):
        header = np.load(path, mmap_mode="r")
        if header.dtype != np.float32 or header.ndim != 2:
            raise ValueError(f"{path}: not a 2-D float32 array")
        self.filename, self.shape, self._offset = str(path), header.shape, header.offset
        del header
        self._row_bytes = self.shape[1] * 4
        self._fd = os.open(path, os.O_RDONLY)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        if isinstance(rows, (int, np.integer)):
            return self._read([int(rows)])[0]
        if isinstance(rows, slice):  # a run of rows (a build's chunk, an exact search's block): one read
            start, stop, step = rows.indices(len(self))
            if step != 1:
                return self._read(list(range(start, stop, step)))
            count = max(0, stop - start)
            out = np.empty((count, self.shape[1]), dtype=np.float32)
            view, at = memoryview(out.reshape(-1).view(np.uint8)), 0
            while at < len(view):  # a read returns at most ~2 GiB: read on until the run is whole
                got = os.preadv(self._fd, [view[at:]], self._offset + start * self._row_bytes + at)
                if got <= 0:
                    raise OSError(f"{self.filename}: ends before row {stop}")
                at += got
            return out
        return self._read(np.asarray(rows, dtype=np.int64).ravel().tolist())

    def _read(self, rows: list[int]) -> np.ndarray:
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        for i, row in enumerate(rows):
            row = row + len(self) if row < 0 else row
            if not 0 <= row < len(self):
                raise IndexError(f"row {row} of {len(self)} vectors")
            out[i] = np.frombuffer(os.pread(self._fd, self._row_bytes, self._offset + row * self._row_bytes),
                                   dtype=np.float32)
        return out

    def __reduce__(self):  # another process opens the file itself (a descriptor does not travel)
        return VectorRows, (self.filename,)

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def scratch_vectors_path(directory: Path | None) -> Path:
    """Where a build writes its vectors before the index is saved: beside its shards, or in the temporary folder."""
    if directory is not None:
        return Path(directory) / VECTORS_FILE
    return Path(tempfile.mkdtemp(prefix="taskret-ivfpq-")) / VECTORS_FILE


def move_vectors(source: Path, directory: Path) -> Path:
    """Put the vectors file into an index folder: renamed on the same file system, copied elsewhere."""
    target = Path(directory) / VECTORS_FILE
    if Path(source).resolve() == target.resolve():
        return target
    try:
        os.replace(source, target)
    except OSError:  # another file system: copy, then rename into place
        partial = target.with_name(f".{target.name}.partial")
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    return target


def _sample_rows(n: int, size: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(size, n)).astype(np.int64))


def build_ivfpq(vectors: np.ndarray, settings: IVFPQSettings, threads: int | None = None):
    """An inner-product IVF-PQ index over ``vectors`` (an ``(n, dim)`` array, memory-mapped or not): trained on an
    evenly spaced sample, then filled :data:`ADD_CHUNK` rows at a time."""
    import faiss

    n, dim = vectors.shape
    if n < MIN_VECTORS:
        raise ValueError(f"an ivfpq index needs at least {MIN_VECTORS} vectors to train its codebooks, got {n}: "
                         "use index_type 'flat' or 'hnsw'")
    if threads:
        faiss.omp_set_num_threads(threads)
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, settings.nlist, settings.m, 8, faiss.METRIC_INNER_PRODUCT)
    # Enough for the lists and for each codebook's 256 centroids (39 a centroid, FAISS's floor), within the cap.
    wanted = min(MAX_TRAIN, max(TRAIN_PER_LIST * settings.nlist, 39 * 256))
    train = np.ascontiguousarray(vectors[_sample_rows(n, wanted)], dtype=np.float32)
    index.train(train)
    del train
    for start in range(0, n, ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[start:start + ADD_CHUNK], dtype=np.float32))
    index.nprobe = settings.nprobe
    if n >= LARGE_FROM:
        use_hnsw_quantizer(index)
    return index


#: The coarse quantizer's graph (:func:`use_hnsw_quantizer`): neighbours a centroid, the build's search width, and how
#: much wider than ``nprobe`` a query searches it. At 10M vectors (16,384 lists, nprobe 128), 1,000 real queries paired
#: (benchmarks/results/ivf_quantizer.json, one thread, 2-core Xeon): 4.64 ms p50 against the scan's 5.32 (0.88x),
#: recall@10 0.958 against 0.962; at 1M (4,096 lists) the graph was slower (1.10x): builds from LARGE_FROM use it.
HNSW_QUANTIZER_M = 32
HNSW_QUANTIZER_EF_CONSTRUCTION = 200
HNSW_QUANTIZER_WIDTH = 2


def use_hnsw_quantizer(index) -> None:
    """Find the lists a query visits with an HNSW graph over the lists' centroids instead of a scan of them all (at
    16,384 lists of 384 dimensions the scan reads 25 MB a query): FAISS's quantizer for large ``nlist``. Swapped in
    after the index is filled, so every vector sits in the list the exact scan assigned it; only searches use it."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    if hasattr(faiss.downcast_index(ivf.quantizer), "hnsw"):
        return
    graph = faiss.IndexHNSWFlat(ivf.d, HNSW_QUANTIZER_M, ivf.metric_type)
    graph.hnsw.efConstruction = HNSW_QUANTIZER_EF_CONSTRUCTION
    graph.add(ivf.quantizer.reconstruct_n(0, ivf.nlist))
    ivf.quantizer = graph
    ivf.own_fields = True  # the index frees the graph; Python must not as well
    graph.this.disown()
    set_nprobe(index, ivf.nprobe)


def set_nprobe(index, nprobe: int) -> None:
    """Visit ``nprobe`` lists a query; with an HNSW quantizer, search its graph :data:`HNSW_QUANTIZER_WIDTH` times
    as wide."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = nprobe
    quantizer = faiss.downcast_index(ivf.quantizer)
    if hasattr(quantizer, "hnsw"):
        quantizer.hnsw.efSearch = max(HNSW_QUANTIZER_WIDTH * nprobe, 16)


def search_reranked(index, vectors: np.ndarray, queries: np.ndarray, k: int, rerank: int):
    """The top ``k`` of each query by exact inner product among the index's ``max(rerank, k)`` candidates: rows
    (lists, best first; fewer when the lists visited hold fewer) and their scores."""
    depth = min(max(rerank, k), index.ntotal)
    _, candidates = index.search(np.ascontiguousarray(queries, dtype=np.float32), depth)
    rows, scores = [], []
    for query, found in zip(queries, candidates):
        found = np.unique(found[found >= 0])  # sorted: the rows are read from disk in file order
        exact = np.asarray(vectors[found], dtype=np.float32) @ query
        best = np.argsort(-exact, kind="stable")[:k]
        rows.append(found[best].tolist())
        scores.append(exact[best].tolist())
    return rows, scores


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int, chunk: int = ADD_CHUNK) -> np.ndarray:
    """Exact top-``k`` rows of each query over ``vectors`` read ``chunk`` rows at a time (memory flat in N), ordered by
    (score descending, row ascending)."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(vectors), chunk):
        block = np.asarray(vectors[start:start + chunk], dtype=np.float32)
        scores = np.hstack([best_scores, queries @ block.T])
        rows = np.hstack([best_rows, np.broadcast_to(np.arange(start, start + len(block)), (len(queries), len(block)))])
        best_scores, best_rows = _top_by_score_then_row(scores, rows, k)
    return best_rows


def _top_by_score_then_row(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each line's ``k`` best (score descending, row ascending). A partition first (a full sort of every chunk made a
    10M-vector pass of 1,000 queries ~18 min), then only the entries at or above the k-th score are ordered: a tie at
    rank k is settled by row, as a full sort would settle it."""
    if scores.shape[1] <= k:
        keep = np.lexsort((rows, -scores), axis=1)
        return np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    out_scores = np.empty((len(scores), k), dtype=scores.dtype)
    out_rows = np.empty((len(scores), k), dtype=rows.dtype)
    for line, (line_scores, line_rows) in enumerate(zip(scores, rows)):
        inside = np.flatnonzero(line_scores >= kth[line])
        keep = inside[np.lexsort((line_rows[inside], -line_scores[inside]))[:k]]
        out_scores[line], out_rows[line] = line_scores[keep], line_rows[keep]
    return out_scores, out_rows


def ivfpq_recall_at_10(index, vectors: np.ndarray, rerank: int, sample: int = 256) -> float | None:
    """The recall cost of the compressed search, measured as it is built: ``sample`` of the indexed vectors (evenly
    spaced) as queries, the share of each one's 10 nearest others (itself left out) that the re-ranked IVF-PQ search
    finds, against exact search over the full vectors. None below 11 vectors."""
    n = len(vectors)
    if n < 11:
        return None
    picked = _sample_rows(n, sample)
    queries = np.asarray(vectors[picked], dtype=np.float32)
    exact = exact_top(vectors, queries, 11)
    approx, _ = search_reranked(index, vectors, queries, 11, rerank)
    found = [len(set(e[e != row][:10].tolist()) & set([r for r in a if r != row][:10]))
             for row, e, a in zip(picked, exact, approx)]
    return round(float(np.mean(found)) / 10, 4)
