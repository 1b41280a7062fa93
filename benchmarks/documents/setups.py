"""The named document setups (``taskret.setups``) measured as a user runs them: quality (NDCG@10) and cost
(seconds to index the corpus, milliseconds per query, reranked pairs per second) on 2 cores, against plain
BM25 reading the query alone, on SciFact (the tasks' instruction given; the setups route it to the reranker only)
and on berri-lite tasks none of the setups was tuned on.

Each task's corpus is indexed once per first stage (``docs-fast`` and ``docs-rerank`` share theirs), then every
setup ranks the task's judged queries exactly as ``taskret tart evaluate --setup NAME`` does.

    python benchmarks/documents/setups.py --tasks scifact,berri-lite/medical_question_pairs,berri-lite/wikiqa

writes ``benchmarks/results/setups.json``: per task and setup NDCG@10 / Recall@100 / MRR@10, index_s,
query_ms (first stage, per query), rerank_s and rerank_pairs_per_s, and each setup's full spec.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, round_metrics, write_result  # noqa: E402

from taskret.rerank import load_reranker  # noqa: E402
from taskret.setups import SETUPS  # noqa: E402
from taskret.tart.evaluation import evaluate_retriever  # noqa: E402
from taskret.tart.tasks import load_retrieval_task  # noqa: E402

BASELINE = "bm25"  # reads the query alone, as every setup's first stage does


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/setups.json")
    args_parser.add_argument("--tasks", default="scifact", help="comma-separated tasks (default: %(default)s)")
    args_parser.add_argument("--setups", default="docs-fast,docs-rerank", help="document setups to measure")
    args_parser.add_argument("--limit", type=int, default=None, help="a seeded sample of N queries per task")
    args = args_parser.parse_args()
    info = machine()
    setups = [SETUPS[name] for name in args.setups.split(",")]
    rerankers = {s.rerank: load_reranker(s.rerank) for s in setups if s.rerank}
    result: dict = {"question": "How good and how costly is each named setup, against BM25?",
                    "setups": {s.name: s.to_dict() for s in setups}, "baseline": BASELINE, "tasks": {},
                    "command": command_line(args, args_parser), "machine": info}
    for name in args.tasks.split(","):
        task = load_retrieval_task(name, args.data_dir).sample(args.limit)
        indexes: dict = {}  # one index per first stage, shared by the setups that use it
        rows: dict = {}
        for label, spec, setup in [(BASELINE, BASELINE, None), *((s.name, s.retriever, s) for s in setups)]:
            print(f"{task.name}: {label}", flush=True)
            rerank = rerankers.get(setup.rerank) if setup is not None and setup.rerank else None
            start = time.perf_counter()
            out = evaluate_retriever(spec, [task], use_instruction=True, k=100, indexes=indexes, reranker=rerank,
                                     rerank_top_k=setup.rerank_depth if rerank else 100,
                                     rerank_weight=setup.rerank_weight if rerank else None)
            entry = out["settings"]["closed"][task.name]
            rows[label] = {**round_metrics(entry["metrics"]), "n_queries": entry["n_queries"],
                           "n_docs": entry["n_docs"], "index_s": entry["index_s"],
                           "query_ms": round(1000 * entry["query_s"] / max(entry["n_queries"], 1), 2),
                           "rerank_s": entry.get("rerank_s"), "rerank_pairs_per_s": entry.get("rerank_pairs_per_s"),
                           "wall_s": round(time.perf_counter() - start, 1)}
        result["tasks"][task.name] = {"instruction": task.instruction, "results": rows}
        write_result(args.out, result)  # each finished task is kept, should a later one fail


if __name__ == "__main__":
    main()
