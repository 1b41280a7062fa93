"""Trained instruction-following retrieval: TART-dual, its no-instruction ablation and TART-full (BM25 top-100
reranked), trained on MTOP, Break and AmbigQA, evaluated on SciFact test (all 300 claims, 5,183 abstracts),
which stays out of training entirely (not its test claims, not its train claims, not its corpus).

Stages, each resumable (a finished stage's output is kept under --work and skipped when the script runs
again with the same settings; other settings are refused):

1. build-data: training rows from the training tasks (--train-tasks, a seeded sample of --limit queries
   each): instruction, query, positive, hard (BM25) / random / instruction-unfollowing negatives.
2. train: TART-dual (MiniLM, shared encoder, cached MNRL), TART-dual without instructions (the ablation),
   and TART-full (MiniLM cross-encoder, BCE at 1 positive : 4 negatives).
3. evaluate on SciFact test, NDCG@10 (and Recall@100, MRR@10), with and without the paper's SciFact
   instruction: BM25, untrained MiniLM, TART-dual, TART-dual trained without instructions, and BM25 +
   TART-full reranking BM25's top 100 (the first stage reads the claim alone in both rows, so they rerank
   the same candidates and differ only in what the cross-encoder reads).

Records the training wall time of each model, the evaluation wall time of each system (indexing
included, once per index) and the reranking throughput (query-document pairs per second).

    python benchmarks/tart_trained.py --data-dir ../shared/data              # the full run
    python benchmarks/tart_trained.py --limit 20 --eval-limit 20 --out /tmp/t.json --work /tmp/tw  # a smoke run
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tart_zero_shot import _machine, _round  # noqa: E402

from taskret.io import read_json, write_json
from taskret.rerank import load_reranker
from taskret.tart.cross_encoder import CONFIG_FILE as FULL_FILE
from taskret.tart.cross_encoder import TartFullConfig, train_tart_full
from taskret.tart.dual import CONFIG_FILE as DUAL_FILE
from taskret.tart.dual import TartDualConfig, train_tart_dual
from taskret.tart.evaluation import evaluate_retriever
from taskret.tart.tasks import load_retrieval_task, load_training_tasks, split_task_spec
from taskret.tart.training_data import (
    build_training_examples,
    read_training_examples,
    write_training_examples,
)

#: The summary keys each training run reports in the result.
TRAINING_KEYS = ("n_used", "n_skipped", "steps", "epochs", "batch_size", "learning_rate", "wall_time_s", "mean_loss",
                 "final_loss", "device")


def _stamp(start: float, text: str) -> None:
    print(f"[{time.perf_counter() - start:6.0f}s] {text}", flush=True)


def _guard(work: Path, settings: dict) -> None:
    """Stages are reused only under the settings they were made with."""
    path = work / "bench_config.json"
    if path.exists():
        used = read_json(path)
        if used != settings:
            changed = sorted(k for k in set(used) | set(settings) if used.get(k) != settings.get(k))
            raise SystemExit(f"{work} was made with other settings (changed: {', '.join(changed)}); "
                             f"use another --work or delete it")
    else:
        write_json(path, settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("TASKRET_DATA_DIR", "../shared/data"))
    parser.add_argument("--out", default="benchmarks/results/tart_trained.json")
    parser.add_argument("--work", default="runs/bench/tart_trained", help="stage outputs (models, data, evaluations)")
    parser.add_argument("--train-tasks", default="mtop,break,ambigqa:dev",
                        help="training tasks ('name' or 'name:split'; AmbigQA has only its dev split, not evaluated "
                        "here); scifact is refused unless --scifact-train")
    parser.add_argument("--scifact-train", action="store_true",
                        help="also train on SciFact's train claims (809 claims, disjoint from the 300 test claims, same "
                             "corpus): an in-domain row beside the zero-shot one, not a zero-shot result")
    parser.add_argument("--limit", type=int, default=300, help="training queries per task (seeded sample; 300 x 3 tasks "
                        "trains the three models in about 15 min on 2 cores)")
    parser.add_argument("--eval-limit", type=int, default=None, help="SciFact test claims (default: all 300)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dual-batch-size", type=int, default=32)
    parser.add_argument("--dual-lr", type=float, default=5e-5)
    parser.add_argument("--full-batch-size", type=int, default=32)
    parser.add_argument("--full-lr", type=float, default=3e-5)
    parser.add_argument("--full-epochs", type=int, default=None, help="epochs of TART-full (default: --epochs); its "
                        "new classification head needs more steps than the dual encoders")
    parser.add_argument("--max-length", type=int, default=256, help="tokens seen by every trained model")
    parser.add_argument("--rerank-top-k", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="tart_dual,tart_dual_no_instruction,tart_full",
                        help="the models to train (and the systems that need them to evaluate)")
    parser.add_argument("--only", default=None,
                        help="evaluate only these SYSTEM.TAG entries (e.g. bm25+tart_full.instruction), for spreading "
                             "the evaluations over processes; writes their files, not --out")
    parser.add_argument("--skip", default=None,
                        help="leave these SYSTEM.TAG entries out of --out (recorded in its command), e.g. an "
                             "evaluation too slow for the time at hand")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    start = time.perf_counter()
    data_dir, work = Path(args.data_dir), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train_specs = [t.strip() for t in args.train_tasks.split(",") if t.strip()]
    if any(split_task_spec(spec, "train")[0] == "scifact" or Path(spec).name == "scifact" for spec in train_specs):
        raise SystemExit("scifact is the evaluation task: keep it out of --train-tasks (--scifact-train adds its "
                         "train claims only)")
    if args.scifact_train:
        train_specs.append("scifact:train")
    full_epochs = args.full_epochs or args.epochs
    settings = {k: getattr(args, k) for k in ("train_tasks", "limit", "epochs", "dual_batch_size", "dual_lr",
                                              "full_batch_size", "full_lr", "max_length", "seed")}
    # Added later: recorded only when used, so work folders made before them stay reusable.
    if args.scifact_train:
        settings["scifact_train"] = True
    if full_epochs != args.epochs:
        settings["full_epochs"] = full_epochs
    _guard(work, {**settings, "data_dir": str(data_dir.resolve())})

    # 1. training data
    data_path = work / "train.jsonl"
    stats_path = work / "train_stats.json"
    if data_path.exists():
        _stamp(start, f"build-data: {data_path} exists, skipped")
    else:
        _stamp(start, f"build-data: {', '.join(train_specs)}, {args.limit} queries each")
        t0 = time.perf_counter()
        tasks, skipped = load_training_tasks(train_specs, data_dir, "train", limit=args.limit, seed=args.seed)
        stats: dict = {}
        rows = build_training_examples(tasks, first_stage="bm25", seed=args.seed, stats=stats)
        write_json(stats_path, {**{k: v for k, v in stats.items() if k != "denoised"}, "skipped_tasks": skipped,
                                "build_s": round(time.perf_counter() - t0, 1)})
        write_training_examples(data_path, rows)
    rows = read_training_examples(data_path)
    data_stats = read_json(stats_path)

    # 2. training
    def dual(use_instruction: bool) -> TartDualConfig:
        return TartDualConfig(epochs=args.epochs, batch_size=args.dual_batch_size, learning_rate=args.dual_lr,
                              max_seq_length=args.max_length, seed=args.seed, use_instruction=use_instruction)

    runs = {
        "tart_dual": (work / "dual", DUAL_FILE, lambda out: train_tart_dual(rows, out, dual(True), source=str(data_path))),
        "tart_dual_no_instruction": (work / "dual_no_instruction", DUAL_FILE,
                                     lambda out: train_tart_dual(rows, out, dual(False), source=str(data_path))),
        "tart_full": (work / "full", FULL_FILE, lambda out: train_tart_full(rows, out, TartFullConfig(
            epochs=full_epochs, batch_size=args.full_batch_size, learning_rate=args.full_lr,
            max_length=args.max_length, seed=args.seed), source=str(data_path))),
    }
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    if wanted - set(runs):
        raise SystemExit(f"unknown --models {', '.join(sorted(wanted - set(runs)))}; expected some of {', '.join(runs)}")
    runs = {name: run for name, run in runs.items() if name in wanted}
    training = {}
    for name, (out, marker, train) in runs.items():
        if (out / marker).exists():
            _stamp(start, f"train {name}: {out / marker} exists, skipped")
        else:
            _stamp(start, f"train {name} on {len(rows)} rows")
            train(out)
        summary = read_json(out / marker)
        training[name] = {k: summary[k] for k in TRAINING_KEYS if k in summary}
        _stamp(start, f"    {name}: {summary['steps']} steps in {summary['wall_time_s']:.0f}s, "
                      f"mean loss {summary['mean_loss']:.4f}")

    # 3. evaluation on SciFact test
    scifact = load_retrieval_task("scifact", data_dir, "test").sample(args.eval_limit, seed=args.seed)
    if args.scifact_train:
        # The in-domain row is only honest if no test claim was trained on.
        trained = {row["qid"] for row in rows if row["task"] == "scifact"}
        overlap = trained & set(scifact.queries)
        if overlap:
            raise SystemExit(f"{len(overlap)} SciFact test claims are in the training data, e.g. {sorted(overlap)[:3]}")
    systems = {
        "bm25": ("bm25", None),
        "minilm_untrained": ("dense:minilm-l6", None),
        "tart_dual": (f"dense:{work / 'dual' / 'model'}", None),
        "tart_dual_no_instruction": (f"dense:{work / 'dual_no_instruction' / 'model'}", None),
        "bm25+tart_full": ("bm25", work / "full"),
    }
    # Evaluations are kept per evaluation setting: another --eval-limit or --rerank-top-k evaluates again.
    needs = {"tart_dual": "tart_dual", "tart_dual_no_instruction": "tart_dual_no_instruction",
             "bm25+tart_full": "tart_full"}
    systems = {name: system for name, system in systems.items() if needs.get(name, name) not in needs.values()
               or needs[name] in runs}
    eval_dir = work / f"eval-{args.eval_limit or 'all'}-top{args.rerank_top_k}"
    indexes: dict = {}
    reranker = None
    results: dict = {}
    for system, (spec, rerank) in systems.items():
        results[system] = {}
        for use_instruction in (False, True):
            tag = "instruction" if use_instruction else "no_instruction"
            path = eval_dir / f"{system}.{tag}.json"
            if args.only and f"{system}.{tag}" not in args.only.split(","):
                continue
            if args.skip and f"{system}.{tag}" in args.skip.split(",") and not path.exists():
                continue
            if path.exists():
                entry = read_json(path)
                _stamp(start, f"evaluate {system}, {tag}: {path} exists, skipped")
            else:
                if rerank is not None and reranker is None:
                    reranker = load_reranker(rerank, batch_size=32)
                t0 = time.perf_counter()
                result = evaluate_retriever(spec, [scifact], "closed", use_instruction, k=100, indexes=indexes,
                                            reranker=reranker if rerank is not None else None,
                                            rerank_top_k=args.rerank_top_k, first_stage_instruction=False
                                            if rerank is not None else None)
                one = result["settings"]["closed"]["scifact"]
                entry = {**_round(one["metrics"]), "eval_s": round(time.perf_counter() - t0, 1),
                         "index_s": one["index_s"], "query_s": one["query_s"]}
                for key in ("rerank_s", "rerank_pairs", "rerank_pairs_per_s"):
                    if key in one:
                        entry[key] = one[key]
                write_json(path, entry)
            results[system][tag] = entry
            _stamp(start, f"    {system}, {tag}: NDCG@10 {entry['ndcg@10']:.1f} ({entry['eval_s']:.0f}s"
                          + (f", {entry['rerank_pairs_per_s']} pairs/s)" if "rerank_pairs_per_s" in entry else ")"))

    if args.only:
        print(f"evaluated {args.only}; run again without --only to write {args.out}")
        return
    result = {
        "benchmark": "tart_trained",
        "command": "python benchmarks/tart_trained.py " + " ".join(
            f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items()
            if v is not None and v is not False and k != "work"),
        "machine": _machine(),
        "metrics_note": "percent, trec_eval (pytrec-eval-terrier); SciFact test, each claim searching the whole "
                        "5,183-abstract corpus; 'instruction' = the paper's BEIR SciFact instruction before "
                        "' [SEP] ' (for the reranker; its BM25 first stage reads the claim alone in both rows)",
        "training": {"tasks": train_specs, "limit_per_task": args.limit, "data": data_stats, "models": training,
                     "total_training_s": round(sum(t["wall_time_s"] for t in training.values()), 1)},
        "scifact_test": {"n_queries": len(scifact.queries), "n_docs": len(scifact.corpus),
                         "instruction": scifact.instruction, "rerank_top_k": args.rerank_top_k,
                         "ndcg@10": {s: {tag: r[tag]["ndcg@10"] for tag in r} for s, r in results.items()},
                         "results": results},
        "wall_time_s_this_run": round(time.perf_counter() - start, 1),
    }
    write_json(args.out, result)
    print(f"-> {args.out}")
    print(json.dumps(result["scifact_test"]["ndcg@10"], indent=1))


if __name__ == "__main__":
    main()
