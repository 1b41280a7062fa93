"""Does a query's top 10 depend on the queries encoded beside it? 1,000 real SciFact claims searched over its 5,183
abstracts with MiniLM-L6, each query's vector encoded alone and in batches as the commands encode them (50 at a
time, as a user's batch of searches; the whole list, as `tart evaluate` does), in each --dtype.

A batch pads its texts to its longest; in float32 the padded positions are masked out and change a vector by float
rounding only, in bfloat16 the rounding is coarser (the issue's 0.4665 alone against 0.4599 in a batch of 50). Per
variant: the share of queries whose top 10 differs from the query's top 10 alone (as a set and as an order), the
largest score difference, and the encoding rate (queries/s; note the machine's load beside it: the machine is shared).

The documents are encoded once (cached under runs/query_batching/, keyed by encoder and dtype) in float32:

    python benchmarks/documents/query_batching.py --queries 1000 --dtype float32
    python benchmarks/documents/query_batching.py --queries 200 --dtype bfloat16 --out benchmarks/results/query_batching_bfloat16.json

(bfloat16 on a CPU without AVX512-BF16 / AMX is emulated, and slow: hence fewer queries there.)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.corpus import doc_ids_and_texts, read_corpus, read_queries
from taskret.retrieval.dense import DenseRetriever

CACHE_DIR = Path("runs/query_batching")


def document_vectors(data_dir: Path, encoder: str) -> tuple[list[str], np.ndarray]:
    ids, texts = doc_ids_and_texts(read_corpus(data_dir / "scifact" / "corpus.jsonl"))
    cache = CACHE_DIR / f"docs-{encoder}-float32-{len(ids)}.npy"
    if cache.exists():
        return ids, np.load(cache)
    retriever = DenseRetriever(encoder=encoder, dtype="float32").index_texts(ids, texts)
    vectors = retriever._index.reconstruct_n(0, len(ids))
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return ids, vectors


def encode(retriever: DenseRetriever, queries: list[str], batch: int | None) -> tuple[np.ndarray, float]:
    """The query vectors, each ``batch`` queries in one call (None: all in one call), and the seconds it took."""
    size = batch or len(queries)
    # The query encoder in the retriever's own dtype (DenseRetriever.encode now takes float32 for queries whatever
    # the documents' dtype: the fix this benchmark measured the need for).
    model = retriever._encoder(retriever.encoder_name, retriever.dtype)
    start = time.perf_counter()
    vectors = np.concatenate([retriever._encode_with(model, queries[i:i + size], True)
                              for i in range(0, len(queries), size)])
    return vectors, time.perf_counter() - start


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/query_batching.json")
    args_parser.add_argument("--queries", type=int, default=1000)
    args_parser.add_argument("--encoder", default="minilm-l6")
    args_parser.add_argument("--dtype", action="append", help="query encoder dtype, repeatable (default float32)")
    args_parser.add_argument("--batch", type=int, default=50, help="queries per call of the batched variant")
    args = args_parser.parse_args()
    data_dir = Path(args.data_dir)
    import faiss

    ids, docs = document_vectors(data_dir, args.encoder)
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    queries = list(read_queries(data_dir / "scifact" / "queries.jsonl").values())[: args.queries]
    result = {"command": command_line(args, args_parser), "machine": machine(), "n_queries": len(queries),
              "n_documents": len(ids), "encoder": args.encoder, "variants": {}}
    for dtype in args.dtype or ["float32"]:
        retriever = DenseRetriever(encoder=args.encoder, dtype=dtype, device="cpu")
        encode(retriever, ["warm up"], 1)
        alone, alone_s = encode(retriever, queries, 1)
        alone_scores, alone_ids = index.search(alone, 10)
        entry = {"alone_queries_per_s": round(len(queries) / alone_s, 1), "load_average": machine()["load_average"]}
        for name, batch in ((f"batch_{args.batch}", args.batch), ("all_at_once", None)):
            vectors, seconds = encode(retriever, queries, batch)
            scores, found = index.search(vectors, 10)
            entry[name] = {
                "top10_order_changed": round(float(np.mean([list(a) != list(b) for a, b in zip(alone_ids, found)])),
                                             4),
                "top10_set_changed": round(float(np.mean([set(a) != set(b) for a, b in zip(alone_ids, found)])), 4),
                "max_score_difference": float(np.abs(scores - alone_scores).max()),
                "max_vector_difference": float(np.abs(vectors - alone).max()),
                "queries_per_s": round(len(queries) / seconds, 1)}
            print(dtype, name, entry[name], flush=True)
        result["variants"][dtype] = entry
        write_result(args.out, result)  # after each dtype: a slow one (bfloat16 emulated) does not take the others


if __name__ == "__main__":
    main()
