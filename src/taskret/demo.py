"""The demo: retrievers compared on the MTOP slice shipped inside the package."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from .data import load_task
from .evaluation import evaluate
from .io import write_json
from .lm import CausalLM
from .progress import progress_bar
from .retrieval import make_retriever

# A small window keeps the demo well under 10 minutes on a 2-core CPU (~20 demonstrations).
DEMO_CONTEXT_WINDOW = 640
DEMO_MAX_NEW_TOKENS = 96


def run_demo(out: str | Path, lm: str = "smollm2-135m", methods: Sequence[str] = ("random", "bm25", "sbert"),
             console: Console | None = None) -> list[dict]:
    console = console or Console()
    out = Path(out)
    task = load_task("demo")
    console.print(f"taskret demo: MTOP slice, {len(task.train)} training examples, {len(task.test)} test inputs, LM {lm}")
    model = CausalLM.load(lm)
    rows = []
    for method in methods:
        start = time.perf_counter()
        retriever = make_retriever(method).index(task.train)
        index_time = time.perf_counter() - start
        with progress_bar(len(task.test), f"{method:>8}") as advance:
            summary = evaluate(task, retriever, model, task.test, out / method, retriever_name=method,
                               context_window=DEMO_CONTEXT_WINDOW, max_new_tokens=DEMO_MAX_NEW_TOKENS, progress=advance,
                               extra={"index_time_s": round(index_time, 2)})
        rows.append(summary)
    table = Table("method", "EM", "N", "demos/prompt", "time (s)", title="MTOP demo slice: exact match")
    for row in rows:
        table.add_row(row["retriever"], f"{row['metrics']['em']:.1f}", str(row["n"]), f"{row['mean_demos']:.1f}",
                      f"{row['wall_time_s'] + row['index_time_s']:.0f}")
    console.print(table)
    write_json(out / "demo_summary.json", rows)
    console.print(f"predictions (with the retrieved ids and the exact prompt) in {out}/<method>/predictions.jsonl")
    return rows
