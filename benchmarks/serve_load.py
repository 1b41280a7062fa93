"""Load test of `taskret serve`: a BM25 index of the Break training set on loopback, hit by N concurrent
clients (httpx, asyncio) posting /retrieve with Break test questions for a fixed time.

Reports requests/s, p50/p90/p99 latency, errors (non-200 answers and transport failures), and the server's
resident memory (RSS) before and after the load. The load generator shares the machine with the server,
so on a small machine both compete for the same cores: the numbers are a floor, not a ceiling.

    python benchmarks/serve_load.py --data-dir ../shared/data --clients 32 --duration 60
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
from _common import command_line, machine, parser, write_result

from taskret.data import load_task
from taskret.retrieval import BM25Retriever
from taskret.retrieval.index import save_index


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rss_mib(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"taskret serve exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("taskret serve did not become healthy")


async def _load(url: str, queries: list[str], clients: int, duration: float, k: int, endpoint: str):
    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop_at = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        async def worker(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                query = queries[i % len(queries)]
                i += clients
                body = {"query": query, "k": k} if endpoint == "/retrieve" else {"input": query, "k": k}
                start = time.perf_counter()
                try:
                    response = await client.post(endpoint, json=body)
                    if response.status_code != 200:
                        errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1
                        continue
                except httpx.HTTPError as err:
                    errors[type(err).__name__] = errors.get(type(err).__name__, 0) + 1
                    continue
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in range(clients)))
        elapsed = time.perf_counter() - start
    return latencies, errors, elapsed


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/serve_load.json")
    options.add_argument("--clients", type=int, default=32)
    options.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    options.add_argument("--k", type=int, default=10)
    options.add_argument("--endpoint", default="/retrieve", choices=["/retrieve", "/prompt"])
    args = options.parse_args()

    task = load_task("break", data_dir=args.data_dir)
    queries = [e.input for e in task.test]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        index_dir = save_index(Path(tmp) / "break-bm25", BM25Retriever().index(task.train), task.train,
                               task="break", retriever_spec="bm25", output_format="break")
        index_s = time.perf_counter() - start
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen([sys.executable, "-m", "taskret.cli", "serve", "--index", str(index_dir),
                                    "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            start = time.perf_counter()
            _wait_healthy(url, process)
            startup_s = time.perf_counter() - start
            rss_before = _rss_mib(process.pid)
            measured_on = machine(setup="server (1 uvicorn worker) and load generator on the same machine")
            latencies, errors, elapsed = asyncio.run(_load(url, queries, args.clients, args.duration, args.k,
                                                           args.endpoint))
            rss_after = _rss_mib(process.pid)
            alive = process.poll() is None and httpx.get(f"{url}/health", timeout=5).status_code == 200
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    ms = np.asarray(latencies) * 1000
    n_errors = sum(errors.values())
    result = {
        "benchmark": "serve_load",
        "command": command_line(args, options),
        "machine": measured_on,
        "index": {"task": "break", "split": "train", "retriever": "bm25 (bm25s, stemmed)", "n_examples": len(task.train),
                  "build_s": round(index_s, 2)},
        "server_startup_s": round(startup_s, 2),
        "endpoint": args.endpoint, "k": args.k, "clients": args.clients, "duration_s": round(elapsed, 2),
        "n_queries_distinct": len(queries),
        "requests_ok": int(len(ms)), "errors": n_errors, "errors_by_kind": errors,
        "requests_per_s": round(len(ms) / elapsed, 1),
        "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 2), "p90": round(float(np.percentile(ms, 90)), 2),
                       "p99": round(float(np.percentile(ms, 99)), 2), "mean": round(float(ms.mean()), 2),
                       "max": round(float(ms.max()), 2)} if len(ms) else None,
        "server_rss_mib": {"before": rss_before, "after": rss_after, "growth": round(rss_after - rss_before, 1)},
        "server_healthy_after": alive,
    }
    write_result(args.out, result, quiet=True)
    print(f"{result['requests_per_s']} req/s, p50 {result['latency_ms']['p50']} ms, p99 {result['latency_ms']['p99']} ms, "
          f"{n_errors} errors, RSS {rss_before} -> {rss_after} MiB -> {args.out}")


if __name__ == "__main__":
    main()
