"""Can a TART-dual read the instruction without losing to its bare query? (dev tasks, then SciFact test, NDCG@10)

A TART-dual trained here reads ``"{instruction} [SEP] {claim}"`` a little worse than the claim alone on SciFact
(65.2 against 66.7 for the 60-minute student). One encoder given twice in a hybrid, reading the instructed query and
the bare one (``hybrid:dense:S+dense:S?fusion=convex&weight=W&read_instruction=1,0``, one index), fuses the two
rankings; ``W``, the instructed ranking's share, is chosen on the berri-lite dev tasks with their own instructions
(``taskret tart tune-weight --first dense:S --second dense:S --instruction --read-instruction 1,0``): W = 1 is the
instructed query alone, W = 0 the bare one. For each ``--student``:

- ``dev``: every W's NDCG@10 on each dev task (the tune-weight grid) and the W chosen on all four;
- ``leave_one_task_out``: each dev task scored at the W chosen on the other three, against W = 1 and W = 0 on the
  same queries: does the choice carry to a task it never saw?
- ``scifact``: the claims bare, instructed (W = 1), and fused at the chosen W, through the library's hybrid
  (:func:`hybrid_instruction.measure`, which also gives the other routings).

::

    python benchmarks/studies/tart/instruction_mix.py --data-dir ../shared/data \\
        --student tart_distil_len256_neg2_q350_cpu60=runs/tart_distil_len256_neg2_q350_cpu60/distil/model

Writes ``benchmarks/results/instruction_mix.json`` (each student with the machine it was measured on); ``--merge``
keeps the students already there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser, write_result  # noqa: E402
from hybrid_instruction import measure  # noqa: E402

from taskret.io import read_json
from taskret.tart.fusion import DEFAULT_GRID, best_shares, tune_weight
from taskret.tart.tasks import load_retrieval_task

DEV_TASKS = "berri-lite/argkp,berri-lite/semeval_cqa,berri-lite/conala,berri-lite/liar_plus"


def leave_one_task_out(per_task: dict[float, dict[str, float]]) -> dict:
    """Each task at the weight that is best on the others, chosen as ``tune-weight`` chooses
    (:func:`taskret.tart.fusion.best_shares`: ties to the share nearest 0.5, then the smaller), with the instructed
    (1) and bare (0) queries' scores on it."""
    tasks = list(next(iter(per_task.values())))
    out: dict = {}
    for task in tasks:
        others = [t for t in tasks if t != task]
        chosen = best_shares({(w, 1 - w): sum(scores[t] for t in others) / len(others)
                              for w, scores in per_task.items()})[0]
        out[task] = {"weight": chosen, "fused": round(per_task[chosen][task], 2),
                     "instructed": round(per_task[1.0][task], 2), "bare": round(per_task[0.0][task], 2)}
    out["mean"] = {key: round(sum(out[t][key] for t in tasks) / len(tasks), 2)
                   for key in ("fused", "instructed", "bare")}
    return out


def measure_student(name: str, model: str, dev_tasks, scifact) -> dict:
    spec = f"dense:{model}"
    started = time.perf_counter()
    choice = tune_weight(spec, dev_tasks, second=spec, use_instruction=True, read_instruction=[True, False])
    entry: dict = {"model": model, "machine": machine(), "weight": choice.weight,
                   "dev_s": round(time.perf_counter() - started, 1),
                   "dev": {f"{w:g}": {"mean": round(choice.mean_ndcg[w], 2),
                                      **{t: round(v, 2) for t, v in choice.per_task[w].items()}}
                           for w in DEFAULT_GRID},
                   "leave_one_task_out": leave_one_task_out(choice.per_task)}
    hybrid = f"hybrid:{spec}+{spec}?fusion=convex&weight={choice.weight:g}"
    routed = measure(hybrid, scifact)
    entry["scifact"] = {"spec": hybrid + "&read_instruction=1,0", "bare": routed["no_instruction"],
                        "instructed": routed["instruction"]["1,1"], "fused": routed["instruction"]["1,0"],
                        "index_s": routed["index_s"], "query_s": routed["query_s"]}
    print(name, {k: v for k, v in entry.items() if k != "dev"}, flush=True)
    return entry


def main() -> None:
    p = parser(__doc__, out="benchmarks/results/instruction_mix.json")
    p.add_argument("--student", action="append", required=True, help="NAME=MODEL_FOLDER of a TART-dual (repeatable)")
    p.add_argument("--dev-tasks", default=DEV_TASKS, help="the tasks W is chosen on (default: %(default)s)")
    p.add_argument("--dev-limit", type=int, default=25, help="dev queries per task, a seeded sample")
    p.add_argument("--task", default="scifact", help="the evaluation task (its test split, all queries)")
    p.add_argument("--merge", action="store_true", help="keep the students (and commands) already in --out")
    args = p.parse_args()
    students = [entry.partition("=") for entry in args.student]
    if any(not sep or not name or not model for name, sep, model in students):
        raise SystemExit(f"--student: expected NAME=MODEL_FOLDER, got {args.student}")
    dev_tasks = [load_retrieval_task(t, args.data_dir, "test").sample(args.dev_limit, seed=0)
                 for t in args.dev_tasks.split(",")]
    scifact = load_retrieval_task(args.task, args.data_dir, "test")
    earlier = read_json(args.out) if args.merge and Path(args.out).is_file() else {}
    setup = {"task": scifact.name, "dev_tasks": [t.name for t in dev_tasks], "dev_limit": args.dev_limit}
    if earlier and any(earlier.get(key) != value for key, value in setup.items()):
        raise SystemExit(f"--merge: {args.out} was measured on {[earlier.get(k) for k in setup]}, not {list(setup.values())}")
    result = {"task": scifact.name, "instruction": scifact.instruction, "dev_tasks": [t.name for t in dev_tasks],
              "dev_limit": args.dev_limit, "students": earlier.get("students", {}),
              "commands": [*earlier.get("commands", []), command_line(args, p)]}
    for name, _, model in students:  # written after each student: an interrupted run keeps the ones done
        result["students"][name] = measure_student(name, model, dev_tasks, scifact)
        write_result(args.out, result)


if __name__ == "__main__":
    main()
