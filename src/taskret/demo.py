"""The demo: retrievers compared on the MTOP slice shipped inside the package."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from .backends.transformers import CausalLM
from .data import load_task
from .icl.evaluation import evaluate
from .io import write_json
from .progress import progress_bar
from .retrieval import make_retriever

# A small window keeps the demo well under 10 minutes on a 2-core CPU (~20 demonstrations).
DEMO_CONTEXT_WINDOW = 640
DEMO_MAX_NEW_TOKENS = 96

# EPR at demo scale: 40 labelled examples x 8 BM25 candidates = 320 LM-scored pairs (the paper: all
# training examples x 50). Enough to show every stage and its files, not to beat the baselines.
DEMO_EPR = {"max_train_examples": 40, "n_candidates": 8, "k": 2, "shard_size": 16,
            "training": {"epochs": 3, "batch_size": 32, "mini_batch_size": 16, "learning_rate": 5e-5}}


def _run_epr(out: Path, lm: str, console: Console, lms: dict) -> dict:
    from .epr.pipeline import EPRConfig, run_pipeline

    config = EPRConfig(task="demo", work_dir=str(out / "epr_work"), scoring_lm=lm, inference_lm=lm, eval_limit=None,
                       context_window=DEMO_CONTEXT_WINDOW, max_new_tokens=DEMO_MAX_NEW_TOKENS, **DEMO_EPR)
    start = time.perf_counter()
    summary = run_pipeline(config, console=console, lms=lms)
    summary["index_time_s"] = round(time.perf_counter() - start - summary["wall_time_s"], 2)
    summary["retriever"] = "epr"
    return summary


def run_demo(out: str | Path, lm: str = "smollm2-135m", methods: Sequence[str] = ("random", "bm25", "sbert", "epr"),
             console: Console | None = None) -> list[dict]:
    console = console or Console()
    out = Path(out)
    task = load_task("demo")
    console.print(f"taskret demo: MTOP slice, {len(task.train)} training examples, {len(task.test)} test inputs, LM {lm}")
    lms: dict[str, CausalLM] = {}
    rows = []
    for method in methods:
        if method == "epr":
            rows.append(_run_epr(out, lm, console, lms))
            continue
        start = time.perf_counter()
        retriever = make_retriever(method).index(task.train)
        index_time = time.perf_counter() - start
        if lm not in lms:
            lms[lm] = CausalLM.load(lm)
        model = lms[lm]
        with progress_bar(len(task.test), f"{method:>8}") as advance:
            summary = evaluate(task, retriever, model, task.test, out / method, retriever_name=method,
                               context_window=DEMO_CONTEXT_WINDOW, max_new_tokens=DEMO_MAX_NEW_TOKENS, progress=advance,
                               extra={"index_time_s": round(index_time, 2)})
        rows.append(summary)
    table = Table("method", "EM", "N", "demos/prompt", "build (s)", "inference (s)", title="MTOP demo slice: exact match")
    for row in rows:
        table.add_row(row["retriever"], f"{row['metrics']['em']:.1f}", str(row["n"]), f"{row['mean_demos']:.1f}",
                      f"{row['index_time_s']:.0f}", f"{row['wall_time_s']:.0f}")
    console.print(table)
    write_json(out / "demo_summary.json", rows)
    console.print(f"predictions (with the retrieved ids and the exact prompt) in {out}/<method>/predictions.jsonl")
    return rows
