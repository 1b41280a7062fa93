"""Does a PISA index in document-range parts keep the BM25 build's memory flat, and what does it cost a query
(issue 78)? PISA compresses an index from its staged postings, 8 bytes each, which it maps whole: at 10M documents
3 GB resident in the build's last step, the step that broke the 1.5x memory target. In parts of ``PART_POSTINGS``
postings (taskret.retrieval.bm25_pisa) a build maps one part at a time; a query searches every part and merges them.

On one built index (a saved BM25 index folder with its bm25s arrays) and its real queries:
1. build: for each part size (``--part-postings``; 0 is one part, as before) the PISA index made from the bm25s
   arrays in a child process of its own, in a folder of its own under ``--work`` (the index's other files linked):
   seconds, peak RSS of the child (the index loaded, as a build's save has it), disk, parts;
2. search: each setting (a part size and the first depth past k a part is searched to, ``PISA_PART_MARGIN``: 0 and
   30) one query at a time on one thread, each run a child of its own, one uncounted run each and then ABBA
   (paired.py); each query's time the mean of its two runs;
3. choice, on half the queries (a seeded split): the part size with the lowest tuning mean among those whose build
   peaked at most ``--peak-limit-gib`` (none: one part stays), then its per-part depth (30 only if significantly
   faster than 0, Wilcoxon p < 0.05); the other half reports the chosen setting against one part. Every setting's
   top 10s are checked against one part's (ids and scores).

    python benchmarks/scale/bm25_pisa_parts.py --index runs/bm25_single/10000000/shards-1/index/shard-0 \\
        --queries runs/bm25_single/queries.json --work runs/bm25_pisa_parts \\
        --part-postings 0,33554432,67108864,134217728 --peak-limit-gib 1.3
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scale.py, bm25_score_array.py, bm25_pisa_depth.py, paired.py
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_pisa_depth import searched  # noqa: E402
from bm25_score_array import compare  # noqa: E402
from paired import abba, paired_runs  # noqa: E402
from scale import K, disk_gib, in_child, percentiles  # noqa: E402

#: the per-part first depths past k measured (PISA_PART_MARGIN); the first is the one a part size is chosen with
PART_MARGINS = (0, 30)
ONE_PART = "0"


def setting_name(postings: int, margin: int) -> str:
    return ONE_PART if postings == 0 else f"{postings}:{margin}"


def linked_index(index: Path, folder: Path) -> Path:
    """``folder`` holding links to ``index``'s files but its PISA index (made anew there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in index.iterdir():
        if item.name != "pisa" and not (folder / item.name).exists():
            (folder / item.name).symlink_to(item.resolve())
    return folder


def derive(folder: Path, postings: int) -> dict:
    """Child: the index opened with backend pisa, which makes its PISA index in parts of ``postings`` (0: one)."""
    from taskret.retrieval import bm25_pisa
    from taskret.retrieval.base import Retriever

    bm25_pisa.PART_POSTINGS = postings or 1 << 62
    shutil.rmtree(folder / bm25_pisa.FOLDER, ignore_errors=True)
    started = time.perf_counter()
    retriever = Retriever.load(folder, mmap=True, options={"backend": "pisa"})
    meta = json.loads((folder / bm25_pisa.FOLDER / bm25_pisa.META).read_text())
    return {"derive_s": round(time.perf_counter() - started, 1), "disk_gib": round(disk_gib(folder / "pisa"), 3),
            "parts": len(meta.get("parts", [None])), "documents": len(retriever.ids)}


def search(folder: Path, queries: Path, margin: int, out: Path, count: bool) -> dict:
    """Child: bm25_pisa_depth.py's search, each part searched first to k + ``margin``."""
    from taskret.retrieval import bm25

    bm25.PISA_PART_MARGIN = margin
    answer, retriever = searched(folder, queries, out, count)
    return {**answer, "parts": retriever._pisa_candidates().parts}


def choose(builds: dict, mean: dict, tuning: np.ndarray, limit: float, seed: int) -> tuple[str, dict]:
    """The chosen setting's name and the tuning comparisons behind it (module docstring, step 3)."""
    within = [p for p, b in builds.items() if p != ONE_PART and b["peak_rss_gib"] <= limit]
    if not within:
        return ONE_PART, {}
    sizes = {p: float(mean[setting_name(int(p), PART_MARGINS[0])][tuning].mean()) for p in within}
    size = min(sizes, key=sizes.get)
    first, deeper = (setting_name(int(size), m) for m in PART_MARGINS)
    margin = compare(mean[deeper][tuning], mean[first][tuning], seed, names=("deeper", "first"))
    chosen = deeper if margin["wilcoxon_p"] < 0.05 and margin["ratio_deeper_over_first"] < 1 else first
    return chosen, {"tuning_mean_ms_by_part_postings": sizes, "margin": {"compared": [deeper, first], **margin}}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, *rest = sys.argv[2:]
        result = derive(Path(rest[0]), int(rest[1])) if step == "derive" else \
            search(Path(rest[0]), Path(rest[1]), int(rest[2]), Path(rest[3]), rest[4] == "1")
        print(json.dumps(result), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_pisa_parts.json", data_dir=False, seed=0)
    options.add_argument("--index", required=True, help="a saved BM25 index folder (its bm25s arrays)")
    options.add_argument("--queries", required=True, help="a JSON list of query texts")
    options.add_argument("--work", required=True, help="a folder for the PISA indexes of each part size")
    options.add_argument("--part-postings", default="0,33554432,67108864,134217728",
                         help="postings a part, comma-separated; 0 is one part (default: %(default)s)")
    options.add_argument("--peak-limit-gib", type=float, required=True,
                         help="the build peak a chosen part size must keep to (issue 78: 1.5x the 1M build's)")
    args = options.parse_args()
    index, queries, work = Path(args.index), Path(args.queries), Path(args.work)
    if not (index / "bm25s").is_dir():
        raise SystemExit(f"{index}: no bm25s folder (a saved BM25 index, e.g. bm25_shards.py's shard-0)")
    sizes = sorted({int(p) for p in args.part_postings.split(",") if p} | {0})
    os.environ.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = machine(threads=1)
    builds, folders = {}, {}
    for postings in sizes:
        folders[str(postings)] = linked_index(index, work / f"parts-{postings}")
        built, peak = in_child(["--child", "derive", str(folders[str(postings)]), str(postings)], __file__)
        builds[str(postings)] = {**built, "peak_rss_gib": round(peak, 3)}
        print(f"part postings {postings}: {built['parts']} part(s) in {built['derive_s']} s at {peak:.2f} GiB peak",
              flush=True)
    settings = [ONE_PART] + [setting_name(p, m) for p in sizes if p for m in PART_MARGINS]

    def child(name: str, out: Path, counted: bool) -> list[str]:
        postings, _, margin = name.partition(":")
        return ["--child", "search", str(folders[postings]), str(queries), margin or "0", str(out),
                "0" if counted else "1"]

    runs = paired_runs(settings, child, __file__, label="setting ")
    mean = {name: got.ms for name, got in runs.items()}
    order = np.random.default_rng(args.seed).permutation(len(mean[ONE_PART]))
    tuning, held_out = order[: len(order) // 2], order[len(order) // 2:]
    chosen, reasons = choose(builds, mean, tuning, args.peak_limit_gib, args.seed)
    one_tops = runs[ONE_PART].first["tops"]
    result_settings = {
        name: {"runs": got.runs, "tuning": percentiles(list(got.ms[tuning] / 1000)),
               "held_out": percentiles(list(got.ms[held_out] / 1000)), "mean_ms": round(float(got.ms.mean()), 3),
               "pisa_searches": int(sum(got.first["searches"])),
               "queries_searched_again": int(sum(s > 1 for s in got.first["searches"])),
               "same_top10_as_one_part": float(np.mean([a == b for a, b in zip(got.first["tops"], one_tops)]))}
        for name, got in runs.items()}
    held = compare(mean[chosen][held_out], mean[ONE_PART][held_out], args.seed,
                   names=("chosen", "one_part")) if chosen != ONE_PART else None
    write_result(args.out, {"benchmark": "bm25_pisa_parts", "command": command_line(args, options),
                            "machine": started, "finished_load_average": list(os.getloadavg()), "threads": 1, "k": K,
                            "index": str(index), "documents": builds[ONE_PART]["documents"],
                            "queries": len(order), "peak_limit_gib": args.peak_limit_gib, "order": abba(settings),
                            "builds": builds, "settings": result_settings, "choice": reasons, "chosen": chosen,
                            "held_out": held})
    print(f"chosen {chosen}" + (f": held out {held}" if held else " (one part)"), flush=True)


if __name__ == "__main__":
    main()
