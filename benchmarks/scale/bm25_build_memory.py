"""What grows with the corpus in a segmented BM25 build (issue 78)? At 1M documents the build peaks at 0.89 GiB and
at 10M at 2.31 (bm25_single.json: 2.6x, the target 1.5x), so something holds ~0.16 KB a document.

Each size's first N documents of ``--corpus`` are indexed as bm25_shards.py builds one shard
(``index_corpus_shards``: the corpus counted, then indexed in segments and merged, its texts written beside) in a child
process of its own, while a thread samples the process every ``--every`` seconds: its anonymous resident memory (heap
and other private pages), its file-backed resident memory (pages of memory-mapped files: they count in RSS while they
are mapped), and where the main thread is (its chain of taskret functions, outermost first: it tells the
counting pass from the build). Per size: the peak of each, the stack at the peak of the total, and per function the
largest memory seen while it ran; then, between the sizes, what grew per document.

    python benchmarks/scale/bm25_build_memory.py --corpus runs/bm25_single/10000000/corpus.jsonl \\
        --sizes 1000000,3000000 --work runs/bm25_build_memory --out benchmarks/results/bm25_build_memory.json
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from scale import in_child, resident_kib  # noqa: E402


def where(frame) -> tuple[str, list[str]]:
    """The innermost taskret function of a stack, and the chain of taskret functions from the outermost in (its
    second is the phase: the counting pass or the build)."""
    chain = []
    while frame is not None:
        if "taskret" in frame.f_code.co_filename:
            chain.append(f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}")
        frame = frame.f_back
    chain.reverse()
    return (chain[-1] if chain else ""), chain


def child(corpus: str, out: str, every: float) -> dict:
    from taskret.retrieval.sharded_index import index_corpus_shards
    from taskret.tart.tasks import open_corpus

    main_thread, samples, done = threading.main_thread().ident, [], threading.Event()

    def sample() -> None:
        while not done.wait(every):
            frame = sys._current_frames().get(main_thread)
            inner, chain = where(frame)
            samples.append({"t": time.perf_counter(), **resident_kib(), "in": inner, "stack": chain})

    thread = threading.Thread(target=sample, daemon=True)
    started = time.perf_counter()
    thread.start()
    index_corpus_shards([open_corpus(Path(corpus))], Path(out))
    done.set()
    thread.join()
    peak = max(samples, key=lambda s: s["rss"])
    by_function: dict[str, dict] = {}
    for s in samples:
        row = by_function.setdefault(s["in"], {"samples": 0, "rss_mib": 0, "anon_mib": 0, "file_mib": 0})
        row["samples"] += 1
        for key in ("rss", "anon", "file"):
            row[f"{key}_mib"] = max(row[f"{key}_mib"], round(s[key] / 1024))
    return {"seconds": round(time.perf_counter() - started, 1), "samples": len(samples),
            "peak": {"rss_mib": round(peak["rss"] / 1024), "anon_mib": round(peak["anon"] / 1024),
                     "file_mib": round(peak["file"] / 1024), "in": peak["in"], "stack": peak["stack"],
                     "at_s": round(peak["t"] - started, 1)},
            "max_anon_mib": round(max(s["anon"] for s in samples) / 1024),
            "max_file_mib": round(max(s["file"] for s in samples) / 1024),
            "by_function": dict(sorted(by_function.items(), key=lambda item: -item[1]["rss_mib"]))}


def prefix(corpus: Path, n: int, out: Path) -> None:
    """The first ``n`` lines of ``corpus`` into ``out`` (kept: a rerun reuses it)."""
    if out.is_file():
        return
    tmp = out.with_name(out.name + ".tmp")
    with open(corpus, encoding="utf-8") as lines, open(tmp, "w", encoding="utf-8") as written:
        for number, line in enumerate(lines):
            if number == n:
                break
            written.write(line)
    tmp.replace(out)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        corpus, out, every = sys.argv[2:5]
        print(json.dumps(child(corpus, out, float(every))), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_build_memory.json", data_dir=False)
    options.add_argument("--corpus", required=True, help="a corpus (JSONL) of at least the largest size")
    options.add_argument("--sizes", default="1000000,3000000", help="documents, its first N (default: %(default)s)")
    options.add_argument("--every", type=float, default=0.25, help="seconds between samples (default: %(default)s)")
    options.add_argument("--work", default="runs/bm25_build_memory", help="the corpus prefixes and the indexes")
    args = options.parse_args()
    work, started = Path(args.work), machine(threads=1)
    work.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for n in [int(s) for s in args.sizes.split(",") if s]:
        corpus = work / f"corpus-{n}.jsonl"
        prefix(Path(args.corpus), n, corpus)
        index = work / f"index-{n}"
        shutil.rmtree(index, ignore_errors=True)
        answer, peak_gib = in_child(["--child", str(corpus), str(index), str(args.every)], __file__)
        sizes[str(n)] = {**answer, "peak_rss_gib_rusage": round(peak_gib, 3)}
        shutil.rmtree(index, ignore_errors=True)
        print(f"{n}: peak {answer['peak']} ", flush=True)
    ordered = sorted(sizes, key=int)
    growth = {}
    if len(ordered) >= 2:
        small, large = sizes[ordered[0]], sizes[ordered[-1]]
        docs = int(ordered[-1]) - int(ordered[0])
        growth = {key: round((large[key] - small[key]) * 2 ** 20 / docs, 1) for key in ("max_anon_mib", "max_file_mib")}
        growth["peak_rss_bytes_per_doc"] = round((large["peak"]["rss_mib"] - small["peak"]["rss_mib"]) * 2 ** 20 / docs, 1)
    write_result(args.out, {"benchmark": "bm25_build_memory", "command": command_line(args, options),
                            "machine": started, "sizes": sizes, "growth_bytes_per_doc": growth})


if __name__ == "__main__":
    main()
