"""Index folders for the index and service tests: BM25 over the shared example pool (no model needed)."""

from __future__ import annotations

import pytest

from taskret.retrieval import BM25Retriever
from taskret.retrieval.index import save_index


@pytest.fixture
def bm25_index(tmp_path, pool_examples):
    return save_index(tmp_path / "index", BM25Retriever().index(pool_examples), pool_examples, task="pool",
                      retriever_spec="bm25")


@pytest.fixture(scope="module")
def shared_bm25_index(tmp_path_factory, pool_examples):
    """One index for tests that only read it."""
    folder = tmp_path_factory.mktemp("served") / "index"
    return save_index(folder, BM25Retriever().index(pool_examples), pool_examples, task="pool", retriever_spec="bm25")
