"""Zero-shot instruction-following retrieval, before any TART training: BM25 and untrained MiniLM
(all-MiniLM-L6-v2), each with and without instructions.

1. SciFact test (all 300 claims, 5,183 abstracts): NDCG@10 / Recall@100 / MRR@10, with and without the
   paper's SciFact instruction (eval_instructions.json, "beir/scifact"). BEIR reports BM25 66.5 NDCG@10.
2. Cross-task: scifact, mtop, break and ambigqa (test splits; a seeded sample of --limit queries each),
   each task searching its own corpus (closed) and all four corpora merged (pooled). Instructions: the
   paper's X^2-retrieval ones where eval_instructions.json has the task (scifact, ambigqa), otherwise
   the task's first built-in instruction (mtop, break).

Every index is built once through the Retriever API and shared by the runs with and without
instructions (documents do not depend on them); MiniLM document embeddings are computed once per text,
so the pooled index reuses the closed indexes' embeddings (its index time is then mostly FAISS).

    OMP_NUM_THREADS=1 python benchmarks/documents/tart_zero_shot.py --data-dir ../shared/data

The same script evaluates trained models (any ``dense:FOLDER`` or ``bm25``), e.g. the TART-dual models of
``benchmarks/documents/tart_trained.py`` on the tasks they were not trained on (their training queries come from
the train splits of MTOP and Break and from AmbigQA's only split, so AmbigQA is left out of the pool)::

    python benchmarks/documents/tart_zero_shot.py --retrievers bm25,dense:minilm-l6,dense:runs/bench/tart_trained/dual/model,\
        dense:runs/bench/tart_trained/dual_no_instruction/model --cross-tasks scifact,mtop,break \
        --out benchmarks/results/tart_trained_pooled.json
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, round_metrics, write_result  # noqa: E402

from taskret.retrieval import DenseRetriever, make_retriever
from taskret.tart.evaluation import evaluate_retriever
from taskret.tart.tasks import load_retrieval_task, read_instructions

CROSS_TASKS = ("scifact", "mtop", "break", "ambigqa")
BEIR_SCIFACT_BM25 = 66.5  # NDCG@10, BEIR paper (Thakur et al., 2021), Elasticsearch BM25


class _EmbeddingCache:
    """Document embeddings by (encoder, text): a text indexed twice (closed, then pooled) is encoded once."""

    def __init__(self) -> None:
        self.vectors: dict[tuple[str, str], np.ndarray] = {}
        self.encoded = 0
        self.encode_s = 0.0

    def make(self, spec: str):
        retriever = make_retriever(spec)
        if isinstance(retriever, DenseRetriever):
            plain_encode = retriever.encode
            cache = self

            def encode(texts, queries: bool = False):
                if queries:
                    return plain_encode(texts, queries=True)
                key = retriever.encoder_name
                missing = list(dict.fromkeys(t for t in texts if (key, t) not in cache.vectors))
                if missing:
                    start = time.perf_counter()
                    for text, vector in zip(missing, plain_encode(missing)):
                        cache.vectors[key, text] = vector
                    cache.encode_s += time.perf_counter() - start
                    cache.encoded += len(missing)
                return np.stack([cache.vectors[key, t] for t in texts])

            retriever.encode = encode
        return retriever


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/tart_zero_shot.json", seed=0)
    options.add_argument("--retrievers", default="bm25,dense:minilm-l6")
    options.add_argument("--limit", type=int, default=200, help="queries per task in the cross-task part")
    options.add_argument("--cross-tasks", default=",".join(CROSS_TASKS), help="tasks pooled in the cross-task part")
    options.add_argument("--no-scifact", action="store_true", help="skip part 1 (SciFact test, the slow part)")
    options.add_argument("--runs", default=None, help="also write the run files (retrieved ids per query) here")
    args = options.parse_args()

    import torch

    torch.set_num_threads(1)
    measured_on = machine()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    start_all = time.perf_counter()
    data_dir = Path(args.data_dir)
    eval_instructions = read_instructions(data_dir / "instructions" / "eval_instructions.json")
    retrievers = [r.strip() for r in args.retrievers.split(",") if r.strip()]

    # Part 1: SciFact test, every claim, with and without the paper's BEIR instruction.
    scifact = load_retrieval_task("scifact", data_dir, "test").with_instructions(eval_instructions["beir/scifact"])
    # Part 2: four tasks, closed and pooled, with the paper's X^2 instructions where it has them.
    cross = []
    for name in [t.strip() for t in args.cross_tasks.split(",") if t.strip()]:
        task = load_retrieval_task(name, data_dir, "test")
        x2 = eval_instructions.get(f"x2_retrieval/{name}")
        cross.append((task.with_instructions(x2) if x2 else task).sample(args.limit, seed=args.seed))

    embeddings = _EmbeddingCache()
    scifact_results: dict = {}
    cross_results: dict = {}
    timings: dict = {}
    for spec in retrievers:
        indexes: dict = {}  # shared by every call for this retriever
        scifact_results[spec] = {}
        cross_results[spec] = {}
        for use_instruction in (False, True):
            tag = "instruction" if use_instruction else "no_instruction"
            runs = Path(args.runs) / spec.replace(":", "-") / tag if args.runs else None
            if not args.no_scifact:
                print(f"[{time.perf_counter() - start_all:6.0f}s] {spec}, {tag}: scifact test", flush=True)
                one = evaluate_retriever(spec, [scifact], "closed", use_instruction,
                                         run_dir=runs and runs / "scifact_test", indexes=indexes, make=embeddings.make)
                entry = one["settings"]["closed"]["scifact"]
                scifact_results[spec][tag] = {**round_metrics(entry["metrics"]), "query_s": entry["query_s"]}
                scifact_results[spec]["index_s"] = entry["index_s"]
            print(f"[{time.perf_counter() - start_all:6.0f}s] {spec}, {tag}: cross-task closed + pooled", flush=True)
            both = evaluate_retriever(spec, cross, "both", use_instruction, run_dir=runs and runs / "cross_task",
                                      indexes=indexes, make=embeddings.make)
            cross_results[spec][tag] = {
                setting: {t: {**round_metrics(e["metrics"]), **({"other_task@10": round(e["other_task@10"], 2)}
                                                         if "other_task@10" in e else {})}
                          for t, e in both["settings"][setting].items()}
                for setting in ("closed", "pooled")}
            cross_results[spec][tag]["mean"] = {s: round_metrics(m) for s, m in both["mean"].items()}
            cross_results[spec][tag]["gap_ndcg@10"] = {t: round(g["ndcg@10"], 2) for t, g in both["gap"].items()}
            cross_results[spec][tag]["gap_ndcg@10"]["mean"] = round(both["gap_mean"]["ndcg@10"], 2)
            timings.setdefault(spec, {})[tag] = {
                "query_s": {s: {t: e["query_s"] for t, e in both["settings"][s].items()} for s in both["settings"]}}
            timings[spec]["index_s"] = {"closed": {t: e["index_s"] for t, e in both["settings"]["closed"].items()},
                                        "pooled": next(iter(both["settings"]["pooled"].values()))["index_s"]}
            print(f"    scifact NDCG@10 {scifact_results[spec].get(tag, {}).get('ndcg@10', float('nan')):.1f}; "
                  f"cross-task NDCG@10 mean "
                  f"closed {both['mean']['closed']['ndcg@10']:.1f}, pooled {both['mean']['pooled']['ndcg@10']:.1f}",
                  flush=True)

    pooled_docs = sum(len(t.corpus) for t in cross)
    result = {
        "benchmark": "tart_zero_shot",
        "command": command_line(args, options, leave_out=("data_dir", "runs"), prefix="OMP_NUM_THREADS=1 "),
        "machine": measured_on,
        "metrics_note": "percent; NDCG@10 and Recall@100 from trec_eval (pytrec-eval-terrier), MRR@10 from the "
                        "same ranking; closed = each task's own corpus, pooled = the cross-task corpora merged",
        "scifact_test": None if args.no_scifact else {
            "n_queries": len(scifact.queries), "n_docs": len(scifact.corpus), "instruction": scifact.instruction,
            "reference_bm25_ndcg@10_beir": BEIR_SCIFACT_BM25,
            "results": scifact_results,
        },
        "cross_task": {
            "limit": args.limit, "seed": args.seed, "pooled_n_docs": pooled_docs,
            "tasks": {t.name: {"n_queries": len(t.queries), "n_docs": len(t.corpus), "instruction": t.instruction}
                      for t in cross},
            "ndcg@10": {spec: {tag: {"closed": {t: v["ndcg@10"] for t, v in r["closed"].items()},
                                     "pooled": {t: v["ndcg@10"] for t, v in r["pooled"].items()},
                                     "gap": r["gap_ndcg@10"]}
                               for tag, r in per.items()} for spec, per in cross_results.items()},
            "results": cross_results,
        },
        "timings": {
            "per_retriever": timings,
            "minilm_documents_encoded": embeddings.encoded,
            "minilm_encode_s": round(embeddings.encode_s, 1),
            "minilm_documents_per_s": round(embeddings.encoded / embeddings.encode_s, 1) if embeddings.encode_s else None,
            "index_note": "the SciFact corpus is indexed once per retriever and shared by part 1 and the closed part "
                          "of part 2; MiniLM's pooled index reuses the closed indexes' document embeddings",
        },
        "wall_time_s": round(time.perf_counter() - start_all, 1),
    }
    write_result(args.out, result)
    for spec in retrievers:
        print(spec, "scifact test NDCG@10:", {tag: scifact_results[spec][tag]["ndcg@10"]
                                             for tag in ("no_instruction", "instruction") if tag in scifact_results[spec]})
        for tag in ("no_instruction", "instruction"):
            print("  ", tag, result["cross_task"]["ndcg@10"][spec][tag])


if __name__ == "__main__":
    main()
