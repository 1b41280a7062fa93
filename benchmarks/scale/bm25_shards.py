"""What does BM25 cost when the corpus is split into shards (issue 78)? The same corpus indexed as 1, 2 and 4 BM25 shards
scored with the whole corpus's statistics, as `taskret tart index-shards` indexes them
(taskret.retrieval.sharded_index.index_corpus_shards, each shard written with its documents), then served as one
index (taskret.retrieval.sharded_index, the shards memory-mapped, as `taskret serve --shards` serves them): build
time, peak RSS and disk per shard count; single-query p50 / p99 on one thread; resident memory after the queries;
NDCG@10 on the queries the pooled tasks judge; and the merged top 10 against the one-shard index (the same scores;
the same documents wherever a score is not tied).

The corpus and queries are scale.py's (every real document here pooled, extended past that by resampled real sentences;
a seeded sample of the pooled tasks' real queries). The corpus is first cut into one file per shard, as a user with
shards holds it (not timed; deleted once the shards, which hold their texts, are built). Each build and each search
runs in a child process of its own, its peak RSS from rusage.
One shard is the single index: the corpus's statistics are its own.

    python benchmarks/scale/bm25_shards.py --data-dir ../shared/data --sizes 1000000,10000000 --shards 1,2,4 \\
        --work runs/bm25_shards --out benchmarks/results/bm25_shards.json

A shard count whose ``shards.json`` exists under ``--work`` is searched again without being built again.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py: the corpus, the queries, the child runner
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from engines import real_qrels  # noqa: E402
from scale import K, disk_gib, in_child, percentiles, real_query_items, real_sources, resident_kib, write_corpus  # noqa: E402


def split_corpus(corpus: Path, shards: int, folder: Path) -> list[Path]:
    """``corpus`` cut into ``shards`` contiguous parts, one JSONL file each (``folder/part-N.jsonl``): the corpus as a
    user with shards holds it, written before the build is timed. A part already there is used again."""
    from taskret.io import atomic_path

    parts = [folder / f"part-{n}.jsonl" for n in range(shards)]
    if all(p.exists() for p in parts):
        return parts
    with open(corpus, encoding="utf-8") as source:
        count = sum(1 for _ in source)
    cuts = np.linspace(0, count, shards + 1).astype(int).tolist()
    with open(corpus, encoding="utf-8") as source:  # streamed: 10M documents do not fit in memory as lines
        for path, a, b in zip(parts, cuts, cuts[1:]):
            with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
                out.writelines(itertools.islice(source, b - a))
    return parts


def build(parts: list[Path], folder: Path, on_ray: bool = False) -> dict:
    """The corpus's parts indexed as `taskret tart index-shards` indexes them (index_corpus_shards: counted, then
    each indexed with the whole corpus's counts and its documents; ``on_ray``: each part's steps a Ray task on the
    connected cluster, as with ``--ray``); ``folder/shards.json`` names the shards (written last: its presence marks
    a finished build). A child process of this script; ray_shards.py's build on Ray too."""
    from taskret.retrieval.sharded_index import index_corpus_shards
    from taskret.tart.tasks import open_corpus

    started = time.perf_counter()
    config = index_corpus_shards([open_corpus(part) for part in parts], folder / "index", on_ray=on_ray)
    seconds = time.perf_counter() - started
    names = list(json.loads(config.read_text())["shards"])
    (folder / "shards.json").write_text(json.dumps({"shards": {name: f"index/{name}" for name in names}}))
    documents = sum(json.loads((folder / "index" / name / "index_info.json").read_text())["n"] for name in names)
    return {"build_s": round(seconds, 1), "documents": documents, "disk_gib": round(disk_gib(folder / "index"), 3)}


def search(folder: Path, queries: Path, times_file: Path | None = None) -> dict:
    """Child: the shards served as one index, each query alone on one thread; the top 11s go to ``tops.json``, and
    with ``times_file`` each query's milliseconds in the queries' order (bm25_score_array.py pairs two runs by them)."""
    from taskret.retrieval.sharded_index import load_sharded_index

    texts = json.loads(queries.read_text())
    index = load_sharded_index(folder / "shards.json")
    index.retriever.warm_up()
    index.retriever.retrieve(texts[:1], k=K)  # the first query compiles numba's scorer, where it is used
    times = []
    for text in texts:
        started = time.perf_counter()
        index.retriever.retrieve([text], k=K)
        times.append(time.perf_counter() - started)
    if times_file is not None:
        times_file.write_text(json.dumps([round(t * 1000, 4) for t in times]))
    # one deeper than the top 10 for the comparison: a 10th score tied with the 11th is a tie too
    found = index.retriever.retrieve(texts, k=K + 1)
    (folder / "tops.json").write_text(json.dumps([{"ids": ids, "scores": [float(s) for s in scores]}
                                                  for ids, scores in zip(found.ids, found.scores)]))
    resident = resident_kib()["rss"] / 2 ** 20
    on_pisa = [shard.retriever.uses_pisa() for shard in index.retriever._indexes.values()]
    return {**percentiles(times), "queries": len(texts), "resident_after_queries_gib": round(resident, 3),
            "searched_on_pisa": all(on_pisa) if len(set(on_pisa)) == 1 else on_pisa}


def agreement(tops: list[dict], single: list[dict]) -> dict:
    """How the merged top 10s compare with the single index's: the largest score difference, and the share of
    ranks whose document is the single index's where that rank's score is not tied."""
    diff = max((abs(a - b) for t, s in zip(tops, single) for a, b in zip(t["scores"], s["scores"])), default=0.0)
    same = [t["ids"][r] == s["ids"][r] for t, s in zip(tops, single) for r in range(min(K, len(t["ids"]), len(s["ids"])))
            if s["scores"].count(s["scores"][r]) == 1]
    return {"max_score_diff": round(diff, 6), "same_document_untied": round(float(np.mean(same)), 4) if same else None}


def ndcg10(tops: list[dict], qids: list[str], qrels: dict) -> float | None:
    """NDCG@10 (percent, trec_eval through taskret's compute_metrics) of the merged top 10s on the judged queries,
    by rank (trec_eval's own order of tied scores is not the index's); None where no query is judged."""
    from taskret.tart.evaluation import compute_metrics

    run = {qid: {doc: float(K - rank) for rank, doc in enumerate(top["ids"][:K])}
           for qid, top in zip(qids, tops) if qid in qrels}
    if not run:
        return None
    return round(compute_metrics({qid: qrels[qid] for qid in run}, run)["ndcg@10"], 2)


def kept_sizes(out: Path, sizes: dict) -> tuple[dict, dict]:
    """``--keep-earlier``: ``sizes`` with the sizes of the earlier result at ``out`` that it lacks, in order of size;
    and each kept size's run (its command and machine, from that result: the run it came from)."""
    earlier = json.loads(out.read_text()) if out.is_file() else {"sizes": {}}
    kept = {n: rows for n, rows in earlier["sizes"].items() if n not in sizes}
    runs = {n: earlier.get("earlier_runs", {}).get(n) or {"command": earlier["command"], "machine": earlier["machine"]}
            for n in kept}
    return dict(sorted({**sizes, **kept}.items(), key=lambda item: int(item[0]))), runs

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, *rest = sys.argv[2:]
        result = build([Path(p) for p in rest[1:]], Path(rest[0])) if step == "build" else \
            search(Path(rest[0]), Path(rest[1]), Path(rest[2]) if len(rest) > 2 else None)
        print(json.dumps(result), flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/bm25_shards.json", seed=0)
    options.add_argument("--sizes", default="1000000,10000000", help="documents (default: %(default)s)")
    options.add_argument("--shards", default="1,2,4", help="shard counts; 1 is the single index (default: %(default)s)")
    options.add_argument("--queries", type=int, default=1000, help="real queries timed (default: %(default)s)")
    options.add_argument("--work", default="runs/bm25_shards", help="corpora and indexes (kept: a rerun resumes)")
    options.add_argument("--keep-earlier", action="store_true",
                         help="keep the sizes of the --out file that this run does not measure, each with its own "
                              "run's command and machine (``earlier_runs``): a size measured in a session of its own")
    args = options.parse_args()
    counts = sorted({int(s) for s in args.shards.split(",") if s} | {1})
    folders = real_sources(Path(args.data_dir))
    started = machine(threads=1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries = work / "queries.json"
    items = real_query_items(folders, args.queries, args.seed)
    queries.write_text(json.dumps([text for _, text in items]))
    qids = [qid for qid, _ in items]
    qrels = real_qrels(folders, set(qids))
    env_one_thread = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    os.environ.update(env_one_thread)  # the children inherit it: one thread a search
    sizes = {}
    for n in [int(s) for s in args.sizes.split(",") if s]:
        corpus = work / str(n) / "corpus.jsonl"
        if not corpus.exists():
            corpus.parent.mkdir(parents=True, exist_ok=True)
            write_corpus(corpus, folders, n, args.seed)
        rows = {}
        for count in counts:
            folder = work / str(n) / f"shards-{count}"
            record = folder / "build.json"
            if (folder / "shards.json").exists() and record.exists():
                built = json.loads(record.read_text())
            else:
                folder.mkdir(parents=True, exist_ok=True)
                parts = split_corpus(corpus, count, folder)
                built, peak = in_child(["--child", "build", str(folder), *map(str, parts)], __file__)
                built["build_peak_rss_gib"] = round(peak, 3)
                record.write_text(json.dumps(built))
                for part in parts:  # the shards hold their texts now: at 10M each count's parts are another 5 GB
                    part.unlink()
            searched, peak = in_child(["--child", "search", str(folder), str(queries)], __file__)
            tops = json.loads((folder / "tops.json").read_text())
            rows[str(count)] = {**built, **searched, "search_peak_rss_gib": round(peak, 3),
                                "ndcg10": ndcg10(tops, qids, qrels), "judged_queries": sum(q in qrels for q in qids)}
            print(f"{n} documents, {count} shard(s): build {built['build_s']} s at {built['build_peak_rss_gib']} "
                  f"GiB peak; p50 {searched['p50_ms']} ms", flush=True)
        single = json.loads((work / str(n) / "shards-1" / "tops.json").read_text())
        for count in counts[1:]:
            tops = json.loads((work / str(n) / f"shards-{count}" / "tops.json").read_text())
            rows[str(count)]["vs_single_index"] = agreement(tops, single)
        sizes[str(n)] = rows
    sizes, earlier_runs = kept_sizes(Path(args.out), sizes) if args.keep_earlier else (sizes, {})
    write_result(args.out, {"benchmark": "bm25_shards", "command": command_line(args, options), "machine": started,
                            "threads": 1, "sizes": sizes, **({"earlier_runs": earlier_runs} if earlier_runs else {})})


if __name__ == "__main__":
    main()
