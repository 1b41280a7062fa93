"""EM of the unsupervised retrievers (Random, SBERT, BM25) with SmolLM2-135M on MTOP and Break.

Every method sees the same seeded sample of N test examples. Each (task, method) run writes its
predictions under --runs; a rerun skips runs that are already complete, so the job can resume.

    python benchmarks/icl_baselines.py --data-dir ../shared/data --n 300
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from taskret.backends.transformers import CausalLM
from taskret.data import load_task, sample
from taskret.icl.evaluation import evaluate
from taskret.io import write_json
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("TASKRET_DATA_DIR", "../shared/data"))
    parser.add_argument("--tasks", default="mtop,break")
    parser.add_argument("--methods", default="random,sbert,bm25")
    parser.add_argument("--lm", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context-window", type=int, default=640)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--runs", default="benchmarks/results/icl_baselines")
    parser.add_argument("--out", default="benchmarks/results/icl_baselines.json")
    args = parser.parse_args()

    lm = CausalLM.load(args.lm)
    results = []
    for task_name in args.tasks.split(","):
        task = load_task(task_name, data_dir=args.data_dir)
        examples = sample(task.test, args.n, seed=args.seed)
        for method in args.methods.split(","):
            run_dir = Path(args.runs) / task_name / method
            summary_path = run_dir / "summary.json"
            if summary_path.exists():
                summary = json.loads(summary_path.read_text())
            else:
                start = time.perf_counter()
                retriever = make_retriever(method, seed=args.seed).index(task.train)
                index_time = time.perf_counter() - start
                with progress_bar(len(examples), f"{task_name}/{method}") as advance:
                    summary = evaluate(task, retriever, lm, examples, run_dir, retriever_name=method,
                                       context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                                       progress=advance, extra={"index_time_s": round(index_time, 2)})
            print(json.dumps({k: summary[k] for k in ("task", "retriever", "n", "metrics", "mean_demos", "wall_time_s")}))
            results.append(summary)
    write_json(args.out, {
        "benchmark": "icl_baselines",
        "command": "python benchmarks/icl_baselines.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("runs", "out", "data_dir")),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "results": results,
    })


if __name__ == "__main__":
    main()
