"""Micro-batching (taskret.serve.batching): concurrent searches share one retriever call, and each request gets
exactly what a call of its own would give."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from taskret.retrieval import BM25Retriever
from taskret.serve.app import create_app
from taskret.serve.batching import BatchedSearch

from ..retrieval.builders import QUERIES, assert_same_results, big_pool

# Distinct words per example: BM25 scores without ties, so that the order of every result is defined.
POOL = [type(e)(e.id, f"{e.input} word{int(e.id[1:])} " + " ".join(f"w{int(e.id[1:]) * 3 + j}" for j in range(3)),
                e.output) for e in big_pool(120)]
REQUESTS = [(f"example number {i} about topic {i % 7} word{i} w{i * 3}", 1 + i % 9) for i in range(0, 120, 5)] + [
    (query, k) for query, k in zip(QUERIES, (2, 10, 4))]


@pytest.fixture(scope="module")
def retriever():
    return BM25Retriever().index(POOL)


class Gated:
    """A search that holds its first call until released, so that the requests made meanwhile queue up; records
    each call's batch."""

    def __init__(self, retriever):
        self.retriever = retriever
        self.calls: list[tuple[int, int]] = []
        self.first = threading.Event()
        self.release = threading.Event()

    def __call__(self, texts, k):
        self.calls.append((len(texts), k))
        self.first.set()
        self.release.wait(30)
        return self.retriever.retrieve(texts, k=k)


def test_concurrent_requests_get_exactly_what_single_calls_give(retriever):
    gated = Gated(retriever)
    search = BatchedSearch(gated)
    with ThreadPoolExecutor(len(REQUESTS)) as pool:
        first = pool.submit(search, [REQUESTS[0][0]], REQUESTS[0][1])
        assert gated.first.wait(30)
        rest = [pool.submit(search, [query], k) for query, k in REQUESTS[1:]]
        while search._queue.qsize() < len(rest):  # every other request is waiting for the running one
            threading.Event().wait(0.01)
        gated.release.set()
        answers = [first.result(30)] + [future.result(30) for future in rest]
    assert gated.calls[0] == (1, REQUESTS[0][1])
    assert gated.calls[1] == (len(REQUESTS) - 1, max(k for _, k in REQUESTS[1:]))  # one call for all the others
    assert search.batches == 2 and search.queries == len(REQUESTS)
    for (query, k), answer in zip(REQUESTS, answers):
        assert len(answer.ids[0]) == k
        assert_same_results(answer, retriever.retrieve([query], k=k))


def test_batches_are_bounded_and_answered_in_order(retriever):
    gated = Gated(retriever)
    search = BatchedSearch(gated, max_batch=4)
    with ThreadPoolExecutor(12) as pool:
        first = pool.submit(search, ["jazz"], 1)
        assert gated.first.wait(30)
        rest = [pool.submit(search, [query], k) for query, k in REQUESTS[:10]]
        while search._queue.qsize() < len(rest):
            threading.Event().wait(0.01)
        gated.release.set()
        first.result(30)
        answers = [future.result(30) for future in rest]
    assert [size for size, _ in gated.calls] == [1, 4, 4, 2]
    for (query, k), answer in zip(REQUESTS[:10], answers):
        assert_same_results(answer, retriever.retrieve([query], k=k))


def test_awaited_requests_are_batched_with_each_other(retriever):
    calls = []

    def search_fn(texts, k):
        calls.append(len(texts))
        return retriever.retrieve(texts, k=k)

    search = BatchedSearch(search_fn)

    async def many():
        return await asyncio.gather(*(search.async_call([query], k) for query, k in REQUESTS))

    answers = asyncio.run(many())
    assert calls == [len(REQUESTS)]  # one call: every request reached the batcher in the same turn of the loop
    for (query, k), answer in zip(REQUESTS, answers):
        assert_same_results(answer, retriever.retrieve([query], k=k))


def test_a_failing_request_fails_alone(retriever):
    gated = Gated(retriever)

    def search_fn(texts, k):
        if "poison" in texts:
            raise ValueError("cannot search poison")
        return gated(texts, k)

    search = BatchedSearch(search_fn)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(search, ["jazz"], 1)
        assert gated.first.wait(30)
        good, bad = pool.submit(search, [QUERIES[0]], 3), pool.submit(search, ["poison"], 3)
        while search._queue.qsize() < 2:
            threading.Event().wait(0.01)
        gated.release.set()
        first.result(30)
        assert_same_results(good.result(30), retriever.retrieve([QUERIES[0]], k=3))
        with pytest.raises(ValueError, match="cannot search poison"):
            bad.result(30)
    assert_same_results(search([QUERIES[1]], 2), retriever.retrieve([QUERIES[1]], k=2))  # and it goes on
    with pytest.raises(ValueError, match="k must be at least 1"):
        search(["x"], 0)


def test_the_service_searches_through_the_batcher(shared_bm25_index):
    app = create_app(shared_bm25_index)
    assert isinstance(app.state.first_stage, BatchedSearch)
    client = TestClient(app)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda q: client.post("/retrieve", json={"query": q, "k": 2}).json(), QUERIES * 4))
    expected = app.state.index.retriever.retrieve(QUERIES, k=2).ids
    assert [a["ids"] for a in answers] == expected * 4
    assert app.state.first_stage.queries == len(answers)
