"""Trained instruction-following retrieval: TART-dual, its no-instruction ablation and TART-full (BM25 top-100
reranked), trained on MTOP, Break and AmbigQA, evaluated on SciFact test (all 300 claims, 5,183 abstracts),
which stays out of training entirely (not its test claims, not its train claims, not its corpus).

Stages, each resumable (a finished stage's output is kept under --work and skipped when the script runs
again with the same settings; other settings are refused):

1. ``taskret tart run`` (``taskret.tart.pipeline.run_pipeline``, training only): the training rows of the
   training tasks (--train-tasks, a seeded sample of --limit queries each: instruction, query, positive, hard
   (BM25) / random / instruction-unfollowing negatives), TART-dual (MiniLM, shared encoder, cached MNRL) and
   TART-full (MiniLM cross-encoder, BCE at 1 positive : 4 negatives). --work is its work folder.
2. the ablation: TART-dual trained on the same rows without instructions (--work/dual_no_instruction).
3. evaluate on SciFact test, NDCG@10 (and Recall@100, MRR@10), with and without the paper's SciFact
   instruction: BM25, untrained MiniLM, TART-dual, TART-dual trained without instructions, and BM25 +
   TART-full reranking BM25's top 100 (the first stage reads the claim alone in both rows, so they rerank
   the same candidates and differ only in what the cross-encoder reads).

Records the training wall time of each model, the evaluation wall time of each system (indexing
included, once per index) and the reranking throughput (query-document pairs per second).

    python benchmarks/documents/tart_trained.py --data-dir ../shared/data              # the full run
    python benchmarks/documents/tart_trained.py --limit 20 --eval-limit 20 --out /tmp/t.json --work /tmp/tw  # a smoke run
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, round_metrics, write_result  # noqa: E402

from taskret.io import read_json, write_json
from taskret.rerank import load_reranker
from taskret.tart.cross_encoder import CONFIG_FILE as FULL_FILE
from taskret.tart.dual import CONFIG_FILE as DUAL_FILE
from taskret.tart.dual import train_tart_dual
from taskret.tart.evaluation import evaluate_retriever
from taskret.tart.pipeline import TartRunConfig, run_pipeline
from taskret.tart.tasks import RetrievalTask, load_retrieval_task, split_task_spec
from taskret.tart.training_data import read_training_examples

#: The summary keys each training run reports in the result.
TRAINING_KEYS = ("n_used", "n_skipped", "steps", "epochs", "batch_size", "learning_rate", "wall_time_s", "mean_loss",
                 "final_loss", "device")
#: The trained models: their folder under --work and the file their training writes last (with its summary).
MODELS = {"tart_dual": ("dual", DUAL_FILE), "tart_dual_no_instruction": ("dual_no_instruction", DUAL_FILE),
          "tart_full": ("full", FULL_FILE)}
TAGS = {"no_instruction": False, "instruction": True}


class Log:
    """Progress lines with the seconds since the start (also run_pipeline's console)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def print(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:6.0f}s] {text}", flush=True)


def options():
    result = parser(__doc__, out="benchmarks/results/tart_trained.json", seed=0, threads=2)
    result.add_argument("--work", default="runs/bench/tart_trained", help="stage outputs (models, data, evaluations)")
    result.add_argument("--train-tasks", default="mtop,break,ambigqa:dev",
                        help="training tasks ('name' or 'name:split'; AmbigQA has only its dev split, not evaluated "
                        "here); scifact is refused unless --scifact-train")
    result.add_argument("--scifact-train", action="store_true",
                        help="also train on SciFact's train claims (809 claims, disjoint from the 300 test claims, same "
                             "corpus): an in-domain row beside the zero-shot one, not a zero-shot result")
    result.add_argument("--limit", type=int, default=300, help="training queries per task (seeded sample; 300 x 3 tasks "
                        "trains the three models in about 15 min on 2 cores)")
    result.add_argument("--eval-limit", type=int, default=None, help="SciFact test claims (default: all 300)")
    result.add_argument("--epochs", type=int, default=1)
    result.add_argument("--dual-batch-size", type=int, default=32)
    result.add_argument("--dual-lr", type=float, default=5e-5)
    result.add_argument("--full-batch-size", type=int, default=32)
    result.add_argument("--full-lr", type=float, default=3e-5)
    result.add_argument("--full-epochs", type=int, default=None, help="epochs of TART-full (default: --epochs); its "
                        "new classification head needs more steps than the dual encoders")
    result.add_argument("--max-length", type=int, default=256, help="tokens seen by every trained model")
    result.add_argument("--rerank-top-k", type=int, default=100)
    result.add_argument("--models", default=",".join(MODELS),
                        help="the models whose systems are evaluated; the pipeline always trains tart_dual and "
                             "tart_full, the ablation (tart_dual_no_instruction) is trained only when listed")
    result.add_argument("--only", default=None,
                        help="evaluate only these SYSTEM.TAG entries (e.g. bm25+tart_full.instruction), for spreading "
                             "the evaluations over processes; writes their files, not --out")
    result.add_argument("--skip", default=None,
                        help="leave these SYSTEM.TAG entries out of --out (recorded in its command), e.g. an "
                             "evaluation too slow for the time at hand")
    return result


def pipeline_config(args) -> TartRunConfig:
    """The training-only ``taskret tart run`` config of these arguments (its work folder refuses other ones)."""
    specs = [t.strip() for t in args.train_tasks.split(",") if t.strip()]
    if any(split_task_spec(spec, "train")[0] == "scifact" or Path(spec).name == "scifact" for spec in specs):
        raise SystemExit("scifact is the evaluation task: keep it out of --train-tasks (--scifact-train adds its "
                         "train claims only)")
    return TartRunConfig(
        work_dir=args.work, data_dir=str(Path(args.data_dir).resolve()), seed=args.seed,
        train_tasks=specs + (["scifact:train"] if args.scifact_train else []), max_train_queries=args.limit,
        dual={"epochs": args.epochs, "batch_size": args.dual_batch_size, "learning_rate": args.dual_lr,
              "max_seq_length": args.max_length},
        full={"epochs": args.full_epochs or args.epochs, "batch_size": args.full_batch_size,
              "learning_rate": args.full_lr, "max_length": args.max_length},
        eval_tasks=[])


def train_ablation(config: TartRunConfig, log: Log) -> None:
    """TART-dual without instructions, on the pipeline's rows with its TART-dual settings."""
    out = Path(config.work_dir) / MODELS["tart_dual_no_instruction"][0]
    if (out / DUAL_FILE).exists():
        log.print(f"train-dual-no-instruction: {out / DUAL_FILE} exists, skipped")
        return
    data = Path(config.work_dir) / "train.jsonl"
    settings = dataclasses.replace(config.dual_config(), use_instruction=False)
    model = train_tart_dual(read_training_examples(data), out, settings, source=str(data))
    log.print(f"train-dual-no-instruction: -> {model}")


def systems(work: str, models: set[str]) -> dict:
    """system: (first-stage retriever, the TART-full folder that reranks it), for the systems ``models`` allow."""
    every = {"bm25": ("bm25", None, None), "minilm_untrained": ("dense:minilm-l6", None, None),
             "tart_dual": (f"dense:{work}/dual/model", None, "tart_dual"),
             "tart_dual_no_instruction": (f"dense:{work}/dual_no_instruction/model", None, "tart_dual_no_instruction"),
             "bm25+tart_full": ("bm25", f"{work}/full", "tart_full")}
    return {name: (spec, rerank) for name, (spec, rerank, needs) in every.items() if needs is None or needs in models}


def evaluate_cell(spec: str, rerank: str | None, scifact: RetrievalTask, use_instruction: bool, top_k: int,
                  indexes: dict, rerankers: dict) -> dict:
    """One system on SciFact test, closed; a reranker's BM25 first stage reads the claim alone."""
    if rerank is not None and rerank not in rerankers:
        rerankers[rerank] = load_reranker(rerank, batch_size=32)
    start = time.perf_counter()
    result = evaluate_retriever(spec, [scifact], "closed", use_instruction, k=100, indexes=indexes,
                                reranker=rerankers.get(rerank), rerank_top_k=top_k,
                                first_stage_instruction=False if rerank is not None else None)
    one = result["settings"]["closed"]["scifact"]
    entry = {**round_metrics(one["metrics"]), "eval_s": round(time.perf_counter() - start, 1),
             "index_s": one["index_s"], "query_s": one["query_s"]}
    return {**entry, **{k: one[k] for k in ("rerank_s", "rerank_pairs", "rerank_pairs_per_s") if k in one}}


def evaluate_grid(args, systems: dict, scifact: RetrievalTask, log: Log) -> dict:
    """Every SYSTEM.TAG cell (kept per evaluation setting under --work, reused when it exists)."""
    eval_dir = Path(args.work) / f"eval-{args.eval_limit or 'all'}-top{args.rerank_top_k}"
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    indexes: dict = {}
    rerankers: dict = {}
    results: dict = {}
    for system, (spec, rerank) in systems.items():
        results[system] = {}
        for tag, use_instruction in TAGS.items():
            path = eval_dir / f"{system}.{tag}.json"
            if (only is not None and f"{system}.{tag}" not in only) or (f"{system}.{tag}" in skip and not path.exists()):
                continue
            if path.exists():
                log.print(f"evaluate {system}, {tag}: {path} exists, skipped")
            else:
                write_json(path, evaluate_cell(spec, rerank, scifact, use_instruction, args.rerank_top_k, indexes,
                                               rerankers))
            entry = results[system][tag] = read_json(path)
            log.print(f"    {system}, {tag}: NDCG@10 {entry['ndcg@10']:.1f} ({entry['eval_s']:.0f}s"
                      + (f", {entry['rerank_pairs_per_s']} pairs/s)" if "rerank_pairs_per_s" in entry else ")"))
    return results


def scifact_test(config: TartRunConfig, limit: int | None) -> RetrievalTask:
    """SciFact test (a seeded sample of ``limit`` claims); refused if the training rows hold one of its claims."""
    scifact = load_retrieval_task("scifact", config.data_dir, "test").sample(limit, seed=config.seed)
    rows = read_training_examples(Path(config.work_dir) / "train.jsonl")
    overlap = {row["qid"] for row in rows if row["task"] == "scifact"} & set(scifact.queries)
    if overlap:  # the in-domain row (--scifact-train) is only honest if no test claim was trained on
        raise SystemExit(f"{len(overlap)} SciFact test claims are in the training data, e.g. {sorted(overlap)[:3]}")
    return scifact


def summary(config: TartRunConfig, args, models: set[str], scifact: RetrievalTask, results: dict) -> dict:
    """The result's training and evaluation sections."""
    work = Path(config.work_dir)
    training = {name: {k: v for k, v in read_json(work / folder / marker).items() if k in TRAINING_KEYS}
                for name, (folder, marker) in MODELS.items() if name in models}
    return {
        "metrics_note": "percent, trec_eval (pytrec-eval-terrier); SciFact test, each claim searching the whole "
                        "5,183-abstract corpus; 'instruction' = the paper's BEIR SciFact instruction before "
                        "' [SEP] ' (for the reranker; its BM25 first stage reads the claim alone in both rows)",
        "training": {"tasks": config.train_tasks, "limit_per_task": args.limit,
                     "data": read_json(work / "train_stats.json"), "models": training,
                     "total_training_s": round(sum(t["wall_time_s"] for t in training.values()), 1)},
        "scifact_test": {"n_queries": len(scifact.queries), "n_docs": len(scifact.corpus),
                         "instruction": scifact.instruction, "rerank_top_k": args.rerank_top_k,
                         "ndcg@10": {s: {tag: r[tag]["ndcg@10"] for tag in r} for s, r in results.items()},
                         "results": results},
    }


def main() -> None:
    arg_parser = options()
    args = arg_parser.parse_args()
    models = {m.strip() for m in args.models.split(",") if m.strip()}
    if models - set(MODELS):
        arg_parser.error(f"unknown --models {', '.join(sorted(models - set(MODELS)))}; expected some of "
                         f"{', '.join(MODELS)}")
    import torch

    torch.set_num_threads(args.threads)
    measured_on = machine()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    log = Log()

    config = pipeline_config(args)
    run_pipeline(config, console=log)  # the training rows, TART-dual and TART-full
    if "tart_dual_no_instruction" in models:
        train_ablation(config, log)
    scifact = scifact_test(config, args.eval_limit)
    results = evaluate_grid(args, systems(args.work, models), scifact, log)
    if args.only:
        print(f"evaluated {args.only}; run again without --only to write {args.out}")
        return
    write_result(args.out, {"benchmark": "tart_trained",
                            "command": command_line(args, arg_parser, leave_out=("data_dir", "work")),
                            "machine": measured_on, **summary(config, args, models, scifact, results),
                            "wall_time_s_this_run": round(time.perf_counter() - log.start, 1)})
    print(json.dumps({s: {tag: r[tag]["ndcg@10"] for tag in r} for s, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
