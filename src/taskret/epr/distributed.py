"""EPR scoring spread over a Ray cluster: one actor per worker, each holding one LM.

The driver (the process running ``taskret epr score --ray ...``) keeps the resumable shard format of
:func:`taskret.epr.scoring.score_candidates`: it sends each pending shard's (prompt, target) pairs to an
idle actor, and writes the shard file itself, atomically, when the scores come back. So

- workers need the model but not the data, and no shared filesystem;
- the output is identical to a single-process run (a shard's batches depend only on its own pairs);
- a worker that dies (killed, OOM, node lost) loses only its in-flight shard, which is sent again to
  another actor; a replacement actor is started in its place, at most ``max_worker_restarts`` times;
- a driver that dies loses nothing written: restarted with the same command it resumes from the shards.

Usage (a cluster started with ``ray start --head`` and ``ray start --address=HEAD:6379`` on each node)::

    taskret epr score --task mtop --candidates cands.jsonl --lm smollm2-135m --out scoring --ray auto
    # on GPU nodes one actor per GPU is the default (num_gpus=1 each):
    taskret epr score ... --ray ray://head:10001 --ray-workers 8 --ray-gpus-per-worker 1

``--ray local`` starts a private Ray instance on this machine instead.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..backends.base import BackendError, LMBackend, TargetScore
from ..backends.ray_pool import (  # noqa: F401 (re-exported)
    RayActorPool,
    RayOptions,
    import_ray,
    root_cause,
    start_local_cluster,
    worker_died_errors,
)
from ..data import Example
from ..formats import OutputFormat
from ..io import write_jsonl
from ..progress import progress_bar
from .scoring import PendingShard, score_candidates, shard_pairs, shard_rows

logger = logging.getLogger(__name__)

__all__ = ["RayOptions", "RayScoring", "run_scoring", "start_local_cluster"]


class _ScoringWorker:
    """The actor: loads one LM and scores lists of pairs with it."""

    def __init__(self, lm_spec: str, lm_options: dict, threads: int | None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        from ..backends.base import make_backend

        self.lm = make_backend(lm_spec, **lm_options)

    def info(self) -> dict:
        import ray

        from ..models import machine_info

        return {"name": self.lm.name, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "runtime": {**machine_info(), **self.lm.runtime()}}

    def score(self, prefixes: list[str], prompts: list[str], targets: list[str]) -> list[tuple[float, int]]:
        return [(s.logprob, s.n_tokens) for s in self.lm.score_shared(prefixes, prompts, targets)]


class RayScoring(RayActorPool):
    """A shard runner for :func:`~taskret.epr.scoring.score_candidates` on Ray actors that each hold one LM
    (:class:`~taskret.backends.ray_pool.RayActorPool`: ``address``, ``workers``, GPUs and CPUs per worker).
    Use as a context manager: entering starts the actors (and fails early if the LM does not load), leaving
    stops them."""

    worker = _ScoringWorker
    model_kind = "the scoring LM"

    def runtime(self) -> dict:
        """Where the first worker's LM computes (machine, engine, dtype), for the scoring's record."""
        infos = getattr(self, "worker_info", None) or [{}]
        return {**infos[0].get("runtime", {}), "workers": len(self.actors)}

    # -- the shard runner ------------------------------------------------------------------------

    def __call__(self, pending: Sequence[PendingShard], examples: Mapping[str, Example], fmt: OutputFormat,
                 progress: Callable[[int], None] | None = None) -> None:
        ray = import_ray()
        if not self.actors:
            raise BackendError("RayScoring is used outside its `with` block")
        queue = deque(pending)
        attempts: dict[int, int] = {}
        idle = list(self.actors)
        in_flight: dict = {}  # ObjectRef -> (actor, shard)
        restarts = 0
        while queue or in_flight:
            while queue and idle:
                actor, shard = idle.pop(), queue.popleft()
                prefixes, prompts, targets = shard_pairs(shard[1], examples, fmt)
                in_flight[actor.score.remote(prefixes, prompts, targets)] = (actor, shard)
            if not in_flight:
                raise BackendError(f"no Ray worker is left to score {len(queue)} shard(s)")
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            actor, shard = in_flight.pop(ref)
            number, rows, path = shard
            try:
                scores = ray.get(ref)
            except worker_died_errors(ray) as err:
                # The worker died with the shard: score it again on another actor.
                attempts[number] = attempts.get(number, 0) + 1
                self.stats["worker_failures"] += 1
                self.stats["retried_shards"] += 1
                if attempts[number] >= self.max_shard_attempts:
                    raise BackendError(f"shard {number} failed on {attempts[number]} Ray workers; last: "
                                       f"{root_cause(err)}") from err
                logger.warning("Ray worker died scoring shard %d (%s); scoring it again", number,
                               type(err).__name__)
                self._forget(actor, idle)
                if restarts < self.max_worker_restarts:
                    restarts += 1
                    replacement = self._start_actor()
                    self.actors.append(replacement)
                    idle.append(replacement)
                queue.appendleft(shard)
                continue
            except ray.exceptions.RayTaskError as err:
                # The scoring itself raised (bad input, server error): the same on any worker, so stop.
                raise root_cause(err) from None
            write_jsonl(path, shard_rows(rows, [TargetScore(lp, n) for lp, n in scores]))
            self.stats["shards"] += 1
            if progress:
                progress(len(scores))
            idle.append(actor)


def run_scoring(candidate_rows: Sequence[dict], examples: Mapping[str, Example], lm: str, out_dir: str | os.PathLike,
                *, lm_options: Mapping[str, Any] | None = None, fmt: OutputFormat = OutputFormat(),
                shard_size: int = 32, ray: RayOptions | None = None, device: str | None = None,
                dtype: str | None = None, load: Callable[[str, dict], LMBackend] | None = None,
                progress: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """:func:`score_candidates` with the LM named by the spec ``lm`` (+ ``lm_options``) and a progress bar:
    the one entry of ``taskret epr score`` and ``taskret epr run``.

    With ``ray`` the shards are scored on Ray actors (:class:`~taskret.epr.distributed.RayScoring`), each
    loading the LM itself; otherwise in this process, the LM loaded by ``load(lm, options)`` (a caller that
    keeps its LMs, like the pipeline, passes its own) or else loaded here and closed when done. ``device``
    and ``dtype`` go to the backends that take them; ``say`` hears how many Ray workers started."""
    from ..backends.base import backend_options, load_lm, parse_spec

    options = dict(lm_options or {})
    n_pairs = sum(len(row["candidates"]) for row in candidate_rows)
    if ray is not None:
        # As load_lm does: device and dtype only for the backends that take them, --lm-option on top.
        known = backend_options(parse_spec(lm)[0])
        common = {k: v for k, v in {"device": device, "dtype": dtype}.items() if k in known and v is not None}
        with RayScoring(lm, {**common, **options}, address=ray.address, workers=ray.workers,
                        gpus_per_worker=ray.gpus_per_worker, cpus_per_worker=ray.cpus_per_worker) as runner:
            if say is not None:
                say(f"scoring on Ray: {len(runner.actors)} workers x {runner.model_name}")
            with progress_bar(n_pairs, "scoring", unit="pairs", enabled=progress) as advance:
                return score_candidates(candidate_rows, examples, runner.model_name, out_dir, fmt=fmt,
                                        shard_size=shard_size, progress=advance, shard_runner=runner)
    model = load(lm, options) if load is not None else load_lm(lm, options, device=device, dtype=dtype)
    try:
        with progress_bar(n_pairs, "scoring", unit="pairs", enabled=progress) as advance:
            return score_candidates(candidate_rows, examples, model, out_dir, fmt=fmt, shard_size=shard_size,
                                    progress=advance)
    finally:
        if load is None:
            model.close()
