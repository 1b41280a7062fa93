"""Load test of `taskret serve`, measured with wrk: the service, not a Python client.

Set-up: wrk 4 (C, LuaJIT scripting), from the Debian/Ubuntu package::

    apt-get update && apt-get install -y wrk

then::

    python benchmarks/serve/serve_load.py --data-dir ../shared/data              # ~8 minutes

One run serves three indexes (built once into ``runs/serve_load/`` with the CLI, as a user would, and reused) with
``--workers 1`` and with ``--workers 2`` (the default on 2 cores), and drives each with ``wrk -t1 --latency
--timeout 30s`` and ``benchmarks/serve/wrk/cycle.lua``, which cycles through real queries (one JSON body per line, each
request the next), not one fixed query:

- ``GET /health``: the floor (what the framework costs: HTTP, routing, a small JSON answer);
- ``POST /retrieve`` k=10 on BM25 over Break's 6,208 training examples (Break test questions), the issue's target;
- ``POST /retrieve`` k=10 on ``dense:minilm-l6`` over the same examples (the queries are encoded per request);
- ``POST /prompt`` on the BM25 index (100 examples retrieved, the prompt filled to the default budget);
- ``POST /retrieve`` with an instruction on a ``taskret tart index --setup docs-rerank`` index of berri-lite
  PubMedQA's 1,000 abstracts (hybrid first stage, SmolLM2-135M UPR rerank of the top 10; PubMedQA questions with
  the task's instructions): slow, so a short run with few connections.

Each run reports requests/s, p50/p90/p99/max latency, errors (wrk's socket errors: connect, read, write, timeout;
and answers with status >= 400), and the server's memory per process after the load: RSS, and PSS, which divides
pages shared between processes (a memory-mapped index, the interpreter's libraries) among them. The load generator
shares the machine with the server (on 2 cores: wrk takes a share of them), so req/s is a floor for a separate
client; other work on the machine slows both, so the load average is recorded before and after.

Without wrk, a Python client (httpx, asyncio) runs instead, and says so loudly: it measures itself as much as the
service (on 2 cores it tops out below the service's rate), so its numbers are not comparable with wrk's.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, http_stack, machine, parser, write_result  # noqa: E402

LUA = Path(__file__).resolve().parent / "wrk" / "cycle.lua"
BREAK_TRAIN = 6208


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _taskret(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "taskret.cli", *args], check=True, stdout=subprocess.DEVNULL)


def build_indexes(data_dir: str, folder: Path) -> dict[str, Path]:
    """The served indexes, written by the CLI the first time and reused after."""
    data = ["--data-dir", data_dir]
    specs = {"break-bm25": ["index", "--task", "break", "--retriever", "bm25", *data],
             "break-dense": ["index", "--task", "break", "--retriever", "dense:minilm-l6", *data],
             "pubmedqa-docs-rerank": ["tart", "index", "--corpus", "berri-lite/pubmedqa", "--setup", "docs-rerank",
                                      *data]}
    paths = {}
    for name, args in specs.items():
        paths[name] = folder / name
        if not (paths[name] / "meta.json").is_file():
            print(f"building {paths[name]} (once)", flush=True)
            _taskret(*args, "--out", str(paths[name]))
    return paths


def write_bodies(data_dir: str, folder: Path, seed: int) -> dict[str, Path]:
    """Request bodies, one JSON object per line, in a seeded random order (each run cycles through them)."""
    from taskret.data import load_task

    questions = [e.input for e in load_task("break", data_dir=data_dir).test]
    berri = Path(data_dir) / "berri-lite"
    with (berri / "pubmedqa" / "queries.jsonl").open(encoding="utf-8") as lines:
        pubmed = [json.loads(line)["text"] for line in lines if line.strip()]
    instructions = json.loads((berri / "instructions.json").read_text(encoding="utf-8"))["pubmedqa"]
    rows = {"retrieve": [{"query": q, "k": 10} for q in questions],
            "prompt": [{"input": q} for q in questions],
            "instructed": [{"query": q, "instruction": instructions[i % len(instructions)], "k": 10}
                           for i, q in enumerate(pubmed)]}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, bodies in rows.items():
        random.Random(seed).shuffle(bodies)
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")
    return paths


class Server:
    """`taskret serve --index INDEX --workers N` on a free loopback port, until closed (``source="--shards"``:
    ``index`` is a shards config)."""

    def __init__(self, index: Path, workers: int, source: str = "--index"):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([sys.executable, "-m", "taskret.cli", "serve", source, str(index),
                                         "--port", str(self.port), "--workers", str(workers)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env={**os.environ, "HF_HUB_OFFLINE": "1"})
        start = time.perf_counter()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"taskret serve exited with {self.process.returncode}: "
                                   f"{self.process.stderr.read().decode()[-2000:]}")
            try:
                # Every worker answers once it is up; the shared socket hands connections to any of them.
                if all(httpx.get(f"{self.url}/health", timeout=5).status_code == 200 for _ in range(4 * workers)):
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError("taskret serve did not become healthy in 300 s")
        self.startup_s = round(time.perf_counter() - start, 2)

    def memory(self) -> dict:
        """RSS and PSS (MiB) of the uvicorn parent and of each worker process."""
        parent = psutil.Process(self.process.pid)

        def mib(process: psutil.Process) -> dict:
            info = process.memory_full_info()
            return {"rss": round(info.rss / 2**20, 1), "pss": round(info.pss / 2**20, 1)}

        children = [p for p in parent.children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
        workers = [mib(p) for p in children] or [mib(parent)]
        return {"parent": mib(parent) if children else None, "workers": workers,
                "worker_rss_mean": round(float(np.mean([w["rss"] for w in workers])), 1),
                "total_pss": round(sum(w["pss"] for w in workers) + (mib(parent)["pss"] if children else 0), 1)}

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wrk(url: str, bodies: Path | None, connections: int, duration: float) -> dict:
    """One wrk run (1 thread): its JSON summary from cycle.lua, in milliseconds and requests/s."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{int(duration)}s", "--latency", "--timeout", "30s",
               "-s", str(LUA), url] + (["--", str(bodies)] if bodies else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(r"^WRK_JSON (.*)$", out, re.M)
    if match is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    raw = json.loads(match.group(1))
    seconds = raw["duration_us"] / 1e6
    errors = raw["errors"]
    return {"tool": "wrk", "connections": connections, "duration_s": round(seconds, 2), "requests": raw["requests"],
            "requests_per_s": round(raw["requests"] / seconds, 1),
            "latency_ms": {key: round(value / 1000, 2) for key, value in raw["latency_us"].items()},
            "errors": sum(errors.values()), "errors_by_kind": {k: v for k, v in errors.items() if v}}


def wrk_summary(run: dict) -> dict:
    """A wrk run as the scale and request-path results keep it: requests/s, p50 / p99 ms, errors."""
    return {"req_per_s": run["requests_per_s"], "p50_ms": run["latency_ms"]["p50"], "p99_ms": run["latency_ms"]["p99"],
            "errors": run["errors"]}


def warmed_wrk(url: str, bodies: Path | None, connections: int, duration: float, warm_up: float = 3.0) -> dict:
    """:func:`wrk`'s run of ``duration`` seconds, after ``warm_up`` seconds of the same load that are not kept."""
    wrk(url, bodies, connections, warm_up)
    return wrk(url, bodies, connections, duration)


def retrieve_bodies(queries: list[str], path: Path, k: int = 10) -> Path:
    """``/retrieve`` request bodies, one JSON object per line in the queries' order, for wrk to cycle through."""
    path.write_text("".join(json.dumps({"query": q, "k": k}) + "\n" for q in queries), encoding="utf-8")
    return path


async def _python_load(url: str, bodies: list[dict] | None, connections: int, duration: float) -> dict:
    """The fallback client: ``connections`` asyncio tasks on one httpx client, each request the next body."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop_at = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def worker(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                try:
                    if bodies:
                        response = await client.post(url, json=bodies[i % len(bodies)])
                    else:
                        response = await client.get(url)
                    if response.status_code >= 400:
                        errors["status"] = errors.get("status", 0) + 1
                        continue
                except httpx.HTTPError as err:
                    errors[type(err).__name__] = errors.get(type(err).__name__, 0) + 1
                    continue
                finally:
                    i += connections
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in range(connections)))
        elapsed = time.perf_counter() - start
    ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    return {"tool": "python-httpx (fallback)", "connections": connections, "duration_s": round(elapsed, 2),
            "requests": len(latencies), "requests_per_s": round(len(latencies) / elapsed, 1),
            "latency_ms": {f"p{p}": round(float(np.percentile(ms, p)), 2) for p in (50, 90, 99)}
            | {"mean": round(float(ms.mean()), 2), "max": round(float(ms.max()), 2)},
            "errors": sum(errors.values()), "errors_by_kind": errors}


def load(url: str, bodies: Path | None, connections: int, duration: float, use_wrk: bool) -> dict:
    if use_wrk:
        return wrk(url, bodies, connections, duration)
    rows = [json.loads(line) for line in bodies.read_text().splitlines()] if bodies else None
    return asyncio.run(_python_load(url, rows, connections, duration))


def targets(floor: dict, bm25: dict) -> dict:
    """The issue's targets for /retrieve on BM25 against the /health floor of the same run and worker count."""
    share = bm25["requests_per_s"] / floor["requests_per_s"]
    p99_ratio = bm25["latency_ms"]["p99"] / floor["latency_ms"]["p99"]
    return {"share_of_floor": round(share, 3), "share_of_floor_target": 0.5, "share_met": share >= 0.5,
            "p99_over_floor_p99": round(p99_ratio, 2), "p99_target": 2.0, "p99_met": p99_ratio <= 2.0,
            "errors": bm25["errors"], "errors_met": bm25["errors"] == 0}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/serve_load.json", seed=0)
    options.add_argument("--workers", default="1,2", help="worker counts to serve with, in turn")
    options.add_argument("--connections", type=int, default=32)
    options.add_argument("--duration", type=float, default=60.0, help="seconds of /health and BM25 /retrieve load")
    options.add_argument("--short-duration", type=float, default=20.0, help="seconds of the other runs' load")
    options.add_argument("--rerank-connections", type=int, default=2)
    options.add_argument("--index-dir", default="runs/serve_load", help="where the indexes are built, once")
    options.add_argument("--python-client", action="store_true", help="use the fallback client even with wrk")
    args = options.parse_args()

    use_wrk = shutil.which("wrk") is not None and not args.python_client
    if not use_wrk:
        print("=" * 78 + "\nWARNING: wrk is not installed (apt-get install -y wrk) or --python-client was given: the "
              "Python client\nmeasures itself as much as the service; these numbers are NOT comparable with wrk's.\n"
              + "=" * 78, file=sys.stderr, flush=True)
    folder = Path(args.index_dir)
    indexes = build_indexes(args.data_dir, folder)
    bodies = write_bodies(args.data_dir, folder / "bodies", args.seed)
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0] if use_wrk \
        else None
    measured_on = machine(setup="server and load generator (wrk, 1 thread) on the same machine",
                          http_stack=http_stack())
    counts = [int(w) for w in args.workers.split(",")]
    # (name, index, path, bodies, connections, duration)
    plan = [("health", "break-bm25", "/health", None, args.connections, args.duration),
            ("retrieve_bm25", "break-bm25", "/retrieve", bodies["retrieve"], args.connections, args.duration),
            ("prompt", "break-bm25", "/prompt", bodies["prompt"], args.connections, args.short_duration),
            ("retrieve_dense", "break-dense", "/retrieve", bodies["retrieve"], args.connections, args.short_duration),
            ("retrieve_instructed_rerank", "pubmedqa-docs-rerank", "/retrieve", bodies["instructed"],
             args.rerank_connections, args.short_duration)]
    runs = []
    for workers in counts:
        for index_name in dict.fromkeys(step[1] for step in plan):
            server = Server(indexes[index_name], workers)
            try:
                memory_idle = server.memory()
                for name, _, path, body_file, connections, duration in (s for s in plan if s[1] == index_name):
                    load(server.url + path, body_file, connections, min(duration, 3), use_wrk)  # warm-up
                    run = {"name": name, "workers": workers, "index": index_name, "endpoint": path,
                           "load_average_before": [round(x, 2) for x in os.getloadavg()],
                           **load(server.url + path, body_file, connections, duration, use_wrk)}
                    run["server_memory_mib"] = server.memory()
                    runs.append(run)
                    lat = run["latency_ms"]
                    print(f"workers={workers} {name:27s} {run['requests_per_s']:8.1f} req/s  p50 {lat['p50']:8.2f} "
                          f"p99 {lat['p99']:8.2f} ms  errors {run['errors']}  worker RSS "
                          f"{run['server_memory_mib']['worker_rss_mean']} MiB", flush=True)
                runs[-1]["server_memory_idle_mib"] = memory_idle
                runs[-1]["server_startup_s"] = server.startup_s
            finally:
                server.close()

    by = {(r["workers"], r["name"]): r for r in runs}
    default = max(counts)
    result = {
        "benchmark": "serve_load",
        "tool": "wrk" if use_wrk else "python-httpx (fallback: wrk not installed)",
        "wrk_version": wrk_version,
        "command": command_line(args, options),
        "machine": measured_on,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "indexes": {"break-bm25": f"bm25 over Break's {BREAK_TRAIN} training examples",
                    "break-dense": f"dense:minilm-l6 over the same {BREAK_TRAIN} examples",
                    "pubmedqa-docs-rerank": "taskret tart index --setup docs-rerank over berri-lite/pubmedqa's "
                                            "1,000 abstracts (hybrid BM25 + MiniLM, SmolLM2-135M UPR rerank of the "
                                            "top 10)"},
        "queries": {"retrieve": "Break test questions (1,552), k=10", "prompt": "Break test questions, default "
                    "budget", "instructed": "berri-lite PubMedQA questions with its 4 instructions in turn, k=10"},
        "workers_default": default,
        "floor": by.get((default, "health")),
        "targets": {str(w): targets(by[(w, "health")], by[(w, "retrieve_bm25")]) for w in counts
                    if (w, "health") in by and (w, "retrieve_bm25") in by},
        "runs": runs,
    }
    write_result(args.out, result)
    for workers, met in result["targets"].items():
        print(f"workers={workers}: /retrieve BM25 at {met['share_of_floor']:.0%} of the /health floor (target 50%), "
              f"p99 {met['p99_over_floor_p99']}x the floor's (target <= 2x), {met['errors']} errors")


if __name__ == "__main__":
    main()
