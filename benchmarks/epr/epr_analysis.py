"""EPR analysis on MTOP, after `taskret epr run benchmarks/epr/configs/epr_mtop_small.json`:

1. Recall@K of the trained retriever (and of BM25 and SBERT) against LM-labelled positives of test
   examples (the paper's Figure 3): each test example's top-L BM25-by-gold-output candidates are scored
   by the scoring LM with the gold output; the top-k are its positives.
2. One-shot (k=1) against full-context EM for BM25, SBERT and EPR (the paper's Table 3).
3. The oracles on the same examples: BM25-Oracle, LM-Oracle (full context) and AnyCorrect-Oracle (one-shot).

    python benchmarks/epr/epr_analysis.py --data-dir ../shared/data --n 100

Every evaluation is kept under --out/<system>/ and reused when the script runs again (a killed run resumes);
--parts picks the sections to run (recall,one_shot,oracles,any_correct).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.backends.transformers import CausalLM
from taskret.data import load_task, sample
from taskret.epr.methods import any_correct_oracle, bm25_oracle, fill_ranking, lm_rank
from taskret.icl.evaluation import evaluate
from taskret.io import write_json
from taskret.progress import progress_bar
from taskret.retrieval import RetrievalResult, make_retriever


def recall_at(ranked: list[list[str]], positives: list[list[str]], k: int) -> float:
    return 100.0 * sum(len(set(r[:k]) & set(p)) / len(p) for r, p in zip(ranked, positives)) / len(ranked)


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_analysis", icl=True)
    options.add_argument("--epr", default="benchmarks/results/epr_mtop_small")
    options.add_argument("--also-epr", action="append", default=[], metavar="NAME=DIR",
                        help="another trained EPR run to analyse beside --epr (e.g. epr-full=benchmarks/results/"
                             "epr_mtop_full), repeatable")
    options.add_argument("--n", type=int, default=100)
    options.add_argument("--n-candidates", type=int, default=10)
    options.add_argument("--k-positives", type=int, default=3)
    options.add_argument("--parts", default="recall,one_shot,oracles,any_correct")
    args = options.parse_args()
    out = Path(args.out)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}

    task = load_task("mtop", data_dir=args.data_dir)
    examples = sample(task.test, args.n, seed=0)
    lm = CausalLM.load("smollm2-135m")
    timings = {}

    start = time.perf_counter()
    candidates = bm25_oracle(task, examples, k=args.n_candidates)
    labels_path = out / "lm_labels.json"
    if labels_path.exists():  # the LM ranking of the test candidates, kept: it is the slowest shared step
        saved = json.loads(labels_path.read_text())
        if saved["ids"] != [e.id for e in examples] or saved["n_candidates"] != args.n_candidates:
            raise SystemExit(f"{labels_path} was made for other examples or --n-candidates; use another --out")
        lm_ranked = RetrievalResult(saved["ranked"], np.array(saved["scores"], dtype=np.float32))
    else:
        lm_ranked = lm_rank(task, examples, candidates, lm, gold_output=True)
        write_json(labels_path, {"ids": [e.id for e in examples], "n_candidates": args.n_candidates,
                                 "ranked": lm_ranked.ids, "scores": lm_ranked.scores.tolist()})
    timings["lm_labelling_s"] = round(time.perf_counter() - start, 1)
    positives = [ids[: args.k_positives] for ids in lm_ranked.ids]

    def evaluated(name: str, **kwargs) -> float:
        """EM of one system, evaluated once and reused from --out/<name>/summary.json afterwards."""
        path = out / name / "summary.json"
        if not path.exists():
            evaluate(task, kwargs.pop("retriever", None), lm, examples, out / name, retriever_name=name,
                     context_window=args.context_window, max_new_tokens=args.max_new_tokens, **kwargs)
        summary = json.loads(path.read_text())
        if summary["n"] != len(examples):
            raise SystemExit(f"{path} holds {summary['n']} examples, not {len(examples)}; use another --out")
        print(f"{name}: EM {summary['metrics']['em']:.1f}", flush=True)
        return round(summary["metrics"]["em"], 2)

    retrievers = {"bm25": make_retriever("bm25"), "sbert": make_retriever("sbert"),
                  "epr": make_retriever(f"epr:{args.epr}")}
    for item in args.also_epr:
        name, sep, run_dir = item.partition("=")
        if not sep or not name or name in retrievers:
            raise SystemExit(f"--also-epr {item!r}: expected NAME=DIR with a new NAME")
        retrievers[name] = make_retriever(f"epr:{run_dir}")
    ks = [1, 3, 5, 10, 25, 50, 100]
    recall = {}
    for name, retriever in retrievers.items():
        if not retriever.ids:
            retriever.index(task.train)
        ranked = retriever.retrieve([e.input for e in examples], k=max(ks)).ids
        recall[name] = {k: round(recall_at(ranked, positives, k), 2) for k in ks}

    em = {}
    if "one_shot" in parts:
        for name, retriever in retrievers.items():
            for label, max_demos in (("one_shot", 1), ("full", None)):
                em[f"{name}/{label}"] = evaluated(f"{name}_{label}", retriever=retriever, max_demos=max_demos)
    if "oracles" in parts:
        # Both oracles fill the prompt from BM25-Oracle's top 100; LM-Oracle re-orders its first --n-candidates.
        oracle = bm25_oracle(task, examples, k=100)
        filled = fill_ranking(lm_ranked, oracle)
        for name, ranked in (("bm25-oracle", oracle), ("lm-oracle", filled)):
            em[f"{name}/full"] = evaluated(name, retrieved=ranked)
    if "any_correct" in parts:
        path = out / "any_correct.json"
        if not path.exists():
            start = time.perf_counter()
            with progress_bar(len(examples) * args.n_candidates, "any-correct one-shot generations") as advance:
                report = any_correct_oracle(task, examples, lm, candidates, max_new_tokens=args.max_new_tokens,
                                            progress=advance)
            write_json(path, {**report, "wall_time_s": round(time.perf_counter() - start, 1)})
        any_correct = json.loads(path.read_text())
        timings["any_correct_s"] = any_correct["wall_time_s"]
        em["anycorrect-oracle/one_shot"] = round(any_correct["any_correct"], 2)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, values in recall.items():
        ax.plot(ks, [values[k] for k in ks], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("K (retrieved examples)")
    ax.set_ylabel(f"recall of LM top-{args.k_positives} positives (%)")
    ax.set_title(f"MTOP test (N={len(examples)}), SmolLM2-135M labels")
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "recall_at_k.png", dpi=120)

    result = {
        "benchmark": "epr_analysis",
        "command": command_line(args, options),
        "machine": machine(),
        "n": len(examples), "recall_at_k": recall, "em": em, "timings": timings,
    }
    print(json.dumps(result, indent=1))
    write_result(out / "analysis.json", result)


if __name__ == "__main__":
    main()
