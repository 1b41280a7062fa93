"""Does the recipe carry beyond MTOP (issues 61, 76)? Each task the headroom pilot passes (headroom.py; Break, with
its authors' metric LF-EM, and nl2bash, a generation task scored by chrF, were the first), each labelled at its own
budget, every method evaluated on all of the task's test inputs on one machine; then one retriever for tasks it never
saw (UDR's other half), leaving one task out at a time. A task is run when its configs are in CONFIGS.

Labels: a seeded sample of the training examples (``max_train_examples`` in the task's config: Break's and nl2bash's
1,237 are MTOP's whole pool) x their 50 BM25 neighbours by output, each pair scored by SmolLM2-135M: the task's label
budget, 61,850 LM calls at MTOP's. They are scored once: the recipe's work folder starts from plain
EPR's candidates, scores and labels, and its later rounds score only the pairs no round scored yet. Methods, on every
test input (Break 1,552, nl2bash 200; ``--limit``: a seeded sample, for smoke runs), SmolLM2-135M generating:

    bm25       BM25 over the training inputs (no training)
    epr        plain EPR: benchmarks/epr/configs/epr_tasks/TASK.json (taskret's defaults: demonstrations encoded as
               input and output, 10 epochs, batch 120)
    recipe     the recommended recipe: --recipe (default TASK_recipe.json: the EPR ladder's pick, rung d: UDR's
               listwise loss, one round; swap the file, or the option, when the recommendation changes)
    lm_oracle  BM25-Oracle's top 50 ranked by the LM with the gold output in view (50 LM calls per input): the ceiling

each paired with BM25 and with plain EPR. Break (``lf_em``, the headline of Break's summaries): McNemar on the per-input
LF-EM verdicts, the paired bootstrap's 95% interval of the difference and the smallest difference this N detects at
80% power. nl2bash (``chrf``: the corpus chrF is the score; the tests read each input's sentence chrF): Wilcoxon's
signed-rank test, the paired bootstrap's interval of the mean difference and its detectable difference.
``gap_share`` = (method - BM25) / (LM-Oracle - BM25).

Leave-one-task-out (--held-out, default MTOP and every task with a config): for each held-out task one dual encoder
trained (taskret.epr.multitask, the recipe's loss: benchmarks/epr/configs/epr_tasks/multitask.json) on the labels and
scores of MTOP and the other --tasks (MTOP's: the committed full recipe's, benchmarks/results/epr_mtop_full/; the
others': this benchmark's first round), each query written ``{instruction} [SEP] {input}`` with its task's
instruction (epr_runs.INSTRUCTIONS), then queried on the held-out task with its own instruction; evaluated on that
task's test inputs against BM25 and the task's own single-task retriever (the recipe's; MTOP's: the committed full
UDR's rankings, --mtop-single-task), each paired with the multitask retriever as above.

Three steps (--step; ``all`` runs them in turn), each resumable, writing under --results (committed, so that a later
step runs in another session, or on another machine where the evaluations then all run again):

1. ``train``: ``taskret epr run CONFIG --stop-after index`` for plain EPR, then the recipe, in --work (a GPU is used
   where torch sees one; the stages that ran on it are listed in ``stage_times_gpu.jsonl``). --work is under
   benchmarks/results by default, so its LM-score shards are committed as they come and a stopped labelling resumes
   in a fresh clone (weights, checkpoints and indexes are git-ignored and made again); kept under
   ``--results/TASK/METHOD/``: the candidates, LM scores and labels (plain EPR's), each later round's, the stage
   times, the configs, and every test input's top 100 (``rankings.jsonl``).
2. ``evaluation``: each method on the test inputs (``TASK/METHOD/eval/``; the LM-Oracle's ranked chunks in
   ``TASK/lm_oracle/oracle/``). An evaluation made here on the same inputs is kept; one made on another machine (CPU,
   torch, transformers or the LM's dtype differ) is run again, never paired with this machine's.
3. ``held_out``: the multitask retrievers (``held_out/TASK/multitask/``: rankings, training cost) and their
   evaluations; MTOP's BM25 and single-task evaluations in ``held_out/mtop/``; a task step 2 measures reuses step 2's
   where this machine made them, and is evaluated again in ``held_out/TASK/`` where another did (never paired across
   machines, and step 2's own table left as it is).

Each step ends by writing --out from every evaluation under --results (``report`` only writes it, with no LM, on any
machine). A task's methods are paired only when one machine evaluated them all; different tasks may come from
different machines, and then ``machine`` is None and ``machines`` names each task's (and each held-out row's).

Writes --out: ``{TASK: {"metric", "n", "methods": {METHOD: {"score", "n", "vs_bm25": {"p", "diff_ci95", ...},
"vs_epr": {...}, "gap_share", "cost"}}, "labelling_cost", "gap_share", "min_detectable_diff"}, "held_out": {TASK:
{"multitask", "bm25", "single_task", "p_vs_bm25", ...}}, "held_out_mean", "machine", "machines", "command"}``.
Costs: ``lm_calls`` (distinct pairs the LM scored for the method's retriever; the LM-Oracle's 50 per input), the
hours of the stages that ran on the CPU (``cpu_hours``, from ``stage_times.jsonl``, with the earlier sessions' part of
a resumed training, ``earlier_s``; the labels stage from every session's ``scoring/scoring_times.jsonl`` where it
resumed) and the minutes of those that ran on a GPU; each evaluation's N generations come on top, the same for every
method.

    python benchmarks/epr/epr_tasks.py --data-dir ../shared/data --step train        # labels, trainings, rankings
    python benchmarks/epr/epr_tasks.py --data-dir ../shared/data --step evaluation   # 4 methods x all test inputs
    python benchmarks/epr/epr_tasks.py --data-dir ../shared/data --step held_out     # 3 multitask retrievers
    python benchmarks/epr/epr_tasks.py --data-dir ../shared/data --step report       # --out from what is evaluated
    python benchmarks/epr/epr_tasks.py --data-dir ../shared/data --tasks nl2bash --held-out '' --limit 5 \\
        --work /tmp/et --results /tmp/et/results --out /tmp/et.json --epr-config CONFIG --recipe CONFIG  # a smoke run
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, round_metrics, write_result  # noqa: E402
from epr_runs import INSTRUCTIONS, distinct_pairs, lm_oracle, ranking, stage_seconds, stage_times, write_rankings  # noqa: E402

from taskret.data import BENCHMARK_TASKS, GENERATION_TASKS, load_task, sample
from taskret.epr.scoring import scoring_seconds
from taskret.icl.compare import paired_comparison, paired_graded_comparison
from taskret.icl.evaluation import GRADED_METRICS, TASK_HEADLINE, machine_differences
from taskret.io import read_json, read_jsonl, write_json

#: the tasks that can be measured here, as the result names them -> taskret's name: every in-context task but MTOP
#: (measured by the ladder) and SMCalFlow (kept for checks outside this work); which are run is the headroom pilot's
#: choice (headroom.py: the tasks not at the floor), each with its configs in CONFIGS
TASKS = {name.rpartition("/")[2]: name for name in ("break", *GENERATION_TASKS, *BENCHMARK_TASKS)}
HELD_OUT = {"mtop": "mtop", **TASKS}
METHODS = ("bm25", "epr", "recipe", "lm_oracle")
CONFIGS = Path("benchmarks/epr/configs/epr_tasks")
#: what --tasks runs unless told: the tasks with a config here (TASK.json, TASK_recipe.json)
DEFAULT_TASKS = tuple(name for name in TASKS if (CONFIGS / f"{name}.json").is_file())
#: MTOP's labels and scores at this budget (all 1,237 training examples x 50), committed by the full recipe's run
MTOP_LABELLED = Path("benchmarks/results/epr_mtop_full")
#: what plain EPR keeps for every later method: its candidates, LM scores and labels
SCORED = ("candidates.jsonl", "labels.jsonl", "scoring/scores.jsonl", "scoring/scoring_meta.json",
          "scoring/scoring_times.jsonl")
#: what every trained run keeps beside its rankings: where its time went and how its retriever was trained
RUN_FILES = ("stage_times.jsonl", "stage_times_gpu.jsonl", "retriever/epr_config.json")
ROUND_FILES = (*SCORED, "retriever/epr_config.json")
#: the config fields the recipe must share with plain EPR to reuse its LM scores and labels
SHARED_FIELDS = ("task", "train", "test", "input_field", "output_field", "id_field", "data_dir", "max_train_examples",
                 "n_candidates", "candidate_field", "scoring_lm", "scoring_lm_options", "shard_size", "k", "labels",
                 "seed")
NOT_TRAINING = ("evaluation", "baseline")  # stages after the index: not part of a retriever's cost


def metric_of(task_name: str) -> str:
    """The metric a task is quoted by: chrF for the generation tasks, accuracy for those answered by choosing among
    options (classification), else its headline match metric (Break's LF-EM, MTOP's exact match)."""
    if task_name in GENERATION_TASKS:
        return "chrf"
    spec = BENCHMARK_TASKS.get(task_name)
    return "accuracy" if spec is not None and spec.options is not None else TASK_HEADLINE.get(task_name, "em")


def per_input(predictions: Path, metric: str) -> dict[str, float | bool]:
    """Each test input's value of ``metric`` in an evaluation's ``predictions.jsonl``: its verdict (``em``: the
    ``correct`` field; ``lf_em``: its own) or its sentence score (a graded metric)."""
    rows = read_jsonl(predictions)
    if metric in GRADED_METRICS:
        return {r["id"]: float(r[metric]) for r in rows}
    return {r["id"]: bool(r["correct" if metric in ("em", "accuracy") else metric]) for r in rows}


def compare(mine: dict, other: dict, metric: str) -> dict:
    """One method against another on the same inputs: McNemar for a verdict, Wilcoxon for a graded metric; either way
    the paired bootstrap's 95% interval of the difference (points) and the smallest difference this N detects."""
    if metric in GRADED_METRICS:
        paired = paired_graded_comparison(mine, other)
        return {"higher_method": paired.pop("higher_a"), "higher_other": paired.pop("higher_b"), **paired}
    paired = paired_comparison(mine, other)
    return {"only_method": paired.pop("only_a"), "only_other": paired.pop("only_b"), **paired}


def gap_share(score: float, bm25: float | None, oracle: float | None) -> float | None:
    """(score - BM25) / (LM-Oracle - BM25): the share of the way from BM25 to the LM-Oracle; None without a gap."""
    if bm25 is None or oracle is None or oracle <= bm25:
        return None
    return round((score - bm25) / (oracle - bm25), 3)


def one_machine(summaries: dict[str, dict]) -> dict | None:
    """The machine every evaluation in ``summaries`` (name -> summary.json) was made on; SystemExit naming two that
    differ (their LM outputs may differ: never paired)."""
    first = next(iter(summaries), None)
    for name, summary in summaries.items():
        elsewhere = machine_differences(summary, against=summaries[first].get("machine") or {})
        if elsewhere:
            raise SystemExit(f"{name}: evaluated on another machine than {first} ({elsewhere}); evaluate both on one "
                             "machine")
    return summaries[first].get("machine") if first else None


def _stage_cost(folder: Path, stages: Callable[[str], bool]) -> dict:
    """The wall time of the stages ``folder`` records that ``stages`` picks, split by where they ran: hours on the
    CPU, minutes on a GPU (None where none did)."""
    times, gpu = stage_times(folder)
    ran = {s: stage_seconds(row) for s, row in times.items() if stages(s)}
    return {"stages_wall_s": ran, **_hours(ran, gpu)}


def _hours(ran: dict[str, float], gpu: set[str]) -> dict:
    on_gpu = sum(wall for s, wall in ran.items() if s in gpu)
    return {"cpu_hours": round(sum(wall for s, wall in ran.items() if s not in gpu) / 3600, 2),
            "gpu_minutes": round(on_gpu / 60, 1) if any(s in gpu for s in ran) else None}


def _lm_calls(score_files: list[Path]) -> int | None:
    present = [path for path in score_files if path.exists()]
    return distinct_pairs(present) if present else None


def labelling_cost(folder: Path) -> dict:
    """A task's labels (``folder``: plain EPR's kept files): LM calls, labelled inputs and the candidates and labels
    stages' time."""
    scores = folder / "scoring" / "scores.jsonl"
    cost = {"lm_calls": _lm_calls([scores]),
            "labelled_inputs": sum(1 for _ in read_jsonl(scores)) if scores.exists() else None}
    times, gpu = stage_times(folder)
    ran = {s: stage_seconds(times[s]) for s in ("candidates", "labels") if s in times}
    # A labelling resumed across sessions records only its last run's labels stage; every session's LM scoring is
    # in scoring_times.jsonl, so the stage counts as that sum where it is the larger.
    scored_s = scoring_seconds(folder / "scoring")
    if scored_s is not None and scored_s > ran.get("labels", 0.0):
        ran["labels"] = scored_s
    cost.update(stages_wall_s=ran, **_hours(ran, gpu))
    if (folder / "machine.json").exists():  # where step 1 ran (the labels' stage times are there if it scored them)
        cost["train_step_machine"] = read_json(folder / "machine.json")
    return cost


def method_cost(folder: Path, method: str, n: int) -> dict:
    """What a method's retriever cost (``folder``: the task's kept files): LM calls (its own and the labels it
    reuses) and its training stages' time; the LM-Oracle's 50 LM calls per test input."""
    if method == "lm_oracle":
        return {"lm_calls": 50 * n, "generations": n}
    if method == "bm25":
        return {"lm_calls": 0, "generations": n}
    own = folder / method
    score_files = [folder / "epr" / "scoring" / "scores.jsonl", *sorted(own.glob("round*/scoring/scores.jsonl"))]
    return {"lm_calls": _lm_calls(score_files), "generations": n,
            **_stage_cost(own, lambda s: s not in NOT_TRAINING and s not in ("candidates", "labels"))}


def assemble_task(name: str, results: Path) -> dict:
    """One task's section of the result from its evaluations under ``results/name``, all made on one machine (its
    ``machine``)."""
    folder, metric = results / name, metric_of(TASKS[name])
    summaries = {m: read_json(folder / m / "eval" / "summary.json") for m in METHODS
                 if (folder / m / "eval" / "summary.json").exists()}
    values = {m: per_input(folder / m / "eval" / "predictions.jsonl", metric) for m in summaries}
    first = next(iter(values), None)
    for m in values:
        if values[m].keys() != values[first].keys():
            raise SystemExit(f"{name}: {m} and {first} were evaluated on other test inputs ({len(values[m])} and "
                             f"{len(values[first])}); run --step evaluation with one --limit")
    methods: dict[str, dict] = {}
    for m, summary in summaries.items():
        row = {"score": round(summary["metrics"][metric], 2), "n": summary["n"], "metrics": round_metrics(summary["metrics"])}
        for other in ("bm25", "epr"):
            if m != "bm25" and m != other and other in values:
                row[f"vs_{other}"] = compare(values[m], values[other], metric)
        row["cost"] = method_cost(folder, m, summary["n"])
        methods[m] = row
    scores = {m: row["score"] for m, row in methods.items()}
    for m in ("epr", "recipe"):
        if m in methods:
            methods[m]["gap_share"] = gap_share(scores[m], scores.get("bm25"), scores.get("lm_oracle"))
    for row in methods.values():  # the issue's flat keys beside the cost they come from
        row["lm_calls"], row["cpu_hours"] = row["cost"].get("lm_calls"), row["cost"].get("cpu_hours")
    recipe = methods.get("recipe", {})
    labels = labelling_cost(folder / "epr")
    section = {"metric": metric, "n": summaries[first]["n"] if first else 0, "methods": methods,
               "machine": one_machine({f"{name}/{m}": s for m, s in summaries.items()}),
               "labelling_cost": labels, "label_budget": labels.get("lm_calls"), "gap_share": recipe.get("gap_share"),
               "min_detectable_diff": {f"recipe_{key}": recipe[key]["min_detectable_diff"] for key in ("vs_bm25", "vs_epr")
                                       if key in recipe}}
    return section


def held_out_folders(name: str, results: Path) -> dict[str, Path]:
    """Where a held-out task's three evaluations are: the multitask retriever's in ``held_out/TASK/``; BM25's and the
    single-task retriever's (the recipe's) in ``held_out/TASK/`` too where they were made there (step 2's were on
    another machine than the multitask one's: :func:`held_out`), else step 2's, for the tasks it measures."""
    own = results / "held_out" / name
    folders = {m: own / m / "eval" for m in ("multitask", "bm25", "single_task")}
    if name in TASKS:
        step_2 = {"bm25": results / name / "bm25" / "eval", "single_task": results / name / "recipe" / "eval"}
        folders.update({m: f for m, f in step_2.items() if not (folders[m] / "summary.json").exists()})
    return folders


def differences_from_here(out: Path, args):
    """How the machine that made ``out``'s evaluation differs from this one (empty: its LM outputs pair with this
    machine's)."""
    from taskret.backends.base import engine_of, generation_spec
    from taskret.models import dtype_name

    return machine_differences(read_json(out / "summary.json"), dtype_name("auto"),
                               engine=engine_of(generation_spec(args.lm)))


def made_here(out: Path, args) -> bool:
    """Whether ``out``'s evaluation exists and was made on this machine."""
    return (out / "summary.json").exists() and not differences_from_here(out, args)


def assemble_held_out(name: str, results: Path) -> dict | None:
    """A held-out task's row: the three retrievers' scores, the multitask one paired with BM25 and with the
    single-task one; None until all three are evaluated."""
    folders, metric = held_out_folders(name, results), metric_of(HELD_OUT[name])
    if not all((f / "summary.json").exists() for f in folders.values()):
        return None
    summaries = {m: read_json(f / "summary.json") for m, f in folders.items()}
    values = {m: per_input(f / "predictions.jsonl", metric) for m, f in folders.items()}
    row: dict = {"metric": metric, "n": summaries["multitask"]["n"],
                 **{m: round(s["metrics"][metric], 2) for m, s in summaries.items()},
                 "machine": one_machine({f"held_out/{name}/{m}": s for m, s in summaries.items()})}
    for other in ("bm25", "single_task"):
        row[f"vs_{other}"] = compare(values["multitask"], values[other], metric)
        row[f"p_vs_{other}"] = row[f"vs_{other}"]["p"]
    kept = results / "held_out" / name / "multitask"
    for extra, path in (("training", kept / "training.json"), ("trained_on", kept / "tasks.json")):
        if path.exists():
            row[extra] = read_json(path)
    return row


def assemble(results: Path, tasks: list[str], held: list[str]) -> dict:
    """Every section measured so far. Each task's evaluations (and each held-out row's) come from one machine, where
    they are paired; tasks may come from different machines (a long run moves between sessions), and then
    ``machine`` is None and ``machines`` names each section's."""
    out: dict = {}
    machines: dict[str, dict] = {}
    for name in tasks:
        out[name] = assemble_task(name, results)
        if out[name]["machine"] is not None:
            machines[name] = out[name]["machine"]
    rows = {}
    for name in held:
        row = assemble_held_out(name, results)
        if row is not None:
            rows[name] = row
            machines[f"held_out/{name}"] = row["machine"]
    if rows:
        out["held_out"] = rows
        out["held_out_mean"] = {m: round(sum(r[m] for r in rows.values()) / len(rows), 2)
                                for m in ("multitask", "bm25", "single_task")}
    first = next(iter(machines.values()), None)
    same = all(not machine_differences({"machine": m}, against=first) for m in machines.values())
    out["machine"], out["machines"] = (first if same else None), machines
    return out


# -- the steps ------------------------------------------------------------------------------------------------------


def _config(pattern: str, name: str, work_dir: Path):
    from taskret.epr.pipeline import EPRConfig

    config = EPRConfig.from_file(pattern.replace("{task}", name))
    return config.model_copy(update={"work_dir": str(work_dir)})


def _copy(source: Path, target: Path, paths, replace: bool = False) -> None:
    """``paths`` (relative) from ``source`` into ``target`` where ``target`` lacks them (``cp -n``), or wherever
    ``source`` has them (``replace``)."""
    for relative in paths:
        if (source / relative).exists() and (replace or not (target / relative).exists()):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / relative, target / relative)


def _rounds(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("round*") if p.is_dir())


def _run(config, console) -> None:
    """``taskret epr run CONFIG --stop-after index``; the stages that ran on a GPU here are added to the work
    folder's ``stage_times_gpu.jsonl`` (what ran where: the cost is read from it)."""
    from taskret.epr.pipeline import TIMES_FILE, run_pipeline
    from taskret.models import pick_device

    times = Path(config.work_dir) / TIMES_FILE
    before = len(read_jsonl(times)) if times.exists() else 0
    run_pipeline(config, console=console, stop_after="index")
    if pick_device() == "cuda":
        new = read_jsonl(times)[before:]
        with open(Path(config.work_dir) / "stage_times_gpu.jsonl", "a", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in new)


def train(name: str, args, results: Path, work: Path, test) -> None:
    """Step 1 for one task: plain EPR, then the recipe from plain EPR's scores; each one's files and rankings kept."""
    from rich.console import Console

    from taskret.epr.pipeline import EPRConfig
    from taskret.pipeline import guard_config

    plain = _config(args.epr_config, name, work / name / "epr")
    recipe = _config(args.recipe, name, work / name / "recipe")
    differing = [f for f in SHARED_FIELDS if getattr(plain, f) != getattr(recipe, f)]
    if differing:
        raise SystemExit(f"{name}: the recipe's config differs from plain EPR's in {', '.join(differing)}: it could "
                         "not reuse plain EPR's LM scores and labels")
    console = Console(stderr=True, soft_wrap=True)
    for method, config in (("epr", plain), ("recipe", recipe)):
        kept, run_dir = results / name / method, Path(config.work_dir)
        kept.mkdir(parents=True, exist_ok=True)
        try:  # a kept folder belongs to one config: a swapped recipe is measured in a fresh --results
            guard_config(kept / "pipeline_config.json", config, ignore=EPRConfig.EXECUTION_FIELDS)
        except ValueError as err:
            raise SystemExit(f"{name}/{method}: {err}") from None
        if (kept / "rankings.jsonl").exists():
            print(f"{name}/{method}: {kept / 'rankings.jsonl'} exists, kept", flush=True)
            continue
        _copy(results / name / "epr", run_dir, SCORED)  # scored once (here, or in an earlier session)
        for done in _rounds(kept):  # a later round's committed scores
            _copy(kept / done, run_dir / done, SCORED)
        _run(config, console)
        if method == "epr":
            _copy(run_dir, kept, SCORED)
        _copy(run_dir, kept, RUN_FILES, replace=True)
        for done in _rounds(run_dir):
            _copy(run_dir / done, kept / done, ROUND_FILES, replace=True)
        write_json(kept / "machine.json", machine(gpu=_gpu_name()))
        write_rankings(kept / "rankings.jsonl", test, ranking(f"index:{run_dir}", test))
        print(f"{name}/{method}: {len(test)} rankings -> {kept / 'rankings.jsonl'}", flush=True)


def _gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def evaluate_method(task, test, out: Path, label: str, rank, lms: dict, args) -> None:
    """``out``'s evaluation of ``test`` with the ranking ``rank(lm)`` returns (``(retriever, retrieved)``), unless
    one made on this machine on these inputs is there."""
    from taskret.backends.base import generation_spec, load_lm
    from taskret.icl.evaluation import evaluate
    from taskret.progress import progress_bar

    if (out / "summary.json").exists():
        elsewhere = differences_from_here(out, args)
        same_inputs = {r["id"] for r in read_jsonl(out / "predictions.jsonl")} == {e.id for e in test}
        if not elsewhere and same_inputs:
            print(f"{label}: evaluated on this machine, kept", flush=True)
            return
        why = f"on another machine ({elsewhere})" if elsewhere else "on other test inputs"
        print(f"{label}: evaluated {why}, evaluated again", flush=True)
    if "lm" not in lms:
        lms["lm"] = load_lm(generation_spec(args.lm))  # ranks (the LM-Oracle) and generates
    retriever, retrieved = rank(lms["lm"])
    with progress_bar(len(test), f"{label}: evaluating") as advance:
        evaluate(task, retriever, lms["lm"], test, out, retriever_name=label, context_window=args.context_window,
                 max_new_tokens=args.max_new_tokens, progress=advance, retrieved=retrieved)


def _bm25(task, seed: int):
    from taskret.retrieval import make_retriever

    return lambda lm: (make_retriever("bm25", seed=seed).index(task.train), None)


def _from(source: str, test):
    return lambda lm: (None, ranking(source, test))


def evaluations(name: str, task, test, results: Path, lms: dict, args) -> None:
    """Step 2 for one task: every method on ``test``, on this machine."""
    folder = results / name
    sources = {"bm25": _bm25(task, args.seed), "epr": _from(f"file:{folder / 'epr' / 'rankings.jsonl'}", test),
               "recipe": _from(f"file:{folder / 'recipe' / 'rankings.jsonl'}", test),
               "lm_oracle": lambda lm: (None, lm_oracle(task, test, lm, folder / "lm_oracle" / "oracle"))}
    for method in METHODS:
        if method in ("epr", "recipe") and not (folder / method / "rankings.jsonl").exists():
            print(f"{name}/{method}: no rankings yet (--step train), not evaluated", flush=True)
            continue
        evaluate_method(task, test, folder / method / "eval", f"{name}/{method}", sources[method], lms, args)


def multitask_training_tasks(held_out: str, tasks: list[str]) -> list[str]:
    """What the retriever that holds ``held_out`` out trains on: MTOP and the benchmark's ``tasks``, less that one
    (never a task the benchmark does not label, whose labels would not be there)."""
    return [t for t in dict.fromkeys(("mtop", *tasks)) if t != held_out]


def _multitask_rankings(name: str, trained_on: list[str], args, kept: Path, model_dir: Path, all_test) -> None:
    """The held-out task's multitask retriever (trained here on the ``trained_on`` tasks unless its model is in
    ``model_dir``) and its top 100 for every test input, queried with the task's instruction."""
    from taskret.epr.listwise import ListwiseConfig
    from taskret.epr.multitask import LabelledTask, train_multitask
    from taskret.epr.training import TrainingConfig, load_retriever
    from taskret.formats import format_query

    settings = read_json(Path(args.multitask_config))
    if not (model_dir / "model").is_dir():
        sources = []
        for other in trained_on:
            labelled = MTOP_LABELLED if other == "mtop" else Path(args.results) / other / "epr"
            if not (labelled / "labels.jsonl").exists():
                raise SystemExit(f"held out {name}: {labelled / 'labels.jsonl'} is missing (--step train first)")
            sources.append(LabelledTask(load_task(HELD_OUT[other], data_dir=args.data_dir), labelled / "labels.jsonl",
                                        INSTRUCTIONS[HELD_OUT[other]], scores=labelled / "scoring" / "scores.jsonl"))
        listwise = settings.get("listwise")
        cpu, wall = time.process_time(), time.perf_counter()
        train_multitask(sources, model_dir, TrainingConfig(**{"seed": args.seed, **settings.get("training", {})}),
                        listwise=ListwiseConfig(**{"seed": args.seed, **listwise}) if listwise is not None else None)
        write_json(kept / "training.json", {"objective": "udr listwise" if listwise is not None else "dpr",
                                            "settings": settings, "wall_s": round(time.perf_counter() - wall, 1),
                                            "cpu_s": round(time.process_time() - cpu, 1),
                                            "machine": machine(gpu=_gpu_name())})
    for file in ("tasks.json", "epr_config.json"):
        _copy(model_dir, kept, [file])
    task = load_task(HELD_OUT[name], data_dir=args.data_dir)
    retriever = load_retriever(model_dir).index(task.train)
    queries = [format_query(INSTRUCTIONS[task.name], e.input) for e in all_test]
    write_rankings(kept / "rankings.jsonl", all_test, retriever.retrieve(queries, k=100))


def held_out(name: str, tasks: list[str], results: Path, work: Path, lms: dict, args) -> None:
    """Step 3 for one held-out task: its multitask retriever (trained on MTOP and ``tasks``, less this one), its
    rankings and evaluation; for a task step 2 does not measure (MTOP), its BM25 and single-task evaluations too."""
    task = load_task(HELD_OUT[name], data_dir=args.data_dir)
    all_test = list(task.test)
    test = sample(all_test, args.limit or None, seed=args.seed)
    kept = results / "held_out" / name / "multitask"
    kept.mkdir(parents=True, exist_ok=True)
    if not (kept / "rankings.jsonl").exists():
        _multitask_rankings(name, multitask_training_tasks(name, tasks), args, kept,
                            work / "held_out" / name / "multitask", all_test)
    folders = held_out_folders(name, results)
    sources = {"multitask": _from(f"file:{kept / 'rankings.jsonl'}", test)}
    if name not in TASKS:
        sources.update(bm25=_bm25(task, args.seed), single_task=_from(args.mtop_single_task, test))
    elif not all(made_here(folders[m], args) for m in ("bm25", "single_task")):
        # step 2 evaluated this task on another machine: BM25 and the recipe are evaluated again here, beside the
        # multitask retriever, in held_out/TASK/ (step 2's stay as they are, paired with its own methods)
        own = results / "held_out" / name
        folders.update(bm25=own / "bm25" / "eval", single_task=own / "single_task" / "eval")
        sources.update(bm25=_bm25(task, args.seed),
                       single_task=_from(f"file:{results / name / 'recipe' / 'rankings.jsonl'}", test))
    for method, rank in sources.items():
        evaluate_method(task, test, folders[method], f"held out {name}/{method}", rank, lms, args)


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_tasks.json", lm="smollm2-135m", seed=0, icl=True)
    options.add_argument("--work", default="benchmarks/results/epr_tasks_work",
                         help="the EPR work folders; under benchmarks/results so that their LM-score shards are committed "
                         "and a clone elsewhere resumes (weights, checkpoints and indexes are git-ignored) "
                         "(default: %(default)s)")
    options.add_argument("--results", default="benchmarks/results/epr_tasks",
                         help="kept scores, rankings and evaluations, committed (default: %(default)s)")
    options.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="(default: %(default)s)")
    options.add_argument("--held-out", default=",".join(("mtop", *DEFAULT_TASKS)),
                         help="tasks held out of multitask training, one at a time (default: %(default)s; empty: none)")
    options.add_argument("--step", choices=("train", "evaluation", "held_out", "report", "all"), default="all",
                         help="report: only write --out from the evaluations under --results, on any machine, no LM "
                         "(default: %(default)s)")
    options.add_argument("--limit", type=int, default=0, help="a seeded sample of this many test inputs (smoke runs; "
                         "default 0: all)")
    options.add_argument("--epr-config", default=str(CONFIGS / "{task}.json"), help="plain EPR's config ({task}: the "
                         "task; default: %(default)s)")
    options.add_argument("--recipe", default=str(CONFIGS / "{task}_recipe.json"),
                         help="the recommended recipe's config (default: %(default)s)")
    options.add_argument("--multitask-config", default=str(CONFIGS / "multitask.json"),
                         help="the multitask retriever's training and listwise settings (default: %(default)s)")
    options.add_argument("--mtop-single-task", default="committed:benchmarks/results/epr_full/mtop/udr/eval",
                         help="MTOP's single-task retriever's rankings, as the ladder reads them (default: the "
                         "committed full UDR's)")
    args = options.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    held = [t.strip() for t in args.held_out.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(TASKS)) + sorted(set(held) - set(HELD_OUT))
    if unknown:
        options.error(f"unknown tasks: {', '.join(unknown)}; --tasks takes some of {', '.join(TASKS)}, --held-out "
                      f"some of {', '.join(HELD_OUT)}")
    os.environ["TASKRET_DATA_DIR"] = args.data_dir  # where the pipeline's configs (no data_dir) read the tasks
    results, work, info, lms = Path(args.results), Path(args.work), machine(), {}
    for name in tasks if args.step != "report" else ():
        task = load_task(TASKS[name], data_dir=args.data_dir)
        if args.step in ("train", "all"):
            train(name, args, results, work, list(task.test))
        if args.step in ("evaluation", "all"):
            evaluations(name, task, sample(task.test, args.limit or None, seed=args.seed), results, lms, args)
    if args.step in ("held_out", "all"):
        for name in held:
            held_out(name, tasks, results, work, lms, args)
    if args.step == "train":
        return
    table = assemble(results, tasks, held)
    common, machines = table.pop("machine"), table.pop("machines")
    result = {"benchmark": "epr_tasks", "command": command_line(args, options, leave_out=("data_dir", "work", "step")),
              "machine": common if machines else info, "machines": machines,
              **({} if args.step == "report" else {"load_average_at_start": info["load_average"]}),  # no timing
              "lm": args.lm, "context_window": args.context_window,
              "max_new_tokens": args.max_new_tokens, "seed": args.seed, "limit": args.limit or None,
              "configs": {name: {"epr": args.epr_config.replace("{task}", name),
                                 "recipe": args.recipe.replace("{task}", name)} for name in tasks}, **table}
    if "held_out" in table:
        result["held_out_setup"] = {"instructions": {t: INSTRUCTIONS[HELD_OUT[t]] for t in HELD_OUT},
                                    "settings": read_json(Path(args.multitask_config)),
                                    "single_task_mtop": args.mtop_single_task,
                                    "labels": "each training task's first-round LM scores and labels (1,237 x 50)"}
    write_result(args.out, result)
    for name in tasks:
        for method, row in table[name]["methods"].items():
            print(f"{name}/{method}: {row['score']:.1f} {table[name]['metric']} (n={row['n']})", flush=True)


if __name__ == "__main__":
    main()
