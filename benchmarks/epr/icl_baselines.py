"""EM of the unsupervised retrievers (Random, SBERT, BM25) with SmolLM2-135M on MTOP and Break.

Every method sees the same seeded sample of N test examples. Each (task, method) run writes its
predictions under --runs; a rerun skips runs that are already complete, so the job can resume.

    python benchmarks/epr/icl_baselines.py --data-dir ../shared/data --n 300
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.backends.transformers import CausalLM
from taskret.data import load_task, sample
from taskret.icl.evaluation import evaluate
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/icl_baselines.json", lm="smollm2-135m", seed=0, icl=True)
    options.add_argument("--tasks", default="mtop,break")
    options.add_argument("--methods", default="random,sbert,bm25")
    options.add_argument("--n", type=int, default=300)
    options.add_argument("--runs", default="benchmarks/results/icl_baselines")
    args = options.parse_args()

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
    write_result(args.out, {
        "benchmark": "icl_baselines",
        "command": command_line(args, options, leave_out=("data_dir", "runs")),
        "machine": machine(),
        "results": results,
    })


if __name__ == "__main__":
    main()
