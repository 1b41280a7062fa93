"""The EPR paper's Table 2 on one task: every method on the same seeded sample of test examples, with one
scoring/inference LM, at a stated training scale.

Methods (each a folder under --work/<task>/, resumed when its summary.json exists):

- random, sbert, bm25: unsupervised retrievers (``--reuse benchmarks/results/icl_baselines`` takes the runs
  of benchmarks/epr/icl_baselines.py instead, when they hold the same N; both sample the test set with --seed);
- epr, dr-bm25, cbr: ``taskret epr run`` with labels from the scoring LM, from BM25 scores and from
  output token-set F1; one set of BM25 candidates is mined and shared, only EPR scores them with the LM;
- bm25-oracle, lm-oracle: rankings that look at the gold test output (upper bounds).

    python benchmarks/epr/epr_table.py --task mtop --data-dir ../shared/data                   # the full scale
    python benchmarks/epr/epr_table.py --task break --max-train-examples 1000                   # a stated subsample
    python benchmarks/epr/epr_table.py --task demo --n 5 --max-train-examples 12 --n-candidates 4 --epochs 1 \\
        --methods bm25,epr,cbr,bm25-oracle --work /tmp/t --out /tmp/t.json                  # a smoke run

Writes --out (default benchmarks/results/epr_table_<task>.json): EM (and Break's normalised match) per
method, N, the training scale (examples labelled, L candidates, k, epochs, effective batch), wall times.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.backends.base import generation_spec, load_lm
from taskret.data import load_task, sample
from taskret.epr.methods import rank_test_examples
from taskret.epr.pipeline import EPRConfig, run_pipeline
from taskret.icl.evaluation import evaluate
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever

UNSUPERVISED = ("random", "sbert", "bm25")
TRAINED = {"epr": "lm", "dr-bm25": "bm25", "cbr": "cbr"}
ORACLES = ("bm25-oracle", "lm-oracle")
ALL_METHODS = UNSUPERVISED + tuple(TRAINED) + ORACLES


def main() -> None:
    options = parser(__doc__, out=None, task="mtop", lm="smollm2-135m", seed=0, icl=True)
    options.add_argument("--methods", default=",".join(ALL_METHODS))
    options.add_argument("--n", type=int, default=300, help="test examples (a seeded sample, the same for every method)")
    options.add_argument("--max-train-examples", type=int, default=None, help="label a seeded sample (default: all)")
    options.add_argument("--n-candidates", type=int, default=50)
    options.add_argument("--k", type=int, default=5, help="positives and hard negatives per example")
    options.add_argument("--epochs", type=int, default=5)
    options.add_argument("--batch-size", type=int, default=120, help="effective batch (the paper: 120)")
    options.add_argument("--mini-batch-size", type=int, default=16, help="GradCache chunk: memory, not the result")
    options.add_argument("--learning-rate", type=float, default=5e-5)
    options.add_argument("--shard-size", type=int, default=25)
    options.add_argument("--oracle-candidates", type=int, default=50,
                        help="L for LM-Oracle: BM25-Oracle's top L re-ranked by the LM (the rest of the prompt is "
                             "filled in BM25-Oracle order); L x N pairs are scored")
    options.add_argument("--work", default=None, help="method folders (default runs/bench/epr_table)")
    options.add_argument("--reuse", default=None, help="a folder of <task>/<method>/summary.json runs to take the "
                        "unsupervised methods from (benchmarks/results/icl_baselines)")
    options.add_argument("--out", default=None, help="the result (default: benchmarks/results/epr_table_TASK.json)")
    args = options.parse_args()

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(ALL_METHODS))
    if unknown:
        options.error(f"unknown methods: {', '.join(unknown)}; expected some of {', '.join(ALL_METHODS)}")
    work = Path(args.work or "runs/bench/epr_table") / args.task
    out_path = Path(args.out or f"benchmarks/results/epr_table_{args.task}.json")
    task = load_task(args.task, data_dir=args.data_dir)
    examples = sample(task.test, args.n, seed=args.seed)
    lms: dict = {}

    def lm():
        if args.lm not in lms:
            lms[args.lm] = load_lm(generation_spec(args.lm))
        return lms[args.lm]

    training = {"epochs": args.epochs, "batch_size": args.batch_size, "mini_batch_size": args.mini_batch_size,
                "learning_rate": args.learning_rate}
    shared_candidates = work / "candidates.jsonl"
    results: dict = {}
    started = time.perf_counter()
    for method in methods:
        run_dir = work / method
        summary_path = (run_dir / "eval" if method in TRAINED else run_dir) / "summary.json"
        if args.reuse and method in UNSUPERVISED and (Path(args.reuse) / args.task / method / "summary.json").exists():
            summary_path = Path(args.reuse) / args.task / method / "summary.json"
        t0 = time.perf_counter()
        if summary_path.exists():
            print(f"{method}: {summary_path} exists, reused", flush=True)
            summary = json.loads(summary_path.read_text())
        elif method in TRAINED:
            config = EPRConfig(task=args.task, data_dir=args.data_dir, work_dir=str(run_dir),
                               max_train_examples=args.max_train_examples, n_candidates=args.n_candidates,
                               scoring_lm=args.lm, shard_size=args.shard_size, k=args.k, labels=TRAINED[method],
                               training=training, inference_lm=args.lm, eval_limit=args.n,
                               context_window=args.context_window, max_new_tokens=args.max_new_tokens, seed=args.seed)
            # The three label sources share one set of candidates: mined once, copied in before a run.
            run_dir.mkdir(parents=True, exist_ok=True)
            if shared_candidates.exists() and not (run_dir / "candidates.jsonl").exists():
                shutil.copyfile(shared_candidates, run_dir / "candidates.jsonl")
            summary = run_pipeline(config, lms=lms)
            if not shared_candidates.exists():
                shutil.copyfile(run_dir / "candidates.jsonl", shared_candidates)
        else:
            if method in ORACLES:
                retriever = None
                # lm-oracle scores (example, candidate) pairs: L BM25-by-gold-output candidates each.
                n_pairs = (len(examples) * min(args.oracle_candidates, len(task.train)) if method == "lm-oracle"
                           else len(examples))
                with progress_bar(n_pairs, f"{args.task}/{method}: ranking", unit="pairs") as advance:
                    retrieved = rank_test_examples(method, task, examples, lm(), seed=args.seed, progress=advance,
                                                   n_candidates=args.oracle_candidates)
                    if method == "bm25-oracle":  # no LM calls: done at once
                        advance(n_pairs)
            else:
                retriever, retrieved = make_retriever(method, seed=args.seed).index(task.train), None
            with progress_bar(len(examples), f"{args.task}/{method}") as advance:
                summary = evaluate(task, retriever, lm(), examples, run_dir, retriever_name=method,
                                   context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                                   progress=advance, retrieved=retrieved)
        if summary["n"] != len(examples):
            raise SystemExit(f"{summary_path}: holds {summary['n']} examples, not {len(examples)}: another --n; "
                             "use another --work")
        results[method] = {"metrics": {k: round(v, 2) for k, v in summary["metrics"].items()}, "n": summary["n"],
                           "eval_wall_time_s": summary["wall_time_s"], "this_run_s": round(time.perf_counter() - t0, 1)}
        print(f"{method}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()), flush=True)

    labelled = args.max_train_examples or len(task.train)
    write_result(out_path, {
        "benchmark": "epr_table",
        "command": command_line(args, options, leave_out=("data_dir", "work")),
        "machine": machine(),
        "task": args.task, "lm": args.lm, "n": len(examples), "seed": args.seed,
        "scale": {"train_pool": len(task.train), "examples_labelled": labelled, "n_candidates": args.n_candidates,
                  "pairs_scored": labelled * args.n_candidates, "k": args.k, "epochs": args.epochs,
                  "effective_batch": args.batch_size, "lm_oracle_candidates": args.oracle_candidates},
        "context_window": args.context_window,
        "results": results,
        "wall_time_s_this_run": round(time.perf_counter() - started, 1),
    })


if __name__ == "__main__":
    main()
