"""An index build's memory budget (``taskret tart index --memory-budget GIB``, ``taskret index --memory-budget``):
what the parts of a build that grow with the corpus may hold at once, and the choices that keep them within it.

A streamed build (:func:`~taskret.retrieval.index.index_documents`) already holds no texts: a dense encoder's
vectors go to shards on disk, BM25 is built in segments on disk (:mod:`~taskret.retrieval.bm25_segments`), an
IVF-PQ index is trained on a sample and filled in chunks (:mod:`~taskret.retrieval.ivfpq`). What still grows with
the corpus, and what the budget sets:

- **the dense index in memory**: a flat index holds every vector (4 bytes a dimension), HNSW the vectors and its
  graph. ``index_type="auto"`` builds HNSW only while vectors and graph fit :data:`DENSE_SHARE` of the budget
  and IVF-PQ past that (48 bytes a vector in memory, the full vectors memory-mapped from disk); a flat or HNSW index
  asked for by name that would not fit is refused once the first shard of vectors tells their size, naming the
  budget it needs (that shard is kept: the next run, with another type or budget, resumes from it);
- **BM25's segment and merge sizes**: :data:`~taskret.retrieval.bm25_segments.SEGMENT_DOCS` documents a segment
  and :data:`~taskret.retrieval.bm25_segments.MERGE_PAIRS` pairs a merge range at the default 8 GiB, in proportion
  to the budget (a smaller budget: more segments, more merge passes, the same index).

Not counted, and small beside the budget up to tens of millions of documents: the ids (about 70 bytes each in
Python), BM25's vocabulary, the encoder (about 100 MB for MiniLM) and a shard of vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bm25_segments import MERGE_PAIRS, SEGMENT_DOCS

__all__ = ["DEFAULT_GIB", "DENSE_SHARE", "HNSW_GRAPH_BYTES_PER_LINK", "MemoryBudget", "OverBudget", "dense_bytes"]

#: The budget when none is given: a 16 GiB laptop's half.
DEFAULT_GIB = 8.0
#: The share of the budget a dense index in memory may take; the rest is BM25's merge, the encoder and the ids. At the
#: default 8 GiB and MiniLM's 384 dimensions it moves ``auto`` from HNSW to IVF-PQ at about 2M vectors: HNSW's index file
#: was 2.5 GB at 1M MiniLM vectors (``benchmarks/results/scale.json``).
DENSE_SHARE = 0.58
#: Bytes of HNSW's graph per vector and link (``hnsw_m``): 30 x 32 links + 4 x 384 dimensions = 2,496 bytes a vector,
#: the 2.5 GB per million measured.
HNSW_GRAPH_BYTES_PER_LINK = 30


class OverBudget(ValueError):
    """A dense index asked for by name that would not fit the build's memory budget."""


def dense_bytes(index_type: str, n: int, dim: int, hnsw_m: int) -> int:
    """Bytes a ``flat`` or ``hnsw`` index of ``n`` vectors of ``dim`` dimensions holds in memory."""
    per_vector = 4 * dim + (HNSW_GRAPH_BYTES_PER_LINK * hnsw_m if index_type == "hnsw" else 0)
    return n * per_vector


@dataclass(frozen=True)
class MemoryBudget:
    """``gib``: what a build's corpus-sized parts may hold at once, in GiB (module docstring)."""

    gib: float = DEFAULT_GIB

    def __post_init__(self) -> None:
        if not self.gib > 0:
            raise ValueError(f"a memory budget is a positive number of GiB, got {self.gib}")

    @property
    def bytes(self) -> int:
        return int(self.gib * 2**30)

    @property
    def bm25_segment_docs(self) -> int:
        """Documents per BM25 segment: :data:`SEGMENT_DOCS` at the default budget, in proportion (10,000 at least)."""
        return max(10_000, int(SEGMENT_DOCS * self.gib / DEFAULT_GIB))

    @property
    def bm25_merge_pairs(self) -> int:
        """(term, document) pairs a BM25 merge range holds: :data:`MERGE_PAIRS` at the default, in proportion."""
        return max(500_000, int(MERGE_PAIRS * self.gib / DEFAULT_GIB))

    def dense_fits(self, index_type: str, n: int, dim: int, hnsw_m: int) -> bool:
        return dense_bytes(index_type, n, dim, hnsw_m) <= DENSE_SHARE * self.bytes

    def check_dense(self, index_type: str, n: int, dim: int, hnsw_m: int) -> None:
        """Refuse a ``flat`` or ``hnsw`` index over ``n`` vectors that would not fit (:class:`OverBudget`)."""
        if index_type in ("flat", "hnsw") and not self.dense_fits(index_type, n, dim, hnsw_m):
            need = dense_bytes(index_type, n, dim, hnsw_m) / DENSE_SHARE / 2**30
            raise OverBudget(f"a {index_type} index of {n:,} vectors of {dim} dimensions needs a memory budget of "
                             f"{need:.1f} GiB (--memory-budget {self.gib:g} GiB now); build index_type=ivfpq (or auto, "
                             "which picks it) or raise the budget")
