"""Issue 48, set-level selection at inference: plain EPR against EPR + DPP and EPR + MMR (taskret.icl.selection)
on the same seeded N test inputs of each task, with one inference LM, each paired with plain EPR by McNemar's test.

Methods (each a folder under --work/<task>/<method>/, resumed when its summary.json holds the same N):

- epr: the base retriever's top of the ranking, filled to the token budget (``taskret evaluate`` as it is);
- epr+dpp: greedy MAP of CEIL's DPP kernel over the base retriever's top --select-candidates;
- epr+mmr: maximal marginal relevance over the same candidates;
- lm-oracle: each test input's BM25-Oracle top 50 (BM25 over the training outputs, queried with the gold output)
  ranked by the LM's log P(gold | e, x), EPR's upper reference (50 LM calls per input, resumable);
- epr+reward: the base retriever's top --reward-candidates reranked by the fusion of its score and a reward
  model's (the gold-free candidate reranker, taskret.epr.candidate_reranker, trained on the base EPR run's LM
  scores into --reward-model when it is not there yet), each min-max scaled, the retriever's weight chosen like the selection weights (--reward-weights);
- any other retriever given as ``--variant NAME=SPEC`` (``{task}`` in SPEC is replaced by the task's name), e.g.
  ``--variant epr-round2=epr:runs/bench/epr_table/{task}/epr-round2``: a UDR second mining round
  (``"rounds": 2`` in the EPR config), filled to the budget as plain EPR is.

The base retriever of a task is ``--base TASK=SPEC`` (default ``epr:runs/bench/epr_table/TASK/epr``, the EPR run
``benchmarks/epr/epr_table.py`` trains; any retriever spec works). A selection weight not given (--dpp-weight,
--mmr-weight) is chosen on --tune-n held-out *training* examples among --tune-weights, never on the test set; that
costs len(weights) x tune-n LM generations per method and is reported (tune_cpu_s). No method calls the LM to select.

    python benchmarks/epr/epr_beyond.py --tasks mtop,break                              # the issue's scale (N=300)
    python benchmarks/epr/epr_beyond.py --tasks demo --base demo=sbert --n 10 --tune-n 10 --context-window 256 \\
        --max-new-tokens 16 --work /tmp/eb --out /tmp/eb.json                          # a smoke run

Multi-task, leave-one-task-out (UDR's question: does a user with a new task and no scoring budget get more from
a retriever trained on other tasks than from BM25?), with --held-out TASKS: for each held-out task, one dual
encoder (taskret.epr.multitask) is trained on the EPR labels of every --train-tasks task but it
(runs/bench/epr_table/TASK/epr/labels.jsonl, from ``taskret epr run``), each query written
``"{instruction} [SEP] {input}"`` with its task's instruction (INSTRUCTIONS); the held-out task is then queried
with its own instruction. Methods on the held-out task's --held-out-n test inputs: bm25, sbert (the untrained
MiniLM), multitask and, as the reference a scoring budget buys, epr (trained on the task's own labels); each is
paired with BM25: McNemar on EM, and a Wilcoxon signed-rank test on the per-input chrF (the graded metric).

    python benchmarks/epr/epr_beyond.py --tasks mtop --held-out berri-lite/nl2bash,berri-lite/conala,\
        berri-lite/asset_simplification                                          # the held-out section too

Writes --out (default benchmarks/results/epr_beyond.json), in issue 48's format: ``{TASK: {METHOD: {"em", "n",
"vs_epr": {"only_method", "only_epr", "p"}, "cpu_s", ...}}, "bm25": {TASK: EM}, "lm_oracle": {TASK: EM}, "device",
"commands"}``; ``bm25`` and ``lm_oracle`` are read from benchmarks/results/epr_table_TASK.json where it exists.
``cpu_s`` is the process CPU time (all threads) of the method's evaluation, selection included.
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
from _common import HERE, command_line, describe_machine, machine, parser, round_metrics, write_result  # noqa: E402
from epr_runs import INSTRUCTIONS, lm_oracle  # noqa: E402

from taskret.backends.base import engine_of, generation_spec, load_lm
from taskret.data import load_task, sample
from taskret.icl.compare import paired_comparison, wilcoxon
from taskret.icl.evaluation import choose_selection_weight, evaluate, machine_differences, mcnemar, read_correct
from taskret.icl.selection import Selection
from taskret.io import read_jsonl
from taskret.models import dtype_name
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever

METHODS = {"epr": None, "epr+dpp": "dpp", "epr+mmr": "mmr", "epr+reward": "reward", "lm-oracle": "oracle"}
HELD_OUT_METHODS = ("bm25", "sbert", "multitask", "epr")
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
    """BM25's and LM-Oracle's EM on the task from benchmarks/epr/epr_table.py's result, where there is one."""
    path = HERE / "results" / f"epr_table_{task}.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text()).get("results", {})
    return {name: results[method]["metrics"]["em"] for name, method in (("bm25", "bm25"), ("lm_oracle", "lm-oracle"))
            if method in results}


def _finished(run_dir: Path, n: int) -> tuple[dict, dict] | None:
    """A method's summary and cost where an earlier run finished it on the same ``n`` inputs (it is reused)."""
    summary_path, cost_path = run_dir / "summary.json", run_dir / COST_FILE
    if summary_path.exists() and cost_path.exists():
        summary = json.loads(summary_path.read_text())
        if summary["n"] == n:
            return summary, json.loads(cost_path.read_text())
    return None


def _reward_candidates(task, retriever, reward_dir: str, examples, k: int, exclude_self: bool = False):
    """The retriever's top ``k`` of each example and the gold-free candidate reranker's scores of them (computed
    once, then fused at as many weights as wanted)."""
    from taskret.epr.candidate_reranker import reranker_scores

    first = retriever.retrieve([e.input for e in examples], k=k,
                               exclude=[e.id for e in examples] if exclude_self else None)
    return first, reranker_scores(reward_dir, task, [e.input for e in examples], first.ids)


def _fused(first, teacher, weight: float):
    """``first`` (a RetrievalResult) reranked by ``weight * retriever + (1 - weight) * reward`` (``teacher``)."""
    import numpy as np

    from taskret.epr.candidate_reranker import fuse_scores
    from taskret.retrieval import RetrievalResult

    ids, scores = [], np.full(first.scores.shape, -np.inf, dtype=np.float32)
    for n, (row, reward) in enumerate(zip(first.ids, teacher)):
        fused = fuse_scores(first.scores[n][: len(row)], reward, weight)
        order = np.argsort(-fused, kind="stable")
        ids.append([row[int(i)] for i in order])
        scores[n, : len(row)] = fused[order]
    return RetrievalResult(ids, scores)


def _train_reranker(task, base_spec: str, model_dir: Path) -> None:
    """The gold-free candidate reranker at ``model_dir``, trained on the base EPR run's LM scores if not there."""
    from taskret.epr.candidate_reranker import train_candidate_reranker
    from taskret.epr.scoring import read_scores

    if model_dir.is_dir():
        return
    scores = Path(base_spec.removeprefix("epr:")) / "scoring" / "scores.jsonl"
    if not scores.exists():
        raise SystemExit(f"epr+reward: {model_dir} is missing and {scores} (the base run's LM scores) too")
    train_candidate_reranker(task, read_scores(scores), model_dir.parent)


def _choose_reward_weight(task, retriever, reward_dir: str, lm, weights: list[float], args):
    """epr+reward's retriever share among ``weights``, chosen on --tune-n held-out training examples (each
    excluded from its own candidates), never on the test set."""
    from taskret.icl.evaluation import score_predictions
    from taskret.icl.inference import predict

    held_out = sample(task.train, args.tune_n, seed=args.seed)
    first, teacher = _reward_candidates(task, retriever, reward_dir, held_out, args.reward_candidates, True)
    scores = {}
    with progress_bar(len(weights) * len(held_out), f"{task.name}/epr+reward: tuning") as advance:
        for weight in weights:
            predictions = predict(task, None, lm, held_out, context_window=args.context_window,
                                  max_new_tokens=args.max_new_tokens, retrieved=_fused(first, teacher, weight),
                                  progress=advance)
            scores[weight] = score_predictions(task, predictions)["em"]
    return max(weights, key=lambda w: (scores[w], -weights.index(w))), scores


def _reused(folder: Path, examples, args, run_dir: Path) -> tuple[dict, dict] | None:
    """An evaluation another command already ran (``--reuse``: e.g. ``taskret epr run``'s ``eval/`` or
    ``baseline/``), taken as this method's when it holds exactly these test inputs with this LM and these prompt
    settings: its predictions and summary are copied into ``run_dir``; its cost is its own wall time."""
    import shutil

    summary_path, predictions = folder / "summary.json", folder / "predictions.jsonl"
    if not summary_path.exists() or not predictions.exists():
        raise SystemExit(f"--reuse {folder}: no summary.json and predictions.jsonl there")
    summary = json.loads(summary_path.read_text())
    wanted = {"n": len(examples), "lm": args.lm, "context_window": args.context_window,
              "max_new_tokens": args.max_new_tokens}
    differing = {k: (summary.get(k), v) for k, v in wanted.items() if summary.get(k) != v}
    ids = {row["id"] for row in read_jsonl(predictions)}
    if differing or ids != {e.id for e in examples}:
        raise SystemExit(f"--reuse {folder}: not run as this benchmark runs ({differing or 'other test inputs'})")
    elsewhere = machine_differences(summary, dtype_name("auto"), engine=engine_of(generation_spec(args.lm)))
    if elsewhere and not args.reuse_other_machine:
        raise SystemExit(f"--reuse {folder}: made on another machine ({elsewhere}); its LM outputs may differ from "
                         "this machine's. Rerun it here, or pass --reuse-other-machine to take it anyway")
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in (predictions, summary_path):
        shutil.copyfile(path, run_dir / path.name)
    cost = {"cpu_s": None, "wall_s": summary.get("wall_time_s"), "reused": str(folder)}
    (run_dir / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n")
    return summary, cost


def _vs_epr(mine: dict[str, bool], epr: dict[str, bool]) -> dict:
    """McNemar against plain EPR, the paired bootstrap's 95% interval of the EM difference, and the smallest
    difference this N detects at 80% power given the observed discordance."""
    paired = paired_comparison(mine, epr)
    return {"only_method": paired.pop("only_a"), "only_epr": paired.pop("only_b"), **paired}


def _training_cost(spec: str) -> dict:
    """What an ``epr:DIR`` variant's own stages cost, from its work folder: the wall and CPU seconds of each stage
    that ran there (``stage_times.jsonl``), and how many pairs and sets its later stages had the LM score."""
    if not spec.startswith("epr:"):
        return {}
    work = Path(spec[4:])
    cost: dict = {}
    times = work / "stage_times.jsonl"
    if times.exists():
        cost["stages"] = {row["stage"]: {"wall_s": row["wall_s"], "cpu_s": row["cpu_s"]} for row in read_jsonl(times)}
    if (work / "stage_times_gpu.jsonl").exists():  # stages run on a GPU machine, the folder copied back
        cost["gpu_stages"] = [row["stage"] for row in read_jsonl(work / "stage_times_gpu.jsonl")]
    rounds = [json.loads(p.read_text())["n_pairs"] for p in work.glob("round*/scoring/scoring_meta.json")]
    if rounds:
        cost["lm_pairs_later_rounds"] = new_pairs_of_later_rounds(work / "scoring" / "scores.jsonl",
                                                                  sorted(work.glob("round*/scoring/scores.jsonl")))
        cost["lm_pairs_later_rounds_scored"] = sum(rounds)  # more where a round re-scored an earlier one's pairs
    agreement = work / "reward" / "agreement.json"
    if agreement.exists():  # LLM-R: the teacher's agreement with the LM beside the EPR retriever's and BM25's
        cost["teacher_agreement"] = json.loads(agreement.read_text())
    set_scores = work / "sets" / "set_scores.jsonl"
    if set_scores.exists():
        cost["lm_sets"] = sum(len(row["sets"]) for row in read_jsonl(set_scores))
    return cost


def new_pairs_of_later_rounds(first: Path, later: list[Path]) -> int:
    """How many (input, candidate) pairs the later rounds' score files hold that no earlier round scored: what the
    LM must score beyond the first round (a run before ``unscored`` kept every round's pairs scored some twice)."""
    seen = {(row["id"], c["id"]) for row in read_jsonl(first) for c in row["candidates"]} if first.exists() else set()
    new = 0
    for path in later:
        for row in read_jsonl(path):
            for candidate in row["candidates"]:
                if (row["id"], candidate["id"]) not in seen:
                    seen.add((row["id"], candidate["id"]))
                    new += 1
    return new


def _labels_of(task_name: str) -> Path:
    path = Path("runs/bench/epr_table") / task_name / "epr" / "labels.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} is missing: label {task_name} first (taskret epr run with its config)")
    return path


def _held_out(name: str, train_tasks: list[str], args, lm) -> dict:
    """One leave-one-task-out fold: train on the other tasks' labels, evaluate every HELD_OUT_METHOD on ``name``."""
    from taskret.epr.listwise import ListwiseConfig
    from taskret.epr.multitask import LabelledTask, train_multitask
    from taskret.epr.training import TrainingConfig
    from taskret.formats import format_query
    from taskret.retrieval import DenseRetriever

    task = load_task(name, data_dir=args.data_dir)
    examples = sample(task.test, args.held_out_n, seed=args.seed)
    work = Path(args.work) / "held_out" / name
    model_dir = work / ("multitask-retriever-listwise" if args.listwise else "multitask-retriever")
    others = [t for t in train_tasks if t != name]
    if not (model_dir / "model").is_dir():
        sources = [LabelledTask(load_task(t, data_dir=args.data_dir), _labels_of(t), INSTRUCTIONS[t],
                                scores=_labels_of(t).parent / "scoring" / "scores.jsonl") for t in others]
        config = TrainingConfig(epochs=args.epochs, batch_size=64, mini_batch_size=16, learning_rate=5e-5,
                                seed=args.seed)
        # UDR's objective, its settings (from_top 2 on MTOP and Break only, as UDR's code; here one value for all).
        objective = ListwiseConfig(seed=args.seed) if args.listwise else None
        cpu = time.process_time()
        train_multitask(sources, model_dir, config, listwise=objective)
        (model_dir / COST_FILE).write_text(json.dumps({"train_cpu_s": round(time.process_time() - cpu, 1)}) + "\n")
    rows: dict[str, dict] = {}
    for method in HELD_OUT_METHODS:
        run_dir = work / method
        finished = _finished(run_dir, len(examples))
        if finished:
            summary, cost = finished
        else:
            retrieved, spec = None, method
            cpu, wall = time.process_time(), time.perf_counter()
            if method == "multitask":
                field = json.loads((model_dir / "epr_config.json").read_text()).get("field", "input")
                retriever = DenseRetriever(encoder=str(model_dir / "model"), field=field).index(task.train)
                spec = f"multitask:{model_dir} (without {name})"
                retrieved = retriever.retrieve([format_query(INSTRUCTIONS[name], e.input) for e in examples], k=100)
            elif method == "epr":
                spec = f"epr:runs/bench/epr_table/{name}/epr"
                retriever = make_retriever(spec, seed=args.seed)
            else:
                retriever = make_retriever(method, seed=args.seed)
            if not retriever.ids:
                retriever.index(task.train)
            with progress_bar(len(examples), f"held out {name}/{method}") as advance:
                summary = evaluate(task, retriever, lm, examples, run_dir, retriever_name=spec, retrieved=retrieved,
                                   context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                                   progress=advance, metrics=("chrf",))
            cost = {"cpu_s": round(time.process_time() - cpu, 1), "wall_s": round(time.perf_counter() - wall, 1)}
            (run_dir / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n")
        rows[method] = {"em": round(summary["metrics"]["em"], 3), "chrf": round(summary["metrics"]["chrf"], 2),
                        "n": summary["n"], "cpu_s": cost["cpu_s"]}
        print(f"held out {name}/{method}: em {summary['metrics']['em']:.1f}, chrf {summary['metrics']['chrf']:.1f}",
              flush=True)
    base = read_jsonl(work / "bm25" / "predictions.jsonl")
    base_correct, base_chrf = {r["id"]: bool(r["correct"]) for r in base}, {r["id"]: r["chrf"] for r in base}
    for method in HELD_OUT_METHODS[1:]:
        mine = read_jsonl(work / method / "predictions.jsonl")
        test = mcnemar({r["id"]: bool(r["correct"]) for r in mine}, base_correct)
        chrf = {r["id"]: r["chrf"] for r in mine}
        rows[method]["vs_bm25"] = {"chrf_diff": round(rows[method]["chrf"] - rows["bm25"]["chrf"], 2),
                                   "chrf_p": round(wilcoxon(chrf, base_chrf), 4), "only_method": test.only_a,
                                   "only_bm25": test.only_b, "em_p": round(test.p_value, 4)}
    rows["multitask"]["trained_on"] = others
    train_cost = model_dir / COST_FILE
    if train_cost.exists():
        rows["multitask"]["train_cpu_s"] = json.loads(train_cost.read_text())["train_cpu_s"]
    return rows


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_beyond.json", lm="smollm2-135m", seed=0, icl=True)
    options.add_argument("--tasks", default="mtop,break", help="comma-separated tasks (default: %(default)s)")
    options.add_argument("--base", action="append", default=[], metavar="TASK=SPEC",
                         help="the base retriever of a task (default: epr:runs/bench/epr_table/TASK/epr)")
    options.add_argument("--methods", default="epr,epr+dpp,epr+mmr",
                         help="some of: " + ", ".join(METHODS) + " (TASK:METHOD: on TASK only; default: %(default)s)")
    options.add_argument("--n", type=int, default=300, help="test inputs (a seeded sample, the same for every method; "
                         "0: all of them)")
    options.add_argument("--reuse", action="append", default=[], metavar="TASK:METHOD=FOLDER",
                         help="take METHOD's evaluation on TASK from FOLDER (e.g. taskret epr run's eval/ or "
                              "baseline/), checked to hold the same test inputs, LM and prompt settings, and to "
                              "have been made on this machine")
    options.add_argument("--reuse-other-machine", action="store_true",
                         help="take a --reuse evaluation made on another machine (CPU, torch, transformers or the "
                              "LM's dtype differ) or one that does not say where it was made")
    options.add_argument("--variant", action="append", default=[], metavar="[TASK:]NAME=SPEC",
                         help="another retriever to pair with plain EPR (on TASK only, if given); {task} in SPEC is "
                              "the task's name")
    options.add_argument("--variant-selection", action="append", default=[], metavar="NAME=METHOD:WEIGHT",
                         help="select a variant's prompts, e.g. ceil=dpp:0.909 (the weight its training matches)")
    options.add_argument("--reward-model", default="runs/bench/epr_beyond/{task}/reranker/model",
                         help="epr+reward's cross-encoder (default: %(default)s)")
    options.add_argument("--reward-candidates", type=int, default=30)
    options.add_argument("--reward-weights", default="0.3,0.5,0.7", help="the retriever's shares tried")
    options.add_argument("--select-candidates", type=int, default=50, help="the base retriever's top K to select from")
    options.add_argument("--dpp-weight", type=float, default=None, help="DPP relevance weight (default: tuned)")
    options.add_argument("--mmr-weight", type=float, default=None, help="MMR relevance weight (default: tuned)")
    options.add_argument("--tune-weights", default="0.5,0.7,0.8,0.9,0.95", help="weights tried on training examples")
    options.add_argument("--tune-n", type=int, default=100, help="held-out training examples the weight is chosen on")
    options.add_argument("--held-out", default="", help="tasks to hold out of multi-task training, one at a time")
    options.add_argument("--train-tasks", default=",".join(INSTRUCTIONS),
                         help="the tasks whose EPR labels train the multi-task retriever (default: %(default)s)")
    options.add_argument("--held-out-n", type=int, default=200, help="test inputs of each held-out task")
    options.add_argument("--epochs", type=int, default=5, help="multi-task training epochs (DPR loss)")
    options.add_argument("--listwise", action="store_true",
                         help="train the multi-task retriever with UDR's listwise objective on each task's LM scores")
    options.add_argument("--work", default="runs/bench/epr_beyond", help="method folders (default: %(default)s)")
    args = options.parse_args()

    methods: dict[str, str | None] = {}  # method -> the one task it runs on (TASK:METHOD), or None: all
    for entry in [m.strip() for m in args.methods.split(",") if m.strip()]:
        only, _, bare = entry.rpartition(":")
        methods[bare] = only or None
    if methods.get("epr", "missing") is not None or set(methods) - set(METHODS):
        options.error(f"--methods: some of {', '.join(METHODS)} (TASK:METHOD for one task only), epr among them "
                      "on every task (the others are paired with it)")
    variants: dict[str, tuple[str | None, str]] = {}  # name -> (the one task it runs on, or None: all; spec)
    for name, spec in _pairs(args.variant, "--variant").items():
        only, _, bare = name.rpartition(":")
        variants[bare] = (only or None, spec)
    clash = sorted(set(variants) & set(METHODS))
    if clash:
        options.error(f"--variant {clash[0]}: the name of a built-in method")
    variant_selection = {}
    for name, value in _pairs(args.variant_selection, "--variant-selection").items():
        kind, _, weight = value.partition(":")
        variant_selection[name] = Selection(kind, float(weight) if weight else None, args.select_candidates)
    bases = _pairs(args.base, "--base")
    reuse = _pairs(args.reuse, "--reuse")
    weights_given = {"dpp": args.dpp_weight, "mmr": args.mmr_weight}
    tune_weights = [float(w) for w in args.tune_weights.split(",") if w.strip()]
    device = machine()
    lm = load_lm(generation_spec(args.lm))
    result: dict = {"benchmark": "epr_beyond", "lm": args.lm, "seed": args.seed, "context_window": args.context_window,
                    "select_candidates": args.select_candidates}
    references: dict[str, dict[str, float]] = {}
    for task_name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        task = load_task(task_name, data_dir=args.data_dir)
        examples = sample(task.test, args.n or None, seed=args.seed)
        spec = bases.get(task_name, f"epr:runs/bench/epr_table/{task_name}/epr")
        retriever = make_retriever(spec, seed=args.seed)
        if not retriever.ids:
            retriever.index(task.train)
        rows: dict[str, dict] = {}
        task_methods = [name for name, only in methods.items() if only in (None, task_name)]
        task_methods += [name for name, (only, _) in variants.items() if only in (None, task_name)]
        for method in task_methods:
            run_dir = Path(args.work) / task_name / method
            finished = _finished(run_dir, len(examples))
            if finished:
                print(f"{task_name}/{method}: {run_dir / 'summary.json'} exists, reused", flush=True)
                summary, cost = finished
            elif f"{task_name}:{method}" in reuse:
                summary, cost = _reused(Path(reuse[f"{task_name}:{method}"]), examples, args, run_dir)
            else:
                cost, selection, kind, retrieved = {}, variant_selection.get(method), METHODS.get(method), None
                method_retriever, method_spec = retriever, spec
                if method in variants:
                    method_spec = variants[method][1].replace("{task}", task_name)
                    method_retriever = make_retriever(method_spec, seed=args.seed)
                    if not method_retriever.ids:
                        method_retriever.index(task.train)
                if kind == "oracle":
                    cpu, wall = time.process_time(), time.perf_counter()
                    retrieved = lm_oracle(task, examples, lm, run_dir / "oracle")
                    cost["ranking"] = {"lm_pairs": 50 * len(examples), "cpu_s": round(time.process_time() - cpu, 1),
                                       "wall_s": round(time.perf_counter() - wall, 1)}
                elif kind == "reward":
                    reward_dir = args.reward_model.replace("{task}", task_name)
                    _train_reranker(task, spec, Path(reward_dir))
                    weights = [float(w) for w in args.reward_weights.split(",") if w.strip()]
                    cpu, wall = time.process_time(), time.perf_counter()
                    weight, scores = _choose_reward_weight(task, retriever, reward_dir, lm, weights, args)
                    cost["tuning"] = {"n": min(args.tune_n, len(task.train)), "chosen": weight,
                                      "scores": {str(w): round(v, 2) for w, v in scores.items()},
                                      "tune_cpu_s": round(time.process_time() - cpu, 1),
                                      "tune_wall_s": round(time.perf_counter() - wall, 1), "reward_model": reward_dir}
                    retrieved = _fused(*_reward_candidates(task, retriever, reward_dir, examples,
                                                           args.reward_candidates), weight)
                elif kind is not None:
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
                    summary = evaluate(task, method_retriever, lm, examples, run_dir, retriever_name=method_spec,
                                       context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                                       progress=advance, selection=selection, retrieved=retrieved)
                cost.update(cpu_s=round(time.process_time() - cpu, 1), wall_s=round(time.perf_counter() - wall, 1))
                (run_dir / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n")
            row = {"em": round(summary["metrics"]["em"], 3), "n": summary["n"], "metrics": round_metrics(summary["metrics"]),
                   "cpu_s": cost["cpu_s"], "wall_s": cost["wall_s"], "lm_calls": summary["n"]}
            if "reused" in cost:
                row["reused"] = cost["reused"]
            if "selection" in summary:
                row["selection"] = summary["selection"]
            if method in variants:
                row["training_cost"] = _training_cost(variants[method][1].replace("{task}", task_name))
            if "tuning" in cost:
                row["tuning"] = cost["tuning"]
                row["lm_calls"] += cost["tuning"]["n"] * len(cost["tuning"]["scores"])
            if "ranking" in cost:
                row["ranking"] = cost["ranking"]
                row["lm_calls"] += cost["ranking"]["lm_pairs"]
            rows[method] = row
            print(f"{task_name}/{method}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()),
                  flush=True)
        epr_correct = read_correct(Path(args.work) / task_name / "epr" / "predictions.jsonl")
        for method in task_methods:
            if method != "epr":
                mine = read_correct(Path(args.work) / task_name / method / "predictions.jsonl")
                rows[method]["vs_epr"] = _vs_epr(mine, epr_correct)
                rows[method]["min_detectable_diff"] = rows[method]["vs_epr"].pop("min_detectable_diff")
        result[task_name] = {"base": spec, **rows}
        # BM25 and the LM-Oracle measured here, on these inputs, when they ran as methods; else an earlier table's.
        measured = {name: rows[method]["em"] for name, method in (("bm25", "bm25"), ("lm_oracle", "lm-oracle"))
                    if method in rows}
        # A run that measures its own references uses no other table's (those were measured on other inputs).
        for name, value in (measured or _reference(task_name)).items():
            references.setdefault(name, {})[task_name] = value
    held_out = [t.strip() for t in args.held_out.split(",") if t.strip()]
    if held_out:
        train_tasks = [t.strip() for t in args.train_tasks.split(",") if t.strip()]
        result["held_out"] = {name: _held_out(name, train_tasks, args, lm) for name in held_out}
        result["held_out_setup"] = {"train_tasks": train_tasks, "instructions": {t: INSTRUCTIONS[t] for t in
                                                                              train_tasks + held_out},
                                    "epochs": args.epochs, "n": args.held_out_n,
                                    "objective": "udr listwise" if args.listwise else "dpr"}
    result.update(references)
    result.update(device=describe_machine(device), machine=device,
                  commands=[command_line(args, options, leave_out=("data_dir", "work"))])
    write_result(args.out, result)


if __name__ == "__main__":
    main()
