"""Random demonstrations: the floor every learned method must clear."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from .base import Retriever


class RandomRetriever(Retriever):
    """Uniform random examples, seeded per query text so a rerun draws the same ones."""

    name = "random"

    def __init__(self, seed: int = 0):
        super().__init__()
        self.seed = seed

    @property
    def reads_instruction(self) -> bool:
        return False  # nor the query

    def _index_texts(self, texts: list[str]) -> None:
        pass  # random draws need only the ids

    def _search(self, queries: Sequence[str], k: int):
        rows, scores = [], np.zeros((len(queries), k), dtype=np.float32)
        for query in queries:
            digest = hashlib.sha256(f"{self.seed}\0{query}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            rows.append(rng.choice(len(self.ids), size=k, replace=False).tolist())
        return rows, scores

    def config(self) -> dict:
        return {"seed": self.seed}
