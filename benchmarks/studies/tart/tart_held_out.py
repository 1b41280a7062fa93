"""Leave-one-task-out: do TART-dual's instructions generalise to a task it never saw?

For each held-out berri-lite task, TART-dual is trained with the recipe of ``--config`` on every OTHER task of
that config (the held-out task removed from its training tasks, ``--cap`` queries per task so that four runs fit
on a laptop), then evaluated on the held-out task's dev queries (closed corpus, NDCG@10) with and without the
task's instruction, beside BM25 and the untrained base. With ``--tart-dual DIR`` the model trained on all tasks
(the held-out one included) is scored too, as the in-domain reference.

With ``--rerank upr`` the held-out TART-dual's top ``--rerank-depth`` is reranked by the zero-shot UPR reranker
(SmolLM2-135M) and interpolated with it (``tart_dual_held_out+upr``): does reranking ever hurt on an unseen task?
The interpolation weight is chosen as in ``tart_berri.py``, on the dev tasks of that benchmark (BM25 + MiniLM
reranked by the same reranker, rankings and pair scores from its ``--dev-work`` cache) with the held-out task
left out of them, so the weight never sees the task it is used on.

The numbers go into the ``held_out`` block of ``benchmarks/results/tart_berri.json``
(``{TASK: {SYSTEM: {"instruction", "no_instruction"}}}``, plus ``held_out_mean``); the rest of that file is
left as it is. Each task's per-query NDCG@10 goes to ``WORK/eval/TASK/per_query.json``, for the intervals of
``benchmarks/studies/tart/tart_confidence.py --per-query ... --per-query ...``. Trainings resume (their stages are skipped when done) and rankings are cached::

    python benchmarks/studies/tart/tart_held_out.py --data-dir ../shared/data

``--name NAME --merge`` adds another recipe's held-out model (e.g. one whose ``dual`` block sets
``exclude_instruction_from_pooling``) beside the existing systems, its setup under ``held_out_setup.more.NAME``.
``--trained-without NAME=RUN`` (repeatable) trains nothing: it scores models already trained without the held-out
tasks (a recipe that leaves them out, e.g. ``tart_distil_dev_out.json`` without the dev tasks
``argkp,semeval_cqa,conala,liar_plus``), so a full-size recipe answers the question the capped runs answer. Each
model's training tasks are read from its run's records and a model trained on a held-out task is refused. Give
such runs their own ``--out``: their tasks differ from the default block's.

``--weights-only`` (with ``--rerank``) trains and ranks nothing: it chooses each held-out task's reranker weight
again from the dev cache, as the current rule chooses it, into ``held_out_setup.rerank_weights_now`` (with its
command), so weights chosen under an older rule can be checked without retraining four models.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "documents"))  # benchmarks/documents/: tart_berri
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser, write_result  # noqa: E402
from tart_berri import DEV_TASKS, PairCache, Rankings, _choose, mean_ndcg  # noqa: E402

from taskret.io import read_json
from taskret.retrieval import RetrievalResult
from taskret.retrieval.hybrid import fuse_results
from taskret.tart.distil import student_model_folder
from taskret.tart.fusion import training_tasks
from taskret.tart.pipeline import TartRunConfig, run_pipeline
from taskret.tart.tasks import berri_lite_tasks, load_retrieval_task

# Each has a sibling task over a similar corpus with another intent (bash vs Python, health duplicates vs health
# QA, key points vs perspectives) or a scientific domain near SciFact's, so the instruction has work to do.
HELD_OUT = ("berri-lite/nl2bash", "berri-lite/medical_question_pairs", "berri-lite/argkp", "berri-lite/scitldr")
COLUMNS = ("no_instruction", "instruction")
HELD_OUT_SYSTEM = "tart_dual_held_out"


def loo_config(recipe: TartRunConfig, held_out: str, work: Path, cap: int, data_dir: str | None) -> TartRunConfig:
    """``recipe`` without ``held_out`` among its training tasks, every task capped at ``cap`` queries."""
    tasks = [t for spec in recipe.train_tasks for t in (berri_lite_tasks(data_dir) if spec == "berri-lite" else [spec])]
    if held_out not in tasks:
        raise SystemExit(f"{held_out} is not a training task of the recipe, so holding it out means nothing")
    return recipe.model_copy(update={
        "work_dir": str(work / held_out.split("/")[-1]), "data_dir": data_dir,
        "train_tasks": [t for t in tasks if t != held_out], "max_train_queries": cap,
        "task_caps": {name: min(cap, n) for name, n in recipe.task_caps.items()}, "eval_tasks": []})


def trained_without(specs: list[str], held_out: list[str]) -> dict[str, dict]:
    """``{NAME: {"model": folder, "train_tasks": [...]}}`` from ``NAME=RUN`` specs, each checked to have been
    trained on none of ``held_out`` (read from its run's records: a model whose training tasks are unknown is
    refused too)."""
    models = {}
    for spec in specs:
        name, sep, run = spec.partition("=")
        if not sep or not name or not run:
            raise SystemExit(f"--trained-without: expected NAME=RUN, got {spec!r}")
        folder = student_model_folder(run)
        seen = training_tasks(folder)
        if seen is None:
            raise SystemExit(f"--trained-without {spec}: no record of its training tasks beside {folder}")
        leaked = sorted(t.split("/")[-1] for t in held_out if t.split("/")[-1] in seen)
        if leaked:
            raise SystemExit(f"--trained-without {spec}: trained on {', '.join(leaked)}, so not held out")
        models[name] = {"model": folder, "train_tasks": sorted(seen)}
    return models


def rerank_weight(reranker, held_out: str, args) -> dict:
    """The first stage's share when ``reranker`` reorders a first stage's top ``args.rerank_depth``, chosen on
    ``tart_berri.py``'s dev tasks other than ``held_out`` (their BM25 + MiniLM hybrid, its own weight chosen on
    the same tasks; no instruction)."""
    dev = [Rankings(load_retrieval_task(name, args.data_dir, "test").sample(args.dev_limit, seed=0),
                    Path(args.dev_work), 100) for name in DEV_TASKS if name != held_out]
    firsts = [(r.first_stage("bm25", "bm25", False), r.first_stage("minilm", "dense:minilm-l6", False)) for r in dev]
    hybrid_weight, _ = _choose(dev, firsts)
    hybrids = [fuse_results(list(f), [hybrid_weight, 1 - hybrid_weight]) for f in firsts]
    # Reranked directly, not through Rankings.reranked: that cache is keyed by queries only, and this hybrid's
    # weight may differ from the one tart_berri.py cached its reranking for. Shared pair scores are reused.
    reranked = [PairCache(reranker, r.work / f"{args.rerank}.pairs.jsonl").rerank(
        r.queries(False), h, r._doc_texts.__getitem__, top_k=args.rerank_depth) for r, h in zip(dev, hybrids)]
    weight, chosen = _choose(dev, list(zip(hybrids, reranked)), rerank=True)
    return {"first_stage": weight, "dev_tasks": [r.task.name for r in dev], "hybrid_bm25_weight": hybrid_weight,
            **chosen}


def main() -> None:
    arg_parser = _parser()
    args = arg_parser.parse_args()
    work = Path(args.work)
    recipe = TartRunConfig.from_file(args.config)
    held_out = [t.strip() for t in args.tasks.split(",") if t.strip()]
    block: dict = {}
    timings: dict = {}
    weights: dict = {}
    rerank_columns = [c.strip() for c in args.rerank_columns.split(",") if c.strip()]
    if unknown := sorted(set(rerank_columns) - set(COLUMNS)):
        raise SystemExit(f"--rerank-columns: unknown {', '.join(unknown)}; expected {' and/or '.join(COLUMNS)}")
    reranker = None
    if args.rerank:
        from taskret.rerank import load_reranker

        reranker = load_reranker(f"upr:{args.upr_lm}" if args.rerank == "upr" else args.rerank)
    held_out_system = args.name
    if args.weights_only:
        if reranker is None:
            raise SystemExit("--weights-only chooses the reranker's weights: give --rerank")
        result = read_json(Path(args.out))
        result["held_out_setup"]["rerank_weights_now"] = {
            "rerank_weights": {name.split("/")[-1]: rerank_weight(reranker, name, args) for name in held_out},
            "rerank_depth": args.rerank_depth, "machine": machine(), "command": command_line(args, arg_parser)}
        write_result(Path(args.out), result)
        for task, chosen in result["held_out_setup"]["rerank_weights_now"]["rerank_weights"].items():
            print(f"{task}: first stage {chosen['first_stage']} (best {chosen['best']}, {chosen['confidence']:.0%})")
        return
    trained = trained_without(args.trained_without, held_out) if args.trained_without else {}
    if trained:
        held_out_system = next(iter(trained))  # the one reranked
    # Another recipe trains into its own folders, so the default recipe's trainings stay resumable beside it.
    loo_dir = work / ("loo" if held_out_system == HELD_OUT_SYSTEM else f"loo_{held_out_system}")
    for name in held_out:
        started = time.perf_counter()
        systems = {"bm25": "bm25", "minilm": "dense:minilm-l6"}
        if trained:
            timings[name] = {}
            systems.update({system: f"dense:{model['model']}" for system, model in trained.items()})
        else:
            config = loo_config(recipe, name, loo_dir, args.cap, args.data_dir)
            print(f"{name}: training TART-dual without it ({len(config.train_tasks)} tasks, cap {args.cap})",
                  flush=True)
            run_pipeline(config, progress=False)
            dual_dir = Path(config.work_dir) / "dual"
            run = read_json(dual_dir / "tart_dual_config.json")
            timings[name] = {"train_wall_time_s": run["wall_time_s"], "steps": run["steps"]}
            systems[held_out_system] = f"dense:{dual_dir / 'model'}"
        task = load_retrieval_task(name, args.data_dir, "test").sample(args.limit, seed=0)
        rankings = Rankings(task, work / "eval", args.depth)
        if args.tart_dual:
            systems["tart_dual_all_tasks"] = f"dense:{Path(args.tart_dual) / 'model'}"
        stages: dict[str, dict[str, RetrievalResult]] = {column: {} for column in COLUMNS}  # column -> system -> run
        for column in COLUMNS:
            for system, spec in systems.items():
                stages[column][system] = rankings.first_stage(system, spec, column == "instruction")
        if reranker is not None:
            weights[task.name] = rerank_weight(reranker, name, args)
            for column in rerank_columns:
                first = stages[column][held_out_system]
                system = f"{held_out_system}+{args.rerank}"
                reranked = rankings.reranked(system, reranker, first, column == "instruction", args.rerank_depth,
                                             args.rerank)
                stages[column][f"{system}_raw"] = reranked
                stages[column][system] = fuse_results([first, reranked], [weights[task.name]["first_stage"],
                                                                          1 - weights[task.name]["first_stage"]])
        scores: dict = {}
        for column, named in stages.items():
            # scored once per query: the means here and the per-query file benchmarks/studies/tart/tart_confidence.py resamples
            per_query = {system: rankings.query_ndcgs(ranking) for system, ranking in named.items()}
            for system, values in per_query.items():
                scores.setdefault(system, {})[column] = mean_ndcg(values)
            rankings.save_query_ndcgs(per_query, column)
        timings[name]["total_s"] = round(time.perf_counter() - started, 1)
        block[task.name] = scores
        print(f"  {task.name}: " + "; ".join(f"{s} " + " / ".join(f"{c[col]:.1f}" for col in COLUMNS if col in c)
                                             for s, c in scores.items()), flush=True)

    out = Path(args.out)
    result = read_json(out) if out.exists() else {}
    # Nothing trained with --trained-without: the models and the tasks each was trained on replace recipe and cap.
    setup = ({"models": {n: m["model"] for n, m in trained.items()},
              "train_tasks": {n: m["train_tasks"] for n, m in trained.items()}} if trained
             else {"recipe": args.config, "cap_per_task": args.cap})
    setup.update({"dev_queries_per_task": args.limit, "timings": timings, "machine": machine(),
                  "command": command_line(args, arg_parser)})
    if weights:
        setup.update({"rerank_depth": args.rerank_depth, "rerank_weights": weights})
    if args.merge and "held_out" in result:
        # Another recipe's held-out model beside the existing ones: same tasks, same sampled dev queries.
        if set(result["held_out"]) != set(block):
            raise SystemExit(f"--merge: {out} holds the tasks {sorted(result['held_out'])}, this run {sorted(block)}")
        for task, scores in block.items():
            result["held_out"][task].update(scores)
        block = result["held_out"]
        result["held_out_setup"].setdefault("more", {})[held_out_system] = setup
    else:
        result["held_out_setup"] = setup
    systems = list(dict.fromkeys(s for scores in block.values() for s in scores))
    result["held_out"] = block
    result["held_out_mean"] = {s: {c: round(sum(block[t][s][c] for t in block) / len(block), 2) for c in COLUMNS
                                   if all(c in block[t].get(s, {}) for t in block)} for s in systems}
    mean = result["held_out_mean"]
    write_result(out, result)
    for system, cols in mean.items():
        print(f"mean {system:<26} " + "   ".join(f"{c.replace('_', ' ')} {v:5.1f}" for c, v in cols.items()))


def _parser():
    p = parser(__doc__, out="benchmarks/results/tart_berri.json")
    p.add_argument("--config", default="benchmarks/studies/tart/configs/tart_dual_berri.json", help="the TART-dual recipe")
    p.add_argument("--tasks", default=",".join(HELD_OUT), help="berri-lite tasks held out, one run each")
    p.add_argument("--cap", type=int, default=60, help="training queries per task in each held-out run")
    p.add_argument("--limit", type=int, default=100, help="dev queries of the held-out task (seeded sample)")
    p.add_argument("--depth", type=int, default=100, help="ranking depth kept")
    p.add_argument("--work", default="runs/bench/tart_held_out", help="trainings and cached rankings (resumable)")
    p.add_argument("--tart-dual", default=None, help="the TART-dual run folder trained on every task (reference)")
    p.add_argument("--rerank", default=None, help="upr (SmolLM2 query likelihood) or a reranker spec/TART-full folder")
    p.add_argument("--upr-lm", default="smollm2-135m", help="the causal LM of the upr reranker")
    p.add_argument("--rerank-depth", type=int, default=10, help="first-stage documents the reranker reorders")
    p.add_argument("--rerank-columns", default="no_instruction",
                   help="the columns reranked (each costs an LM pass per pair): no_instruction and/or instruction")
    p.add_argument("--dev-work", default="runs/bench/tart_berri/dev", help="tart_berri.py's dev rankings and pair scores")
    p.add_argument("--dev-limit", type=int, default=25, help="dev queries per dev task, as in tart_berri.py")
    p.add_argument("--name", default=HELD_OUT_SYSTEM, help="the held-out model's system name (another recipe, another name)")
    p.add_argument("--merge", action="store_true",
                   help="add this run's systems to the existing held_out block (same tasks) instead of replacing it")
    p.add_argument("--trained-without", action="append", default=[], metavar="NAME=RUN",
                   help="score a model already trained without the held-out tasks instead of training (repeatable)")
    p.add_argument("--weights-only", action="store_true",
                   help="with --rerank: only choose each task's reranker weight again (no training, no ranking)")
    return p


if __name__ == "__main__":
    main()
