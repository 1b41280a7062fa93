"""Gather the scale results that other scripts measure into ``scale.json``, under the keys the issue's readers use
(issue 78): ``shards`` from ray_shards.py's result, with dense_shards.py's recall difference where it was run; and
each size that scale.py does not build (``--sizes``, 10M: its vectors synthesised, as encoding them would take ~16 h)
from the bounded-memory builds measured at that size, BM25 from bm25_shards.py's single index and dense from
compressed_vectors.py's IVF-PQ index; and from those, ``extrapolation_shards``: the table at 100M documents in shards
(:func:`per_shard_extrapolation`, an extrapolation and named so). Each part is copied from its own results file,
never measured here; a result that is not there leaves its key out (or null), and the line printed says so.

    python benchmarks/scale/assemble.py --scale benchmarks/results/scale.json \\
        --ray-shards benchmarks/results/ray_shards.json --dense-shards benchmarks/results/dense_shards.json \\
        --bm25-shards benchmarks/results/bm25_single.json --compressed benchmarks/results/compressed_vectors.json \\
        --sizes 10000000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import write_result  # noqa: E402


def shards_entry(ray_shards: dict, dense_shards: dict | None = None) -> dict:
    """ray_shards.py's result as ``scale.json``'s ``shards``: the merged top 10 against the single index's, the
    killed shard (tested when the strict search named it, the partial one left it and its documents out, and the
    service marked its answer), and the served numbers beside the single index's."""
    killed = ray_shards["killed_shard"]
    serve = ray_shards.get("serve") or {}
    service_killed = serve.get("killed_shard") or {}
    tested = (killed["strict"].get("raised") and killed["strict"].get("names_shard")
              and killed["partial_missing"] == [killed["shard"]] and killed["partial_has_no_killed_shard_documents"]
              and service_killed.get("status") == 200 and len(service_killed.get("missing_shards") or []) == 1)
    compared = ray_shards["vs_single_index"]
    return {"nodes": ray_shards["nodes"], "shards": ray_shards["shards"], "documents": ray_shards["documents"],
            "queries": compared["queries"],
            "bm25_same_top10_share": compared["same_top10_share"],
            "bm25_same_top10_up_to_ties_share": compared["same_top10_up_to_ties_share"],
            "bm25_max_score_diff": compared["max_score_diff"],
            "dense_recall_delta": dense_shards["recall_delta"] if dense_shards else None,
            "dense": {"documents": dense_shards["documents"], "shards": dense_shards["shards"],
                      "recall_at_10": {"single": dense_shards["single"]["recall_at_10"],
                                       "ray_shards": dense_shards["ray"]["recall_at_10"]},
                      "command": dense_shards["command"]} if dense_shards else None,
            "killed_shard_tested": bool(tested),
            "search_p50_ms": {"single": ray_shards["single"]["p50_ms"], "ray_shards": ray_shards["ray"]["p50_ms"]},
            "serve": {name: serve[name] for name in ("single", "ray_shards", "connections", "duration_s", "tool")
                      if name in serve},
            "machine": ray_shards["machine"], "command": ray_shards["command"]}


def pisa_entry(n: str, bm25_pisa: dict | None) -> dict | None:
    """bm25_pisa.py's measurement at size ``n`` (the same kind of index searched by bm25s and by PISA over its
    scores, paired), or None where it did not measure ``n``."""
    row = (bm25_pisa or {}).get("sizes", {}).get(n)
    if row is None:
        return None
    pisa, paired = row["settings"]["pisa"], row["paired"]
    return {"p50_ms": pisa["p50_ms"], "p99_ms": pisa["p99_ms"], "bm25s_p50_ms": row["settings"]["bm25s"]["p50_ms"],
            "ratio_to_bm25s": paired["ratio_pisa_over_bm25s"], "ratio_ci95": paired["ratio_ci95"],
            "same_top10_share": row["same_top10_share"], "derive_s": row["derive"]["derive_s"],
            "derive_peak_rss_gib": row["derive"]["peak_rss_gib"], "disk_gib": row["derive"]["disk_gib"],
            "command": bm25_pisa["command"], "machine": bm25_pisa["machine"]}


def default_search(n: str, quantizers: dict | None) -> dict | None:
    """ivf_quantizer.py's search at size ``n`` with the quantizer a build of that size now gets (the HNSW graph from
    ``ivfpq.LARGE_FROM`` vectors on, the scan below), at the size's default settings; None where it did not run."""
    from taskret.retrieval.ivfpq import LARGE_FROM

    row = (quantizers or {}).get("sizes", {}).get(n)
    if row is None:
        return None
    quantizer = "hnsw" if int(n) >= LARGE_FROM else "flat"
    measured = row["quantizers"][quantizer]
    return {"quantizer": quantizer, "settings": row["settings"], "recall_at_10": measured["recall_at_10"],
            "p50_ms": measured["p50_ms"], "p99_ms": measured["p99_ms"],
            "resident_after_queries_gib": measured["runs"][0]["resident_after_queries_gib"],
            "command": quantizers["command"], "machine": quantizers["machine"]}


def size_entry(n: str, bm25_shards: dict, compressed: dict, bm25_pisa: dict | None = None,
               quantizers: dict | None = None) -> dict | None:
    """Size ``n`` as ``scale.json``'s other sizes hold it, from its two builds (each a child process of its own, so
    the peak over the whole build is the larger of theirs): BM25 from bm25_shards.py's one-shard (single) index,
    dense from compressed_vectors.py's IVF-PQ index with exact re-ranking; with each build's peak beside the same
    build's at the smallest size both ran (flat memory: their ratio). The dense search is ivf_quantizer.py's of the
    same index with the quantizer and settings a build of that size now gets, where it ran (``quantizers``), else
    compressed_vectors.py's own. None unless both builds measured ``n``."""
    bm25, dense = bm25_shards["sizes"].get(n, {}).get("1"), compressed["sizes"].get(n)
    if bm25 is None or dense is None:
        return None
    searched = default_search(n, quantizers)
    own = {"quantizer": "flat", "settings": dense["settings"], "recall_at_10": dense["recall_at_10"],
           "p50_ms": dense["p50_ms"], "p99_ms": dense["p99_ms"],
           "resident_after_queries_gib": dense["resident_after_queries_gib"]}
    searched = searched or own
    common = sorted(set(bm25_shards["sizes"]) & set(compressed["sizes"]), key=int)
    base = common[0] if common and common[0] != n else None
    peak = max(bm25["build_peak_rss_gib"], dense["build_peak_rss_gib"])
    base_peak = max(bm25_shards["sizes"][base]["1"]["build_peak_rss_gib"],
                    compressed["sizes"][base]["build_peak_rss_gib"]) if base else None
    return {"documents": int(n), "peak_rss_gib": peak,
            "peak_rss_ratio_to": {"documents": int(base), "ratio": round(peak / base_peak, 3)} if base else None,
            "disk_gib": round(bm25["disk_gib"] + dense["disk_gib"], 3),
            # searched in the run that built it (on PISA where that run's index had one: auto from bm25.PISA_FROM);
            # "pisa": the same kind of index searched by bm25s and by PISA, paired (bm25_pisa.py)
            "bm25": {"p50_ms": bm25["p50_ms"], "p99_ms": bm25["p99_ms"], "ndcg10": bm25.get("ndcg10"),
                     "build_s": bm25["build_s"], "build_peak_rss_gib": bm25["build_peak_rss_gib"],
                     "disk_gib": bm25["disk_gib"], "resident_after_queries_gib": bm25["resident_after_queries_gib"],
                     "searched_by": "pisa" if bm25.get("searched_on_pisa") is True else "bm25s",
                     "pisa": pisa_entry(n, bm25_pisa)},
            "dense": {"index_type": "ivfpq", "recall_at_10": searched["recall_at_10"],
                      "search_only": {"p50_ms": searched["p50_ms"], "p99_ms": searched["p99_ms"]},
                      "quantizer": searched["quantizer"], "searched_by": searched.get("command", compressed["command"]),
                      "build_s": dense["build_s"], "build_peak_rss_gib": dense["build_peak_rss_gib"],
                      "disk_gib": dense["disk_gib"], "settings": searched["settings"],
                      # compressed_vectors.py's own search of the index, at the settings of its time
                      "build_run_search": {key: own[key] for key in ("settings", "recall_at_10", "p50_ms", "p99_ms")},
                      # the search settings chosen on half the queries, measured on the other half (--nprobe/--rerank)
                      "swept_held_out": (dense.get("sweep") or {}).get("held_out"),
                      "real_vectors": dense["real_vectors"], "queries": compressed["queries"]},
            "resident_after_queries_share_of_disk": round(searched["resident_after_queries_gib"] / dense["disk_gib"], 4),
            "commands": {"bm25": bm25_shards["command"], "dense": compressed["command"]}}


#: documents a shard in the 100M table's rows, one shard a machine
SHARD_DOCUMENTS = (10_000_000, 5_000_000, 2_000_000, 1_000_000)


def straight_line(points: dict[int, float]):
    """The least-squares line through measured (documents, value) points (two points: the line through both)."""
    sizes = np.array(sorted(points), dtype=float)
    slope, intercept = np.polyfit(sizes, [points[int(n)] for n in sizes], 1)
    return lambda n: float(intercept + slope * n)


def per_shard_extrapolation(total: int, bm25_shards: dict, compressed: dict, encode_docs_per_s: float,
                            merge_ms: float, quantizers: dict | None = None) -> dict | None:
    """``total`` documents in shards of each of :data:`SHARD_DOCUMENTS`, one a machine like the one measured: each
    cost of one shard read off a straight line through the sizes both bounded builds measured (BM25: bm25_shards.py's
    single index; dense: compressed_vectors.py's IVF-PQ, searched as :func:`default_search` where ``quantizers``
    measured it), the encoding at ``encode_docs_per_s`` (scale.py's, one
    machine), and a query's p50 the slower shard's plus ``merge_ms`` (what the Ray front added at 3 shards:
    ray_shards.py). An extrapolation, not a measurement; None below two measured sizes."""
    sizes = sorted((n for n in set(bm25_shards["sizes"]) & set(compressed["sizes"]) if "1" in bm25_shards["sizes"][n]),
                   key=int)
    if len(sizes) < 2:
        return None

    def fit(source: dict, key: str):
        return straight_line({int(n): source[n][key] for n in sizes})

    bm25 = {n: bm25_shards["sizes"][n]["1"] for n in sizes}
    dense = {n: {**compressed["sizes"][n], **{key: searched[key] for key in ("p50_ms", "resident_after_queries_gib")}}
             if (searched := default_search(n, quantizers)) else compressed["sizes"][n] for n in sizes}
    costs = {"bm25_build_s": fit(bm25, "build_s"), "bm25_peak_gib": fit(bm25, "build_peak_rss_gib"),
             "bm25_disk_gib": fit(bm25, "disk_gib"), "bm25_p50_ms": fit(bm25, "p50_ms"),
             "dense_build_s": fit(dense, "build_s"), "dense_peak_gib": fit(dense, "build_peak_rss_gib"),
             "dense_disk_gib": fit(dense, "disk_gib"), "dense_p50_ms": fit(dense, "p50_ms"),
             "dense_resident_gib": fit(dense, "resident_after_queries_gib"),
             "bm25_resident_gib": fit(bm25, "resident_after_queries_gib")}
    rows = []
    for shard in SHARD_DOCUMENTS:
        at = {name: line(shard) for name, line in costs.items()}
        build_h = (shard / encode_docs_per_s + at["bm25_build_s"] + at["dense_build_s"]) / 3600
        rows.append({"documents_per_shard": shard, "shards": total // shard, "machines": total // shard,
                     "build_peak_gib_per_machine": round(max(at["bm25_peak_gib"], at["dense_peak_gib"]), 2),
                     "disk_gib_per_machine": round(at["bm25_disk_gib"] + at["dense_disk_gib"], 2),
                     "resident_gib_per_machine": round(at["bm25_resident_gib"] + at["dense_resident_gib"], 2),
                     "build_h": round(build_h, 2), "encode_h": round(shard / encode_docs_per_s / 3600, 2),
                     "bm25_p50_ms": round(at["bm25_p50_ms"] + merge_ms, 2),
                     "dense_search_p50_ms": round(at["dense_p50_ms"] + merge_ms, 2)})
    return {"documents": total, "from_sizes": [int(n) for n in sizes], "encode_docs_per_s": encode_docs_per_s,
            "merge_ms": round(merge_ms, 2), "rows": rows,
            "note": "each shard's costs on straight lines through the bounded builds' measured sizes, one shard a "
                    "machine like the one measured, the encoding at its rate, the merge as the Ray front added at 3 "
                    "shards on one machine (more shards add fan-out, not measured); where the measured sizes were "
                    "searched by different BM25 backends (bm25s below bm25.PISA_FROM, PISA from it), the line between "
                    "them is neither's: an extrapolation"}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--scale", default="benchmarks/results/scale.json", help="the file to add to")
    options.add_argument("--ray-shards", default="benchmarks/results/ray_shards.json")
    options.add_argument("--dense-shards", default="benchmarks/results/dense_shards.json")
    options.add_argument("--bm25-shards", default="benchmarks/results/bm25_single.json",
                         help="bm25_shards.py's result whose one-shard rows are the single index (default: %(default)s)")
    options.add_argument("--compressed", default="benchmarks/results/compressed_vectors.json")
    options.add_argument("--bm25-pisa", default="benchmarks/results/bm25_pisa.json",
                         help="bm25_pisa.py's result: the BM25 index searched by PISA too (default: %(default)s)")
    options.add_argument("--ivf-quantizer", default="benchmarks/results/ivf_quantizer.json",
                         help="ivf_quantizer.py's result: the dense index searched with the quantizer a build now gets")
    options.add_argument("--sizes", default="10000000", help="sizes taken from those two (default: %(default)s)")
    options.add_argument("--extrapolate-to", type=int, default=100_000_000,
                         help="documents of the per-shard table (default: %(default)s)")
    args = options.parse_args()
    scale = json.loads(Path(args.scale).read_text())
    ray_shards, dense_shards, bm25_shards, compressed, bm25_pisa, quantizers = (
        json.loads(Path(path).read_text()) if Path(path).is_file() else None
        for path in (args.ray_shards, args.dense_shards, args.bm25_shards, args.compressed, args.bm25_pisa,
                     args.ivf_quantizer))
    if ray_shards:
        scale["shards"] = shards_entry(ray_shards, dense_shards)
        print(f"shards: from {args.ray_shards}"
              + (f" and {args.dense_shards}" if dense_shards else f" ({args.dense_shards} is not there)"))
    else:
        print(f"shards: left out ({args.ray_shards} is not there)")
    for n in [s for s in args.sizes.split(",") if s]:
        entry = size_entry(n, bm25_shards, compressed, bm25_pisa, quantizers) if bm25_shards and compressed else None
        if entry is None:
            print(f"sizes[{n}]: left out (not measured at {n} in both {args.bm25_shards} and {args.compressed})")
            continue
        scale["sizes"][n] = entry
        print(f"sizes[{n}]: from {args.bm25_shards} and {args.compressed}")
    # the encoding rate of scale.py's largest build (its own: the bounded builds do not encode)
    encoded = [scale["sizes"][n] for n in sorted(scale["sizes"], key=int) if "encode_docs_per_s" in scale["sizes"][n]]
    if bm25_shards and compressed and ray_shards and encoded:
        table = per_shard_extrapolation(args.extrapolate_to, bm25_shards, compressed, encoded[-1]["encode_docs_per_s"],
                                        ray_shards["ray"]["p50_ms"] - ray_shards["single"]["p50_ms"], quantizers)
        if table is not None:
            scale["extrapolation_shards"] = table
        print("extrapolation_shards: " + ("written" if table else "left out (fewer than two sizes in both builds)"))
    write_result(args.scale, scale)


if __name__ == "__main__":
    main()
