"""Cost as the corpus grows (issue 54): `tart index` and search over 10K, 100K and 1M documents.

The corpus pools every real document here (every berri-lite corpus plus SciFact, ~96K; ids ``task/id``) and extends
it past that with documents made from the real ones: the real documents' sentences resampled into documents whose
sentence counts follow the real documents' (a seeded draw; ids ``synthetic/N``). A size below the real count is a
seeded sample of the real documents; a size above holds them all and synthetic ones for the rest. The queries are
real (every pooled task's queries, a seeded sample).

For each size, each index is built in a child process of its own (peak RSS from its rusage), with `index_documents`
as `tart index` calls it: ``bm25`` and ``docs-fast`` (BM25 + MiniLM fused; its dense component is the ``dense``
index measured alone). Reported per size: the time of each indexing stage (reading the corpus, BM25, encoding,
the ANN build, writing the folder), encoding documents/s, disk size, peak RSS; single-query and batched p50 / p99
(ms) of ``bm25``, ``dense``, ``docs-fast`` and ``docs-rerank`` (docs-fast's top 10 reranked by SmolLM2, on fewer
queries); recall@10 of the dense index against exact search over the same vectors on the real queries (1 for a
flat index). Then a power-law fit of each cost against N and a table that extrapolates to 10M and 100M documents
(memory; build time on one machine, and on a cluster of ``--cluster`` machines that share the encoding, the one
cost that spreads over Ray), and plots. Last, the largest size (``--serve``) is served by `taskret serve --workers 2`
under wrk (serve_load.py's server and client): ``/retrieve`` on ``bm25`` and on ``docs-fast`` against the ``/health``
floor of the same run and, for ``docs-fast``, against the query encoder's own batched rate; memory per worker. And
the smallest size's dense index is built again on Ray (``--ray local``, 2 workers): the same top 10 as the local build.

    python benchmarks/scale/scale.py --data-dir ../shared/data --sizes 10000,100000,1000000 --work runs/scale \\
        --out benchmarks/results/scale.json --plots docs/img/scale
    python benchmarks/scale/scale.py --sizes 2000 --queries 50 --rerank-queries 2 --work /tmp/scale --out /tmp/scale.json

A size whose indexes are complete under ``--work`` is measured again without being built again (its build
numbers are read back from ``build.json``), and a killed build resumes from its shards.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, http_stack, machine, parser, write_result  # noqa: E402

SETUPS = ("bm25", "docs-fast")
#: The depth every engine and index is compared at: the top 10.
K = 10
EXTRAPOLATE = (10_000_000, 100_000_000)
SENTENCE = re.compile(r"(?<=[.!?])\s+")
TITLES = {"build": "index build, seconds per stage", "query": "top-10 single query p50, ms",
          "memory": "peak RSS and disk, GiB"}
#: How much of a failed child's stderr its error keeps (the last lines, then the last characters of those).
STDERR_TAIL_LINES, STDERR_TAIL_CHARS = 40, 3000


# -- the corpus -----------------------------------------------------------------------------------------------------


def corpus_texts(corpus: Path):
    """The text each engine indexes of each document, in corpus order (a document's number is its row): what
    taskret indexes (:func:`taskret.corpus.doc_text`, title and text)."""
    from taskret.corpus import doc_text, iter_corpus

    return (doc_text(doc) for doc in iter_corpus(corpus))


def real_sources(data_dir: Path) -> list[Path]:
    """The BEIR folders pooled: every berri-lite task and SciFact."""
    folders = sorted(p.parent for p in (data_dir / "berri-lite").glob("*/corpus.jsonl"))
    folders += [data_dir / "scifact"] if (data_dir / "scifact" / "corpus.jsonl").is_file() else []
    if not folders:
        raise SystemExit(f"{data_dir}: no berri-lite/*/corpus.jsonl nor scifact/corpus.jsonl (taskret data download)")
    return folders


def real_documents(folders: list[Path]):
    from taskret.corpus import iter_corpus

    for folder in folders:
        for doc in iter_corpus(folder / "corpus.jsonl"):
            yield {"_id": f"{folder.name}/{doc.id}", "title": doc.title, "text": doc.text}


def real_query_items(folders: list[Path], n: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample of ``n`` of every pooled task's queries: (``task/id``, text) pairs, the ids as the qrels of
    :func:`real_documents`' ids name them."""
    from taskret.corpus import read_queries

    queries = [(f"{folder.name}/{qid}", text) for folder in folders if (folder / "queries.jsonl").is_file()
               for qid, text in read_queries(folder / "queries.jsonl").items()]
    return random.Random(seed).sample(queries, min(n, len(queries)))


def real_queries(folders: list[Path], n: int, seed: int) -> list[str]:
    """The texts of :func:`real_query_items` (the same sample: it depends on the pool's size only)."""
    return [text for _, text in real_query_items(folders, n, seed)]


def write_corpus(path: Path, folders: list[Path], n: int, seed: int) -> dict:
    """The pooled corpus of ``n`` documents at ``path`` (written to a temporary name and renamed)."""
    from taskret.io import atomic_path

    real = list(real_documents(folders))
    rng = random.Random(seed)
    chosen = real if n >= len(real) else [real[i] for i in sorted(rng.sample(range(len(real)), n))]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for row in chosen:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        if n > len(real):
            sentences = [s for row in real for s in SENTENCE.split(row["text"]) if s.strip()]
            lengths = [max(1, len(SENTENCE.split(row["text"]))) for row in real]
            for i in range(n - len(real)):
                text = " ".join(rng.choice(sentences) for _ in range(rng.choice(lengths)))
                out.write(json.dumps({"_id": f"synthetic/{i}", "title": "", "text": text}, ensure_ascii=False) + "\n")
    return {"documents": n, "real": len(chosen), "synthetic": max(0, n - len(real))}


# -- one build, in a child process --------------------------------------------------------------------------------


def build(corpus: Path, setup: str, index: Path) -> dict:
    """Build ``setup``'s index of ``corpus`` at ``index`` as `tart index` does, timing each stage."""
    from taskret.corpus import DocumentStream, iter_corpus
    from taskret.progress import reporting
    from taskret.retrieval import make_retriever
    from taskret.retrieval.index import save_index
    from taskret.retrieval.shards import SHARDS_DIR, ShardPlan
    from taskret.setups import resolve_setup

    named = resolve_setup(setup)
    spec = named.retriever if named else setup
    documents = DocumentStream(corpus.stem, lambda: iter_corpus(corpus))
    retriever = make_retriever(spec)
    seconds = {}
    with reporting():
        start = time.perf_counter()
        ids, fingerprint = documents.scan()
        seconds["read"] = time.perf_counter() - start
        start = time.perf_counter()
        retriever.index_stream(ids, documents.texts, ShardPlan(index / SHARDS_DIR, fingerprint))
        indexing = time.perf_counter() - start
        start = time.perf_counter()
        save_index(index, retriever, documents, kind="documents", task=documents.name, retriever_spec=spec,
                   extra=named.search_settings() if named else None)
        seconds["write"] = time.perf_counter() - start
    dense = [c for c in getattr(retriever, "components", [retriever]) if hasattr(c, "build_seconds")]
    for component in dense:
        seconds["load_encoder"] = component.build_seconds["load"]
        seconds["encode"] = component.build_seconds["encode"]
        seconds["ann"] = component.build_seconds["ann"] + component.build_seconds.get("recall", 0.0)
    seconds["bm25"] = indexing - sum(seconds.get(k, 0.0) for k in ("load_encoder", "encode", "ann"))
    return {"index_s": seconds, "n": len(ids),
            "dense_index_type": dense[0].index_type if dense else None,
            "build_recall_at_10": dense[0].recall_at_10 if dense and dense[0].index_type == "hnsw" else None}


def in_child(args: list[str], script: str = __file__) -> tuple[dict, float]:
    """Run ``script`` (this one by default) with ``args`` in a child process: its JSON answer (its last line on
    stdout) and its peak RSS in GiB. The child's stderr is passed on as it comes and its tail kept: a failure's
    message ends with it (the traceback that says why)."""
    proc = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    def pass_on() -> None:
        for line in iter(proc.stderr.readline, b""):
            text = line.decode(errors="replace")
            sys.stderr.write(text)
            tail.append(text)

    reader = threading.Thread(target=pass_on, daemon=True)
    reader.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 gives the child's rusage (its peak RSS)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=10)  # a process the child left behind could hold its stderr open
    proc.stdout.close()
    if status != 0:
        said = "".join(tail).strip()[-STDERR_TAIL_CHARS:]
        raise SystemExit(f"child {' '.join(args)} failed with exit code {proc.returncode}"
                         + (f"; its stderr ends:\n{said}" if said else " (nothing on stderr)"))
    return json.loads(out.decode().strip().splitlines()[-1]), usage.ru_maxrss / 2**20


# -- queries --------------------------------------------------------------------------------------------------------


def resident_kib() -> dict:
    """This process's resident memory in KiB (``/proc/self/status``): all of it (``rss``), its anonymous pages (heap
    and other private memory: ``anon``) and its file-backed ones (mapped files and libraries: ``file``)."""
    keys = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    return {keys[line.split()[0]]: int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
            if line.split()[:1] and line.split()[0] in keys}


def percentiles(times: list[float]) -> dict:
    ms = np.asarray(times) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def timed(call, items) -> list[float]:
    times = []
    for item in items:
        start = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - start)
    return times


def timed_results(call, items) -> tuple[list[float], list]:
    """:func:`timed` that keeps what each call returned."""
    results: list = []
    return timed(lambda item: results.append(call(item)), items), results


def latency(search, queries: list[str], batch: int) -> dict:
    search(queries[:2])  # warm: models loaded, caches filled
    single = percentiles(timed(lambda q: search([q]), queries))
    batches = [queries[i:i + batch] for i in range(0, len(queries), batch)]
    batched = timed(search, batches)
    return {**single, "batched": {**percentiles(batched), "batch": batch,
                                  "queries_per_s": round(len(queries) / sum(batched), 1)}}


def exact_top10(retriever, vectors: np.ndarray) -> np.ndarray:
    """The exact top 10 rows of encoded queries: a flat search over the HNSW index's own stored vectors."""
    import faiss

    return faiss.downcast_index(retriever._index.storage).search(vectors, 10)[1]


def recall_at_10(retriever, vectors: np.ndarray, exact: np.ndarray) -> float:
    """The share of the exact top 10 that the index's search (at its current ef_search) finds."""
    _, approx = retriever._index.search(vectors, 10)
    return round(float(np.mean([len(set(e) & set(a)) / 10 for e, a in zip(exact, approx)])), 4)


#: ef_search values whose recall and latency each size records (what :func:`taskret.retrieval.dense.ef_search_for`
#: was chosen on).
EF_CURVE = (64, 128, 256, 512)


def ef_search_curve(retriever, vectors: np.ndarray, exact: np.ndarray) -> list[dict]:
    """recall@10 against exact search and the index's own single-query p50 at each of :data:`EF_CURVE` (HNSW)."""
    import faiss

    hnsw, kept, curve = faiss.downcast_index(retriever._index).hnsw, retriever._index.hnsw.efSearch, []
    for ef in EF_CURVE:
        hnsw.efSearch = ef
        curve.append({"ef_search": ef, "recall_at_10": recall_at_10(retriever, vectors, exact),
                      "p50_ms": ann_latency(retriever, vectors)["p50_ms"]})
    hnsw.efSearch = kept
    return curve


def set_ef_search_by_size(index: Path, n: int) -> dict:
    """An HNSW index built before ef_search was chosen by size gets what a build chooses now (a search-time setting
    in meta.json; the graph does not change); returns what was done, for the result."""
    from taskret.retrieval.dense import ef_search_for

    meta_path = index / "meta.json"
    meta = json.loads(meta_path.read_text())
    if meta.get("index_type") != "hnsw" or meta.get("ef_search") == ef_search_for(n):
        return {}
    before, meta["ef_search"] = meta.get("ef_search"), ef_search_for(n)
    partial = meta_path.with_suffix(".json.partial")
    partial.write_text(json.dumps(meta))
    partial.replace(meta_path)
    return {"ef_search_set": {"from": before, "to": meta["ef_search"],
                              "why": "built before ef_search by size; what a build now records"}}


def ann_latency(retriever, vectors: np.ndarray) -> dict:
    """The index's own cost: top 10 for one query vector at a time, the queries encoded beforehand (a dense
    query's end-to-end latency is mostly its encoder pass, the same at every corpus size)."""
    retriever._index.search(vectors[:2], 10)
    return percentiles(timed(lambda v: retriever._index.search(v[None], 10), vectors))


def encoder_throughput(retriever, queries: list[str], batch: int) -> dict:
    """The query encoder alone, one query and ``batch`` at a time: the ceiling of a dense search's rate."""
    retriever.encode(queries[:2], queries=True)
    single = timed(lambda q: retriever.encode([q], queries=True), queries)
    batched = timed(lambda qs: retriever.encode(qs, queries=True),
                    [queries[i:i + batch] for i in range(0, len(queries), batch)])
    return {"single_queries_per_s": round(len(queries) / sum(single), 1),
            "batched_queries_per_s": round(len(queries) / sum(batched), 1), "batch": batch}


def docs_fast_dense(folder: Path, mmap: bool = False):
    """The dense component of a ``docs-fast`` index folder, loaded through its hybrid (a component's meta.json holds no
    ids: the hybrid's are its)."""
    from taskret.retrieval import DenseRetriever, Retriever

    hybrid = Retriever.load(folder, mmap=mmap)
    return next(c for c in hybrid.components if isinstance(c, DenseRetriever))


def measure(work: Path, queries: list[str], batch: int, rerank_queries: int) -> dict:
    from taskret.retrieval.index import load_index
    from taskret.setups import resolve_setup
    from taskret.tart.search import search_index

    out = {}
    bm25 = load_index(work / "bm25", mmap=True)
    # As a service starts (taskret serve): BM25 compiles numba before the first query (taskret.retrieval.bm25).
    start = time.perf_counter()
    bm25.retriever.warm_up()
    warm_s = time.perf_counter() - start
    out["bm25"] = {**latency(lambda qs: bm25.retriever.retrieve(qs, k=10), queries, batch),
                   "backend": bm25.retriever._bm25.backend, "warm_up_s": round(warm_s, 2)}
    fast = load_index(work / "docs-fast", mmap=True)
    fast.retriever.warm_up()
    dense = docs_fast_dense(work / "docs-fast", mmap=True)
    vectors = dense.encode(queries, queries=True)  # once, for the index's own recall and latency
    hnsw = dense.index_type == "hnsw"
    exact = exact_top10(dense, vectors) if hnsw else None
    out["dense"] = {**latency(lambda qs: dense.retrieve(qs, k=10), queries, batch),
                    "recall_at_10": recall_at_10(dense, vectors, exact) if hnsw else 1.0,
                    "index_type": dense.index_type, "ef_search": dense.ef_search if hnsw else None,
                    "ef_search_curve": ef_search_curve(dense, vectors, exact) if hnsw else [],
                    "search_only": ann_latency(dense, vectors), "encoder": encoder_throughput(dense, queries, batch)}
    out["docs-fast"] = latency(lambda qs: fast.retriever.retrieve(qs, k=10), queries, batch)
    rerank = resolve_setup("docs-rerank")
    few = queries[:rerank_queries]
    search = lambda qs: search_index(fast, qs, top_k=10, reranker=rerank.rerank, rerank_depth=10)  # noqa: E731
    search(few[:1])
    out["docs-rerank"] = {**percentiles(timed(lambda q: search([q]), few)), "queries": len(few)}
    return out


# -- serving --------------------------------------------------------------------------------------------------------


def serve(folder: Path, queries: list[str], workers: int, connections: int, duration: float,
          encoder_queries_per_s: float | None) -> dict:
    """`taskret serve --workers N` over the size's ``bm25`` and ``docs-fast`` indexes under wrk (serve_load.py's
    server and client, each request the next real query, k=10): the ``/health`` floor of the same run,
    ``/retrieve`` on each index, and the memory of each worker after the load (RSS, and PSS, which shares the
    memory-mapped index among the workers)."""
    import serve_load

    if shutil.which("wrk") is None:
        raise SystemExit("serving needs wrk (apt-get install -y wrk); --serve 0 leaves it out")
    bodies = serve_load.retrieve_bodies(queries, folder / "serve_bodies.jsonl")
    summary, warmed_wrk = serve_load.wrk_summary, serve_load.warmed_wrk

    out = {"tool": "wrk", "workers": workers, "connections": connections, "duration_s": duration}
    for setup in SETUPS:
        server = serve_load.Server(folder / setup, workers)
        try:
            if setup == "bm25":
                out["floor"] = summary(warmed_wrk(server.url + "/health", None, connections, duration))
            out[setup] = {**summary(warmed_wrk(server.url + "/retrieve", bodies, connections, duration)),
                          "memory_mib": server.memory(), "startup_s": server.startup_s}
        finally:
            server.close()
        print(f"served {setup}: {out[setup]['req_per_s']} req/s, p99 {out[setup]['p99_ms']} ms", flush=True)
    out["docs-fast"]["encoder_queries_per_s"] = encoder_queries_per_s
    floor, bm25, fast = out["floor"], out["bm25"], out["docs-fast"]
    out["targets"] = {
        "bm25_share_of_floor": round(bm25["req_per_s"] / floor["req_per_s"], 3),
        "bm25_p99_over_floor": round(bm25["p99_ms"] / floor["p99_ms"], 2),
        "docs_fast_share_of_encoder": round(fast["req_per_s"] / encoder_queries_per_s, 3)
        if encoder_queries_per_s else None}
    return out


# -- Ray --------------------------------------------------------------------------------------------------------------


def ray_check(folder: Path, queries: list[str], workers: int) -> dict:
    """The size's dense index built again with its shards encoded on a private Ray instance (``--ray local``,
    ``workers`` actors each holding the encoder), against the local build's (docs-fast's dense component): the same
    top 10 for every real query (the same ids; the scores differ only in float rounding across processes)."""
    from taskret.corpus import DocumentStream, iter_corpus
    from taskret.epr.distributed import RayOptions
    from taskret.retrieval import DenseRetriever
    from taskret.retrieval.shards import SHARDS_DIR, ShardPlan

    for key, value in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}.items():
        os.environ.setdefault(key, value)
    local = docs_fast_dense(folder / "docs-fast")
    corpus = folder / "corpus.jsonl"
    documents = DocumentStream(corpus.stem, lambda: iter_corpus(corpus))
    ids, fingerprint = documents.scan()
    remote = DenseRetriever(encoder=local.encoder_name, dtype=local.dtype, index_type=local.index_type)
    shutil.rmtree(folder / "ray", ignore_errors=True)  # a check's shards left behind would be read, not encoded on Ray
    start = time.perf_counter()
    # The local component, loaded through its hybrid, answers with the hybrid's ids: the remote one indexes those.
    remote.index_stream(list(local.ids), documents.texts,
                        ShardPlan(folder / "ray" / SHARDS_DIR, fingerprint, ray=RayOptions("local", workers=workers)))
    seconds = time.perf_counter() - start
    shutil.rmtree(folder / "ray", ignore_errors=True)
    mine, theirs = local.retrieve(queries, k=10), remote.retrieve(queries, k=10)
    same = [a == b for a, b in zip(mine.ids, theirs.ids)]
    return {"workers": workers, "documents": len(ids), "queries": len(queries), "same_top10": all(same),
            "queries_with_same_top10": sum(same),
            "max_score_diff": round(float(np.nanmax(np.abs(mine.scores - theirs.scores))), 6),
            "build_s": round(seconds, 1), "encode_s": round(remote.build_seconds["encode"], 1)}


# -- fits -----------------------------------------------------------------------------------------------------------


def fit(sizes: list[int], values: list[float], form: str = "linear") -> dict | None:
    """A least-squares fit of a cost against N and its predictions at :data:`EXTRAPOLATE`. ``linear``: ``a + b * N``
    (a fixed part, the interpreter, the models, and a part per document: memory, disk, build time, BM25's postings
    scanned per query); ``log``: ``a + b * log10(N)`` (an HNSW search walks ~log N layers)."""
    points = [(n, v) for n, v in zip(sizes, values) if v is not None and v > 0]
    if len(points) < 2:
        return None
    x = np.array([p[0] for p in points], dtype=float)
    x = np.log10(x) if form == "log" else x
    b, a = np.polyfit(x, np.array([p[1] for p in points]), 1)
    at = (lambda n: a + b * np.log10(n)) if form == "log" else (lambda n: a + b * n)
    residual = max(abs(at(n) - v) / v for n, v in points)
    return {"form": form, "a": float(a), "b": float(b), "max_relative_residual": round(float(residual), 3),
            "predicted": {str(n): float(at(n)) for n in EXTRAPOLATE}}


def extrapolate(result: dict, cluster: int) -> dict:
    sizes = sorted(int(n) for n in result["sizes"])
    rows = [result["sizes"][str(n)] for n in sizes]

    def series(get, form="linear"):
        return fit(sizes, [get(r) for r in rows], form)

    fits = {
        "peak_rss_gib": series(lambda r: r["peak_rss_gib"]),
        "disk_gib": series(lambda r: r["disk_gib"]),
        "encode_s": series(lambda r: r["index_s"].get("encode")),
        "other_index_s": series(lambda r: sum(v for k, v in r["index_s"].items() if k not in ("encode", "bm25_alone"))),
        "bm25_p50_ms": series(lambda r: r["bm25"]["p50_ms"]),
        "dense_search_p50_ms": series(lambda r: r["dense"].get("search_only", {}).get("p50_ms"), "log"),
    }
    table = {}
    for n in EXTRAPOLATE:
        def at(key, n=n):
            return fits[key]["predicted"][str(n)] if fits.get(key) else None
        encode, other = at("encode_s"), at("other_index_s")
        table[str(n)] = {"peak_rss_gib": at("peak_rss_gib"), "disk_gib": at("disk_gib"),
                         "build_h_one_machine": (encode + other) / 3600 if encode and other else None,
                         f"build_h_{cluster}_machines": (encode / cluster + other) / 3600 if encode and other else None,
                         **{k: at(k) for k in fits if k.endswith("_p50_ms")}}
    return {"fits": fits, "table": table, "cluster": cluster,
            "note": f"fitted to {len(sizes)} sizes (linear in N, the dense search in log N); a cluster of {cluster} "
                    f"shares the encoding over Ray (BM25, the ANN build and writing stay on one machine); one unsharded "
                    f"index (past one machine, shards: ray_shards.py, dense_shards.py)"}


def plot(result: dict, folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    sizes = sorted(int(n) for n in result["sizes"])
    rows = [result["sizes"][str(n)] for n in sizes]
    panels = {"build": {stage: [r["index_s"].get(stage, 0) for r in rows]
                                  for stage in ("read", "bm25", "encode", "ann", "write")},
              "query": {**{name: [r[name]["p50_ms"] for r in rows] for name in ("bm25", "dense", "docs-fast")},
                        "dense index alone": [r["dense"].get("search_only", {}).get("p50_ms") for r in rows]},
              "memory": {"peak RSS": [r["peak_rss_gib"] for r in rows], "disk": [r["disk_gib"] for r in rows]}}
    written = []
    for title, lines in panels.items():
        figure, axes = plt.subplots(figsize=(5, 3.5))
        for label, values in lines.items():
            axes.plot(sizes, values, marker="o", label=label)
        axes.set(xscale="log", yscale="log", xlabel="documents", title=TITLES[title])
        axes.legend()
        figure.tight_layout()
        path = folder / f"scale-{title}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written.append(str(path))
    return written


def disk_gib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**30


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/scale.json", seed=0)
    args_parser.add_argument("--sizes", default="10000,100000,1000000")
    args_parser.add_argument("--work", default="runs/scale", help="corpora and indexes (kept: a rerun resumes)")
    args_parser.add_argument("--queries", type=int, default=1000, help="real queries timed per index")
    args_parser.add_argument("--rerank-queries", type=int, default=20, help="queries timed through docs-rerank")
    args_parser.add_argument("--batch", type=int, default=64)
    args_parser.add_argument("--cluster", type=int, default=8, help="machines of the extrapolated cluster")
    args_parser.add_argument("--plots", default=None, help="folder for the plots (PNG); none without it")
    args_parser.add_argument("--serve", type=int, default=None,
                             help="serve this size's indexes under wrk (default: the largest size; 0: none)")
    args_parser.add_argument("--serve-workers", type=int, default=2)
    args_parser.add_argument("--serve-duration", type=float, default=30.0, help="seconds of wrk load per run")
    args_parser.add_argument("--connections", type=int, default=32)
    args_parser.add_argument("--ray-check", type=int, default=None,
                             help="build this size's dense index again on Ray (2 local workers) and compare its top "
                                  "10 with the local build's (default: the smallest size; 0: none)")
    args_parser.add_argument("--ray-only", action="store_true",
                             help="only the Ray check, added to the existing --out (the sizes already measured)")
    args = args_parser.parse_args()
    if args.ray_only:
        result = json.loads(Path(args.out).read_text())
        size = args.ray_check or min(int(n) for n in result["sizes"])
        work = Path(args.work)
        result["ray"] = ray_check(work / str(size), json.loads((work / "queries.json").read_text()), 2)
        write_result(args.out, result)
        return
    data_dir, work = Path(args.data_dir), Path(args.work)
    folders = real_sources(data_dir)
    queries = real_queries(folders, args.queries, args.seed)
    result = {"sizes": {}, "queries": len(queries), "corpus": "every berri-lite corpus + SciFact, extended by "
              "real sentences resampled into documents of the real sentence counts"}
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        folder = work / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        corpus = folder / "corpus.jsonl"
        if not corpus.is_file():
            result_corpus = write_corpus(corpus, folders, n, args.seed)
            (folder / "corpus.json").write_text(json.dumps(result_corpus))
        built_path = folder / "build.json"
        built = json.loads(built_path.read_text()) if built_path.is_file() else {}
        for setup in SETUPS:
            if setup not in built or not (folder / setup / "meta.json").is_file():
                answer, rss = in_child(["--child-build", str(corpus), setup, str(folder / setup)])
                built[setup] = {**answer, "peak_rss_gib": round(rss, 3), "disk_gib": disk_gib(folder / setup)}
                built_path.write_text(json.dumps(built, indent=2))
        (work / "queries.json").write_text(json.dumps(queries))
        ef_set = set_ef_search_by_size(folder / "docs-fast" / "component_1", n)
        measured, query_rss = in_child(["--child-measure", str(folder), str(work / "queries.json"), str(args.batch),
                                        str(args.rerank_queries)])
        fast = built["docs-fast"]
        result["sizes"][str(n)] = {
            **json.loads((folder / "corpus.json").read_text()),
            "peak_rss_gib": max(built[s]["peak_rss_gib"] for s in SETUPS), "query_peak_rss_gib": round(query_rss, 3),
            "encode_docs_per_s": round(n / fast["index_s"]["encode"], 1),
            "index_s": {**{k: round(v, 2) for k, v in fast["index_s"].items()},
                        "bm25_alone": round(built["bm25"]["index_s"]["bm25"], 2)},
            "disk_gib": round(fast["disk_gib"], 4), "bm25_disk_gib": round(built["bm25"]["disk_gib"], 4),
            "build_recall_at_10": fast["build_recall_at_10"], **ef_set, **measured}
        print(json.dumps({n: result["sizes"][str(n)]}), flush=True)
    served = max(sizes) if args.serve is None else args.serve
    if served:
        size = result["sizes"][str(served)]
        result["serve"] = {"size": served, **serve(work / str(served), queries, args.serve_workers, args.connections,
                                                   args.serve_duration,
                                                   size["dense"]["encoder"]["batched_queries_per_s"])}
    ray_size = min(sizes) if args.ray_check is None else args.ray_check
    if ray_size:
        result["ray"] = ray_check(work / str(ray_size), queries, 2)
    result["extrapolation"] = extrapolate(result, args.cluster)
    if args.plots:
        result["plots"] = plot(result, Path(args.plots))
    result["machine"] = machine(http_stack=http_stack())
    result["command"] = command_line(args, args_parser)
    write_result(args.out, result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-build":
        print(json.dumps(build(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-measure":
        print(json.dumps(measure(Path(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text()), int(sys.argv[4]),
                                 int(sys.argv[5]))))
    else:
        main()
