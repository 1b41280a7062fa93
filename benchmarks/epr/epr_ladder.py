"""Which of UDR's changes makes it beat plain EPR on MTOP? A ladder where each rung adds one lever to the one before,
every rung evaluated on all 859 test inputs on one machine, each paired with the rung before and with plain EPR.

    (a) plain EPR as taskret ran it (demonstrations by their input; lr 5e-5, 10 epochs, batch 120)
    (b) + demonstrations encoded and indexed as input and output (``field: both``, EPR's code's ``setup_type=qa``)
    (c) + EPR's code's training settings (lr 1.34e-4, batch 60, 30 epochs, 15.7% warm-up, the LM's best positive)
    (d) + UDR's listwise loss, one round, no new LM call (UDR's own settings: lr 1.3e-4, batch 32, 10 epochs): the
        recommended recipe, run end to end from its own config (``taskret epr run benchmarks/epr/configs/epr_ladder/
        d.json --work-dir benchmarks/results/epr_ladder_e2e/d``: its own candidates and LM scores, hours measured)
    (e) + UDR's second round: the committed UDR run's round-2 candidates (mined by its round-1 retriever, the
        one (d) retrains here) and their 26,051 new LM scores; a listwise retriever trained on both rounds' scores
    (f) full UDR, three rounds (the committed run)
    (g) e's round 2 labelled by a reward model trained on round 1's LM scores (``round_labeller``): no new LM call
    (h) e's round 2 LM-scored within 1.1x plain EPR's calls (``round_budget``), on the inputs whose round-1
        retriever ranks least like the LM
    (g and h each run ``benchmarks/epr/configs/epr_ladder/RUNG.json`` in ``benchmarks/results/epr_ladder_e2e/RUNG``,
    its round 1 d's files copied in by ``--step seed``; paired with e, whose round 2 they replace, and with d,
    which has none)
    and the references BM25 and LM-Oracle, so that each rung's share of the BM25 -> LM-Oracle gap is read on
    the same machine.

Three steps, each resumable, each writing files under ``--results`` (committed, so that a later one can run in
another session on the same kind of machine):

1. ``rankings``: the trained rungs' (b-e) top 100 training examples for every test input (``RUNG/rankings.jsonl``),
   from the index their ``taskret epr run benchmarks/epr/configs/epr_ladder/RUNG.json --stop-after index`` built; a, f
   and the references keep the rankings their committed evaluations recorded.
2. ``evaluation``: SmolLM2-135M on every test input with each rung's ranking (``RUNG/eval/``). An evaluation made
   on another machine (CPU, torch, transformers or the LM's dtype differ: ``summary.json``'s ``machine``) is run
   again, never mixed in. A rung whose ``taskret epr run`` went on to its evaluation (d) takes that evaluation
   where it is the ladder's (:func:`own_evaluation`).
3. ``dpp`` (after the evaluations): CEIL's DPP over the recommended rung's (``--dpp-on``) top 50 at inference, its
   trade-off chosen among ``--tune-weights`` on ``--tune-n`` held-out training inputs, never on test (``dpp/``); a
   row paired with that rung.

``--step all`` runs the three; ``--step report`` writes the result from the evaluations already there, with no LM,
on any machine (they must still come from one machine: the pairing refuses two).

The result (``--out``) holds each rung's EM, ``vs_prev`` and ``vs_epr`` (McNemar, paired bootstrap interval),
``min_detectable_diff``, ``lm_calls`` (the LM scorings of training pairs its retriever needs, EPR's included;
each evaluation's 859 generations come on top, the same for every rung) and ``cpu_hours_to_index`` (hours of a
2-core machine from BM25 candidates to a built index: LM scoring at the rate measured on 2 cores plus the training
and index stages' wall time as recorded in the rung's ``stage_times.jsonl``; ``null`` with the GPU minutes beside
it where a stage ran on a GPU). g's and h's rows add how their round 2 was labelled: ``labeller_agreement`` (the
reward model against the LM on the round-1 inputs it held out: Spearman, top-5 overlap), ``labeller_fit`` (its map
onto the LM's scale) and ``round2_budget`` (the pairs h let the LM score).

    python benchmarks/epr/epr_ladder.py --data-dir ../shared/data                    # both steps
    python benchmarks/epr/epr_ladder.py --data-dir ../shared/data --step rankings    # after the trainings
    python benchmarks/epr/epr_ladder.py --step seed --rungs g,h   # d's round 1 into g's and h's work folders, then:
    taskret epr run benchmarks/epr/configs/epr_ladder/g.json --work-dir benchmarks/results/epr_ladder_e2e/g \
        --stop-after index
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from epr_runs import distinct_pairs, ranking, stage_seconds, stage_times, write_rankings  # noqa: E402

from taskret.backends.base import engine_of, generation_spec, load_lm  # noqa: E402
from taskret.data import load_task
from taskret.epr.scoring import META_FILE, scoring_seconds
from taskret.icl.compare import holm_adjusted, paired_comparison
from taskret.icl.evaluation import (
    choose_selection_weight,
    evaluate,
    machine_differences,
    machine_info,
    mcnemar,
    read_correct,
)
from taskret.io import read_json, read_jsonl, write_json
from taskret.models import dtype_name
from taskret.progress import progress_bar
from taskret.retrieval import make_retriever
from taskret.retrieval.set_selection import Selection

COMMITTED = Path("benchmarks/results/epr_full/mtop")
EPR_SCORES = Path("benchmarks/results/epr_mtop_full/scoring/scores.jsonl")
UDR_ROUNDS = [COMMITTED / "udr" / f"round{r}" / "scoring" / "scores.jsonl" for r in (2, 3)]
#: Where the rungs run end to end on this machine keep their work folders (LM-score shards committed as they come).
E2E = Path("benchmarks/results/epr_ladder_e2e")
#: EPR's 61,850 LM scorings on the 2-core machine (AVX2 EPYC): 8.3-8.7 pairs/s on 2 Ray workers, ~2.0 h
#: (docs/benchmarks.md, "The full MTOP pipeline takes ~2.3 h on 2 cores").
SCORING_PAIRS_PER_S = 8.5

#: rung -> (what it adds, where its ranking comes from, the LM score files its retriever was trained on, the
#: work folder whose stage_times.jsonl holds its training cost)
RUNGS: dict[str, tuple[str, str, list[Path], Path]] = {
    "a": ("plain EPR (field input, lr 5e-5, 10 epochs, batch 120)", f"committed:{COMMITTED}/epr/eval",
          [EPR_SCORES], COMMITTED / "epr"),
    "b": ("+ demonstrations as input and output (field both)", "index:runs/bench/epr_ladder/b", [EPR_SCORES],
          Path("runs/bench/epr_ladder/b")),
    "c": ("+ EPR's code's training settings", "index:runs/bench/epr_ladder/c", [EPR_SCORES],
          Path("runs/bench/epr_ladder/c")),
    # d end to end from its own config (its own BM25 candidates and LM scores, measured): the recommended recipe's
    # row. The ladder's first d (trained on plain EPR's scores, its LM scoring modelled) is kept in d_first/.
    "d": ("+ UDR's listwise loss, one round", f"index:{E2E}/d", [E2E / "d" / "scoring" / "scores.jsonl"], E2E / "d"),
    "e": ("+ UDR's round 2", "index:runs/bench/epr_ladder/e", [EPR_SCORES, UDR_ROUNDS[0]],
          Path("runs/bench/epr_ladder/e")),
    "f": ("full UDR (3 rounds)", f"committed:{COMMITTED}/udr/eval", [EPR_SCORES, *UDR_ROUNDS], COMMITTED / "udr"),
    # g and h: e's round 2 by other means, each run in a work folder under benchmarks/results (its round 2 committed)
    # that starts from d's round 1 (its candidates, LM scores, labels and retriever copied in by --step seed, and
    # git-ignored there: round 1's LM scores are read from d's folder, which commits them once)
    "g": ("+ round 2 labelled by a reward model trained on round 1's LM scores, no new LM call",
          f"index:{E2E}/g", [E2E / "d" / "scoring" / "scores.jsonl"], E2E / "g"),
    "h": ("+ round 2 LM-scored within 1.1x plain EPR's calls, on the inputs round 1 ranks least like the LM",
          f"index:{E2E}/h", [E2E / "d" / "scoring" / "scores.jsonl", E2E / "h" / "round2" / "scoring" / "scores.jsonl"],
          E2E / "h"),
}
REFERENCES = {"bm25": f"committed:{COMMITTED}/epr/baseline", "lm_oracle": f"oracle:{COMMITTED}/lm-oracle/oracle"}
#: Stages that ``taskret epr run`` runs inside another's (their time within its wall time too): the round labeller is
#: trained, and its agreement measured, as round 2's labels stage begins.
NESTED_IN_LABELS = {"round 2 labels": ("round labeller", "round labeller agreement")}
TRAINING_STAGES = ("training", "round 2 training", "round 3 training", "index", "round 2 candidates",
                   "round 3 candidates", "round labeller", "round labeller agreement")
#: Stages a rung's work folder skipped because another rung ran them with the same settings, so the rung's cost
#: counts that rung's measured time: e's round 1 is d's training. (e's round-2 mining, the committed run's on a GPU,
#: is counted as two index stages: it encodes the same pool and the 1,237 queries with the same encoder.)
STAGES_RUN_BY: dict[str, dict[str, str]] = {"e": {"training": "d"}, "g": {"training": "d"}, "h": {"training": "d"}}
MINED_LIKE_INDEX: dict[str, str] = {"e": "round 2 candidates"}
#: The rung a rung adds its lever to, where that is not the rung listed before it: c is a branch off b (EPR's code's
#: training settings), and d adds UDR's listwise loss to b's settings, not to c's.
BUILDS_ON: dict[str, str] = {"d": "b", "g": "e", "h": "e"}
#: A rung also paired with a rung other than the one it builds on (``vs_RUNG``): g and h, which replace e's LM-scored
#: round 2, against d, which has no round 2.
ALSO_PAIRED: dict[str, str] = {"g": "d", "h": "d"}


def _source(name: str, results: Path) -> str:
    """Where a rung's (or reference's) ranking is read for its evaluation: a trained rung's from step 1's file."""
    source = RUNGS[name][1] if name in RUNGS else REFERENCES[name]
    return f"file:{results / name / 'rankings.jsonl'}" if source.startswith("index:") else source


#: What a rung that starts from d's round 1 (STAGES_RUN_BY) takes from d's work folder: its candidates, LM scores
#: (with the measured scoring time), labels and trained retriever (where this machine has it: weights are not
#: committed, so on a fresh clone the rung trains round 1 again and counts its own time).
ROUND1_FILES = ("candidates.jsonl", "labels.jsonl", "scoring", "retriever")


def seed_round1(name: str, source: Path) -> list[str]:
    """Copy d's round 1 (``source``: its work folder) into rung ``name``'s work folder, each part only where the rung
    lacks it; the parts copied. Refused where d's labels are not finished (a round 1 still being scored)."""
    if not (source / "labels.jsonl").exists():
        raise SystemExit(f"{name}: {source} has no finished round 1 (labels.jsonl); run d first: taskret epr run "
                         f"benchmarks/epr/configs/epr_ladder/d.json --work-dir {source}")
    target, copied = Path(RUNGS[name][3]), []
    for part in ROUND1_FILES:
        if (source / part).exists() and not (target / part).exists():
            target.mkdir(parents=True, exist_ok=True)
            if (source / part).is_dir():
                shutil.copytree(source / part, target / part)
            else:
                shutil.copyfile(source / part, target / part)
            copied.append(part)
    return copied


def rankings(test, results: Path, names: list[str]) -> None:
    """Step 1: the trained rungs' rankings of the test inputs, from their indexes (the others' are committed)."""
    for name in names:
        source, path = RUNGS[name][1], results / name / "rankings.jsonl"
        if not source.startswith("index:"):
            continue
        if path.exists():
            print(f"{name}: {path} exists, kept", flush=True)
        elif not (Path(source[6:]) / "index" / "meta.json").exists():
            print(f"{name}: no index yet (taskret epr run benchmarks/epr/configs/epr_ladder/{name}.json --stop-after "
                  "index), skipped", flush=True)
        else:
            write_rankings(path, test, ranking(source, test))
            # What the training cost and how it was set, kept beside the rankings (the work folder is not kept).
            work = Path(source[6:])
            shutil.copyfile(work / "stage_times.jsonl", results / name / "stage_times.jsonl")
            for trained in sorted(work.glob("**/retriever/epr_config.json")):
                shutil.copyfile(trained, results / name / f"{trained.parent.parent.name}_epr_config.json"
                                if trained.parent.parent != work else results / name / "epr_config.json")
            print(f"{name}: {len(test)} rankings -> {path}", flush=True)


def _here(summary: dict, lm: str) -> bool:
    """Whether an evaluation (or tuning) ``summary`` was made on this machine, with this LM's precision and engine."""
    return not machine_differences(summary, dtype_name("auto"), engine=engine_of(generation_spec(lm)))


def own_evaluation(name: str, test, results: Path, args) -> Path | None:
    """The evaluation that a rung's own end-to-end run (``taskret epr run`` without ``--stop-after``) made in its
    work folder, where it is this ladder's: every test input, the ladder's prompt settings, this machine, and the
    demonstrations ranked as the rung's rankings file ranks them. Else None (the ladder evaluates the rung itself)."""
    source = RUNGS[name][1] if name in RUNGS else ""
    own = Path(source[6:]) / "eval" if source.startswith(f"index:{E2E}") else None
    if own is None or not (own / "summary.json").exists() or not (own / "predictions.jsonl").exists():
        return None
    summary = read_json(own / "summary.json")
    settings = (summary.get("n"), summary.get("context_window"), summary.get("max_new_tokens"))
    if settings != (len(test), args.context_window, args.max_new_tokens) or not _here(summary, args.lm):
        return None
    ranked = {row["id"]: row["ids"] for row in read_jsonl(results / name / "rankings.jsonl")}
    rows = read_jsonl(own / "predictions.jsonl")
    if any(ranked.get(row["id"], [])[:len(row["retrieved_ids"])] != row["retrieved_ids"] for row in rows):
        return None
    return own


def evaluations(task, test, results: Path, names: list[str], args) -> None:
    """Step 2: each rung's (and reference's) evaluation on this machine, unless one made here exists. A rung whose
    end-to-end run evaluated it here takes that run's evaluation (:func:`own_evaluation`): its row is then one
    run of its config, candidates to exact match."""
    lm = None
    for name in names:
        source, out = _source(name, results), results / name / "eval"
        if source.startswith("file:") and not Path(source[5:]).exists():
            print(f"{name}: no rankings yet, not evaluated", flush=True)
            continue
        if (out / "summary.json").exists():
            elsewhere = machine_differences(read_json(out / "summary.json"), dtype_name("auto"),
                                            engine=engine_of(generation_spec(args.lm)))
            if not elsewhere:
                print(f"{name}: evaluated on this machine, kept", flush=True)
                continue
            print(f"{name}: evaluated on another machine ({elsewhere}), evaluated again", flush=True)
        own = own_evaluation(name, test, results, args)
        if own is not None:
            out.mkdir(parents=True, exist_ok=True)
            for part in ("predictions.jsonl", "summary.json"):
                shutil.copyfile(own / part, out / part)
            print(f"{name}: its end-to-end run's evaluation ({own}) taken", flush=True)
            continue
        lm = lm or load_lm(generation_spec(args.lm))
        with progress_bar(len(test), f"{name}: evaluating") as advance:
            evaluate(task, None, lm, test, out, retriever_name=f"ladder:{name}", context_window=args.context_window,
                     max_new_tokens=args.max_new_tokens, progress=advance, retrieved=ranking(source, test))


#: The folder (under --results) of CEIL's set selection on the recommended rung's retriever (issue 77, item 4).
DPP = "dpp"


def dpp_evaluation(task, test, results: Path, on: str, args, required: bool = True) -> None:
    """Step dpp: CEIL's DPP over rung ``on``'s top --select-candidates at inference, its trade-off chosen among
    --tune-weights on --tune-n held-out *training* inputs (never on test; ``dpp/tuning.json``), then evaluated on every
    test input (``dpp/eval``), to be paired with ``on``'s evaluation. Kept where made on this machine. Without the
    rung's retriever here: refused, or (not ``required``, as a step of ``--step all``) skipped with a word."""
    out = results / DPP
    if (out / "eval" / "summary.json").exists() and _here(read_json(out / "eval" / "summary.json"), args.lm):
        print(f"{DPP}: evaluated on this machine, kept", flush=True)
        return
    source = RUNGS[on][1]
    work = Path(source[6:]) if source.startswith("index:") else None
    if work is None or not (work / "index" / "meta.json").exists():
        why = (f"{DPP}: rung {on}'s retriever is not on this machine (its index: {work or source}); run taskret epr "
               f"run benchmarks/epr/configs/epr_ladder/{on}.json first")
        if required:
            raise SystemExit(why)
        print(f"{why}; skipped", flush=True)
        return
    retriever = make_retriever(f"epr:{work}", seed=args.seed)
    lm = load_lm(generation_spec(args.lm))
    tuning_file = out / "tuning.json"
    tuning = read_json(tuning_file) if tuning_file.exists() else None
    weights = [float(w) for w in args.tune_weights.split(",") if w.strip()]
    if tuning is None or tuning.get("on") != on or tuning.get("weights") != weights or not _here(tuning, args.lm):
        start = time.perf_counter()
        with progress_bar(len(weights) * min(args.tune_n, len(task.train)), f"{DPP}: tuning on training inputs") as advance:
            weight, scores = choose_selection_weight(
                task, retriever, lm, Selection("dpp", n_candidates=args.select_candidates), weights, n=args.tune_n,
                seed=args.seed, context_window=args.context_window, max_new_tokens=args.max_new_tokens,
                progress=advance)
        tuning = {"on": on, "n": min(args.tune_n, len(task.train)), "weights": weights, "chosen": weight,
                  "scores": {str(w): round(v, 2) for w, v in scores.items()},
                  "wall_s": round(time.perf_counter() - start, 1),
                  "machine": {**machine_info(), **lm.runtime()}}  # the record evaluate() writes, read by _here
        write_json(tuning_file, tuning)
    with progress_bar(len(test), f"{DPP}: evaluating") as advance:
        evaluate(task, retriever, lm, test, out / "eval", retriever_name=f"ladder:{on}+dpp",
                 context_window=args.context_window, max_new_tokens=args.max_new_tokens, progress=advance,
                 selection=Selection("dpp", tuning["chosen"], args.select_candidates))


def dpp_row(results: Path, correct: dict[str, dict[str, bool]], machine_of: dict | None) -> dict | None:
    """The DPP's row, paired with the rung it selects from, where both are evaluated (on one machine)."""
    eval_dir, tuning_file = results / DPP / "eval", results / DPP / "tuning.json"
    if not (eval_dir / "predictions.jsonl").exists() or not tuning_file.exists():
        return None
    summary, tuning = read_json(eval_dir / "summary.json"), read_json(tuning_file)
    on = tuning["on"]
    if on not in correct:
        return None
    elsewhere = machine_differences(summary, against=machine_of)
    if elsewhere:
        raise SystemExit(f"{DPP}: evaluated on another machine than {on} ({elsewhere}); evaluate both on one machine")
    paired = paired_comparison(read_correct(eval_dir / "predictions.jsonl"), correct[on])
    return {"on": on, "adds": f"CEIL's DPP over {on}'s top {summary['selection']['n_candidates']} at inference",
            "em": round(summary["metrics"]["em"], 3), "n": summary["n"], "selection": summary["selection"],
            f"vs_{on}": {"only_method": paired["only_a"], f"only_{on}": paired["only_b"], "p": paired["p"],
                         "diff_ci95": paired["diff_ci95"]},
            "tuning": {k: tuning[k] for k in ("n", "weights", "chosen", "scores", "wall_s")},
            "lm_calls_to_tune": tuning["n"] * len(tuning["weights"])}


def _stage_times(name: str, results: Path) -> tuple[dict[str, dict], set[str]]:
    """A rung's recorded stages (``{stage: row}``) and those of them that ran on a GPU."""
    work = RUNGS[name][3]
    if (results / name / "stage_times.jsonl").exists():  # a trained rung's, kept by step 1
        work = results / name
    return stage_times(work)


def _round1_times(name: str, other: str, results: Path) -> dict[str, dict]:
    """The stages of the round 1 that rung ``name`` took from rung ``other``: the rung's own record of them
    (``RUNG/round1/stage_times.jsonl``) where that round 1 is an earlier run of the other's config than the one
    RUNGS names today (e's: the ladder's first d, trained on plain EPR's scores), else the other rung's."""
    kept = results / name / "round1"
    return stage_times(kept)[0] if (kept / "stage_times.jsonl").exists() else _stage_times(other, results)[0]


def _labelling_beyond_scoring(times: dict[str, dict], scoring_s: dict[str, float | None]) -> dict[str, float]:
    """What each round's labels stage took besides its LM scoring (``scoring_s``, counted on its own): all of it for
    a round that the LM did not score (g's round 2, labelled by its reward model), the rest (a budget's choice of
    inputs, the labels' merge) where the scoring was measured, nothing where it was not (its hours are modelled).
    The stages that ran inside round 2's labels (the round labeller's training and agreement, recorded apart and
    counted on their own) are taken out of it too."""
    out = {}
    for stage, row in times.items():
        labels = re.fullmatch(r"(?:round (\d+) )?labels", stage)  # round 1's stage is "labels"
        if labels is None:
            continue
        scored = scoring_s.get(labels.group(1) or "1", 0.0)  # 0.0: no LM score file for this round
        nested = sum(times[s]["wall_s"] for s in NESTED_IN_LABELS.get(stage, ()) if s in times)
        if scored is not None:
            out[f"{stage} beyond LM scoring"] = round(max(0.0, row["wall_s"] - scored - nested), 1)
    return out


def _cost(name: str, results: Path) -> dict:
    """LM scorings and hours from BM25 candidates to a built index on 2 cores (module docstring)."""
    pairs = distinct_pairs(RUNGS[name][2])
    times, gpu = _stage_times(name, results)
    stages = {s: stage_seconds(times[s]) for s in TRAINING_STAGES if s in times}
    # each round's LM scoring as its job measured it (None: scored before scoring_times.jsonl existed)
    scoring_s = {str(r): scoring_seconds(path.parent) for r, path in enumerate(RUNGS[name][2], 1)}
    stages.update(_labelling_beyond_scoring(times, scoring_s))
    for stage, other in STAGES_RUN_BY.get(name, {}).items():
        if stage not in stages:
            stages[stage] = stage_seconds(_round1_times(name, other, results)[stage])
    if name in MINED_LIKE_INDEX and "index" in stages:
        stages.setdefault(MINED_LIKE_INDEX[name], round(2 * stages["index"], 1))
    own, measured = Path(RUNGS[name][3]), all(v is not None for v in scoring_s.values())
    cost = {"lm_calls": pairs, "stages_wall_s": stages, "scoring_s": scoring_s,
            # one run of the rung's config did it all: its own scores, stages and machine, nothing borrowed
            "end_to_end": (measured and not gpu
                           and name not in STAGES_RUN_BY and name not in MINED_LIKE_INDEX
                           and all(own in path.parents for path in RUNGS[name][2]))}
    if gpu:
        cost["cpu_hours_to_index"] = None
        cost["gpu_minutes"] = round(sum(times[s]["wall_s"] for s in gpu if s in times) / 60, 1)
        # of which LM scoring: the "labels" stages score the new pairs (the rest trains and mines)
        cost["gpu_scoring_minutes"] = round(sum(times[s]["wall_s"] for s in gpu if s in times and "labels" in s) / 60, 1)
        cost["gpu_stages"] = sorted(gpu)
    elif measured:
        # every round's LM scoring measured (g and h add their round 2 to d's measured round 1, on one machine)
        cost["cpu_hours_to_index"] = round((sum(scoring_s.values()) + sum(stages.values())) / 3600, 2)
        if name in STAGES_RUN_BY:  # the stages whose measured time is another rung's run
            cost["stages_run_by"] = STAGES_RUN_BY[name]
        meta = RUNGS[name][2][0].parent / META_FILE
        if meta.exists():  # the machine its hours are measured on (others' scoring is modelled at AVX2's rate)
            recorded = read_json(meta)
            cost["built_on"] = {**(recorded.get("machine") or {}), "dtype": recorded.get("dtype")}
    else:  # the LM scoring modelled: the pairs at a constant rate, the stages as recorded
        cost["cpu_hours_to_index"] = round((pairs / SCORING_PAIRS_PER_S + sum(stages.values())) / 3600, 2)
        cost["scoring_modelled_pairs_per_s"] = SCORING_PAIRS_PER_S
    return cost


def _round2_records(name: str) -> dict:
    """What a rung's work folder records of how its round 2 was labelled, where it does: g's reward model against
    the LM on the round-1 inputs it held out (Spearman, top-5 overlap) and its map onto the LM's scale; h's budget
    (the pairs it let the LM score, on how many of the inputs with new pairs)."""
    work, out = Path(RUNGS[name][3]), {}
    agreement, fit = work / "round_labeller" / "agreement.json", work / "round2" / "reward_labels" / "fit.json"
    if agreement.exists():
        out["labeller_agreement"] = {k: v for k, v in read_json(agreement).items() if k != "what"}
    if fit.exists():
        out["labeller_fit"] = read_json(fit)
    if (work / "round2" / "budget.json").exists():
        budget = read_json(work / "round2" / "budget.json")
        out["round2_budget"] = {"round_budget": budget["round_budget"], "budget_pairs": budget["budget_pairs"],
                                "pairs": budget["pairs"], "inputs": len(budget["inputs"]),
                                "inputs_with_new_pairs": budget["inputs_with_new_pairs"]}
    return out


def assemble(results: Path, names: list[str]) -> dict:
    rows: dict[str, dict] = {}
    correct = {n: read_correct(results / n / "eval" / "predictions.jsonl") for n in [*names, *REFERENCES]
               if (results / n / "eval" / "predictions.jsonl").exists()}
    summaries = {n: read_json(results / n / "eval" / "summary.json") for n in correct}
    first = next(iter(summaries.values()), None)
    for n, summary in summaries.items():  # one machine for every number
        elsewhere = machine_differences(summary, against=first.get("machine"))
        if elsewhere:
            raise SystemExit(f"{n}: evaluated on another machine than {next(iter(summaries))} ({elsewhere}); "
                             "evaluate both on one machine")
    previous = None
    for name in names:
        if name not in correct:
            previous = None
            continue
        row = {"adds": RUNGS[name][0], "em": round(summaries[name]["metrics"]["em"], 3), "n": summaries[name]["n"]}
        pairs = [("vs_prev", BUILDS_ON.get(name, previous)), ("vs_epr", "a" if name != "a" else None)]
        pairs += [(f"vs_{ALSO_PAIRED[name]}", ALSO_PAIRED[name])] if name in ALSO_PAIRED else []
        for key, other in pairs:
            if other in correct:
                paired = paired_comparison(correct[name], correct[other])
                row[key] = {"only_method": paired["only_a"], "only_" + key[3:]: paired["only_b"], "p": paired["p"],
                            "diff_ci95": paired["diff_ci95"], "rung": other,
                            "min_detectable_diff": paired["min_detectable_diff"]}
                if key == "vs_epr":
                    row["min_detectable_diff"] = paired["min_detectable_diff"]
        row.update(_cost(name, results))
        row.update(_round2_records(name))
        rows[name] = row
        previous = name
    if rows:  # each rung against the best, one family of tests: the recommended recipe is the cheapest not below it
        best = max(rows, key=lambda r: rows[r]["em"])
        raw = {name: mcnemar(correct[name], correct[best]).p_value for name in rows if name != best}
        for name, adjusted in holm_adjusted(raw).items():
            rows[name]["vs_best_p"], rows[name]["vs_best_p_holm"] = round(raw[name], 4), round(adjusted, 4)
    references = {n: round(summaries[n]["metrics"]["em"], 3) for n in REFERENCES if n in summaries}
    if {"bm25", "lm_oracle"} <= references.keys():
        gap = references["lm_oracle"] - references["bm25"]
        for row in rows.values():
            row["share_of_gap"] = round((row["em"] - references["bm25"]) / gap, 3)
    dpp = dpp_row(results, correct, first["machine"] if first else None)
    return {"rungs": rows, "machine": first["machine"] if first else None, **references, **({DPP: dpp} if dpp else {})}


#: How the recommendation reads the rungs' tests against the best one (written into the result).
RECOMMENDED_RULE = "holm"


def recommended(rungs: dict) -> str | None:
    """The cheapest rung (fewest LM calls, then hours) within noise of the best one: the best itself, or a rung whose
    McNemar p against it, Holm-adjusted over every rung compared with it (``vs_best_p_holm``), is >= 0.05. Each
    rung's test against the best is one of a family read together, on the same inputs; uncorrected, the more rungs a
    ladder has, the likelier one is dropped by chance."""
    if not rungs:
        return None
    best = max(rungs, key=lambda r: rungs[r]["em"])
    return min((r for r in rungs if r == best or rungs[r].get("vs_best_p_holm", 0) >= 0.05),
               key=lambda r: (rungs[r]["lm_calls"], rungs[r].get("cpu_hours_to_index") or float("inf")))


def _earlier_load(out: Path) -> list | None:
    """A report's load average: the one the evaluations' run recorded in the result it rewrites (a report's own
    load measures nothing it reports)."""
    return read_json(out).get("load_average_at_start") if out.exists() else None


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_ladder.json", task="mtop", lm="smollm2-135m", seed=0,
                     icl=True)
    options.add_argument("--results", default="benchmarks/results/epr_ladder", help="rankings and evaluations")
    options.add_argument("--rungs", default=",".join(RUNGS), help="(default: %(default)s)")
    options.add_argument("--step", choices=("seed", "rankings", "evaluation", "dpp", "report", "all"), default="all",
                         help="seed: copy d's round 1 (--round1-from) into the work folders of the --rungs that start "
                         "from it (g, h), before their `taskret epr run`; dpp: CEIL's DPP on --dpp-on's retriever, "
                         "tuned on training inputs; report: --out from the evaluations already in --results, with no "
                         "LM, on any machine (default: %(default)s)")
    options.add_argument("--dpp-on", default="d", help="the rung whose retriever the DPP selects from (default: "
                         "%(default)s, the recommended recipe)")
    options.add_argument("--select-candidates", type=int, default=50, help="the retriever's top K the DPP selects from")
    options.add_argument("--tune-weights", default="0.5,0.7,0.8,0.9,0.95", help="DPP trade-offs tried on training "
                         "inputs (default: %(default)s)")
    options.add_argument("--tune-n", type=int, default=100, help="held-out training inputs the trade-off is chosen on")
    options.add_argument("--round1-from", default=str(E2E / "d"), help="d's work folder (default: %(default)s)")
    options.add_argument("--references", default=",".join(REFERENCES), help="evaluated after the rungs, for the "
                         "share of the BM25 -> LM-Oracle gap (default: %(default)s; empty: none)")
    args = options.parse_args()
    task = load_task(args.task, data_dir=args.data_dir)
    test = list(task.test)
    names = [n.strip() for n in args.rungs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(RUNGS))
    if unknown:
        raise SystemExit(f"unknown rungs: {', '.join(unknown)}; expected some of {', '.join(RUNGS)}")
    results = Path(args.results)
    if args.step == "seed":
        for name in names:
            if STAGES_RUN_BY.get(name, {}).get("training") == "d" and RUNGS[name][1].startswith(f"index:{E2E}"):
                print(f"{name}: {', '.join(seed_round1(name, Path(args.round1_from))) or 'nothing'} copied from "
                      f"{args.round1_from}", flush=True)
        return
    info = machine()
    references = [n.strip() for n in args.references.split(",") if n.strip()]
    if set(references) - set(REFERENCES):
        raise SystemExit(f"unknown references: {', '.join(sorted(set(references) - set(REFERENCES)))}")
    if args.step == "dpp":
        dpp_evaluation(task, test, results, args.dpp_on, args)
    elif args.step != "report":
        rankings(test, results, names)
        if args.step == "rankings":
            return
        evaluations(task, test, results, [*names, *references], args)
        if args.step == "all":
            dpp_evaluation(task, test, results, args.dpp_on, args, required=False)
    table = assemble(results, names)
    rungs = table["rungs"]
    # the command that makes the evaluations (a report only rewrites the file from them, and its load is no
    # measure of theirs)
    command = command_line(args, options, leave_out=("data_dir", "round1_from")).replace("--step report", "--step all")
    result = {"benchmark": "epr_ladder", "command": command, "machine": table["machine"] or info,
              "load_average_at_start": _earlier_load(Path(args.out)) if args.step == "report" else info["load_average"],
              args.task: {"n": len(test), "bm25": table.get("bm25"), "lm_oracle": table.get("lm_oracle"),
                          "recommended_rule": RECOMMENDED_RULE, "recommended": recommended(rungs), "rungs": rungs,
                          **({DPP: table[DPP]} if DPP in table else {})}}
    speed = Path("benchmarks/results/listwise_speed.json")
    if speed.exists():
        variants = json.loads(speed.read_text())["variants"]
        result["listwise_inputs_per_s"] = {"before": variants["padded_batch"]["inputs_per_s"],
                                           "after": variants["distinct_chunks"]["inputs_per_s"]}
    write_result(args.out, result)
    for name, row in rungs.items():
        print(f"{name}: {row['em']:.1f} EM ({row['adds']})", flush=True)


if __name__ == "__main__":
    main()
