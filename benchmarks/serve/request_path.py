"""Where a served ``/retrieve`` spends its time, and what each change to the request path buys (issue 62 item 3).

One run serves a BM25 index with ``taskret serve --workers 2``: the code with a change to the request path and,
with ``--before``, the code before it (another checkout's ``src/``), side by side; and drives them with wrk as
serve_load.py does (each request the next real query, k=10), in rounds: each round loads each server's
``GET /health`` (the floor: HTTP, routing, a small JSON answer) and then its ``POST /retrieve`` for ``--duration``
seconds, the servers in ABBA order round by round, so that the machine's drift reaches both alike. The change is
the ratio of the rounds' requests/s, after / before, with its 95% interval over the rounds (a paired t on the log
ratios).

Then py-spy profiles the changed code's ``/retrieve`` (``record --subprocesses``: in every worker, ``--rate`` times a
second, each thread that is not waiting for a lock or a socket, so that native code that released the GIL, such as
numba's BM25 scoring, is counted; ``--profile-mode gil`` samples only the thread holding the GIL), its samples sorted into the parts of a request: the first stage (the retriever: tokenising the query, scoring, the top
k), the batcher, the answer (looking the records up, building and serialising the response), the request's parsing
and validation, and the rest (uvicorn, the HTTP parser, starlette's routing, the loop). The profiled run's
requests/s are not reported: py-spy slows what it samples.

Indexes: Break's 6,208 training examples (``taskret index --task break --retriever bm25``, built once into
``--index-dir``; Break's test questions as queries), and with ``--index`` any other BM25 index folder (scale.py's
``runs/scale/1000000/bm25``, with ``--queries runs/scale/queries.json``). Each change is measured once, its run
labelled (``--label``) and added to ``--out`` beside the others::

    git worktree add /tmp/before HEAD~1
    python benchmarks/serve/request_path.py --data-dir ../shared/data --label async-endpoint --before /tmp/before/src
    python benchmarks/serve/request_path.py --label now-1m --index runs/scale/1000000/bm25 \\
        --queries runs/scale/queries.json

Needs wrk (``apt-get install -y wrk``) and py-spy (``pip install py-spy``; without it the profile is left out).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))  # serve_load.py: the server and wrk
import serve_load  # noqa: E402
from _common import command_line, http_stack, machine, parser, write_result  # noqa: E402

#: The parts of a request, each a test on a sample's frames (``function (file:line)``, root first). A sample
#: belongs to the first part whose test holds for any of its frames, in this order: a search the batcher runs is
#: the first stage's, the endpoint's own frames (the records, the response) are the answer's.
PARTS = (
    ("first stage", re.compile(r"\((?:taskret/retrieval/(?!index\.py)|bm25s/|numba/|faiss/)")),
    ("batcher", re.compile(r"\(taskret/serve/batching\.py")),
    ("answer", re.compile(r"^\S*\.(?:retrieve|_finite) \(taskret/serve/app\.py|\(taskret/retrieval/index\.py")),
    ("request parsing and validation", re.compile(r"^\S*(?:solve_dependencies|request_body_to_args|validate\w*|"
                                                  r"_validate\w*|body|json|loads|decode|raw_decode) \((?:fastapi|"
                                                  r"starlette|pydantic\w*|json)/")),
)
OTHER = "HTTP, routing, event loop"
#: A sample whose innermost frame is one of these is a thread waiting (a thread pool's idle worker, uvicorn's pipe to
#: its parent), left out: py-spy counts some waits as running.
WAITING = re.compile(r"^\S*(?:wait|_recv|_recv_bytes|get|select|acquire) \((?:threading|multiprocessing/connection|"
                     r"queue|selectors|concurrent/futures/thread)\.py")
#: What a profile samples: every thread that is not waiting (py-spy's default: native code that released the GIL,
#: numba's BM25 scoring, is counted), or only the thread holding the GIL (``--gil``: the Python-level cost alone).
PROFILE_MODES = {"active": "the threads not waiting", "gil": "the thread holding the GIL"}
TOP_FUNCTIONS = 12  # the functions with most samples of their own, reported with their shares


def build_break_index(data_dir: str, folder: Path) -> Path:
    index = folder / "break-bm25"
    if not (index / "meta.json").is_file():
        subprocess.run([sys.executable, "-m", "taskret.cli", "index", "--task", "break", "--retriever", "bm25",
                        "--data-dir", data_dir, "--out", str(index)], check=True, stdout=subprocess.DEVNULL)
    return index


def classify(stack: list[str]) -> str:
    for part, test in PARTS:
        if any(test.search(frame) for frame in stack):
            return part
    return OTHER


def profile(pid: int, url: str, bodies: Path, connections: int, duration: float, rate: int,
            mode: str = "active") -> dict | None:
    """py-spy over the server's processes while wrk loads ``/retrieve``: the share of samples in each part."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).is_file():
        print("py-spy not found (pip install py-spy): the profile is left out", flush=True)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "stacks.txt"
        spy_process = subprocess.Popen([spy, "record", "--pid", str(pid), "--subprocesses", "--rate", str(rate),
                                        "--duration", str(int(duration) + 2), "--format", "raw",
                                        *(["--gil"] if mode == "gil" else []), "--output", str(raw)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches to every worker before the load starts
        serve_load.wrk(url, bodies, connections, duration)
        _, errors = spy_process.communicate(timeout=120)
        if os.environ.get("REQUEST_PATH_STACKS"):  # to read the samples themselves
            shutil.copy(raw, os.environ["REQUEST_PATH_STACKS"])
        if not raw.is_file():
            raise RuntimeError(f"py-spy wrote no profile: {errors.decode()[-2000:]}")
        parts: Counter = Counter()
        own: Counter = Counter()
        waiting = 0
        for line in raw.read_text(encoding="utf-8").splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [f for f in stack.split(";") if "(" in f]  # py-spy's process and thread entries have none
            if not frames or not count.isdigit():
                continue
            if WAITING.search(frames[-1]):  # an idle thread py-spy did not tell from a busy one
                waiting += int(count)
                continue
            parts[classify(frames)] += int(count)
            own[re.sub(r":\d+\)$", ")", frames[-1])] += int(count)
    total = sum(parts.values()) or 1
    return {"samples": total, "rate_hz": rate, "mode": PROFILE_MODES[mode], "waiting_samples_left_out": waiting,
            "parts": {part: round(parts[part] / total, 3) for part in [p for p, _ in PARTS] + [OTHER]},
            "top_functions": [{"function": f, "share": round(n / total, 3)} for f, n in own.most_common(TOP_FUNCTIONS)]}


def mean_rows(rows: list[dict]) -> dict:
    return {key: round(float(np.mean([r[key] for r in rows])), 2) if key != "errors" else sum(r[key] for r in rows)
            for key in rows[0]}


def paired_ratio(after: list[float], before: list[float]) -> dict:
    """after / before over the rounds: the geometric mean of the rounds' ratios and its 95% t interval."""
    from scipy import stats

    logs = np.log(np.asarray(after) / np.asarray(before))
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)) if len(logs) > 1 else np.nan
    return {"ratio": round(float(np.exp(logs.mean())), 3),
            "ci95": [round(float(np.exp(logs.mean() - half)), 3), round(float(np.exp(logs.mean() + half)), 3)],
            "rounds": [round(float(x), 3) for x in np.exp(logs)]}


def start_server(index: Path, workers: int, src: str | None):
    """`taskret serve` of ``src`` (a checkout's src/; None: the installed taskret)."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(src).resolve()), saved]))
    try:
        return serve_load.Server(index, workers)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def measure(index: Path, bodies: Path, workers: int, connections: int, duration: float, rounds: int, rate: int,
            before_src: str | None, after_src: str | None = None, mode: str = "active") -> dict:
    """Each round loads ``/health`` then ``/retrieve`` for ``duration`` seconds on each server (this code's and,
    with ``before_src``, the code before the change, in ABBA order round by round), so that a machine's drift
    reaches both alike; then py-spy profiles this code's ``/retrieve``."""
    servers = {"after": start_server(index, workers, after_src)}
    if before_src:
        servers["before"] = start_server(index, workers, before_src)
    runs: dict[str, dict[str, list[dict]]] = {name: {"floor": [], "retrieve": []} for name in servers}
    try:
        load_before = [round(x, 2) for x in os.getloadavg()]
        for server in servers.values():  # warm-up
            serve_load.wrk(server.url + "/health", None, connections, 3)
            serve_load.wrk(server.url + "/retrieve", bodies, connections, 3)
        for r in range(rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for name in order:
                url = servers[name].url
                for part, path, body in (("floor", "/health", None), ("retrieve", "/retrieve", bodies)):
                    runs[name][part].append(serve_load.wrk_summary(serve_load.wrk(url + path, body, connections,
                                                                                   duration)))
        load_after = [round(x, 2) for x in os.getloadavg()]
        spied = profile(servers["after"].process.pid, servers["after"].url + "/retrieve", bodies, connections,
                        max(duration, 20.0), rate, mode)
    finally:
        for server in servers.values():
            server.close()
    out: dict = {"index": str(index), "workers": workers, "connections": connections, "duration_s": duration,
                 "rounds": rounds, "load_average_before": load_before, "load_average_after": load_after}
    for name, measured in runs.items():
        floor, retrieve = mean_rows(measured["floor"]), mean_rows(measured["retrieve"])
        out[name] = {"floor": floor, "retrieve": retrieve,
                     "share_of_floor": round(retrieve["req_per_s"] / floor["req_per_s"], 3),
                     "p99_over_floor": round(retrieve["p99_ms"] / floor["p99_ms"], 2),
                     "rounds": {part: [row["req_per_s"] for row in rows] for part, rows in measured.items()}}
    if before_src:
        out["change"] = {part: paired_ratio(out["after"]["rounds"][part], out["before"]["rounds"][part])
                         for part in ("floor", "retrieve")}
    out["profile"] = spied
    return out


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/request_path.json")
    options.add_argument("--label", required=True, help="the name of this run in --out (the change it measures)")
    options.add_argument("--change", default="", help="what the change does, in words (kept in --out)")
    options.add_argument("--before", default=None, help="a checkout's src/ with the code before the change: "
                         "served beside this code, round by round")
    options.add_argument("--after", default=None, help="a checkout's src/ with the change (default: the installed "
                         "taskret)")
    options.add_argument("--index", default=None, help="a BM25 index folder (default: Break's, built once)")
    options.add_argument("--queries", default=None, help="a JSON list of query texts (default: Break's test "
                         "questions)")
    options.add_argument("--index-dir", default="runs/serve_load", help="where Break's index is built, once")
    options.add_argument("--workers", type=int, default=2)
    options.add_argument("--connections", type=int, default=32)
    options.add_argument("--duration", type=float, default=10.0, help="seconds of each wrk run")
    options.add_argument("--rounds", type=int, default=6, help="rounds of /health and /retrieve on each server")
    options.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    options.add_argument("--profile-mode", choices=sorted(PROFILE_MODES), default="active",
                         help="active: every thread not waiting (native scoring included); gil: the GIL's holder")
    args = options.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("this benchmark needs wrk: apt-get install -y wrk")
    folder = Path(args.index_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if args.queries:
        queries = json.loads(Path(args.queries).read_text(encoding="utf-8"))
    else:
        from taskret.data import load_task

        queries = [e.input for e in load_task("break", data_dir=args.data_dir).test]
    index = Path(args.index) if args.index else build_break_index(args.data_dir, folder)
    bodies = serve_load.retrieve_bodies(queries, folder / f"request_path_{index.parent.name}_{index.name}.jsonl")
    run = {"description": args.change, "before": args.before, "after": args.after, "queries": len(queries),
           **measure(index, bodies, args.workers, args.connections, args.duration, args.rounds, args.rate,
                     args.before, args.after, args.profile_mode)}
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.is_file() else {"benchmark": "request_path", "runs": {}}
    result["runs"][args.label] = {**run, "machine": machine(http_stack=http_stack()),
                                  "command": command_line(args, options)}
    write_result(out, result)
    print(json.dumps({args.label: {k: run.get(k) for k in ("after", "before", "change")}}, indent=1), flush=True)


if __name__ == "__main__":
    main()
