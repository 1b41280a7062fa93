"""Issue 48, set-level selection at inference: plain EPR against EPR + DPP and EPR + MMR (taskret.icl.selection)
on the same seeded N test inputs of each task, with one inference LM, each paired with plain EPR by McNemar's test.

Methods (each a folder under --work/<task>/<method>/, resumed when its summary.json holds the same N):

- epr: the base retriever's top of the ranking, filled to the token budget (``taskret evaluate`` as it is);
- epr+dpp: greedy MAP of CEIL's DPP kernel over the base retriever's top --select-candidates;
- epr+mmr: maximal marginal relevance over the same candidates.

The base retriever of a task is ``--base TASK=SPEC`` (default ``epr:runs/bench/epr_table/TASK/epr``, the EPR run
``benchmarks/epr_table.py`` trains; any retriever spec works). A selection weight not given (--dpp-weight,
--mmr-weight) is chosen on --tune-n held-out *training* examples among --tune-weights, never on the test set; that
costs len(weights) x tune-n LM generations per method and is reported (tune_cpu_s). No method calls the LM to select.

    python benchmarks/epr_beyond.py --tasks mtop,break                              # the issue's scale (N=300)
    python benchmarks/epr_beyond.py --tasks demo --base demo=sbert --n 10 --tune-n 10 --context-window 256 \\
        --max-new-tokens 16 --work /tmp/eb --out /tmp/eb.json                          # a smoke run

Writes --out (default benchmarks/results/epr_beyond.json), in issue 48's format: ``{TASK: {METHOD: {"em", "n",
"vs_epr": {"only_method", "only_epr", "p"}, "cpu_s", ...}}, "bm25": {TASK: EM}, "lm_oracle": {TASK: EM}, "device",
"commands"}``; ``bm25`` and ``lm_oracle`` are read from benchmarks/results/epr_table_TASK.json where it exists.
``cpu_s`` is the process CPU time (all threads) of the method's evaluation, selection included.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import HERE, command_line, describe_machine, machine, parser, round_metrics, write_result

from taskret.backends.base import load_lm
from taskret.data import load_task, sample
from taskret.icl.evaluation import choose_selection_weight, evaluate, mcnemar, read_correct
from taskret.icl.selection import Selection
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever

METHODS = {"epr": None, "epr+dpp": "dpp", "epr+mmr": "mmr"}
COST_FILE = "cost.json"  # beside a method's summary.json: its CPU time and weight tuning, for a resumed run


def _pairs(values: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        task, sep, spec = value.partition("=")
        if not sep or not task or not spec:
            raise SystemExit(f"{option} {value}: expected TASK=VALUE")
        pairs[task] = spec
    return pairs


def _reference(task: str) -> dict[str, float]:
    """BM25's and LM-Oracle's EM on the task from benchmarks/epr_table.py's result, where there is one."""
    path = HERE / "results" / f"epr_table_{task}.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text()).get("results", {})
    return {name: results[method]["metrics"]["em"] for name, method in (("bm25", "bm25"), ("lm_oracle", "lm-oracle"))
            if method in results}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_beyond.json", lm="smollm2-135m", seed=0, icl=True)
    options.add_argument("--tasks", default="mtop,break", help="comma-separated tasks (default: %(default)s)")
    options.add_argument("--base", action="append", default=[], metavar="TASK=SPEC",
                         help="the base retriever of a task (default: epr:runs/bench/epr_table/TASK/epr)")
    options.add_argument("--methods", default=",".join(METHODS), help="some of: " + ", ".join(METHODS))
    options.add_argument("--n", type=int, default=300, help="test inputs (a seeded sample, the same for every method)")
    options.add_argument("--select-candidates", type=int, default=50, help="the base retriever's top K to select from")
    options.add_argument("--dpp-weight", type=float, default=None, help="DPP relevance weight (default: tuned)")
    options.add_argument("--mmr-weight", type=float, default=None, help="MMR relevance weight (default: tuned)")
    options.add_argument("--tune-weights", default="0.5,0.7,0.8,0.9,0.95", help="weights tried on training examples")
    options.add_argument("--tune-n", type=int, default=100, help="held-out training examples the weight is chosen on")
    options.add_argument("--work", default="runs/bench/epr_beyond", help="method folders (default: %(default)s)")
    args = options.parse_args()

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if "epr" not in methods or set(methods) - set(METHODS):
        options.error(f"--methods: some of {', '.join(METHODS)}, epr among them (the others are paired with it)")
    bases = _pairs(args.base, "--base")
    weights_given = {"dpp": args.dpp_weight, "mmr": args.mmr_weight}
    tune_weights = [float(w) for w in args.tune_weights.split(",") if w.strip()]
    device = machine()
    lm = load_lm(args.lm)
    result: dict = {"benchmark": "epr_beyond", "lm": args.lm, "seed": args.seed, "context_window": args.context_window,
                    "select_candidates": args.select_candidates}
    references: dict[str, dict[str, float]] = {}
    for task_name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        task = load_task(task_name, data_dir=args.data_dir)
        examples = sample(task.test, args.n, seed=args.seed)
        spec = bases.get(task_name, f"epr:runs/bench/epr_table/{task_name}/epr")
        retriever = make_retriever(spec, seed=args.seed)
        if not retriever.ids:
            retriever.index(task.train)
        rows: dict[str, dict] = {}
        for method in methods:
            run_dir = Path(args.work) / task_name / method
            summary_path, cost_path = run_dir / "summary.json", run_dir / COST_FILE
            if summary_path.exists() and cost_path.exists() and json.loads(summary_path.read_text())["n"] == len(examples):
                print(f"{task_name}/{method}: {summary_path} exists, reused", flush=True)
                summary, cost = json.loads(summary_path.read_text()), json.loads(cost_path.read_text())
            else:
                cost, selection, kind = {}, None, METHODS[method]
                if kind is not None:
                    weight = weights_given[kind]
                    if weight is None:
                        cpu, wall = time.process_time(), time.perf_counter()
                        n_tune = min(args.tune_n, len(task.train))
                        with progress_bar(len(tune_weights) * n_tune, f"{task_name}/{method}: tuning") as advance:
                            weight, scores = choose_selection_weight(
                                task, retriever, lm, Selection(kind, n_candidates=args.select_candidates),
                                tune_weights, n=args.tune_n, seed=args.seed, context_window=args.context_window,
                                max_new_tokens=args.max_new_tokens, progress=advance)
                        cost["tuning"] = {"n": n_tune, "scores": {str(w): round(v, 2) for w, v in scores.items()},
                                          "chosen": weight, "tune_cpu_s": round(time.process_time() - cpu, 1),
                                          "tune_wall_s": round(time.perf_counter() - wall, 1)}
                    selection = Selection(kind, weight, args.select_candidates)
                cpu, wall = time.process_time(), time.perf_counter()
                with progress_bar(len(examples), f"{task_name}/{method}") as advance:
                    summary = evaluate(task, retriever, lm, examples, run_dir, retriever_name=spec,
                                       context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                                       progress=advance, selection=selection)
                cost.update(cpu_s=round(time.process_time() - cpu, 1), wall_s=round(time.perf_counter() - wall, 1))
                (run_dir / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n")
            row = {"em": round(summary["metrics"]["em"], 2), "n": summary["n"], "metrics": round_metrics(summary["metrics"]),
                   "cpu_s": cost["cpu_s"], "wall_s": cost["wall_s"], "lm_calls": summary["n"]}
            if "selection" in summary:
                row["selection"] = summary["selection"]
            if "tuning" in cost:
                row["tuning"] = cost["tuning"]
                row["lm_calls"] += cost["tuning"]["n"] * len(cost["tuning"]["scores"])
            rows[method] = row
            print(f"{task_name}/{method}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()),
                  flush=True)
        epr_correct = read_correct(Path(args.work) / task_name / "epr" / "predictions.jsonl")
        for method in methods:
            if method != "epr":
                test = mcnemar(read_correct(Path(args.work) / task_name / method / "predictions.jsonl"), epr_correct)
                rows[method]["vs_epr"] = {"only_method": test.only_a, "only_epr": test.only_b,
                                          "p": round(test.p_value, 4)}
        result[task_name] = {"base": spec, **rows}
        for name, value in _reference(task_name).items():
            references.setdefault(name, {})[task_name] = value
    result.update(references)
    result.update(device=describe_machine(device), machine=device,
                  commands=[command_line(args, options, leave_out=("data_dir", "work"))])
    write_result(args.out, result)


if __name__ == "__main__":
    main()
