"""``benchmarks/scale/scale.py``'s reading of a ``docs-fast`` index: its dense component, through the hybrid."""

from __future__ import annotations

import sys
from pathlib import Path

from taskret.data import Example
from taskret.retrieval import BM25Retriever, DenseRetriever, HybridRetriever

SCALE = Path(__file__).resolve().parents[2] / "benchmarks" / "scale"


def test_the_dense_component_of_a_saved_hybrid_loads_with_the_hybrids_ids(tiny_bert_dir, tmp_path):
    # A component's meta.json holds no ids (the hybrid's are its): loading it alone fails; through the hybrid, not.
    saved = list(sys.path)
    sys.path[:0] = [str(SCALE), str(SCALE.parent)]
    try:
        import scale
    finally:
        sys.path[:] = saved
    pool = [Example(f"d{i}", f"document {i} about topic {i % 3}", "") for i in range(12)]
    dense = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32")
    HybridRetriever([BM25Retriever(), dense]).index(pool).save(tmp_path / "docs-fast")
    loaded = scale.docs_fast_dense(tmp_path / "docs-fast", mmap=True)
    assert isinstance(loaded, DenseRetriever) and loaded.ids == [e.id for e in pool]
    query = ["document 5 about topic 2"]
    rows = dense.retrieve(query, k=3).ids[0]  # a component in a hybrid indexes rows
    assert loaded.retrieve(query, k=3).ids[0] == [pool[int(row)].id for row in rows]
