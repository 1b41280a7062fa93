"""Dense retrieval: sentence embeddings in a FAISS inner-product index.

One class serves SBERT (one encoder for queries and examples) and learned dual encoders such as
EPR's (a query encoder and an example encoder), since only the encoders differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..data import Example
from ..models import pick_device, resolve_model
from .base import Retriever, example_text


def load_encoder(name_or_path: str, device: str | None = None):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model(name_or_path)), device=pick_device(device))


class DenseRetriever(Retriever):
    name = "dense"

    def __init__(self, encoder: str = "minilm-l6", query_encoder: str | None = None, field: str = "input",
                 batch_size: int = 64, device: str | None = None):
        super().__init__()
        example_text(Example("", "", ""), field)
        self.encoder_name = encoder
        self.query_encoder_name = query_encoder
        self.field = field
        self.batch_size = batch_size
        self.device = device
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
        model = self._encoder(name)
        encode = model.encode_query if queries else model.encode_document
        vectors = encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _index_texts(self, texts: list[str]) -> None:
        import faiss

        vectors = self.encode(texts)
        self._index = faiss.IndexFlatIP(vectors.shape[1])
        self._index.add(vectors)

    def _search(self, queries: Sequence[str], k: int):
        scores, rows = self._index.search(self.encode(queries, queries=True), k)
        return rows.tolist(), scores

    def config(self) -> dict:
        return {"encoder": self.encoder_name, "query_encoder": self.query_encoder_name, "field": self.field,
                "batch_size": self.batch_size}

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


class SBERTRetriever(DenseRetriever):
    """The EPR paper's SBERT baseline: MiniLM embeddings of the inputs."""

    name = "sbert"
