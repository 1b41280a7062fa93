"""Does compressed dense search hold at 10M vectors (issue 78)? IVF-PQ with exact re-ranking (``index_type=ivfpq``,
taskret.retrieval.ivfpq) built over N vectors, then searched from disk: recall@10 against exact search, single-query
latency on one thread, and what stays resident.

Encoding 10M documents with MiniLM takes ~16 h on 2 AVX2 cores, so past the real vectors the corpus's vectors are
synthesised from them. ``--base`` holds real MiniLM vectors (a ``vectors.npy``, float32, unit length: an ivfpq index's
own file, or any encoded corpus's). A synthetic vector is a real one (the base's rows taken in a seeded shuffled
order, round after round) plus Gaussian noise, renormalised. The noise is calibrated so that a synthetic vector lies
as far from its source as a real vector lies from its nearest real neighbour (the median cosine of each sampled base
vector to its nearest other, exact): a copy is then a plausible neighbour, neither a duplicate nor a stranger. Below
the base's size, N is the base's first N rows (real vectors alone): the quality check on real vectors.

The queries are real too where given (``--queries``: encoded queries, a ``.npy``); otherwise a seeded sample of base
rows with fresh noise of the same scale, left out of nothing (their sources are indexed, as a query's topic is).

Each size runs in two child processes, so that each one's memory is its own (peak RSS from rusage):
1. build: the vectors written to ``WORK/N/vectors.npy`` in chunks, the IVF-PQ index trained on a sample and filled
   in chunks (``build_ivfpq``, settings by size: ``settings_for``), saved as ``index.faiss``; seconds and peak RSS;
2. search: the index opened as ``taskret serve`` opens it (``IO_FLAG_MMAP``: inverted lists mapped) and the
   vectors read row by row (as a served index reads them); ``--queries-n`` queries searched one at a time on one thread (p50 / p99 ms), then
   recall@10 of the re-ranked search against exact search over all N vectors (read in chunks), and the resident
   memory (VmRSS) after the searches against the index's size on disk (and before the index was opened: the
   interpreter's and libraries' own, which dominates at small sizes).

    python benchmarks/scale/compressed_vectors.py --base runs/scale/1000000/dense/vectors.npy \\
        --sizes 1000000,10000000 --work runs/compressed --out benchmarks/results/compressed_vectors.json
    python benchmarks/scale/compressed_vectors.py --base /tmp/v.npy --sizes 8000,20000 --work /tmp/cv --out /tmp/cv.json

A size whose ``index.faiss`` exists under ``--work`` is searched again without being built again (its build record,
``build.json``, is read back).

``--nprobe`` and ``--rerank`` (comma lists) sweep the search settings of each size in a third child, chosen without
the queries that judge them: the queries are split in two seeded halves; on the tuning half every pair is searched
(recall@10, p50), the fastest pair whose recall reaches ``--target-recall`` is chosen (none reaching it: the one of
highest recall), and that pair alone is searched on the held-out half, whose recall and p50 are its numbers. This is
how a size's defaults (``taskret.retrieval.ivfpq.settings_for``) are picked.

    python benchmarks/scale/compressed_vectors.py --base runs/scale/1000000/dense-3/vectors.npy \
        --queries runs/scale/1000000/dense-3/queries.npy --sizes 1000000,10000000 --nprobe 64,128,256 --rerank 100,200,400
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402
from scale import resident_kib  # noqa: E402  (its own folder is on sys.path when it runs)

#: Rows synthesised and written at a time: what the synthesis holds in memory.
CHUNK = 65_536
K = 10
#: Each size's exact top 10 of the queries, written by the search child, read by the sweep's.
EXACT_FILE = "exact_top10.npy"


def nearest_neighbour_cosine(base: np.ndarray, sample: int = 2000, seed: int = 0) -> float:
    """The median cosine of ``sample`` base rows (seeded) to their nearest other base row, by exact search."""
    from taskret.retrieval.ivfpq import exact_top

    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(base), size=min(sample, len(base)), replace=False))
    queries = np.asarray(base[picked], dtype=np.float32)
    top = exact_top(base, queries, 2)
    others = np.where(top[:, 0] == picked, top[:, 1], top[:, 0])
    return float(np.median(np.einsum("ij,ij->i", queries, np.asarray(base[others], dtype=np.float32))))


def noise_scale(cosine: float, dim: int) -> float:
    """The per-dimension standard deviation that puts a unit vector plus Gaussian noise at ``cosine`` to it in
    expectation: cos = 1 / sqrt(1 + dim sigma^2)."""
    return float(np.sqrt((1.0 / cosine ** 2 - 1.0) / dim))


def synthesize(base: np.ndarray, n: int, sigma: float, out: Path, seed: int = 0) -> None:
    """``n`` vectors into ``out`` (``.npy``, float32): the base's rows first, then noisy copies of them (module
    docstring), ``CHUNK`` rows at a time."""
    from taskret.retrieval.ivfpq import VectorFile

    rng = np.random.default_rng(seed)
    real, dim = len(base), base.shape[1]
    order = rng.permutation(real)
    written = VectorFile(out, n, dim)
    try:
        for start in range(0, n, CHUNK):
            rows = np.arange(start, min(n, start + CHUNK))
            block = np.asarray(base[np.where(rows < real, rows, order[rows % real])], dtype=np.float32)
            copies = rows >= real
            if copies.any():
                noisy = block[copies] + rng.normal(0.0, sigma, size=(int(copies.sum()), dim)).astype(np.float32)
                block[copies] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
            written.write(block)
        written.close()
    except BaseException:
        written.discard()
        raise


def query_vectors(base: np.ndarray, count: int, sigma: float, queries: Path | None, seed: int = 1) -> np.ndarray:
    """The queries (module docstring): ``count`` rows of ``--queries``, else noisy copies of seeded base rows."""
    if queries is not None:
        return np.asarray(np.load(queries)[:count], dtype=np.float32)
    rng = np.random.default_rng(seed)
    rows = np.asarray(base[np.sort(rng.choice(len(base), size=min(count, len(base)), replace=False))],
                      dtype=np.float32)
    noisy = rows + rng.normal(0.0, sigma, size=rows.shape).astype(np.float32)
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def _peak_rss_gib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3)  # KiB on Linux


def _resident_gib() -> float:
    return round(resident_kib()["rss"] / 2 ** 20, 3)


def build(job: dict) -> dict:
    """Child 1: synthesise the size's vectors and build its index (module docstring)."""
    import faiss

    from taskret.retrieval.ivfpq import build_ivfpq, open_vectors, settings_for

    folder = Path(job["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    # both read through a descriptor, as taskret's own build reads its vectors (a mapping keeps what it touched)
    base = open_vectors(job["base"], random_reads=True)
    started = time.perf_counter()
    synthesize(base, job["n"], job["sigma"], folder / "vectors.npy", seed=job["seed"])
    synthesized = time.perf_counter() - started
    vectors = open_vectors(folder / "vectors.npy", random_reads=True)
    settings = settings_for(job["n"], vectors.shape[1])
    started = time.perf_counter()
    index = build_ivfpq(vectors, settings)
    faiss.write_index(index, str(folder / "index.faiss.tmp"))
    os.replace(folder / "index.faiss.tmp", folder / "index.faiss")
    return {"synthesis_s": round(synthesized, 1), "build_s": round(time.perf_counter() - started, 1),
            "build_peak_rss_gib": _peak_rss_gib(), "settings": settings.as_dict()}


def search(job: dict) -> dict:
    """Child 2: the index searched from disk, one query at a time on one thread (module docstring)."""
    import faiss

    from taskret.retrieval.ivfpq import exact_top, open_vectors

    folder = Path(job["folder"])
    faiss.omp_set_num_threads(1)
    queries = np.load(job["queries"])
    before = _resident_gib()  # the interpreter and its libraries, before the index: the floor of any process
    index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_MMAP)
    index.nprobe = job["settings"]["nprobe"]
    vectors = open_vectors(folder / "vectors.npy", random_reads=True)  # as a served index maps them
    found, times = timed_search(index, vectors, queries, job["settings"]["rerank"])
    resident = _resident_gib()
    exact = exact_top(open_vectors(folder / "vectors.npy"), queries, K)  # read in order: a mapping of its own
    np.save(folder / EXACT_FILE, exact)  # the sweep's reference too: a pass over all N vectors, made once
    recall = recall_at_10(found, exact)
    disk = sum((folder / name).stat().st_size for name in ("index.faiss", "vectors.npy")) / 2 ** 30
    return {"queries": len(queries), "p50_ms": round(float(np.percentile(times, 50)) * 1000, 3),
            "p99_ms": round(float(np.percentile(times, 99)) * 1000, 3), "recall_at_10": round(recall, 4),
            "resident_before_index_gib": before, "resident_after_queries_gib": resident, "disk_gib": round(disk, 3),
            "resident_share_of_disk": round(resident / disk, 4)}


def halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The queries' rows split in two seeded halves: (tuning, held out), each in query order."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def timed_search(index, vectors, queries: np.ndarray, rerank: int) -> tuple[list[list[int]], list[float]]:
    """Each query searched alone (``search_reranked`` at the index's nprobe): its top rows and its seconds."""
    from taskret.retrieval.ivfpq import search_reranked

    found, times = [], []
    for query in queries:
        started = time.perf_counter()
        rows, _ = search_reranked(index, vectors, query[None, :], K, rerank)
        times.append(time.perf_counter() - started)
        found.append(rows[0])
    return found, times


def recall_at_10(found: list[list[int]], exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e.tolist())) / K for f, e in zip(found, exact)]))


def searched_with(index, vectors, queries: np.ndarray, exact: np.ndarray, nprobe: int, rerank: int) -> dict:
    """recall@10 against ``exact`` and the single-query p50 of ``queries`` at one pair of settings."""
    index.nprobe = nprobe
    found, times = timed_search(index, vectors, queries, rerank)
    recall = recall_at_10(found, exact)
    return {"nprobe": nprobe, "rerank": rerank, "recall_at_10": round(recall, 4),
            "p50_ms": round(float(np.percentile(times, 50)) * 1000, 3), "queries": len(queries)}


def sweep(job: dict) -> dict:
    """Child 3: each (nprobe, rerank) pair on the tuning half, the chosen one on the held-out half (module
    docstring)."""
    import faiss

    from taskret.retrieval.ivfpq import open_vectors

    folder = Path(job["folder"])
    faiss.omp_set_num_threads(1)
    queries = np.load(job["queries"])
    exact = np.load(folder / EXACT_FILE)  # the search child's, of these queries, just before
    index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_MMAP)
    vectors = open_vectors(folder / "vectors.npy", random_reads=True)
    tuning, held_out = halves(len(queries), job["seed"])
    points = [searched_with(index, vectors, queries[tuning], exact[tuning], nprobe, rerank)
              for nprobe in job["nprobe"] for rerank in job["rerank"]]
    reaching = [p for p in points if p["recall_at_10"] >= job["target_recall"]]
    chosen = min(reaching, key=lambda p: p["p50_ms"]) if reaching else max(points, key=lambda p: p["recall_at_10"])
    return {"target_recall": job["target_recall"], "tuning_queries": len(tuning), "tuning": points,
            "chosen": {"nprobe": chosen["nprobe"], "rerank": chosen["rerank"],
                       "reached_target_on_tuning": bool(reaching)},
            "held_out": searched_with(index, vectors, queries[held_out], exact[held_out], chosen["nprobe"],
                                      chosen["rerank"])}


def _child(step: str, job: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", step, json.dumps(job)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{step} of {job['n']} vectors failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps({"build": build, "search": search, "sweep": sweep}[sys.argv[2]](json.loads(sys.argv[3]))),
              flush=True)
        return
    options = parser(__doc__, out="benchmarks/results/compressed_vectors.json", data_dir=False, seed=0)
    options.add_argument("--base", required=True, help="real vectors (.npy, float32, unit length)")
    options.add_argument("--sizes", default="1000000,10000000", help="vector counts (default: %(default)s)")
    options.add_argument("--queries", default=None, help="real query vectors (.npy); default: noisy base rows")
    options.add_argument("--queries-n", type=int, default=1000, help="queries searched (default: %(default)s)")
    options.add_argument("--work", default="runs/compressed", help="the vectors and indexes (GBs at 10M)")
    options.add_argument("--nprobe", default="", help="nprobe values swept (comma list; with --rerank)")
    options.add_argument("--rerank", default="", help="re-rank depths swept (comma list; with --nprobe)")
    options.add_argument("--target-recall", type=float, default=0.95, help="what a swept pair must reach on the "
                         "tuning half (default: %(default)s)")
    args = options.parse_args()
    started = machine()  # the load the run starts at
    grid = {"nprobe": [int(v) for v in args.nprobe.split(",") if v], "rerank": [int(v) for v in args.rerank.split(",") if v]}
    if bool(grid["nprobe"]) != bool(grid["rerank"]):
        raise SystemExit("--nprobe and --rerank sweep together: give both")
    base = np.load(args.base, mmap_mode="r")
    cosine = nearest_neighbour_cosine(base, seed=args.seed)
    sigma = noise_scale(cosine, base.shape[1])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries_file = work / "queries.npy"
    np.save(queries_file, query_vectors(base, args.queries_n, sigma, Path(args.queries) if args.queries else None,
                                        seed=args.seed + 1))
    rows = {}
    for n in [int(s) for s in args.sizes.split(",") if s]:
        folder = work / str(n)
        record = folder / "build.json"
        job = {"n": n, "folder": str(folder), "base": str(Path(args.base).resolve()), "sigma": sigma,
               "seed": args.seed}
        if (folder / "index.faiss").exists() and record.exists():
            built = json.loads(record.read_text())
            print(f"{n}: built before, searched again", flush=True)
        else:
            built = _child("build", job)
            record.write_text(json.dumps(built))
        searched = _child("search", {**job, "settings": built["settings"], "queries": str(queries_file)})
        rows[str(n)] = {"real_vectors": min(n, len(base)), **built, **searched}
        if grid["nprobe"]:
            rows[str(n)]["sweep"] = _child("sweep", {**job, **grid, "target_recall": args.target_recall,
                                                     "queries": str(queries_file)})
            held = rows[str(n)]["sweep"]["held_out"]
            print(f"{n}: swept; chosen nprobe {held['nprobe']}, rerank {held['rerank']}: held-out recall@10 "
                  f"{held['recall_at_10']}, p50 {held['p50_ms']} ms", flush=True)
        print(f"{n}: recall@10 {searched['recall_at_10']}, p50 {searched['p50_ms']} ms, resident "
              f"{searched['resident_after_queries_gib']} of {searched['disk_gib']} GiB on disk, build peak "
              f"{built['build_peak_rss_gib']} GiB", flush=True)
    write_result(args.out, {"benchmark": "compressed_vectors", "command": command_line(args, options),
                            "machine": started, "finished_load_average": list(os.getloadavg()),
                            "base_vectors": len(base), "base_nn_cosine_median": round(cosine, 4),
                            "noise_sigma": round(sigma, 6), "queries": "real" if args.queries else "noisy base rows",
                            "sizes": rows})


if __name__ == "__main__":
    main()
