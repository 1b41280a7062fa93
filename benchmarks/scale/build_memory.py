"""Where a streaming dense build's memory goes: the process's RSS, its glibc heap (the ``[heap]`` mapping) and the
Python objects tracemalloc sees, sampled as an index of real documents is built, in one child process per variant.

The 1M-document build of ``benchmarks/scale/scale.py`` grew its heap ~3.5-8 KB per document while encoding, more than the
HNSW graph and vectors it adds (~1.8 KB). Each variant builds ``dense:minilm-l6`` (``docs-fast``'s dense component,
as ``tart index`` streams it: shards of encoded vectors on disk, each added to the FAISS index as it comes) over the
first ``--docs`` documents of a corpus, and reports the growth per document of RSS, heap and traced Python memory
over the encoding (a least-squares slope of the samples after the first shard):

- ``hnsw``: the default index at this size;
- ``flat``: ``index_type=flat`` (no graph): what the ANN index adds;
- ``hnsw-trim``: ``hnsw`` with glibc's ``malloc_trim(0)`` after every sample: memory freed but kept by the
  allocator (fragmentation) comes back;
- ``hnsw-tracemalloc``: ``hnsw`` with tracemalloc on (slower): the growth of Python's own objects, and the
  allocation sites that grew most;
- ``hnsw-onednn-cache-0``: ``hnsw`` with oneDNN's primitive cache off (``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0``): each
  new input shape (batch x padded length) builds oneDNN primitives, cached by default (1,024 of them);
- ``hnsw-float32``: ``hnsw`` encoding in float32 (bfloat16 is the default where the CPU has it);
- ``encode-only``: the encoder alone, each shard's vectors made and dropped (no shards on disk, no FAISS);
- ``hnsw-mmap-threshold``: ``hnsw`` with glibc's mmap threshold fixed at 128 KiB (``MALLOC_MMAP_THRESHOLD_``): by
  default glibc raises it as large blocks are freed (up to 32 MiB), so that later tensors of other shapes come from
  the heap, which fragments and keeps what they free; fixed, each large block is mapped and unmapped on its own;
- ``hnsw-mmap-threshold-onednn-cache-0``: both;
- ``hnsw-release``: taskret's default since (:mod:`taskret.allocator`): glibc's own malloc, with ``malloc_trim(0)``
  after each chunk of 256 documents encoded.

    python benchmarks/scale/build_memory.py --corpus runs/scale/100000/corpus.jsonl --docs 20000
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

GLIBC = {"TASKRET_GLIBC_MALLOC": "1"}  # glibc's own behaviour: taskret.allocator leaves it alone
#: variant -> (the dense spec's options, environment of its child process)
VARIANTS = {
    "hnsw": ("index_type=hnsw", GLIBC),
    "flat": ("index_type=flat", GLIBC),
    "hnsw-trim": ("index_type=hnsw", GLIBC),
    "hnsw-tracemalloc": ("index_type=hnsw", GLIBC),
    "hnsw-onednn-cache-0": ("index_type=hnsw", {**GLIBC, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}),
    "hnsw-float32": ("index_type=hnsw&dtype=float32", GLIBC),
    "encode-only": ("index_type=hnsw", GLIBC),
    # taskret's default since (taskret.allocator): malloc_trim(0) after each chunk of documents encoded
    "hnsw-release": ("index_type=hnsw", {}),
    "hnsw-mmap-threshold": ("index_type=hnsw", {**GLIBC, "MALLOC_MMAP_THRESHOLD_": "131072"}),
    "hnsw-mmap-threshold-onednn-cache-0": ("index_type=hnsw", {**GLIBC, "MALLOC_MMAP_THRESHOLD_": "131072",
                                                               "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}),
}


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


def child(corpus: Path, variant: str, shard: int, every: float) -> dict:
    import tracemalloc

    from taskret.corpus import DocumentStream, iter_corpus
    from taskret.retrieval import make_retriever
    from taskret.retrieval.shards import ShardPlan

    if variant.endswith("tracemalloc"):
        tracemalloc.start(8)
    libc = ctypes.CDLL("libc.so.6")
    documents = DocumentStream("memory", lambda: iter_corpus(corpus))
    spec = f"dense:minilm-l6?{VARIANTS[variant][0]}"
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
        if tracemalloc.is_tracing() and first[0] is None and encoded[0] >= shard:
            first[0] = tracemalloc.take_snapshot()  # after the first shard: the encoder's start-up left out
        return out

    retriever._vectors = counting
    ids, fingerprint = documents.scan()
    first = [None]
    thread = threading.Thread(target=sample, daemon=True)
    with tempfile.TemporaryDirectory() as work:
        thread.start()
        started = time.perf_counter()
        if variant == "encode-only":  # the encoder alone: each shard's vectors made and dropped
            model, chunk = retriever._encoder(retriever.encoder_name), []
            for text in documents.texts():
                chunk.append(text)
                if len(chunk) == shard:
                    counting(model, chunk, False, None)
                    chunk = []
            if chunk:
                counting(model, chunk, False, None)
        else:
            retriever.index_stream(ids, documents.texts,
                                   ShardPlan(Path(work) / "shards", fingerprint, shard_size=shard))
        seconds = time.perf_counter() - started
        done.set()
        thread.join()
    out = {"variant": variant, "docs": len(ids), "samples": len(samples), "seconds": round(seconds, 1),
           "docs_per_s": round(len(ids) / seconds, 1)}
    # The encoding's samples after the first shard (the encoder's own start-up is done by then).
    steady = [s for s in samples if shard <= s["encoded"] < len(ids)]
    for key in ("rss_kib", "heap_kib", "traced_kib"):
        if len(steady) >= 3 and key in steady[0]:
            x = np.array([s["encoded"] for s in steady], dtype=float)
            y = np.array([s[key] for s in steady], dtype=float)
            out[key.replace("_kib", "_bytes_per_doc")] = round(float(np.polyfit(x, y, 1)[0]) * 1024, 1)
            out[key.replace("_kib", "_end_mib")] = round(steady[-1][key] / 1024, 1)
    if first[0] is not None:
        grown = tracemalloc.take_snapshot().compare_to(first[0], "traceback")[:5]
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
    options.add_argument("--variants", default="hnsw,hnsw-release,hnsw-mmap-threshold,flat,hnsw-trim,hnsw-onednn-cache-0,"
                         "hnsw-mmap-threshold-onednn-cache-0,hnsw-float32,encode-only,hnsw-tracemalloc")
    args = options.parse_args()
    on = machine()
    runs = []
    with open(args.corpus, encoding="utf-8") as source:  # the first --docs documents, read by each child
        head = "".join(line for _, line in zip(range(args.docs), source))
    with tempfile.TemporaryDirectory() as folder:
        subset = Path(folder) / "corpus.jsonl"
        subset.write_text(head, encoding="utf-8")
        for variant in args.variants.split(","):
            if variant not in VARIANTS:
                raise SystemExit(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
            proc = subprocess.run([sys.executable, __file__, "--child", str(subset), variant, str(args.shard),
                                   str(args.every)], capture_output=True, text=True,
                                  env={**os.environ, **VARIANTS[variant][1]})
            if proc.returncode != 0:
                raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    write_result(args.out, {"benchmark": "build_memory", "runs": runs, "machine": on,
                            "command": command_line(args, options, leave_out=())})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))))
    else:
        main()
