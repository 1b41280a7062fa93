"""The demo: EPR against BM25 on an MTOP slice shipped inside the package, every stage run for real.

``taskret demo`` (``make demo``) runs, on a laptop CPU in about five minutes:

* BM25 (and, on request, random / SBERT) demonstrations for every shipped test input -> SmolLM2 -> EM;
* the whole EPR pipeline (:func:`taskret.epr.pipeline.run_pipeline`): BM25 candidates for a seeded sample
  of labelled examples -> the LM scores each candidate -> positives / hard negatives -> a MiniLM dual
  encoder trained on them -> a FAISS index of the pool -> the same test inputs -> EM;

then a table and one sentence with the paired count (test inputs only EPR solves vs only BM25 solves) and
McNemar's p-value. Every stage prints one line and nothing else (no trainer logs or bars).

Reproducible: seeds (python, numpy, torch, the trainer) and torch's thread count are fixed, and the EPR work
folder is rebuilt on every run, so the same machine prints the same numbers each time.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .backends.base import LMBackend
from .icl.compare import verdict  # the sentence `taskret compare` and `taskret epr run` end with too
from .io import write_json

# Sized so that EPR's lead over BM25 is well outside the noise of the test sample, in ~5 min on 2 CPU cores
# (the project's claim, at 300 test inputs and 300 labelled examples x 8 candidates: EPR 39.0 vs BM25 27.7).


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; the defaults are ``taskret demo``'s."""

    n_test: int | None = None  # None: every shipped test input
    n_labelled: int = 128  # training examples the LM labels (a seeded sample of the pool)
    n_candidates: int = 5  # BM25 candidates scored per labelled example
    k: int = 2  # positives and hard negatives kept per labelled example
    epochs: int = 3
    batch_size: int = 32
    mini_batch_size: int = 16
    learning_rate: float = 5e-5
    base_model: str = "minilm-l6"  # the dual encoder EPR trains
    context_window: int = 256  # ~4 demonstrations: short prompts keep inference cheap
    max_new_tokens: int = 96
    seed: int = 0
    threads: int = 2  # fixed, because float sums (and so greedy decoding) can change with the thread count
    # The LM's dtype. auto runs bfloat16 on a CPU with native bf16 (~3.5x faster there) and float32 elsewhere.
    # Greedy decoding follows float rounding, so the numbers are repeatable for one dtype on one kind of CPU; the
    # README gives them for float32 and bfloat16, and float32 is the dtype to compare two CPUs in.
    dtype: str = "auto"


DEFAULT_METHODS = ("bm25", "epr")


@contextmanager
def _reproducible(settings: DemoSettings) -> Iterator[None]:
    """Seed python, numpy and torch and fix torch's thread count for the block (restored after)."""
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(settings.threads, os.cpu_count() or 1)))
    random.seed(settings.seed)
    np.random.seed(settings.seed)
    torch.manual_seed(settings.seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Indented:
    """The console ``run_pipeline`` prints its stage lines (``name: what -> output (time)``) to, indented."""

    def __init__(self, console: Console, prefix: str):
        self.console, self.prefix = console, prefix

    def print(self, text: str) -> None:
        self.console.print(f"{self.prefix}{text}", soft_wrap=True)


def _took(start: float) -> str:
    return f"({time.perf_counter() - start:.1f} s)"


def run_demo(out: str | Path, lm: str | LMBackend = "smollm2-135m", methods: Sequence[str] = DEFAULT_METHODS,
             settings: DemoSettings = DemoSettings(), console: Console | None = None,
             train: str | Path | None = None, test: str | Path | None = None) -> dict:
    """Run the demo into ``out``; return ``{"rows": [summary per method], "paired": ..., "verdict": ...}``.

    ``lm``: a model name or folder, or a loaded backend (tests). ``train``/``test``: other MTOP-layout files
    instead of the shipped slice (tests run the machinery on a few lines)."""
    from .training.fit import quiet

    unknown = [m for m in methods if m not in ("random", "bm25", "sbert", "epr")]
    if unknown or not methods:
        raise ValueError(f"unknown demo method(s) {', '.join(unknown) or '(none)'}; choose from random, bm25, sbert, epr")
    console = console or Console()
    out = Path(out)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # else a warning after every fork
    started = time.perf_counter()
    with quiet(False), _reproducible(settings):
        result = _run(out, lm, list(methods), settings, console, train, test)
    console.print(escape(f"total {time.perf_counter() - started:.0f} s; each method's prompts and predictions in "
                         f"{out}/<method>/predictions.jsonl"), soft_wrap=True)
    return result


def _run(out: Path, lm: str | LMBackend, methods: list[str], settings: DemoSettings, console: Console,
         train: str | Path | None, test: str | Path | None) -> dict:
    from .backends.base import generation_spec, load_lm
    from .data import load_task, sample
    from .icl.evaluation import evaluate, mcnemar, read_correct
    from .retrieval import make_retriever

    files = {"train": str(train), "test": str(test)} if train is not None else {}
    task = load_task("mtop", **files) if files else load_task("demo")
    tests = sample(task.test, settings.n_test, seed=settings.seed)
    lm_name = lm if isinstance(lm, str) else lm.name
    console.print(escape(f"taskret demo: MTOP, pool of {len(task.train)} examples, {len(tests)} test inputs, "
                         f"{lm_name}, seed {settings.seed}"), soft_wrap=True)
    step = time.perf_counter()
    lms: dict[str, LMBackend] = {lm_name: lm if not isinstance(lm, str) else load_lm(lm, dtype=settings.dtype)}
    model = lms[lm_name]  # EPR's scoring LM
    generator = generation_spec(lm, dtype=settings.dtype) if isinstance(lm, str) else lm_name
    if generator != lm_name:  # every method generates on one engine; EPR's pipeline finds it under this name
        lms[generator] = model = load_lm(generator)
    dtype = _lm_dtype(model)
    engine = model.runtime().get("engine")
    console.print(escape(f"  load: {lm_name}{f' in {dtype}' if dtype else ''}"
                         f"{f' on {engine}' if engine and generator != lm_name else ''} {_took(step)}"), soft_wrap=True)

    rows, correct = [], {}
    for method in methods:
        if method == "epr":
            rows.append(_run_epr(out, lm_name, lms, settings, console, files, len(tests)))
            correct["epr"] = read_correct(out / "epr" / "eval" / "predictions.jsonl")
            continue
        step = time.perf_counter()
        retriever = make_retriever(method, seed=settings.seed).index(task.train)
        index_time = time.perf_counter() - step
        summary = evaluate(task, retriever, model, tests, out / method, retriever_name=method,
                           context_window=settings.context_window, max_new_tokens=settings.max_new_tokens,
                           extra={"index_time_s": round(index_time, 2)})
        correct[method] = read_correct(out / method / "predictions.jsonl")
        console.print(f"  {method}: index {len(task.train)} examples, answer {len(tests)} test inputs: "
                      f"EM {summary['metrics']['em']:.1f} {_took(step)}", soft_wrap=True)
        rows.append(summary)

    table = Table("method", "EM", "N", "demos/prompt", "build (s)", "inference (s)",
                  title=f"MTOP, {len(tests)} test inputs: exact match")
    for row in rows:
        table.add_row(row["retriever"], f"{row['metrics']['em']:.1f}", str(row["n"]), f"{row['mean_demos']:.1f}",
                      f"{row['index_time_s']:.0f}", f"{row['wall_time_s']:.0f}")
    console.print(table)
    result = {"settings": asdict(settings), "lm_dtype": dtype, "rows": rows, "paired": None, "verdict": None}
    if "epr" in correct and "bm25" in correct:
        em = {row["retriever"]: row["metrics"]["em"] for row in rows}
        paired = mcnemar(correct["epr"], correct["bm25"])
        result["paired"] = paired._asdict()
        result["verdict"] = verdict("EPR", "BM25", em["epr"], em["bm25"], paired, len(tests))
        console.print(escape(result["verdict"]), soft_wrap=True)
    write_json(out / "demo_summary.json", result)
    return result


def _lm_dtype(lm: LMBackend) -> str | None:
    """The dtype the LM's weights run in (``bfloat16``, ``float32``), or None for a backend that does not say (a
    server)."""
    return lm.runtime().get("dtype")


def _run_epr(out: Path, lm_name: str, lms: dict, settings: DemoSettings, console: Console, files: dict,
             n_test: int) -> dict:
    from .epr.pipeline import EPRConfig, run_pipeline

    work = out / "epr"
    # Every run rebuilds every stage: the pipeline skips stages whose files exist, and the demo shows them all.
    shutil.rmtree(work, ignore_errors=True)
    training = {"base_model": settings.base_model, "epochs": settings.epochs, "batch_size": settings.batch_size,
                "mini_batch_size": settings.mini_batch_size, "learning_rate": settings.learning_rate}
    config = EPRConfig(task="mtop" if files else "demo", **files, work_dir=str(work), scoring_lm=lm_name,
                       inference_lm=lm_name, max_train_examples=settings.n_labelled, n_candidates=settings.n_candidates,
                       k=settings.k, training=training, eval_limit=n_test, context_window=settings.context_window,
                       max_new_tokens=settings.max_new_tokens, seed=settings.seed,
                       baseline=None)  # the demo pairs EPR with its own BM25 run
    start = time.perf_counter()
    summary = run_pipeline(config, console=_Indented(console, "  epr "), progress=False, lms=lms)
    summary["index_time_s"] = round(time.perf_counter() - start - summary["wall_time_s"], 2)
    summary["retriever"] = "epr"
    return summary
