"""`taskret serve --workers N` (taskret.serve.workers): worker processes built from create_app's arguments."""

from __future__ import annotations

import json

import httpx
import psutil
import pytest

from taskret.retrieval.index import LazyRecords
from taskret.serve import workers

from .test_serve_process import running_server


def test_two_workers_serve(bm25_index):
    with running_server(bm25_index, args=("--workers", "2")) as url:
        for query, first in (("play some jazz", "music"), ("what is the weather in paris", "weather")):
            body = httpx.post(f"{url}/retrieve", json={"query": query, "k": 2}, timeout=30).json()
            assert body["ids"][0] == first and len(body["texts"]) == 2
        assert httpx.get(f"{url}/health", timeout=30).json()["n"] == 8
        port = url.rsplit(":", 1)[1]
        server = next(p for p in psutil.process_iter(["cmdline"])
                      if "taskret.cli" in (p.info["cmdline"] or ()) and port in (p.info["cmdline"] or ()))
        assert len(server.children()) >= 2  # uvicorn's parent and its worker processes, sharing one socket


def test_each_worker_builds_the_app_from_create_apps_arguments(shared_bm25_index, monkeypatch):
    monkeypatch.setenv(workers.APP_KWARGS_ENV, json.dumps({"index_dir": str(shared_bm25_index), "token_budget": 300}))
    app = workers.app()
    assert app.state.index.retriever.mmap  # workers map the index's files by default
    assert isinstance(app.state.index.records, LazyRecords)  # its texts too: read when a result needs them
    from fastapi.testclient import TestClient

    assert TestClient(app).get("/health").json()["token_budget"] == 300
    monkeypatch.setenv(workers.APP_KWARGS_ENV, json.dumps({"index_dir": str(shared_bm25_index), "mmap": False}))
    assert not workers.app().state.index.retriever.mmap


def test_the_factory_says_what_it_needs(monkeypatch):
    monkeypatch.delenv(workers.APP_KWARGS_ENV, raising=False)
    with pytest.raises(RuntimeError, match="TASKRET_SERVE_APP_KWARGS"):
        workers.app()


def test_worker_connections_get_tcp_nodelay(monkeypatch):
    # A worker's inherited socket says proto 0, so asyncio leaves Nagle on; the protocol turns it off per connection.
    import socket

    monkeypatch.setattr(workers._HTTPProtocol, "connection_made", lambda self, transport: None)
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            assert not accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

            class Transport:
                def get_extra_info(self, name):
                    return accepted if name == "socket" else None

            workers.NoDelayProtocol.connection_made(object.__new__(workers.NoDelayProtocol), Transport())
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
