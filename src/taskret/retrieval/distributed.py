"""A corpus encoded on a Ray cluster: the shards of :mod:`taskret.retrieval.shards` spread over actors that each
hold the encoder (``taskret tart index --ray auto|local|ADDRESS``).

It is the actor pool EPR scoring runs on too (:class:`taskret.backends.ray_pool.RayActorPool`: connecting, sizing,
starting and replacing actors) with another worker: each actor builds the dense retriever from its config (encoder, dtype,
batch size) and returns a shard's vectors; the driver reads the corpus, sends each shard's texts to an idle actor
(a few shards ahead of the workers, never the whole corpus) and writes each shard file itself. So

- workers need the encoder (a registered name, or a model folder at the same path on every node), not the
  corpus, and no shared filesystem;
- a shard's vectors are what this machine would compute for it (the same texts in the same batches), so the
  index retrieves the same top 10 (tests/retrieval/test_ray_encoding.py: identical ids, scores within 1e-4);
- a worker that dies (killed, OOM, node lost) loses only its shard in flight, which is sent again to another
  actor; a replacement actor starts in its place;
- a driver that dies loses nothing written: the same command resumes from the shards.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Callable, Iterator

import numpy as np

from ..backends.base import BackendError
from ..backends.ray_pool import RayActorPool, RayOptions, import_ray, root_cause, worker_died_errors

logger = logging.getLogger(__name__)

__all__ = ["RayEncoding", "RayOptions"]


class _EncodingWorker:
    """The actor: builds one dense retriever (its encoder loaded once) and encodes shards of texts with it."""

    def __init__(self, encoder: str, config: dict, threads: int | None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        from .base import REGISTRY

        config = dict(config)
        self.retriever = REGISTRY[config.pop("retriever")](**config)
        self.retriever.encode_documents(["load the encoder now"])  # a model that does not load fails at start

    def info(self) -> dict:
        import ray

        return {"name": self.retriever.encoder_name, "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id()}

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.retriever.encode_documents(texts)


class RayEncoding(RayActorPool):
    """The shard runner of :func:`~taskret.retrieval.shards.encode_in_shards` on Ray actors (a context manager:
    entering starts them and fails early if the encoder does not load; leaving stops them). ``retriever`` and
    ``config``: the registry name and config of the dense retriever every actor builds; ``options``: where and how
    many (:class:`~taskret.backends.ray_pool.RayOptions`)."""

    worker = _EncodingWorker
    model_kind = "the encoder"

    def __init__(self, retriever: str, config: dict, options: RayOptions, ahead: int = 2, **kwargs):
        super().__init__(config["encoder"], {"retriever": retriever, **config}, address=options.address, workers=options.workers,
                         gpus_per_worker=options.gpus_per_worker, cpus_per_worker=options.cpus_per_worker, **kwargs)
        self.ahead = ahead  # shards sent per actor before its first result: the driver reads no further ahead

    def __call__(self, pending: Iterator[tuple[int, list[str]]],
                 advance: Callable[[int], None]) -> Iterator[tuple[int, np.ndarray]]:
        ray = import_ray()
        if not self.actors:
            raise BackendError("RayEncoding is used outside its `with` block")
        retry: deque = deque()
        attempts: dict[int, int] = {}
        in_flight: dict = {}  # ObjectRef -> (actor, (number, texts))
        load = {id(actor): 0 for actor in self.actors}

        def send() -> None:
            for actor in sorted(self.actors, key=lambda a: load[id(a)]):
                while load[id(actor)] < self.ahead:
                    shard = retry.popleft() if retry else next(pending, None)
                    if shard is None:
                        return
                    in_flight[actor.encode.remote(shard[1])] = (actor, shard)
                    load[id(actor)] += 1

        send()
        while in_flight:
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            actor, shard = in_flight.pop(ref)
            load[id(actor)] -= 1
            try:
                block = ray.get(ref)
            except worker_died_errors(ray) as err:
                self._redo(actor, shard, attempts, err, in_flight, retry, load)
            except ray.exceptions.RayTaskError as err:
                raise root_cause(err) from None  # the encoding itself failed: the same on any worker
            else:
                self.stats["shards"] += 1
                advance(len(shard[1]))
                yield shard[0], block
            send()
            if not in_flight and (retry or not self.actors):
                raise BackendError(f"no Ray worker is left to encode {len(retry)} shard(s)")

    def _redo(self, actor, shard, attempts: dict, err: BaseException, in_flight: dict, retry: deque,
              load: dict) -> None:
        """A worker died with ``shard``: queue it and the worker's other shards in flight for another actor, and
        start one replacement while restarts are left."""
        number = shard[0]
        tries = attempts[number] = attempts.get(number, 0) + 1
        for counter in ("worker_failures", "retried_shards"):
            self.stats[counter] += 1
        if tries >= self.max_shard_attempts:
            raise BackendError(f"shard {number} failed on {tries} Ray workers; last: {root_cause(err)}") from err
        logger.warning("Ray worker died encoding shard %d (%s); encoding it again", number, type(err).__name__)
        retry.append(shard)
        self._forget(actor, [])
        # Its other shards are sent again now, so that no failure of theirs comes back: waiting for Ray to fail each
        # would start a replacement for each, and a replacement that no free CPU can host waits for ever, with the
        # shards sent to it (or Ray may never fail a task of an actor that was given up on).
        for ref in [ref for ref, (owner, _) in in_flight.items() if owner is actor]:
            retry.append(in_flight.pop(ref)[1])
            self.stats["retried_shards"] += 1
            try:
                import_ray().cancel(ref)
            except Exception:  # nothing to cancel on a dead actor
                pass
        if self.stats["workers_started"] - self.workers < self.max_worker_restarts:
            replacement = self._start_actor()
            self.actors.append(replacement)
            load[id(replacement)] = 0
