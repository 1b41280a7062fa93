"""Where a streaming dense build's memory goes: the process's RSS, its glibc heap (the ``[heap]`` mapping) and the
Python objects tracemalloc sees, sampled as an index of real documents is built, in one child process per variant.

The 1M-document build of ``benchmarks/scale.py`` grew its heap ~3.5-8 KB per document while encoding, more than the
HNSW graph and vectors it adds (~1.8 KB). Each variant builds ``dense:minilm-l6`` (``docs-fast``'s dense component,
as ``tart index`` streams it: shards of encoded vectors on disk, each added to the FAISS index as it comes) over the
first ``--docs`` documents of a corpus, and reports the growth per document of RSS, heap and traced Python memory
over the encoding (a least-squares slope of the samples after the first shard):

- ``hnsw``: the default index at this size;
- ``flat``: ``index_type=flat`` (no graph): what the ANN index adds;
- ``hnsw-trim``: ``hnsw`` with glibc's ``malloc_trim(0)`` after every sample: memory freed but kept by the
  allocator (fragmentation) comes back;
- ``hnsw-tracemalloc``: ``hnsw`` with tracemalloc on (slower): the growth of Python's own objects, and the
  allocation sites that grew most.

    python benchmarks/build_memory.py --corpus runs/scale/100000/corpus.jsonl --docs 20000
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import command_line, machine, parser, write_result

VARIANTS = ("hnsw", "flat", "hnsw-trim", "hnsw-tracemalloc")


def _memory_kib() -> dict:
    """RSS and the ``[heap]`` mapping's size (KiB) of this process, from /proc."""
    rss = heap = 0
    with open("/proc/self/smaps") as smaps:
        in_heap = False
        for line in smaps:
            if not line[0].isupper() or line.startswith(("VmFlags",)):
                in_heap = line.rstrip().endswith("[heap]")
                continue
            if line.startswith("Rss:"):
                kib = int(line.split()[1])
                rss += kib
                heap += kib if in_heap else 0
    return {"rss_kib": rss, "heap_kib": heap}


def child(corpus: Path, docs: int, variant: str, shard: int, every: float) -> dict:
    import tracemalloc

    from taskret.corpus import DocumentStream, iter_corpus
    from taskret.retrieval import make_retriever
    from taskret.retrieval.shards import ShardPlan

    if variant.endswith("tracemalloc"):
        tracemalloc.start(8)
    libc = ctypes.CDLL("libc.so.6")
    documents = DocumentStream("memory", lambda: iter_corpus(corpus))
    spec = "dense:minilm-l6?index_type=flat" if variant == "flat" else "dense:minilm-l6?index_type=hnsw"
    retriever = make_retriever(spec)
    samples, done = [], threading.Event()
    encoded = [0]

    def sample() -> None:
        while not done.wait(every):
            if variant.endswith("trim"):
                libc.malloc_trim(0)
            row = {"t": time.perf_counter(), "encoded": encoded[0], **_memory_kib()}
            if tracemalloc.is_tracing():
                row["traced_kib"] = tracemalloc.get_traced_memory()[0] // 1024
            samples.append(row)

    original = retriever._vectors

    def counting(model, chunk, queries, advance):  # the documents encoded so far, for the samples' x axis
        out = original(model, chunk, queries, advance)
        encoded[0] += len(chunk)
        return out

    retriever._vectors = counting
    ids, fingerprint = documents.scan()
    first = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    thread = threading.Thread(target=sample, daemon=True)
    with tempfile.TemporaryDirectory() as work:
        thread.start()
        retriever.index_stream(ids, documents.texts, ShardPlan(Path(work) / "shards", fingerprint, shard_size=shard))
        done.set()
        thread.join()
    out = {"variant": variant, "docs": len(ids), "samples": len(samples)}
    # The encoding's samples after the first shard (the encoder's own start-up is done by then).
    steady = [s for s in samples if shard <= s["encoded"] < len(ids)]
    for key in ("rss_kib", "heap_kib", "traced_kib"):
        if len(steady) >= 3 and key in steady[0]:
            x = np.array([s["encoded"] for s in steady], dtype=float)
            y = np.array([s[key] for s in steady], dtype=float)
            out[key.replace("_kib", "_bytes_per_doc")] = round(float(np.polyfit(x, y, 1)[0]) * 1024, 1)
            out[key.replace("_kib", "_end_mib")] = round(steady[-1][key] / 1024, 1)
    if first is not None:
        grown = tracemalloc.take_snapshot().compare_to(first, "traceback")[:5]
        out["grew_most"] = [{"kib": stat.size_diff // 1024, "count": stat.count_diff,
                             "where": [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback][:4]}
                            for stat in grown]
    return out


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/build_memory.json", data_dir=False)
    options.add_argument("--corpus", default="runs/scale/100000/corpus.jsonl", help="a JSONL corpus (id, text)")
    options.add_argument("--docs", type=int, default=20_000, help="its first documents indexed")
    options.add_argument("--shard", type=int, default=2_000, help="documents per shard")
    options.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    options.add_argument("--variants", default=",".join(VARIANTS))
    args = options.parse_args()
    on = machine()
    runs = []
    with open(args.corpus, encoding="utf-8") as source:  # the first --docs documents, read by each child
        head = "".join(line for _, line in zip(range(args.docs), source))
    subset = Path(tempfile.mkdtemp()) / "corpus.jsonl"
    subset.write_text(head, encoding="utf-8")
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; expected one of {VARIANTS}")
        proc = subprocess.run([sys.executable, __file__, "--child", str(subset), str(args.docs), variant,
                               str(args.shard), str(args.every)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]), flush=True)
    write_result(args.out, {"benchmark": "build_memory", "runs": runs, "machine": on,
                            "command": command_line(args, options, leave_out=())})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]),
                               float(sys.argv[6]))))
    else:
        main()
