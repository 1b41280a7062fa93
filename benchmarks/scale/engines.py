"""Search against the engines users would pick instead (issue 62), side by side on scale.py's corpus. This script runs
the comparison and the children; the engines themselves are in ``bm25_engines.py`` and ``dense_engines.py``.

BM25: bm25s (taskret's: its numpy and numba backends), PISA (``pyterrier-pisa``: block-max WAND and MaxScore),
tantivy (block-max WAND) and Lucene (Anserini's jar in Pyserini 0.25, the last release that runs on Debian 12's
JDK 17; Pyserini 0.35 on needs JDK 21), all at taskret's k1 and b where the engine takes them (tantivy's are fixed
at 1.2 / 0.75: its overlap is also measured against bm25s at those) and each with the English analyser closest to
bm25s's that it offers (recorded per engine). Ranking is checked, not assumed: NDCG@10 on the sampled real queries
that have qrels, and the top-10 overlap with bm25s (numpy, the exact reference) at the same k1 and b.

Dense: faiss HNSW (taskret's), usearch and hnswlib, each an HNSW graph of the same degree (M=32,
ef_construction=200, inner product) over the same vectors (the docs-fast index scale.py built for that size, read
back from its ``index.faiss``; else the corpus encoded here with MiniLM-L6), at several ef_search values: recall@10
against exact search (faiss flat; a result counts when it scores at least the exact 10th score, as ann-benchmarks
counts, since a corpus with identical documents has ties at rank 10; the share by id is kept beside it) and the
single-query p50 / p99 of the index alone (queries encoded beforehand), batched queries/s, build time, disk, peak RSS.

Every index is built in a child process of its own and searched in another (peak RSS from each one's rusage, as
scale.py does); single queries run one at a time on one thread, batched ones all at once on ``--threads``.

    python benchmarks/scale/engines.py --sizes 100000,1000000 --work runs/scale --out benchmarks/results/engines.json
    python benchmarks/scale/engines.py --sizes 10000 --queries 200 --work /tmp/engines --out /tmp/engines_small.json

Served (``--serve 1000000``, one run, the other parts kept): ``taskret serve --workers 2`` under wrk over that size's
``bm25`` and ``docs-fast`` indexes (scale.py's serve: the ``/health`` floor of the same run, each ``/retrieve``, the
docs-fast rate against its query encoder's batched rate), and over Break's 6,208 examples (``floor_6k``, ``bm25_6k``).

    python benchmarks/scale/engines.py --serve 1000000 --work runs/scale --out benchmarks/results/engines.json

``--work`` is scale.py's: a size's corpus and docs-fast index already there are used as they are. An engine whose
package (the ``engines`` extra) or JVM is missing is recorded with the reason and left out of the comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py: the corpus, the queries, the child processes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))  # serving: serve_load.py, request_path.py
from _common import command_line, http_stack, machine, parser, write_result  # noqa: E402
from bm25_engines import (  # noqa: E402
    BM25_ENGINES,
    BM25S_SCORING,
    INDEXERS,
    K1,
    B,
    bm25s_analyser,
    count_corpus,
    engine_k1_b,
    reference_tops,
    reference_tops_from_index,
    search_engine,
)
from dense_engines import DENSE, DENSE_LIBS, EF_CONSTRUCTION, EF_SEARCH, HNSW_M, measure_dense, prepare_vectors  # noqa: E402
from scale import K, disk_gib, docs_fast_dense, in_child, real_query_items, real_sources, write_corpus  # noqa: E402

#: What taskret uses today (the full run's numbers say whether that should change).
DEFAULT = {"bm25": "bm25s-numba", "dense": "faiss-hnsw"}
#: Python distributions whose versions the result records.
PACKAGES = ("bm25s", "numba", "faiss-cpu", "pyterrier-pisa", "tantivy", "pyserini", "pyjnius", "usearch", "hnswlib")


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found



# -- the comparison -------------------------------------------------------------------------------------------------


def real_qrels(folders: list[Path], query_ids: set[str]) -> dict[str, dict[str, int]]:
    """Every split's qrels of ``query_ids``, ids as :func:`scale.real_documents` and :func:`real_query_items` name
    them (``task/id``)."""
    from taskret.corpus import read_qrels

    qrels: dict[str, dict[str, int]] = {}
    for folder in folders:
        for path in sorted((folder / "qrels").glob("*.tsv")):
            for qid, docs in read_qrels(path).items():
                key = f"{folder.name}/{qid}"
                if key in query_ids:
                    qrels.setdefault(key, {}).update({f"{folder.name}/{d}": r for d, r in docs.items()})
    return qrels


def row_ids(corpus: Path, rows: set[int]) -> dict[int, str]:
    """The ids of the documents at ``rows`` (a pass over the corpus, holding only those)."""
    out = {}
    with open(corpus, encoding="utf-8") as lines:
        for row, line in enumerate(lines):
            if row in rows:
                out[row] = json.loads(line)["_id"]
    return out


def overlap_at_10(tops: list[list[int]], reference: list[list[int]]) -> float:
    """The mean share of the reference's top 10 that an engine's top 10 holds (a query with fewer than 10 hits in
    both: of the larger)."""
    shares = [len(set(a) & set(r)) / max(len(a), len(r)) if a or r else 1.0 for a, r in zip(tops, reference)]
    return round(float(np.mean(shares)), 4)


def ndcg_at_10(tops: list[list[int]], qids: list[str], ids: dict[int, str], qrels: dict) -> float:
    """NDCG@10 (percent, trec_eval through taskret's :func:`~taskret.tart.evaluation.compute_metrics`) of the
    rankings as the engine ordered them (scores by rank: trec_eval's tie order is not the engine's)."""
    from taskret.tart.evaluation import compute_metrics

    run = {qid: {ids[row]: float(K - rank) for rank, row in enumerate(top)} for qid, top in zip(qids, tops)}
    return round(compute_metrics({q: qrels[q] for q in qids if q in qrels}, run)["ndcg@10"], 2)


def child(args: list[str]) -> tuple[dict | None, float, str | None]:
    """:func:`scale.in_child` on this script, a failure (an engine not installed, a JVM missing) returned, not
    raised."""
    try:
        answer, rss = in_child(args, script=__file__)
    except SystemExit as failure:
        return None, 0.0, str(failure)
    return answer, rss, answer.get("error") if isinstance(answer, dict) else None


def compare_bm25(folder: Path, corpus: Path, queries: list[tuple[str, str]], qrels: dict, engines: list[str],
                 threads: int, reference_index: Path | None = None) -> dict:
    """Each engine built and searched, its ranking against bm25s's at the same k1 and b. ``reference_index``: a
    taskret BM25 index of the same corpus (taskret's k1 and b), searched for bm25s's ranking instead of a bm25s index
    built in memory from the texts (which at 10M documents outgrows the machine); an engine at another k1 and b then
    has no ranking of its own pair to be compared with."""
    work, out, built = folder / "engines", {}, {}
    queries_path = work / "queries.json"
    queries_path.write_text(json.dumps([text for _, text in queries]))
    reference_path = {}
    for engine in engines:
        kind = BM25_ENGINES[engine]
        k1, b = engine_k1_b(engine)
        index = work / kind
        if kind == "bm25s" and reference_index is not None:  # taskret's own index of the corpus: searched, not built
            index = reference_index
            built[kind] = {"index_s": None, "peak_rss_gib": None, "disk_gib": round(disk_gib(index), 4),
                           "analyser": bm25s_analyser(), "scoring": BM25S_SCORING,
                           "built_by": "taskret's segmented build (bm25_shards.py), not built here"}
        if kind not in built:
            shutil.rmtree(index, ignore_errors=True)
            answer, rss, error = child(["--child-index", kind, str(corpus), str(index), str(K1), str(B), str(threads)])
            built[kind] = {"error": error} if error else {**answer, "peak_rss_gib": round(rss, 3),
                                                          "disk_gib": round(disk_gib(index), 4)}
        if "error" in built[kind]:
            out[engine] = {"error": built[kind]["error"]}
            continue
        tops_path = work / f"tops_{engine}.json"
        answer, rss, error = child(["--child-search", engine, str(index), str(queries_path), str(threads),
                                    str(tops_path)])
        if error:
            out[engine] = {"error": error}
            continue
        index_s = built[kind]["index_s"]
        out[engine] = {"index_s": None if index_s is None else round(index_s, 2), "disk_gib": built[kind]["disk_gib"],
                       "peak_rss_gib": built[kind]["peak_rss_gib"], "search_rss_gib": round(rss, 3),
                       **answer, "k1": k1, "b": b, "analyser": built[kind]["analyser"],
                       "scoring": built[kind]["scoring"], "index": kind,
                       **({"built_by": built[kind]["built_by"]} if "built_by" in built[kind] else {})}
        if (k1, b) not in reference_path:
            path = work / f"tops_reference_{k1}_{b}.json"
            # a bm25s engine searching the reference index ranks as the reference does (its own search: no second)
            if (k1, b) == (K1, B) and (engine == "bm25s-numpy" or (reference_index is not None and kind == "bm25s")):
                path = tops_path
            elif reference_index is not None and (k1, b) == (K1, B):
                child(["--child-reference-index", str(reference_index), str(queries_path), str(path)])
            elif reference_index is not None:
                continue
            else:
                child(["--child-reference", str(corpus), str(queries_path), str(k1), str(b), str(path)])
            reference_path[(k1, b)] = path
    tops = {e: json.loads((work / f"tops_{e}.json").read_text()) for e in out if "error" not in out[e]}
    references = {key: json.loads(path.read_text()) for key, path in reference_path.items()}
    ids = row_ids(corpus, {row for top in tops.values() for rows in top for row in rows})
    qids = [qid for qid, _ in queries]
    for engine, engine_tops in tops.items():
        k1, b = engine_k1_b(engine)
        entry = out[engine]
        entry["ndcg10"] = ndcg_at_10(engine_tops, qids, ids, qrels)
        entry["overlap10_vs_bm25s"] = overlap_at_10(engine_tops, references[(K1, B)]) if (K1, B) in references \
            else None
        if (k1, b) != (K1, B):  # its own pair: the overlap that says whether the engine, not k1, differs
            entry["overlap10_vs_bm25s_same_k1_b"] = overlap_at_10(engine_tops, references[(k1, b)]) \
                if (k1, b) in references else None
        entry["full_top10_share"] = round(float(np.mean([len(t) == K for t in engine_tops])), 4)
    return out


def compare_dense(folder: Path, corpus: Path, queries: list[str], libs: list[str], threads: int,
                  efs: Sequence[int], measured: Callable[[dict], None] = lambda out: None) -> dict:
    """Each library's curve on the same vectors, ``measured(out so far)`` after each. A library is built and
    searched once: its answer is kept as ``LIB.json`` beside the vectors, and a run started again (an hour or more
    of builds at 1M) reuses it."""
    work = folder / "engines" / "dense"
    if not (work / "exact_top10.npy").is_file():
        (work.parent / "query_texts.json").write_text(json.dumps(queries))
        answer, rss, error = child(["--child-vectors", str(folder), str(corpus),
                                    str(work.parent / "query_texts.json"), str(work)])
        if error:
            return {"error": error}
        (work / "vectors.json").write_text(json.dumps(answer))
    out: dict = {"vectors": json.loads((work / "vectors.json").read_text())}
    for lib in libs:
        kept = work / f"{lib}.json"
        before = json.loads(kept.read_text()) if kept.is_file() else None
        if before and [point["ef"] for point in before["curve"]] == list(efs):
            out[lib] = before
            print(f"{lib}: measured before, kept ({kept})", file=sys.stderr, flush=True)
            continue
        index_path = work / f"{lib}.index"
        answer, rss, error = child(["--child-dense", lib, str(work), str(index_path), str(threads),
                                    ",".join(map(str, efs))])
        out[lib] = {"error": error} if error else {**answer, "rss_gib": round(rss, 3), "m": HNSW_M,
                                                   "ef_construction": EF_CONSTRUCTION}
        index_path.unlink(missing_ok=True)
        if not error:
            write_result(kept, out[lib], quiet=True)
        measured(out)
    return out


def encoder_rate(size_folder: Path, queries: list[str]) -> dict:
    """The docs-fast index's query encoder alone, batched (scale.py's measure): what its served rate is set against."""
    from scale import encoder_throughput

    return encoder_throughput(docs_fast_dense(size_folder / "docs-fast", mmap=True), queries, 64)


def serve_part(work: Path, size: int, queries: list[str], data_dir: str, duration: float) -> dict:
    """`taskret serve --workers 2` under wrk at ``size`` (scale.py's serve: the /health floor, BM25 and docs-fast
    /retrieve, in one run) and over Break's 6,208 examples (request_path.py's index: floor_6k, bm25_6k)."""
    import request_path
    import serve_load
    from scale import serve

    from taskret.data import load_task

    folder = work / str(size)
    encoder, _ = in_child(["--child-encoder", str(folder), str(work / "queries.json")], script=__file__)
    out = {"size": size, **serve(folder, queries, 2, 32, duration, encoder["batched_queries_per_s"])}
    index = request_path.build_break_index(data_dir, Path("runs/serve_load"))
    bodies = serve_load.retrieve_bodies([e.input for e in load_task("break", data_dir=data_dir).test],
                                        Path("runs/serve_load") / "engines_serve_6k.jsonl")
    server = serve_load.Server(index, 2)
    try:
        out["floor_6k"] = serve_load.wrk_summary(serve_load.warmed_wrk(server.url + "/health", None, 32, duration))
        out["bm25_6k"] = serve_load.wrk_summary(serve_load.warmed_wrk(server.url + "/retrieve", bodies, 32, duration))
    finally:
        server.close()
    out["targets"]["bm25_6k_share_of_floor"] = round(out["bm25_6k"]["req_per_s"] / out["floor_6k"]["req_per_s"], 3)
    return out


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/engines.json", seed=0)
    args_parser.add_argument("--sizes", default="100000,1000000")
    args_parser.add_argument("--work", default="runs/scale",
                             help="scale.py's work folder: its corpora and docs-fast indexes are used as they are")
    args_parser.add_argument("--queries", type=int, default=1000, help="real queries timed per engine")
    args_parser.add_argument("--threads", type=int, default=2, help="threads of a build and of a batched search")
    args_parser.add_argument("--bm25", default=",".join(BM25_ENGINES),
                             help="BM25 engines compared ('': none, the BM25 numbers in --out kept)")
    args_parser.add_argument("--dense", default=",".join(DENSE_LIBS),
                             help="HNSW libraries compared ('': none, the dense numbers in --out kept)")
    args_parser.add_argument("--reference-index", default=None,
                             help="a taskret BM25 index of the (one) size's corpus, e.g. bm25_shards.py's "
                                  "SIZE/shards-1/index/shard-0: bm25s's ranking read from it, not from a bm25s index "
                                  "built in memory (needed at 10M documents)")
    args_parser.add_argument("--ef", default=",".join(map(str, EF_SEARCH)), help="ef_search values of the curve")
    args_parser.add_argument("--serve", type=int, default=None,
                             help="serve this size's bm25 and docs-fast indexes (scale.py's) and Break's under wrk, "
                                  "the other parts' numbers in --out kept (needs wrk)")
    args_parser.add_argument("--serve-duration", type=float, default=30.0, help="seconds of each wrk run")
    args = args_parser.parse_args()
    engines, libs = args.bm25.split(",") if args.bm25 else [], args.dense.split(",") if args.dense else []
    unknown = [e for e in engines if e not in BM25_ENGINES] + [lib for lib in libs if lib not in DENSE]
    if unknown:
        raise SystemExit(f"unknown engines {unknown}: BM25 {list(BM25_ENGINES)}, dense {list(DENSE)}")
    if args.reference_index and "," in args.sizes:
        raise SystemExit("--reference-index is one size's index: give one --sizes")
    data_dir, work = Path(args.data_dir), Path(args.work)
    folders = real_sources(data_dir)
    queries = real_query_items(folders, args.queries, args.seed)
    qrels = real_qrels(folders, {qid for qid, _ in queries})
    result = {"machine": machine(threads=args.threads), "versions": versions(), "sizes": {}, "default": DEFAULT,
              "queries": len(queries), "queries_with_qrels": sum(qid in qrels for qid, _ in queries),
              "settings": {"k1": K1, "b": B, "k": K, "hnsw_m": HNSW_M, "ef_construction": EF_CONSTRUCTION,
                           "threads": args.threads},
              "notes": "ndcg10: NDCG@10 in percent on the sampled real queries with qrels (every split's); "
                       "overlap10_vs_bm25s: mean share of bm25s-numpy's top 10 (k1 1.5, b 0.75) an engine's top 10 "
                       "holds; p50/p99: one query at a time on one thread; batched_qps: every query at once on "
                       "`threads` threads; peak_rss_gib: the build's child, search_rss_gib: the search's; dense "
                       "p50/p99: the index alone, queries encoded beforehand; rss_gib: build and search, the float32 "
                       "vectors the child reads included"}
    # A run of one part (--bm25 '' or --dense '') keeps the other part's numbers from --out, each part with the
    # machine and the command it was measured with.
    out = Path(args.out)
    keeps_parts = args.serve or not (engines and libs)
    on_file = json.loads(out.read_text()) if out.is_file() else {}
    earlier = on_file if keeps_parts else {}
    if args.serve:  # served alone: the engines' numbers kept; the machine (and its load) read before the run
        serve_run = {"machine": machine(threads=args.threads, http_stack=http_stack()),
                     "command": command_line(args, args_parser)}
        result = {**earlier, "serve": serve_part(work, args.serve, json.loads((work / "queries.json").read_text()),
                                                 args.data_dir, args.serve_duration), "serve_run": serve_run}
        write_result(out, result)
        return
    run = {"machine": result["machine"], "command": command_line(args, args_parser)}
    for n in [int(s) for s in args.sizes.split(",")]:
        folder = work / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        corpus = folder / "corpus.jsonl"
        if not corpus.is_file():
            (folder / "corpus.json").write_text(json.dumps(write_corpus(corpus, folders, n, args.seed)))
        elif not (folder / "corpus.json").is_file():  # a corpus bm25_shards.py wrote (the same function and seed)
            (folder / "corpus.json").write_text(json.dumps(count_corpus(corpus)))
        (folder / "engines").mkdir(exist_ok=True)
        entry = dict(earlier.get("sizes", {}).get(str(n), {}))
        entry["corpus"] = json.loads((folder / "corpus.json").read_text())
        if engines:
            entry["bm25"] = compare_bm25(folder, corpus, queries, qrels, engines, args.threads,
                                         reference_index=Path(args.reference_index) if args.reference_index else None)
            if args.reference_index:
                entry["bm25_reference_index"] = args.reference_index
            entry["bm25_run"] = run
            print(json.dumps({n: {"bm25": entry["bm25"]}}), flush=True)
        result["sizes"][str(n)] = entry
        if libs:
            def measured(dense: dict, entry: dict = entry) -> None:  # each library's curve on file as it comes
                entry["dense"], entry["dense_run"] = dense, run
                write_result(out, completed(result, earlier, on_file, run), quiet=True)

            measured(compare_dense(folder, corpus, [text for _, text in queries], libs, args.threads,
                                   [int(ef) for ef in args.ef.split(",")], measured))
            print(json.dumps({n: {"dense": entry["dense"]}}), flush=True)
    write_result(out, completed(result, earlier, on_file, run))


def completed(result: dict, earlier: dict, on_file: dict, run: dict) -> dict:
    """``result`` with what this run leaves as it was: the sizes it did not measure and the versions of packages it
    did not use (from ``earlier``), and the served numbers (from the file on disk: measured by a run of its own,
    --serve, which records its machine)."""
    done = {**result, "sizes": dict(result["sizes"]), "command": run["command"]}
    # A package this run did not install (Pyserini, for a dense-only run) keeps the version an earlier part ran with.
    done["versions"] = {name: found or earlier.get("versions", {}).get(name)
                        for name, found in result["versions"].items()}
    for key in set(earlier.get("sizes", {})) - set(result["sizes"]):
        done["sizes"][key] = earlier["sizes"][key]
    for key in ("serve", "serve_run"):
        if key in on_file:
            done[key] = on_file[key]
    return done


def run_child(argv: list[str]) -> dict:
    """What a child process (``--child-KIND ...``) answers. An engine's own output (PISA's and Anserini's logs)
    goes to stderr: stdout carries only the answer."""
    kind, rest = argv[0], argv[1:]
    if kind == "--child-index":
        index_kind, corpus, index, k1, b, threads = rest
        return INDEXERS[index_kind](Path(corpus), Path(index), float(k1), float(b), int(threads))
    if kind == "--child-search":
        engine, index, queries, threads, tops = rest
        return search_engine(engine, Path(index), json.loads(Path(queries).read_text()), int(threads), Path(tops))
    if kind == "--child-reference":
        corpus, queries, k1, b, tops = rest
        return reference_tops(Path(corpus), json.loads(Path(queries).read_text()), float(k1), float(b), Path(tops))
    if kind == "--child-reference-index":
        index, queries, tops = rest
        return reference_tops_from_index(Path(index), json.loads(Path(queries).read_text()), Path(tops))
    if kind == "--child-vectors":
        size_folder, corpus, queries, out = rest
        return prepare_vectors(Path(size_folder), Path(corpus), json.loads(Path(queries).read_text()), Path(out))
    if kind == "--child-encoder":
        size_folder, queries = rest
        return encoder_rate(Path(size_folder), json.loads(Path(queries).read_text()))
    if kind == "--child-dense":
        lib, vectors, index, threads, efs = rest
        return measure_dense(lib, Path(vectors), Path(index), int(threads), [int(ef) for ef in efs.split(",")])
    raise SystemExit(f"unknown child {kind}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("--child-"):
        answer_out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # the engines' prints and the JVM's logs to stderr
        try:
            answer = run_child(sys.argv[1:])
        except ImportError as missing:  # an optional engine not installed: recorded, the comparison goes on
            answer = {"error": f"{type(missing).__name__}: {missing} (pip install -e '.[engines]')"}
        answer_out.write(json.dumps(answer) + "\n")
        answer_out.flush()
        os._exit(0)  # a JVM's threads would keep the process alive
    else:
        main()
