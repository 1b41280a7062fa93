"""Which of a hybrid's components should read the instruction? (SciFact test, NDCG@10, through the library)

A TART query is ``"{instruction} [SEP] {claim}"``. Inside a hybrid (``taskret.retrieval.hybrid``) each component
reads it or the claim alone as ``read_instruction`` says; the default gives it to every component but BM25. For
each ``--spec`` this indexes SciFact's corpus once with the library's own :class:`HybridRetriever`, then ranks the
same instructed claims under every assignment of ``read_instruction`` (all 0/1 combinations: 4 for two
components, 8 for three), and the bare claims once, so the README's advice on where the instruction goes is
measured by the code a user runs (``taskret tart evaluate --retriever 'hybrid:...&read_instruction=...'``)::

    python benchmarks/studies/tart/hybrid_instruction.py --data-dir ../shared/data \\
        --spec 'hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4' \\
        --spec 'hybrid:bm25+dense:runs/tart_distil_len256_neg2_q350_cpu60/distil/model?fusion=convex&weight=0.5'

The weights are the ones ``benchmarks/documents/tart_berri.py`` chose on the four berri-lite dev tasks (its ``weights``), or
``taskret tart tune-weight --read-instruction`` chose there. A spec may name one encoder twice
(``hybrid:dense:S+dense:S?...``): read ``1,0`` it fuses the encoder's rankings of the instructed and of the bare claim,
a way for TART-dual to read the instruction without giving up the bare claim (indexed once).
Writes ``benchmarks/results/hybrid_instruction.json``: per spec, ``no_instruction`` and ``instruction``
(``read_instruction`` -> NDCG@10), the default assignment, the seconds each step took and the machine that took
them; ``--merge`` keeps the specs and commands already in the file.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.formats import format_query
from taskret.io import read_json
from taskret.retrieval import HybridRetriever, make_retriever
from taskret.tart.evaluation import compute_metrics
from taskret.tart.tasks import load_retrieval_task


def _ndcg(task, qids: list[str], retriever, queries: list[str]) -> float:
    result = retriever.retrieve(queries, k=100)
    run = {q: {d: float(s) for d, s in zip(ids, row)} for q, ids, row in zip(qids, result.ids, result.scores)}
    return round(compute_metrics({q: task.qrels[q] for q in qids}, run)["ndcg@10"], 2)


def measure(spec: str, task) -> dict:
    retriever = make_retriever(spec)
    if not isinstance(retriever, HybridRetriever):
        raise SystemExit(f"--spec {spec!r}: expected a hybrid:SPEC+SPEC retriever")
    default = list(retriever.read_instruction)
    started = time.perf_counter()
    retriever.index_texts(*task.doc_ids_and_texts())
    entry: dict = {"default": ",".join(str(int(r)) for r in default),
                   "index_s": round(time.perf_counter() - started, 1), "instruction": {}}
    qids = [q for q in task.queries if q in task.qrels]
    started = time.perf_counter()
    entry["no_instruction"] = _ndcg(task, qids, retriever, [task.queries[q] for q in qids])
    instructed = [format_query(task.instruction, task.queries[q]) for q in qids]
    for reads in itertools.product((0, 1), repeat=len(default)):
        retriever.read_instruction = [bool(r) for r in reads]
        entry["instruction"][",".join(map(str, reads))] = _ndcg(task, qids, retriever, instructed)
    entry["query_s"] = round(time.perf_counter() - started, 1)
    print(spec, entry, flush=True)
    return entry


def main() -> None:
    p = parser(__doc__, out="benchmarks/results/hybrid_instruction.json")
    p.add_argument("--spec", action="append", required=True, help="a hybrid retriever spec (repeatable)")
    p.add_argument("--task", default="scifact", help="the evaluation task (its test split, all queries)")
    p.add_argument("--merge", action="store_true", help="keep the specs (and commands) already in --out")
    args = p.parse_args()
    info = machine()
    task = load_retrieval_task(args.task, args.data_dir, "test")
    if not task.instruction:
        raise SystemExit(f"{args.task}: the task has no instruction to route")
    earlier = read_json(args.out) if args.merge and Path(args.out).is_file() else {}
    if earlier and earlier.get("task") != task.name:
        raise SystemExit(f"--merge: {args.out} holds {earlier.get('task')}, not {task.name}")
    commands = earlier.get("commands", [earlier["command"]] if "command" in earlier else [])
    # each spec keeps the machine that timed it (a file from before this kept one machine for all)
    kept = {spec: {**entry, "machine": entry.get("machine", earlier.get("machine"))}
            for spec, entry in earlier.get("specs", {}).items()}
    result = {"task": task.name, "instruction": task.instruction,
              "n_queries": sum(q in task.qrels for q in task.queries),
              "specs": {**kept, **{spec: {**measure(spec, task), "machine": info} for spec in args.spec}},
              "commands": [*commands, command_line(args, p)]}
    write_result(args.out, result)


if __name__ == "__main__":
    main()
