"""What smaller index shards cost: the same real documents encoded into shards of each --sizes (taskret.retrieval.shards,
as `taskret tart index` writes them: each shard's vectors written to a temporary name, fsynced and renamed), with
the wall time, the CPU time, the shards' files on disk, and what an interrupt loses at most (one shard's encoding
here; up to two a worker on Ray). SHARD_SIZE was chosen on it: a smaller shard loses less to an interrupt and moves
Ray's progress more often, and costs a file write per shard.

Beside the full builds, the write and the read of one shard of each size are timed alone (real vectors, repeated
--repeats times), so the per-shard cost is known without the encoder's noise (the machine is shared: its load
average is recorded before each build).

    python benchmarks/scale/shard_size.py --documents 1000 --sizes 1000,200,100
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.corpus import DocumentStream, iter_corpus
from taskret.io import write_jsonl
from taskret.retrieval.dense import DenseRetriever
from taskret.retrieval.shards import ShardPlan, _read_shard, _write_shard


def _disk(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*.npy")]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/shard_size.json")
    args_parser.add_argument("--documents", type=int, default=2000, help="the first N SciFact abstracts")
    args_parser.add_argument("--sizes", default="10000,1000,200", help="shard sizes, comma-separated")
    args_parser.add_argument("--encoder", default="minilm-l6")
    args_parser.add_argument("--repeats", type=int, default=20, help="writes and reads of one shard, timed alone")
    args_parser.add_argument("--one-shard-sizes", default="10000,2000,1000,100", help="shard sizes timed alone")
    args = args_parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="shard-size-"))
    try:
        rows = []
        for doc in iter_corpus(Path(args.data_dir) / "scifact" / "corpus.jsonl"):
            if len(rows) == args.documents:
                break
            rows.append({"_id": doc.id, "title": doc.title, "text": doc.text})
        corpus = work / "corpus.jsonl"
        write_jsonl(corpus, rows)
        stream = DocumentStream("scifact", lambda: iter_corpus(corpus))
        ids, digest = stream.scan()
        retriever = DenseRetriever(encoder=args.encoder, device="cpu")
        retriever.encode(["load the encoder first"])
        result = {"command": command_line(args, args_parser), "machine": machine(), "documents": len(ids),
                  "encoder": args.encoder, "dtype": retriever.dtype, "builds": {}, "one_shard": {}}
        vectors = None
        for size in sizes:
            folder = work / f"shards-{size}"
            load = machine()["load_average"]
            start, cpu = time.perf_counter(), time.process_time()
            retriever.index_stream(ids, stream.texts, ShardPlan(folder, digest, size))
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            files, size_bytes = _disk(folder)
            rate = len(ids) / wall
            result["builds"][str(size)] = {
                "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "documents_per_s": round(rate, 1),
                "shard_files": files, "disk_bytes": size_bytes, "lost_per_interrupt_s": round(min(size, len(ids)) / rate, 1),
                "load_average_before": load}
            print(size, result["builds"][str(size)], flush=True)
            vectors = retriever._index.reconstruct_n(0, len(ids))
        for size in [int(size) for size in args.one_shard_sizes.split(",")]:  # one shard's write and read, alone
            block = np.resize(vectors, (size, vectors.shape[1])).astype(np.float32)
            path = work / "one" / f"{size}.npy"
            path.parent.mkdir(exist_ok=True)
            start = time.perf_counter()
            for _ in range(args.repeats):
                _write_shard(path, block)
            written = (time.perf_counter() - start) / args.repeats
            start = time.perf_counter()
            for _ in range(args.repeats):
                _read_shard(path, size)
            read = (time.perf_counter() - start) / args.repeats
            result["one_shard"][str(size)] = {"write_ms": round(1000 * written, 2), "read_ms": round(1000 * read, 2),
                                              "bytes": path.stat().st_size,
                                              "write_ms_per_1000_documents": round(1e6 * written / size, 2)}
            print(size, result["one_shard"][str(size)], flush=True)
        write_result(args.out, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
