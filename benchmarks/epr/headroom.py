"""Can the LM do the task, and do better demonstrations move its score? A pilot on 100 test inputs per task and LM,
before a task costs hours of labelling.

For every in-context task (--tasks) and offline LM (--lms), on --n seeded test inputs, with the prompt settings of
the full runs (``--context-window``, ``--max-new-tokens``: epr_tasks.py's):

    random     demonstrations drawn at random from the training pool
    bm25       BM25 over the training inputs
    lm_oracle  BM25-Oracle's top 50 ranked by the LM with the gold output in view (50 LM-scored pairs per input)

It reports each method's score (the task's headline metric: exact match, Break's LF-EM, chrF for the generation
tasks), the gap LM-Oracle minus BM25 with its paired bootstrap interval, the smallest difference the task's full
test N would detect (the pilot's discordance, or the spread of its per-input differences, carried to N), and what
the LM costs on this machine: seconds per LM-scored pair (the LM-Oracle's ranking) and per generated answer (the
three evaluations). A task whose gap is under twice that detectable difference is "at the floor" for that LM: no
labelling budget can show a retriever's gain over BM25 there.

Generation runs on the engine ``taskret evaluate`` picks (``generation_spec``), the LM-Oracle's scoring on the LM as
named (EPR's labelling engine). Every (task, LM, method) evaluation is kept under --results
(``TASK/LM/METHOD/eval/``; the LM-Oracle's ranked chunks in ``TASK/LM/lm_oracle/oracle/``), committed, so that a
stopped pilot resumes in another session; an evaluation made on another machine is run again, never paired.

    python benchmarks/epr/headroom.py --data-dir ../shared/data                          # every task, both LMs
    python benchmarks/epr/headroom.py --data-dir ../shared/data --tasks mtop --lms smollm2-135m --n 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from epr_runs import lm_oracle  # noqa: E402
from epr_tasks import compare, evaluate_method, metric_of, one_machine, per_input  # noqa: E402

from taskret.backends.base import load_lm  # noqa: E402
from taskret.data import BENCHMARK_TASKS, GENERATION_TASKS, load_task, sample  # noqa: E402
from taskret.icl.compare import min_detectable_difference, min_detectable_mean_difference  # noqa: E402
from taskret.icl.evaluation import GRADED_METRICS  # noqa: E402
from taskret.io import read_json  # noqa: E402
from taskret.retrieval import make_retriever  # noqa: E402

#: every in-context task taskret loads, but SMCalFlow (kept for checks outside this work); the public benchmark
#: tasks come with ``taskret data download NAME``
TASKS = ("mtop", "break", *GENERATION_TASKS, *BENCHMARK_TASKS)
LMS = ("smollm2-135m", "gemma3-270m")
METHODS = ("random", "bm25", "lm_oracle")


def folder_name(task: str) -> str:
    return task.replace("/", "__")


def pilot(name: str, lm_name: str, results: Path, args) -> None:
    """The three evaluations of one task with one LM (each kept; a stopped pilot resumes). Generation on the engine
    ``taskret evaluate`` picks (epr_tasks.evaluate_method loads it), the LM-Oracle's scoring on the LM as named."""
    task = load_task(name, data_dir=args.data_dir)
    test = sample(task.test, args.n, seed=args.seed)
    folder = results / folder_name(name) / lm_name
    run = argparse.Namespace(**{**vars(args), "lm": lm_name})
    lms: dict = {}  # "lm": the generation LM; "scorer": the LM-Oracle's

    def scorer():
        if "scorer" not in lms:
            lms["scorer"] = load_lm(lm_name, dtype=args.scoring_dtype)
        return lms["scorer"]

    sources = {
        "random": lambda lm: (make_retriever("random", seed=args.seed).index(task.train), None),
        "bm25": lambda lm: (make_retriever("bm25", seed=args.seed).index(task.train), None),
        "lm_oracle": lambda lm: (None, lm_oracle(task, test, scorer(), folder / "lm_oracle" / "oracle")),
    }
    try:
        for method in METHODS:
            evaluate_method(task, test, folder / method / "eval", f"{name}/{lm_name}/{method}", sources[method], lms,
                            run)
    finally:
        for lm in lms.values():
            lm.close()


def detectable_at(n_full: int, mine: dict, other: dict, metric: str) -> float | None:
    """The smallest difference a test of ``n_full`` inputs detects at 80% power, read from the pilot's pairs: the
    share of inputs only one method gets right (a verdict metric, McNemar), or the spread of the per-input
    differences (a graded one), carried to ``n_full``."""
    if metric in GRADED_METRICS:
        differences = [float(mine[i]) - float(other[i]) for i in mine]
        at_pilot = min_detectable_mean_difference(differences)
        return None if at_pilot is None else round(float(at_pilot) * (len(mine) / n_full) ** 0.5, 2)
    discordant = sum(bool(mine[i]) != bool(other[i]) for i in mine)
    return min_detectable_difference(n_full, round(discordant / len(mine) * n_full))


def assemble_one(name: str, lm_name: str, results: Path, n_full: int) -> dict | None:
    """One row of the table (None until its three evaluations exist)."""
    folder = results / folder_name(name) / lm_name
    evals = {m: folder / m / "eval" for m in METHODS}
    if not all((e / "summary.json").exists() for e in evals.values()):
        return None
    summaries = {m: read_json(e / "summary.json") for m, e in evals.items()}
    where = one_machine(summaries)
    metric = metric_of(name)
    values = {m: per_input(e / "predictions.jsonl", metric) for m, e in evals.items()}
    scores = {m: round(summaries[m]["metrics"][metric], 2) for m in METHODS}
    gap = compare(values["lm_oracle"], values["bm25"], metric)
    detectable = detectable_at(n_full, values["lm_oracle"], values["bm25"], metric)
    chunks = [read_json(c) for c in sorted((folder / "lm_oracle" / "oracle").glob("*.json"))]
    timed = [c for c in chunks if "seconds" in c]
    if any("machine" in c for c in timed):  # a ranking resumed on another CPU kind: the evaluations' kind's seconds
        timed = [c for c in timed
                 if all(c.get("machine", {}).get(k) == (where or {}).get(k) for k in ("cpu", "cpu_flags"))]
    answers = sum(summaries[m]["n"] for m in METHODS)
    difference = scores["lm_oracle"] - scores["bm25"]
    return {**scores, "metric": metric, "n": summaries["bm25"]["n"], "n_full": n_full,
            "gap": round(difference, 2), "gap_ci95": gap["diff_ci95"], "gap_p": gap["p"],
            "min_detectable_diff_full_n": detectable,
            "floor": bool(detectable is None or difference < 2 * detectable),  # a JSON bool, never numpy's
            "s_per_pair": round(sum(c["seconds"] for c in timed) / sum(c["pairs"] for c in timed), 3) if timed else None,
            "s_per_answer": round(sum(summaries[m]["wall_time_s"] for m in METHODS) / answers, 2),
            "s_per_pair_inputs": sum(len(c["inputs"]) for c in timed),
            # the LM-Oracle's precision and engine (each chunk's: one ranking, one precision)
            "scoring_runtime": chunks[0].get("runtime") if chunks else None,
            "generation_engine": (where or {}).get("engine", "transformers"), "machine": where,
            # the busiest start of the three evaluations (None before it was recorded): their seconds hold only
            # where this is under 1.5
            "load_average_at_start": max((s["load_average_at_start"] for s in summaries.values()
                                          if "load_average_at_start" in s), default=None)}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/headroom.json", seed=0, icl=True)
    options.add_argument("--tasks", default=",".join(TASKS), help="(default: %(default)s)")
    options.add_argument("--lms", default=",".join(LMS), help="(default: %(default)s)")
    options.add_argument("--n", type=int, default=100, help="test inputs per task (default: %(default)s)")
    options.add_argument("--results", default="benchmarks/results/headroom", help="the evaluations (committed)")
    options.add_argument("--scoring-dtype", default="auto",
                         help="the LM-Oracle's precision (auto: bfloat16 where the CPU has it, else float32); a "
                         "ranking resumed on another CPU kind keeps its chunks' with it (default: %(default)s)")
    options.add_argument("--step", choices=("pilot", "report"), default="pilot",
                         help="pilot: run what is missing, then report; report: only the table from what exists")
    args = options.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    lms = [m for m in args.lms.split(",") if m]
    results = Path(args.results)
    started = machine()
    installed = []
    for name in tasks:
        try:
            load_task(name, data_dir=args.data_dir)
            installed.append(name)
        except FileNotFoundError as err:  # a public task not downloaded here: said, skipped
            print(f"{name}: not installed in {args.data_dir}, skipped ({err})", flush=True)
    if args.step == "pilot":
        for lm_name in lms:  # one LM through every task first: the cheaper LM's verdicts come first
            for name in installed:
                start = time.perf_counter()
                pilot(name, lm_name, results, args)
                print(f"{name}/{lm_name}: {time.perf_counter() - start:.0f} s", flush=True)
    table: dict[str, dict] = {}
    for name in installed:
        n_full = len(load_task(name, data_dir=args.data_dir).test)
        for lm_name in lms:
            row = assemble_one(name, lm_name, results, n_full)
            if row is not None:
                table.setdefault(name, {})[lm_name] = row
    write_result(args.out, {"benchmark": "headroom", "command": command_line(args, options, leave_out=("data_dir", "step")),
                            "machine": started, "n": args.n, "tasks": table})
    for name, rows in table.items():
        for lm_name, row in rows.items():
            print(f"{name} / {lm_name}: random {row['random']}, BM25 {row['bm25']}, LM-Oracle {row['lm_oracle']} "
                  f"({row['metric']}); gap {row['gap']:+.1f} {row['gap_ci95']}, detectable at N={row['n_full']}: "
                  f"{row['min_detectable_diff_full_n']}{' -> at the floor' if row['floor'] else ''}", flush=True)


if __name__ == "__main__":
    main()
