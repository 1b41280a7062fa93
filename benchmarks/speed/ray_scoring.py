"""EPR scoring throughput on Ray (1 and 2 worker actors) against the single-process scorer, on this machine,
with an identical-output check.

One job: N MTOP training examples x K BM25 candidates, scored by SmolLM2 (float32, CPU) into shards of
S examples. Runs: the local scorer (`score_candidates` in this process, 1 and --threads torch threads); Ray
with 1 actor (--threads CPUs, as many threads); Ray with 2 actors (1 CPU and 1 thread each). Ray runs on
a private local cluster (`ray start --head` on 127.0.0.1) started by this script and stopped at the end.
Pairs/s counts the scoring only; cluster start and actor start-up (model load) are reported apart.

    python benchmarks/speed/ray_scoring.py --data-dir ../shared/data            # ~3 min on 2 cores
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Keep Ray on loopback and without token authentication (a private, single-machine cluster).
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
os.environ.update(RAY_ENV)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, sampled_candidates, write_result  # noqa: E402

from taskret.data import load_task  # noqa: E402
from taskret.epr.scoring import score_candidates  # noqa: E402


def max_abs_diff(a: Path, b: Path) -> float:
    rows_a = [json.loads(line) for line in a.read_text().splitlines()]
    rows_b = [json.loads(line) for line in b.read_text().splitlines()]
    return max(abs(x["logprob"] - y["logprob"]) for ra, rb in zip(rows_a, rows_b)
               for x, y in zip(ra["candidates"], rb["candidates"]))


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/ray_scoring.json", lm="smollm2-135m", seed=0)
    options.add_argument("--examples", type=int, default=24)
    options.add_argument("--candidates", type=int, default=8)
    options.add_argument("--shard-size", type=int, default=2)
    options.add_argument("--threads", type=int, default=2, help="CPUs of the machine used by each configuration")
    args = options.parse_args()

    import torch

    from taskret.backends import make_backend
    from taskret.epr.distributed import RayScoring

    measured_on = machine(threads=args.threads)  # with the load average at the start
    task = load_task("mtop", data_dir=args.data_dir)
    examples = {e.id: e for e in task.train}
    rows = sampled_candidates(task.train, args.examples, args.candidates, seed=args.seed)
    n_pairs = sum(len(r["candidates"]) for r in rows)
    options = {"device": "cpu", "dtype": "float32"}
    runs = []
    with tempfile.TemporaryDirectory(prefix="taskret-ray-bench-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        lm = make_backend(args.lm, **options)
        load_s = time.perf_counter() - start
        local_path = None
        for threads in sorted({1, args.threads}):
            torch.set_num_threads(threads)
            lm.score(["warm up\t"], ["X"])
            start = time.perf_counter()
            path = score_candidates(rows, examples, lm, tmp / f"local-{threads}", shard_size=args.shard_size)
            wall = time.perf_counter() - start
            local_path = local_path or path
            runs.append({"run": f"local ({threads} thread{'s' if threads > 1 else ''})", "workers": 0,
                         "startup_s": round(load_s, 2), "scoring_s": round(wall, 2),
                         "pairs_per_s": round(n_pairs / wall, 2),
                         "identical": path.read_bytes() == local_path.read_bytes(),
                         "max_abs_diff": round(max_abs_diff(path, local_path), 6)})
            print(runs[-1], flush=True)
        del lm

        from taskret.epr.distributed import start_local_cluster

        start = time.perf_counter()
        with start_local_cluster(num_cpus=args.threads, num_gpus=0, temp_dir=tmp / "ray") as address:
            cluster_s = time.perf_counter() - start
            for workers in (1, 2):
                cpus = args.threads / workers
                start = time.perf_counter()
                with RayScoring(args.lm, options, address=address, workers=workers, cpus_per_worker=cpus) as runner:
                    startup = time.perf_counter() - start
                    start = time.perf_counter()
                    path = score_candidates(rows, examples, runner.lm_name, tmp / f"ray-{workers}",
                                            shard_size=args.shard_size, shard_runner=runner)
                    wall = time.perf_counter() - start
                runs.append({"run": f"ray, {workers} worker(s) x {int(cpus)} CPU", "workers": workers,
                             "startup_s": round(startup, 2), "scoring_s": round(wall, 2),
                             "pairs_per_s": round(n_pairs / wall, 2),
                             "identical": path.read_bytes() == local_path.read_bytes(),
                             "max_abs_diff": round(max_abs_diff(path, local_path), 6)})
                print(runs[-1], flush=True)
    import ray

    result = {
        "command": command_line(args, options),
        "machine": {**measured_on, "ray": ray.__version__},
        "lm": args.lm, "n_examples": len(rows), "n_candidates": args.candidates, "n_pairs": n_pairs,
        "shard_size": args.shard_size,
        "reference_for_identical": "local (1 thread)", "ray_cluster_start_s": round(cluster_s, 2), "runs": runs,
        "note": "identical = byte-identical scores.jsonl; a different torch thread count can change the last bits "
                "of a float32 matmul, so max_abs_diff is reported too (scores are rounded to 5 decimals).",
    }
    write_result(args.out, result)


if __name__ == "__main__":
    main()
