"""Issue 61: does LF-EM (taskret.icl.lf_em) behave on Break's own decompositions? Every Break row of the data folder
(train.csv and test.csv both come from Break's dev split) scored against itself (every gold should match; those
that do not are listed with the step the operator identifier cannot read) and against the next row's gold (a
trivially wrong baseline), by LF-EM and by the string-level normalised match beside it.

    python benchmarks/epr/break_lf_em_check.py
"""

from __future__ import annotations

import csv
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.icl.evaluation import break_normalized_match
from taskret.icl.lf_em import lf_em, load_resources, qdmr_to_logical_form


def _rows(data_dir: str) -> list[dict]:
    rows = []
    for name in ("train.csv", "test.csv"):
        with open(Path(data_dir) / "break" / name, newline="", encoding="utf-8") as f:
            rows += [dict(r, file=name) for r in csv.DictReader(f)]
    return rows


def _why(decomposition: str) -> str:
    try:
        qdmr_to_logical_form(decomposition)
    except ValueError as err:
        return str(err)
    return "read, but its graph differs from itself"


def _percent(hits: int, n: int) -> float:
    return round(100.0 * hits / n, 2) if n else 0.0


def main() -> None:
    ap = parser(__doc__, out="benchmarks/results/break_lf_em_check.json")
    args = ap.parse_args()
    load_resources()
    rows = _rows(args.data_dir)
    start = time.perf_counter()
    result: dict = {"command": command_line(args, ap), "machine": machine()}
    for label in ("test.csv", "all"):
        part = rows if label == "all" else [r for r in rows if r["file"] == label]
        golds = [(r["decomposition"], r["question_text"]) for r in part]
        failed = [r for r in part if not lf_em(r["decomposition"], r["decomposition"], r["question_text"])]
        wrong = [(part[(i + 1) % len(part)]["decomposition"], gold, question) for i, (gold, question) in
                 enumerate(golds)]
        result[label] = {
            "n": len(part),
            "gold_vs_gold": {"lf_em": _percent(len(part) - len(failed), len(part)),
                             "normalized_match": _percent(sum(break_normalized_match(g, g) for g, _ in golds),
                                                          len(part))},
            "next_row_gold": {"lf_em": _percent(sum(lf_em(p, g, q) for p, g, q in wrong), len(part)),
                              "normalized_match": _percent(sum(break_normalized_match(p, g) for p, g, _ in wrong),
                                                           len(part))},
            "gold_not_matching_itself": {r["question_id"]: _why(r["decomposition"]) for r in failed},
            "reasons": dict(Counter(_why(r["decomposition"]).split(":")[0] for r in failed).most_common()),
        }
        print(label, {k: v for k, v in result[label].items() if k in ("n", "gold_vs_gold", "next_row_gold")},
              flush=True)
    result["wall_time_s"] = round(time.perf_counter() - start, 1)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
