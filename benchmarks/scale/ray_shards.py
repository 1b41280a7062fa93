"""Do BM25 shards on a multi-node Ray cluster answer as the single index does, and what does serving them cost
(issue 78)? The corpus cut into shards, each indexed by a Ray task with the whole corpus's statistics
(`taskret tart index-shards --ray`: taskret.retrieval.sharded_index.index_corpus_shards) on a real local cluster
(``ray start --head`` and worker nodes, each a process of its own, one CPU each), then searched by one actor per
shard on its own node (``RayShards``), and served as `taskret serve --shards CONFIG` with the cluster's address.
Measured:

1. build: seconds, and the peak of the summed RSS of the driver and every process of the cluster (sampled every
   second; RSS counts the object store's shared pages once per process that maps them, so it overstates);
2. the merged top 10 of ``--queries`` real queries against the single index's (bm25_shards.py's one-shard build of
   the same corpus, its own child): the share of queries with the same ten ids in the same order, the same up to the
   order of tied scores, and the largest score difference; one query at a time through the actors (p50 / p99 ms)
   beside the single index's on one thread;
3. served: ``/retrieve`` under wrk (serve_load.py's server and client, each request the next real query, k=10),
   the single index (`taskret serve --index`) against the shards over Ray, requests/s and p50 / p99, each server
   having first answered 20 requests one at a time (the seconds they took are kept: the actors load their shards
   then); each shard actor's resident memory after the load;
4. a killed shard: one actor's process killed (SIGKILL); without ``allow_partial`` the search raises ShardFailed
   naming it; with it, the answer comes from the others and names it missing, none of its documents in the top 10;
   the service (``allow_partial``) answers marked ``missing_shards``.

Every process shares the machine's cores: on 2 cores three nodes, the service and wrk contend, so the served numbers
are a floor for shards on machines of their own. Dense shards (no shared statistics) are not run here yet: they
need the corpus's real vectors (scale.py's 1M build).

    python benchmarks/scale/ray_shards.py --data-dir ../shared/data --size 1000000 --shards 3 \\
        --work runs/ray_shards --out benchmarks/results/ray_shards.json
    python benchmarks/scale/ray_shards.py --size 20000 --queries 100 --serve-duration 5 --work /tmp/rs --out /tmp/rs.json

A build whose ``shards.json`` exists under ``--work`` is searched again without being built again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_shards.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
sys.path.insert(0, str(HERE.parent / "serve"))  # serve_load.py: the server and wrk
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_shards import build, split_corpus  # noqa: E402
from scale import K, in_child, percentiles, real_queries, real_sources, write_corpus  # noqa: E402

WARM_UP_QUERIES = 20  # /retrieve requests answered one at a time before each wrk run
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}


class PeakMemory:
    """The peak, sampled every ``every`` seconds, of the summed RSS (GiB) of this process and every process of the
    Ray cluster at ``address`` (:func:`cluster_processes`)."""

    def __init__(self, address: str, every: float = 1.0):
        self.address, self.every, self.peak_gib, self._stop = address, every, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _total(self) -> float:
        import psutil

        total = psutil.Process().memory_info().rss
        for process in cluster_processes(self.address):
            try:
                total += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / 2**30

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak_gib = max(self.peak_gib, self._total())

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def build_on_ray(parts: list[Path], folder: Path, address: str) -> dict:
    """The parts indexed on the connected cluster as `taskret tart index-shards --ray` indexes them, each part's
    counting and indexing a Ray task reading its own file (bm25_shards.py's build, on Ray), with the peak memory."""
    with PeakMemory(address) as memory:
        built = build(parts, folder, on_ray=True)
    return {**built, "peak_rss_gib": round(memory.peak_gib, 3)}


def shard_folders(folder: Path) -> dict[str, Path]:
    named = json.loads((folder / "shards.json").read_text())["shards"]
    return {name: folder / path for name, path in named.items()}


def tied_groups(ids: list[str], scores: list[float]) -> list[frozenset]:
    """The top 10's ids grouped by equal score, in rank order (a group cut by rank 10 is left out: the documents
    past it that share its score could stand in either list)."""
    groups, last = [], None
    for doc, score in zip(ids, scores):
        if groups and score == last:
            groups[-1].add(doc)
        else:
            groups.append({doc})
        last = score
    cut = len(ids) > K and scores[K] == scores[K - 1]
    kept, seen = [], 0
    for group in groups:
        seen += len(group)
        if seen > K or (cut and seen == K):
            break
        kept.append(frozenset(group))
    return kept


def agreement(merged: list[dict], single: list[dict]) -> dict:
    """The merged top 10s against the single index's (both searched 11 deep)."""
    same = [m["ids"][:K] == s["ids"][:K] for m, s in zip(merged, single)]
    up_to_ties = [tied_groups(m["ids"], m["scores"]) == tied_groups(s["ids"], s["scores"])
                  for m, s in zip(merged, single)]
    diff = max((abs(a - b) for m, s in zip(merged, single) for a, b in zip(m["scores"][:K], s["scores"][:K])),
               default=0.0)
    return {"queries": len(same), "same_top10_share": round(float(np.mean(same)), 4),
            "same_top10_up_to_ties_share": round(float(np.mean(up_to_ties)), 4), "max_score_diff": round(diff, 6)}


def search_on_ray(folder: Path, queries: list[str]) -> tuple[dict, list[dict]]:
    """The shards' actors: one query at a time (p50 / p99), then all queries 11 deep for the comparison."""
    from taskret.retrieval.ray_shards import RayShards

    searched = RayShards(shard_folders(folder), timeout_s=600)
    try:
        where = searched.where()
        searched.retrieve(queries[:1], k=K)  # the first query compiles numba's scorer in each actor
        times = []
        for query in queries:
            started = time.perf_counter()
            searched.retrieve([query], k=K)
            times.append(time.perf_counter() - started)
        found = searched.retrieve(queries, k=K + 1).result
        tops = [{"ids": ids, "scores": [float(s) for s in scores]} for ids, scores in zip(found.ids, found.scores)]
        return {**percentiles(times), "nodes": len({w["node"] for w in where.values()})}, tops
    finally:
        searched.close()


def killed_shard(folder: Path, queries: list[str]) -> dict:
    """One shard actor's process killed: the strict search names it, the partial one names it missing."""
    from taskret.corpus import iter_corpus
    from taskret.retrieval.ray_shards import RayShards
    from taskret.retrieval.sharded import ShardFailed

    folders = shard_folders(folder)
    victim = sorted(folders)[len(folders) // 2]
    searched = RayShards(folders, timeout_s=120)
    try:
        pid = searched.where()[victim]["pid"]
        os.kill(pid, signal.SIGKILL)
        started = time.perf_counter()
        try:
            searched.retrieve(queries[:10], k=K)
            strict = {"raised": False}
        except ShardFailed as error:
            strict = {"raised": True, "names_shard": error.shard == victim, "message": str(error)[:200]}
        strict["seconds"] = round(time.perf_counter() - started, 2)
        searched.allow_partial = True
        answer = searched.retrieve(queries, k=K)
        victim_ids = {doc.id for doc in iter_corpus(folder / f"part-{victim.split('-')[-1]}.jsonl")}
        found = {i for row in answer.result.ids for i in row}
        return {"shard": victim, "strict": strict, "partial_missing": answer.missing,
                "partial_has_no_killed_shard_documents": not (found & victim_ids),
                "partial_queries_answered": len(answer.result.ids)}
    finally:
        searched.close()


def cluster_processes(address: str) -> list:
    """The processes of the Ray cluster at ``address`` on this machine: its nodes' ``ray start`` processes (found by
    the head's port in their command lines) and every process they started (GCS, raylets, workers, actors). Another
    Ray cluster on the machine (a benchmark or test beside this one) is left out."""
    import psutil

    marks = {f"--port={address.rsplit(':', 1)[-1]}", f"--address={address}"}
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        words = process.info["cmdline"] or []
        if "start" not in words or not marks & set(words):
            continue
        try:
            for member in (process, *process.children(recursive=True)):
                found[member.pid] = member
        except psutil.NoSuchProcess:
            continue
    return list(found.values())


def shard_actor_processes(address: str) -> list:
    """The shard actors' processes of the cluster at ``address`` (Ray titles an actor's process
    ``ray::_ShardActor...``)."""
    import psutil

    found = []
    for process in cluster_processes(address):
        try:
            if (process.cmdline() or [""])[0].startswith("ray::_ShardActor"):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def served(single: Path, shards_config: Path, address: str, queries: list[str], connections: int,
           duration: float) -> dict:
    """`taskret serve` over the single index and over the shards (Ray), each under wrk; then one of the service's
    shard actors killed and the next answer checked for ``missing_shards``."""
    import httpx
    import serve_load

    bodies = serve_load.retrieve_bodies(queries, shards_config.parent / "serve_bodies.jsonl")
    out = {"tool": "wrk", "connections": connections, "duration_s": duration, "workers": 1,
           "warm_up_queries": WARM_UP_QUERIES}
    for name, index, source in (("single", single, "--index"), ("ray_shards", shards_config, "--shards")):
        server = serve_load.Server(index, 1, source=source)
        try:
            # Healthy is not ready: the first /retrieve waits for the shards' actors to load and compile their
            # scorer. Answered here, one at a time, so that wrk measures the service and not its start.
            started = time.perf_counter()
            for query in queries[:WARM_UP_QUERIES]:
                httpx.post(server.url + "/retrieve", json={"query": query, "k": K}, timeout=600).raise_for_status()
            warm_up_s = round(time.perf_counter() - started, 2)
            loaded = serve_load.warmed_wrk(server.url + "/retrieve", bodies, connections, duration)
            out[name] = {**serve_load.wrk_summary(loaded), "startup_s": server.startup_s, "warm_up_s": warm_up_s}
            if name == "ray_shards":
                actors = shard_actor_processes(address)
                out[name]["actor_rss_mib"] = [round(p.memory_info().rss / 2**20, 1) for p in actors]
                os.kill(actors[0].pid, signal.SIGKILL)
                answer = httpx.post(server.url + "/retrieve", json={"query": queries[0], "k": K}, timeout=120)
                out["killed_shard"] = {"status": answer.status_code,
                                       "missing_shards": answer.json().get("missing_shards"),
                                       "results": len(answer.json().get("ids", []))}
        finally:
            server.close()
        print(f"served {name}: {out[name]['req_per_s']} req/s, p99 {out[name]['p99_ms']} ms", flush=True)
    return out


def shard_options(doc: str, out: str) -> argparse.ArgumentParser:
    """The options every shards benchmark takes (this one's and dense_shards.py's)."""
    options = parser(doc, out=out, seed=0)
    options.add_argument("--size", type=int, default=1_000_000, help="documents (default: %(default)s)")
    options.add_argument("--shards", type=int, default=3, help="shards, one a node (default: %(default)s)")
    options.add_argument("--queries", type=int, default=1000, help="real queries compared (default: %(default)s)")
    return options


def prepare(args) -> tuple[Path, Path, list[str]]:
    """Ray's environment set; the size's work folder, its corpus (scale.py's, written once) and the real queries."""
    os.environ.update(RAY_ENV)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folders = real_sources(Path(args.data_dir))
    work = Path(args.work).resolve() / str(args.size)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus, folders, args.size, args.seed)
    return work, corpus, real_queries(folders, args.queries, args.seed)


@contextmanager
def local_cluster(nodes: int) -> Iterator[str]:
    """A real local Ray cluster of ``nodes`` nodes (a head and worker nodes, each a process of its own, one CPU
    each), this process connected to it; yields its address."""
    import ray

    from taskret.backends.ray_pool import start_local_cluster

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths need a short folder
    with start_local_cluster(num_cpus=1, temp_dir=temp, worker_nodes=nodes - 1) as address:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        try:
            yield address
        finally:
            ray.shutdown()


def main() -> None:
    options = shard_options(__doc__, "benchmarks/results/ray_shards.json")
    options.add_argument("--serve-duration", type=float, default=30.0, help="seconds of wrk load per run")
    options.add_argument("--connections", type=int, default=8, help="wrk connections (default: %(default)s)")
    options.add_argument("--work", default="runs/ray_shards", help="corpus and indexes (kept: a rerun resumes)")
    args = options.parse_args()
    started = machine(threads=1)  # before any work: the load the build starts at
    work, corpus, queries = prepare(args)
    queries_file = work / "queries.json"
    queries_file.write_text(json.dumps(queries))

    # The single index: bm25_shards.py's one-shard build and one-thread search, each in a child of its own.
    single = work / "shards-1"
    if not (single / "shards.json").exists():
        single.mkdir(parents=True, exist_ok=True)
        built, peak = in_child(["--child", "build", str(single), *map(str, split_corpus(corpus, 1, single))],
                               str(HERE / "bm25_shards.py"))
        (single / "build.json").write_text(json.dumps({**built, "build_peak_rss_gib": round(peak, 3)}))
    single_search, _ = in_child(["--child", "search", str(single), str(queries_file)], str(HERE / "bm25_shards.py"))

    import ray

    sharded = work / f"ray-{args.shards}"
    sharded.mkdir(parents=True, exist_ok=True)
    parts = split_corpus(corpus, args.shards, sharded)
    with local_cluster(args.shards) as address:
        nodes = len([n for n in ray.nodes() if n["Alive"]])
        record = sharded / "build.json"
        if (sharded / "shards.json").exists() and record.exists():
            built = json.loads(record.read_text())
        else:
            built = build_on_ray(parts, sharded, address)
            record.write_text(json.dumps(built))
        print(f"built {args.shards} shards on {nodes} nodes: {built['build_s']} s", flush=True)
        search, tops = search_on_ray(sharded, queries)
        single_tops = json.loads((single / "tops.json").read_text())
        compared = agreement(tops, single_tops)
        print(f"merged top 10: {compared}", flush=True)
        killed = killed_shard(sharded, queries)
        config = sharded / "serve_shards.json"
        config.write_text(json.dumps({"shards": {n: str(p) for n, p in shard_folders(sharded).items()},
                                      "ray": address, "allow_partial": True, "timeout_s": 120}))
        serve = served(shard_folders(single)["shard-0"], config, address, queries, args.connections,
                       args.serve_duration) if args.serve_duration > 0 else None
    write_result(args.out, {
        "benchmark": "ray_shards", "command": command_line(args, options), "machine": started,
        "nodes": nodes, "shards": args.shards, "documents": args.size,
        "single": {**json.loads((single / "build.json").read_text()), **single_search},
        "ray": {**built, **search}, "vs_single_index": compared, "killed_shard": killed, "serve": serve})


if __name__ == "__main__":
    main()
