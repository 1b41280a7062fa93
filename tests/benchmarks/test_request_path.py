"""``benchmarks/serve/request_path.py``'s sorting of py-spy's samples and its paired interval."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve" / "request_path.py"


@pytest.fixture(scope="module")
def request_path():
    saved = list(sys.path)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import request_path
    finally:
        sys.path[:] = saved
    return request_path


LOOP = ["Runner.run (asyncio/runners.py:118)", "RequestResponseCycle.run_asgi (uvicorn/protocols/http/httptools_impl.py:4)"]
ROUTE = [*LOOP, "FastAPI.__call__ (fastapi/applications.py:1)", "get_request_handler.<locals>.app (fastapi/routing.py:3)"]


@pytest.mark.parametrize("stack, part", [
    # the batcher's search, run in the loop's callback: the first stage, wherever it is called from
    ([*LOOP, "BatchedSearch._search_waiting (taskret/serve/batching.py:9)", "BM25Retriever._search "
      "(taskret/retrieval/bm25.py:5)", "_retrieve_numba_functional (bm25s/numba/retrieve_utils.py:7)"], "first stage"),
    ([*LOOP, "BatchedSearch._search_waiting (taskret/serve/batching.py:9)"], "batcher"),
    # the endpoint's own frames, and the records it reads (retrieval/index.py is not the first stage)
    ([*ROUTE, "create_app.<locals>.retrieve (taskret/serve/app.py:460)", "LazyRecords.take "
      "(taskret/retrieval/index.py:500)", "loads (json/__init__.py:2)"], "answer"),
    ([*ROUTE, "solve_dependencies (fastapi/dependencies/utils.py:5)"], "request parsing and validation"),
    ([*ROUTE, "Request.body (starlette/requests.py:2)"], "request parsing and validation"),
    (ROUTE, "HTTP, routing, event loop"),
])
def test_a_sample_goes_to_the_part_of_the_request_it_is_in(request_path, stack, part):
    assert request_path.classify(stack) == part


def test_waiting_threads_are_told_from_busy_ones(request_path):
    waiting = request_path.WAITING
    assert waiting.search("Condition.wait (threading.py:355)")
    assert waiting.search("Connection._recv (multiprocessing/connection.py:395)")
    assert not waiting.search("Runner.run (asyncio/runners.py:118)")  # uvloop's native work is the loop's
    assert not waiting.search("BM25.get_scores (bm25s/__init__.py:3)")


def test_the_change_is_the_rounds_paired_ratio(request_path):
    steady = request_path.paired_ratio([200, 220, 180], [100, 110, 90])
    assert steady["ratio"] == 2.0 and steady["ci95"] == [2.0, 2.0]  # the same ratio in every round: no spread
    noisy = request_path.paired_ratio([110, 95, 130, 100], [100, 100, 100, 100])
    assert noisy["ci95"][0] < 1 < noisy["ci95"][1] and noisy["rounds"] == [1.1, 0.95, 1.3, 1.0]
