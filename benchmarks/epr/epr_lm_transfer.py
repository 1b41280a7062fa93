"""Score with one LM, infer with another (the EPR paper's Table 4).

For every scoring LM in --lms, EPR is trained at the small scale of benchmarks/epr/configs/epr_mtop_small.json
(``taskret epr run`` with that scoring LM); each trained retriever then fills the prompts of every inference LM
in --lms. BM25 with each inference LM is the reference row. All cells use the same seeded test sample.

    python benchmarks/epr/epr_lm_transfer.py --data-dir ../shared/data --lms smollm2-135m,gemma3-270m --n 300 \\
        --reuse smollm2-135m=benchmarks/results/epr_mtop_small
    python benchmarks/epr/epr_lm_transfer.py --task demo --n 4 --max-train-examples 12 --n-candidates 3 --epochs 1 \\
        --lms smollm2-135m --work /tmp/t --out /tmp/t.json                                  # a smoke run

Every cell is a folder under --work with its predictions.jsonl and summary.json, reused when the script runs
again (a killed run resumes). Writes --out: EM per (scoring LM, inference LM), BM25 per inference LM, wall times.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.backends.base import generation_spec, load_lm
from taskret.data import load_task, sample
from taskret.epr.pipeline import EPRConfig, run_pipeline
from taskret.icl.evaluation import evaluate, mcnemar, read_correct
from taskret.io import read_json
from taskret.progress import progress_bar
from taskret.retrieval import Retriever, make_retriever


def _folder_name(lm: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in lm)


def label_agreement(run_a: Path, run_b: Path, k: int) -> dict:
    """Two scoring LMs on the same candidates: mean per-example Spearman correlation of their log-probabilities,
    and the share of one's top-k positives (and bottom-k negatives) that the other's labels also hold."""
    from scipy.stats import spearmanr

    def scores(run: Path) -> dict[str, dict[str, float]]:
        rows = map(json.loads, (run / "scoring" / "scores.jsonl").read_text().splitlines())
        return {r["id"]: {c["id"]: c["logprob"] for c in r["candidates"]} for r in rows}

    def labels(run: Path) -> dict[str, dict]:
        return {r["id"]: r for r in map(json.loads, (run / "labels.jsonl").read_text().splitlines())}

    sa, sb, la, lb = scores(run_a), scores(run_b), labels(run_a), labels(run_b)
    shared = [i for i in sa if i in sb and sa[i].keys() == sb[i].keys() and len(sa[i]) > 2]
    rhos = [spearmanr([sa[i][c] for c in sa[i]], [sb[i][c] for c in sa[i]]).correlation for i in shared]
    rhos = [r for r in rhos if r == r]  # NaN when one LM scores every candidate alike
    both = [i for i in la if i in lb]
    kept = {kind: sum(len(set(la[i][kind]) & set(lb[i][kind])) / max(len(la[i][kind]), 1) for i in both) / len(both)
            for kind in ("positives", "negatives")}
    return {"n_examples": len(shared), "spearman_mean": round(sum(rhos) / len(rhos), 3),
            f"top{k}_positives_shared": round(kept["positives"], 3),
            f"bottom{k}_negatives_shared": round(kept["negatives"], 3)}


def main() -> None:
    options = parser(__doc__, out=None, task="mtop", seed=0, icl=True)
    options.add_argument("--lms", default="smollm2-135m,gemma3-270m", help="the LMs, each used to score and to infer")
    options.add_argument("--n", type=int, default=300, help="test examples (a seeded sample, the same for every cell)")
    options.add_argument("--max-train-examples", type=int, default=300)
    options.add_argument("--n-candidates", type=int, default=8)
    options.add_argument("--k", type=int, default=3)
    options.add_argument("--epochs", type=int, default=5)
    options.add_argument("--batch-size", type=int, default=64)
    options.add_argument("--reuse", action="append", default=[],
                        help="SCORING_LM=DIR: a finished `taskret epr run` folder made with these settings and that "
                             "scoring LM (its own evaluation is reused when it holds --n examples, else redone here)")
    options.add_argument("--work", default="runs/bench/epr_lm_transfer")
    options.add_argument("--out", default=None, help="the result (default: benchmarks/results/epr_lm_transfer_TASK.json)")
    args = options.parse_args()
    os.environ["TASKRET_DATA_DIR"] = args.data_dir  # for reused runs whose config names no data_dir

    lm_names = [name.strip() for name in args.lms.split(",") if name.strip()]
    reuse = dict(item.split("=", 1) for item in args.reuse)
    work = Path(args.work) / args.task
    out_path = Path(args.out or f"benchmarks/results/epr_lm_transfer_{args.task}.json")
    task = load_task(args.task, data_dir=args.data_dir)
    examples = sample(task.test, args.n, seed=args.seed)
    started = time.perf_counter()

    def cell(folder: Path, retriever, inference_lm: str, name: str) -> dict:
        summary_path = folder / "summary.json"
        if not summary_path.exists():
            lm = load_lm(generation_spec(inference_lm))
            with progress_bar(len(examples), f"{name} -> {inference_lm}") as advance:
                evaluate(task, retriever, lm, examples, folder, retriever_name=name,
                         context_window=args.context_window, max_new_tokens=args.max_new_tokens, progress=advance)
        summary = json.loads(summary_path.read_text())
        if summary["n"] != len(examples):
            raise SystemExit(f"{summary_path} holds {summary['n']} examples, not {len(examples)}; use another --work")
        print(f"{name} -> {inference_lm}: EM {summary['metrics']['em']:.1f}", flush=True)
        return {"em": round(summary["metrics"]["em"], 2), "eval_wall_time_s": summary["wall_time_s"]}

    def against_bm25(predictions: Path, inference_lm: str) -> dict:
        """An EPR cell paired with BM25 under the same inference LM on the same examples (McNemar)."""
        test = mcnemar(read_correct(predictions), bm25_correct[inference_lm])
        return {"only_epr": test.only_a, "only_bm25": test.only_b, "mcnemar_p": round(test.p_value, 4)}

    bm25 = make_retriever("bm25", seed=args.seed).index(task.train)
    results: dict = {"bm25": {}, "epr": {}}
    bm25_correct = {}
    for inference_lm in lm_names:
        folder = work / "bm25" / _folder_name(inference_lm)
        results["bm25"][inference_lm] = cell(folder, bm25, inference_lm, "bm25")
        bm25_correct[inference_lm] = read_correct(folder / "predictions.jsonl")

    for scoring_lm in lm_names:
        run_dir = Path(reuse.get(scoring_lm, work / f"epr-scored-by-{_folder_name(scoring_lm)}"))
        config = EPRConfig(task=args.task, data_dir=args.data_dir, work_dir=str(run_dir),
                           max_train_examples=args.max_train_examples, n_candidates=args.n_candidates,
                           scoring_lm=scoring_lm, k=args.k, labels="lm",
                           training={"epochs": args.epochs, "batch_size": args.batch_size, "mini_batch_size": 16,
                                     "learning_rate": 5e-5},
                           inference_lm=scoring_lm, eval_limit=args.n, context_window=args.context_window,
                           max_new_tokens=args.max_new_tokens, seed=args.seed)
        if scoring_lm in reuse:
            # A finished run is taken as it was configured, once the settings that shape the result agree.
            used = EPRConfig.model_validate(read_json(run_dir / "pipeline_config.json"))
            # (its eval_limit may differ: the diagonal cell is then evaluated here on --n examples)
            shaping = ("task", "max_train_examples", "n_candidates", "scoring_lm", "k", "labels", "training",
                       "inference_lm", "context_window", "max_new_tokens", "seed")
            changed = [k for k in shaping if getattr(used, k) != getattr(config, k)]
            if changed:
                raise SystemExit(f"--reuse {scoring_lm}={run_dir}: made with other {', '.join(changed)}")
            config = used
        t0 = time.perf_counter()
        run_pipeline(config)  # trains (or finds) the retriever and evaluates the diagonal cell
        retriever = Retriever.load(run_dir / "index")
        row = {}
        for inference_lm in lm_names:
            if inference_lm == scoring_lm and config.eval_limit == args.n:
                summary = json.loads((run_dir / "eval" / "summary.json").read_text())
                row[inference_lm] = {"em": round(summary["metrics"]["em"], 2),
                                     "eval_wall_time_s": summary["wall_time_s"]}
                predictions = run_dir / "eval" / "predictions.jsonl"
            else:
                folder = work / f"epr-scored-by-{_folder_name(scoring_lm)}-infer" / _folder_name(inference_lm)
                row[inference_lm] = cell(folder, retriever, inference_lm, f"epr:{run_dir}")
                predictions = folder / "predictions.jsonl"
            row[inference_lm]["vs_bm25"] = against_bm25(predictions, inference_lm)
        row["pipeline_this_run_s"] = round(time.perf_counter() - t0, 1)
        results["epr"][scoring_lm] = row

    # How much do the scoring LMs agree on the same (example, candidate) pairs? Their labels are EPR's only signal.
    run_dirs = {lm: Path(reuse.get(lm, work / f"epr-scored-by-{_folder_name(lm)}")) for lm in lm_names}
    agreement = {f"{a} vs {b}": label_agreement(run_dirs[a], run_dirs[b], args.k)
                 for i, a in enumerate(lm_names) for b in lm_names[i + 1:]}

    write_result(out_path, {
        "benchmark": "epr_lm_transfer",
        "command": command_line(args, options, leave_out=("data_dir", "work", "reuse")),
        "machine": machine(),
        "task": args.task, "n": len(examples), "lms": lm_names,
        "scale": {"examples_labelled": args.max_train_examples, "n_candidates": args.n_candidates, "k": args.k,
                  "epochs": args.epochs, "effective_batch": args.batch_size},
        "results": results,
        "label_agreement": agreement,
        "wall_time_s_this_run": round(time.perf_counter() - started, 1),
    })


if __name__ == "__main__":
    main()
