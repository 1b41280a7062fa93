"""The service tests serve the index folders of tests/retrieval/conftest.py."""

from __future__ import annotations

from ..retrieval.conftest import bm25_index, shared_bm25_index  # noqa: F401 - fixtures
