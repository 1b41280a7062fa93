"""Issue 53: does sizing the answer by the task's training outputs (``taskret evaluate`` without --max-new-tokens)
save time without costing quality? The same BM25 prompts for the same seeded test inputs, generated once with a
fixed answer room (--fixed, the old default 128) and once with the room the training outputs need
(taskret.icl.prompt.max_new_tokens_for, as the command computes it); time per example, generated tokens, chrF,
and the per-input chrF paired by a Wilcoxon test. Take the timing on a quiet machine (the load is recorded).

    python benchmarks/epr/answer_room.py --task berri-lite/nl2bash --n 30
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, describe_machine, machine, parser, round_metrics, write_result  # noqa: E402

from taskret.backends.base import load_lm
from taskret.data import load_task, sample
from taskret.icl.compare import wilcoxon
from taskret.icl.evaluation import evaluate
from taskret.icl.prompt import max_new_tokens_for
from taskret.io import read_jsonl
from taskret.retrieval import make_retriever


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/answer_room.json", task="berri-lite/nl2bash",
                     lm="smollm2-135m", seed=0)
    options.add_argument("--n", type=int, default=30, help="test inputs (a seeded sample)")
    options.add_argument("--context-window", type=int, default=640)
    options.add_argument("--fixed", type=int, default=128, help="the fixed answer room compared against")
    options.add_argument("--work", default="runs/bench/answer_room")
    args = options.parse_args()

    task = load_task(args.task, data_dir=args.data_dir)
    examples = sample(task.test, args.n, seed=args.seed)
    lm = load_lm(args.lm)
    room, length = max_new_tokens_for([task.prompt_output(e) for e in task.train], lm.count_tokens)
    room = min(room, args.context_window // 2)
    retriever = make_retriever("bm25", seed=args.seed).index(task.train)
    device = machine()
    runs = {}
    for name, max_new_tokens in (("fixed", args.fixed), ("from_outputs", room)):
        out = Path(args.work) / task.name.replace("/", "_") / name
        load = os.getloadavg()[0]
        started = time.perf_counter()
        summary = evaluate(task, retriever, lm, examples, out, retriever_name="bm25", context_window=args.context_window,
                           max_new_tokens=max_new_tokens, metrics=("chrf",))
        wall = time.perf_counter() - started
        rows = read_jsonl(out / "predictions.jsonl")
        generated = sum(lm.count_tokens(r["generation"]) for r in rows)  # the raw answer, loops included
        runs[name] = {"max_new_tokens": max_new_tokens, "metrics": round_metrics(summary["metrics"]),
                      "s_per_example": round(wall / len(rows), 3), "generated_tokens_per_example":
                      round(generated / len(rows), 1), "load_average_before": round(load, 2),
                      "chrf_by_id": {r["id"]: r["chrf"] for r in rows}}
        print(f"{name} ({max_new_tokens} tokens): {runs[name]['s_per_example']} s/example, "
              f"chrF {summary['metrics']['chrf']:.1f}", flush=True)
    p = wilcoxon(runs["from_outputs"].pop("chrf_by_id"), runs["fixed"].pop("chrf_by_id"))
    result = {"benchmark": "answer_room", "task": task.name, "n": len(examples), "lm": args.lm,
              "training_output_tokens_q99": length, "runs": runs, "chrf_wilcoxon_p": round(p, 4),
              "speedup": round(runs["fixed"]["s_per_example"] / runs["from_outputs"]["s_per_example"], 2),
              "device": describe_machine(device), "machine": device,
              "commands": [command_line(args, options, leave_out=("data_dir", "work"))]}
    write_result(args.out, result)


if __name__ == "__main__":
    main()
