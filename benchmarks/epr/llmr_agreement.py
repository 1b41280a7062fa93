"""Issue 52, LLM-R's bug signal: where does the chain teacher -> student lose the LM's preferences? On the inputs the
reward model never trained on (its held-out share), each scorer's agreement with the LM's ranking of their scored
BM25 candidates (taskret.epr.reward.ranking_agreement: mean Spearman, top-5 overlap): the reward model (teacher),
the distilled retriever (student), plain EPR's retriever and the untrained MiniLM reading what the student reads.
The student and EPR's retriever trained on these inputs (the student on the teacher's scores of them): theirs are
in-sample figures. Each encoder's Spearman with the teacher itself (``vs_teacher``) says whether distillation
took: a student that follows its teacher less than the untrained MiniLM learnt nothing from it (the sign of the
bug fixed in 054884a, a teacher whose scores were sigmoids, so that the softmax it was distilled through was flat).

    python benchmarks/epr/llmr_agreement.py --work runs/bench/epr_full/mtop/llm-r
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, describe_machine, machine, parser, write_result  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from taskret.data import load_task
from taskret.epr.reward import STUDENT_FIELD, encoder_scores, ranking_agreement
from taskret.epr.scoring import read_scores
from taskret.io import read_json, read_jsonl
from taskret.retrieval import DenseRetriever


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/llmr_agreement.json", task="mtop")
    options.add_argument("--work", default="runs/bench/epr_full/mtop/llm-r", help="an LLM-R EPR work folder")
    args = options.parse_args()
    work = Path(args.work)
    task = load_task(args.task, data_dir=args.data_dir)
    pool = {e.id: e for e in task.train}
    held = set(read_json(work / "reward" / "teacher" / "reward_config.json")["held_out_ids"])
    rows = [r for r in read_scores(work / "scoring" / "scores.jsonl") if r["id"] in held]
    teacher = {r["id"]: {c["id"]: c["reward"] for c in r["candidates"]}
               for r in read_jsonl(work / "reward" / "teacher_scores.jsonl")}
    scorers = {"reward_model": {r["id"]: [teacher[r["id"]][c["id"]] for c in r["candidates"]] for r in rows}}
    encoders = {"distilled_retriever": (work / "reward" / "retriever" / "model", STUDENT_FIELD),
                "epr_retriever": (work / "retriever" / "model", "input"),
                "untrained_minilm": ("minilm-l6", STUDENT_FIELD)}
    for name, (encoder, field) in encoders.items():
        scorers[name] = encoder_scores(DenseRetriever(encoder=str(encoder), field=field), rows, pool)
    agreement = ranking_agreement(rows, scorers)
    for name in encoders:
        agreement[name]["spearman_vs_teacher"] = round(float(np.mean(
            [spearmanr(scorers[name][r["id"]], scorers["reward_model"][r["id"]]).statistic for r in rows])), 4)
    spreads = [np.ptp(values) for values in scorers["reward_model"].values()]
    for name, value in agreement.items():
        print(f"{name}: Spearman {value['spearman']} (with the teacher {value.get('spearman_vs_teacher', 1.0)}), "
              f"top-5 overlap {value['top5_overlap']}", flush=True)
    device = machine()
    write_result(args.out, {"benchmark": "llmr_agreement", "work": str(work), "n_inputs": len(rows),
                            "scorers": agreement, "teacher_score_range_median": round(float(np.median(spreads)), 3),
                            "device": describe_machine(device), "machine": device,
                            "commands": [command_line(args, options, leave_out=("data_dir",))],
                            "distillation": {k: v for k, v in read_json(work / "reward" / "retriever" /
                                                                         "epr_config.json").items()
                                             if k in ("epoch_losses", "steps", "wall_time_s")}})


if __name__ == "__main__":
    main()
