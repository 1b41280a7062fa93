"""Concurrent searches answered by one retriever call (micro-batching), for the service.

bm25s and FAISS answer a batch far faster per query than one query at a time (Break's BM25 index: ~0.3 ms a
query in a batch of 32 against ~0.5 ms alone; a MiniLM encoder more so), and the per-call overhead (tokenizer and
progress-bar set-up, a dense encoder's forward pass) is paid once per batch. :class:`BatchedSearch` wraps a search
function ``search(texts, k) -> RetrievalResult``: the requests that arrive while a batch runs wait in a queue, and
the next single call ``search(all their texts, k=the largest k)`` answers them all, each cut to its own ``k``. Under
no load a request runs alone, at once: there is no waiting window to fill a batch.

Two ways in, for the two kinds of endpoint:

- ``await search.async_call(texts, k)`` from a coroutine: the requests of one event loop that reach it in one turn
  of the loop are searched by one call, made on the loop's own thread, in a callback scheduled for the loop's next
  turn (by then every request the loop read at once has queued). No thread is woken and none waits: profiling the
  service under wrk showed a thread per request (FastAPI's threadpool for a ``def`` endpoint) spending more CPU
  on handing the GIL between 32 threads than on searching, and every hand-over waits for the OS scheduler on a busy
  machine. The loop does nothing else while it searches, which costs nothing on a CPU-bound process.
- ``search(texts, k)`` from any thread (a ``def`` endpoint): the calling thread blocks while a searching thread of
  the batcher's own answers it, with the other threads' requests that came meanwhile.

A lock keeps it to one search at a time, whichever way a request came: bm25s, FAISS and tokenizers are not all
safe to share between threads.

A batch that fails is retried one request at a time, so that one bad request fails alone. Results of equal score
have no defined order: a request for k results may see ties at its k-th place broken otherwise than a call with
that k alone would (never a different score).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Callable, NamedTuple, Sequence, Union

from ..retrieval.base import RetrievalResult
from ..retrieval.sharded_index import partial

logger = logging.getLogger(__name__)

SearchFunction = Callable[[list[str], int], RetrievalResult]
#: Queries in one retriever call at most: a larger backlog is served by several calls, in order.
DEFAULT_MAX_BATCH = 64


class _Call(NamedTuple):
    texts: list[str]
    k: int
    future: Union[Future, asyncio.Future]  # both: done(), set_result(), set_exception()


class BatchedSearch:
    """``search(texts, k)`` (a retriever's first stage) called for many concurrent requests at once: see the
    module docstring. ``max_batch`` bounds the queries in one call."""

    def __init__(self, search: SearchFunction, max_batch: int = DEFAULT_MAX_BATCH, name: str = "taskret-search"):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.search = search
        self.max_batch = max_batch
        self.name = name
        self.batches = 0  # retriever calls made, and the queries they answered: what batching saved
        self.queries = 0
        self._search_lock = threading.Lock()
        # From threads: a queue that the searching thread (started on first use) empties.
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # From coroutines: per event loop (a test client may run several), the calls waiting for its next turn.
        self._waiting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Call]] = weakref.WeakKeyDictionary()

    def _submit(self, texts: Sequence[str], k: int) -> Future:
        if k < 1:
            raise ValueError("k must be at least 1")
        future: Future = Future()
        self._queue.put(_Call(list(texts), k, future))
        if self._thread is None:
            # Started on first use, not in __init__: an app that is built and never serves (a check, a test)
            # leaves no thread behind. Daemon: a stopping server does not wait for an idle searcher.
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                    self._thread.start()
        return future

    def __call__(self, texts: Sequence[str], k: int) -> RetrievalResult:
        """The top ``k`` of each text, as ``search(texts, k)`` gives them; blocks the calling thread."""
        return self._submit(texts, k).result()

    async def async_call(self, texts: Sequence[str], k: int) -> RetrievalResult:
        """The same, awaited on an event loop: searched on the loop's thread at its next turn, with every other
        request waiting by then."""
        if k < 1:
            raise ValueError("k must be at least 1")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting = self._waiting.setdefault(loop, [])
        if not waiting:  # the first to wait in this turn schedules the search
            loop.call_soon(self._search_waiting, loop)
        waiting.append(_Call(list(texts), k, future))
        return await future

    def _search_waiting(self, loop: asyncio.AbstractEventLoop) -> None:
        calls = [call for call in self._waiting.pop(loop, ()) if not call.future.done()]  # done: cancelled
        for start in range(0, len(calls), self.max_batch):  # max_batch calls at most (one query each, mostly)
            self._answer(calls[start:start + self.max_batch])

    # -- the searching thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            calls = [self._queue.get()]  # blocks until a request comes
            size = len(calls[0].texts)
            while size < self.max_batch:  # and takes whatever else is waiting, without waiting for more
                try:
                    call = self._queue.get_nowait()
                except queue.Empty:
                    break
                calls.append(call)
                size += len(call.texts)
            self._answer([c for c in calls if c.future.set_running_or_notify_cancel()])

    def _answer(self, calls: list[_Call]) -> None:
        if not calls:
            return
        texts = [text for call in calls for text in call.texts]
        try:
            result = self._search(texts, max(call.k for call in calls))
        except Exception as err:  # noqa: BLE001 - handed to the requests, never lost in this thread
            if len(calls) == 1:
                calls[0].future.set_exception(err)
                return
            logger.warning("a batch of %d searches failed (%s); retrying them one at a time", len(calls), err)
            for call in calls:
                self._answer_alone(call)
            return
        self.batches += 1
        self.queries += len(texts)
        start = 0
        for call in calls:
            rows = slice(start, start + len(call.texts))
            start = rows.stop
            # a sharded index's answer that lacks shards says so to every request of its batch
            call.future.set_result(partial(RetrievalResult(result.ids[rows], result.scores[rows]).head(call.k),
                                           getattr(result, "missing", ())))

    def _answer_alone(self, call: _Call) -> None:
        try:
            call.future.set_result(self._search(call.texts, call.k))
        except Exception as err:  # noqa: BLE001 - handed to the request
            call.future.set_exception(err)
        else:
            self.batches += 1
            self.queries += len(call.texts)

    def _search(self, texts: list[str], k: int) -> RetrievalResult:
        with self._search_lock:
            return self.search(texts, k)
