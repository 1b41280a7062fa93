"""``taskret serve --workers N``: N uvicorn worker processes, each with the app :func:`~taskret.serve.app.create_app`
builds, sharing one listening socket.

One Python process serves one request's Python at a time (the GIL), so a second core needs a second process.
uvicorn starts its workers as fresh processes (spawned, not forked) that import an app by name: :func:`app`, a
factory (``uvicorn.run("taskret.serve.workers:app", factory=True)``) that reads ``create_app``'s keyword arguments
from the environment variable :data:`APP_KWARGS_ENV` as JSON, so that ``create_app``'s arguments stay the one way
configuration enters, for one worker or many. Each worker loads the index memory-mapped (``mmap=True``): bm25s's
arrays, a FAISS index and the texts (items.jsonl, each record parsed when a result needs it:
:class:`~taskret.retrieval.index.LazyRecords`) are then one copy in the page cache, whatever the number of workers; a
dense encoder's weights and the Python objects are each worker's own (``benchmarks/serve/serve_load.py`` measures RSS per
worker).

Each worker's math libraries (torch, FAISS's OpenMP) get ``cores / N`` threads (``OMP_NUM_THREADS``, unless it is set
already): N workers with a thread per core each would fight over the cores.

The workers speak HTTP through :class:`NoDelayProtocol`, which sets ``TCP_NODELAY`` on every connection: a worker
inherits the listening socket with its protocol number lost (``proto`` 0), so asyncio, which sets ``TCP_NODELAY`` only
on sockets that say TCP, leaves Nagle's algorithm on, and each answer (headers and body written apart) waited for the
client's delayed ACK: every request took ~44 ms with 2 workers, ~2 ms with 1 (wrk, 4 connections, GET /health).

Each worker gives tqdm a thread lock (:func:`thread_lock_for_bars`), so that stopping the server leaves no
multiprocessing semaphore behind (Python's resource tracker warned of one per worker).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

try:  # the protocol uvicorn's "auto" picks: httptools where installed, else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HTTPProtocol
except ImportError:
    from uvicorn.protocols.http.h11_impl import H11Protocol as _HTTPProtocol

#: The environment variable holding ``create_app``'s keyword arguments (JSON) for each worker.
APP_KWARGS_ENV = "TASKRET_SERVE_APP_KWARGS"


class NoDelayProtocol(_HTTPProtocol):
    """uvicorn's HTTP protocol with ``TCP_NODELAY`` set on each connection (module docstring)."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # not a TCP socket after all
                pass
        super().connection_made(transport)


def default_workers() -> int:
    """One worker per core (what ``--workers`` defaults to)."""
    return os.cpu_count() or 1


def app():
    """The app of one worker: ``create_app(**json.loads($TASKRET_SERVE_APP_KWARGS))``, the index memory-mapped
    unless the arguments say ``"mmap": false``."""
    from .app import create_app

    raw = os.environ.get(APP_KWARGS_ENV)
    if not raw:
        raise RuntimeError(f"taskret.serve.workers:app needs ${APP_KWARGS_ENV}: create_app's keyword arguments as "
                           "JSON (`taskret serve --workers N` sets it)")
    kwargs = json.loads(raw)
    kwargs.setdefault("mmap", True)
    thread_lock_for_bars()
    return create_app(**kwargs)


def thread_lock_for_bars() -> None:
    """Give tqdm a thread lock before any bar exists. Its default lock holds a multiprocessing semaphore (bm25s
    tokenizes each query under a hidden bar, so every worker made one), which a worker stopped by a signal never
    releases: "2 leaked semaphore objects" at every server stop. A worker's bars are its own: no process shares them."""
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def serve_workers(kwargs: dict[str, Any], workers: int, *, host: str, port: int, log_level: str = "warning",
                  access_log: bool = False) -> None:
    """Serve ``create_app(**kwargs)`` (JSON-serialisable arguments; ``index_dir`` a path) from ``workers`` processes,
    until stopped. The index is checked here first, so that a partial or missing index fails with its message
    instead of as N workers failing to start."""
    import uvicorn

    from ..retrieval.index import load_index

    kwargs = {**kwargs, "index_dir": str(Path(kwargs["index_dir"]))}
    index = load_index(kwargs["index_dir"], mmap=True)  # raises InvalidIndex, naming the file
    if kwargs.get("query_encoder"):  # a query encoder the index cannot take fails here, not in every worker
        index.use_query_encoder(kwargs["query_encoder"])
    del index
    os.environ[APP_KWARGS_ENV] = json.dumps(kwargs)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, default_workers() // workers)))
    uvicorn.run("taskret.serve.workers:app", factory=True, workers=workers, host=host, port=port,
                log_level=log_level, access_log=access_log, http=NoDelayProtocol)
