"""Cost as the corpus grows and where a streaming build's memory goes (benchmarks/scale/: scale.json,
build_memory.json)."""

from __future__ import annotations

import json
import re

from _common import describe_machine

from .common import header, load, load_text
from .serve import worker_memory


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bm25_backends(d: dict) -> str:
    backends = sorted({r["bm25"].get("backend", "numpy") for r in d["sizes"].values() if "index_s" in r})
    return " / ".join(backends)


def _index_kind(dense: dict) -> str:
    return f"hnsw, ef_search {dense['ef_search']}" if dense.get("ef_search") else dense["index_type"]


def scale_table() -> list[str]:
    """`benchmarks/scale/scale.py`: indexing and search cost at each corpus size, the fitted extrapolation, serving."""
    d = load("scale.json")
    if not d:
        return []
    out = [f"Cost as the corpus grows (`{d['command']}`; {describe_machine(d['machine'])}; {d['corpus']}; "
           f"{d['queries']} real queries). Build: `docs-fast` (BM25 + MiniLM in bf16, HNSW from 20K vectors), each "
           "stage in seconds; peak RSS of the build process; single-query p50 / p99 ms, top 10, each index loaded "
           "and warmed as `taskret serve` does (BM25 on bm25s's " + _bm25_backends(d) + " backend); the dense index "
           "alone is its search for an encoded query (end to end, a dense query is mostly its encoder pass); "
           "recall@10 of the dense index against exact search, at the ef_search it records:", "",
           *header("documents", "encode docs/s", "encode s", "ANN s", "BM25 s", "peak RSS GiB", "disk GiB",
                   "BM25 p50 / p99", "dense index alone p50 / p99", "recall@10", "dense end to end p50",
                   "docs-fast p50 / p99", "docs-rerank p50")]
    # scale.py's own builds; a size assemble.py took from the bounded builds (10M) has no index_s and a table of its own
    built = {n: r for n, r in d["sizes"].items() if "index_s" in r}
    for n, r in sorted(built.items(), key=lambda item: int(item[0])):
        t, dense, alone = r["index_s"], r["dense"], r["dense"].get("search_only", {})
        out.append(f"| {int(n):,} | {r['encode_docs_per_s']:.0f} | {t['encode']:,.0f} | {t['ann']:,.1f} | "
                   f"{t['bm25']:,.1f} | {r['peak_rss_gib']:.2f} | {r['disk_gib']:.2f} | {r['bm25']['p50_ms']:.2f} / "
                   f"{r['bm25']['p99_ms']:.2f} | {_fmt(alone.get('p50_ms'), 3)} / {_fmt(alone.get('p99_ms'), 3)} | "
                   f"{dense['recall_at_10']:.3f} ({_index_kind(dense)}) | {dense['p50_ms']:.1f} | "
                   f"{r['docs-fast']['p50_ms']:.1f} / {r['docs-fast']['p99_ms']:.1f} | "
                   f"{r['docs-rerank']['p50_ms']:,.0f} |")
    curves = {n: r["dense"]["ef_search_curve"] for n, r in built.items() if r["dense"].get("ef_search_curve")}
    if curves:
        efs = [point["ef_search"] for point in next(iter(curves.values()))]
        out += ["", "HNSW's search width (`ef_search`) at each size: recall@10 against exact search / the index's "
                "own single-query p50 ms (`taskret.retrieval.dense.ef_search_for` chooses by size from these):", "",
                *header("documents", *(f"ef_search {ef}" for ef in efs))]
        for n, curve in sorted(curves.items(), key=lambda item: int(item[0])):
            out.append(f"| {int(n):,} | " + " | ".join(f"{c['recall_at_10']:.3f} / {c['p50_ms']:.2f}" for c in curve)
                       + " |")
    ex = d.get("extrapolation")
    if ex:
        cluster = ex["cluster"]
        out += ["", f"Extrapolated ({ex['note']}):", "",
                *header("documents", "peak RSS GiB", "disk GiB", "build h, one machine", f"build h, {cluster} machines",
                        "BM25 p50 ms", "dense index alone p50 ms")]
        for n, row in ex["table"].items():
            out.append(f"| {int(n):,} | {_fmt(row['peak_rss_gib'])} | {_fmt(row['disk_gib'])} | "
                       f"{_fmt(row['build_h_one_machine'])} | {_fmt(row[f'build_h_{cluster}_machines'])} | "
                       f"{_fmt(row.get('bm25_p50_ms'))} | {_fmt(row.get('dense_search_p50_ms'), 2)} |")
    ray = d.get("ray")
    if ray:
        out += ["", f"Encoding on Ray (`--ray local`, {ray['workers']} workers) at {ray['documents']:,} documents: "
                f"{'the same' if ray['same_top10'] else 'a different'} top 10 as the local build for "
                f"{ray['queries_with_same_top10']} of {ray['queries']} real queries (largest score difference "
                f"{ray['max_score_diff']:.1e}); encoding {ray['encode_s']:,.0f} s on the same 2 cores."]
    if d.get("serve"):
        out += served_rows(d["serve"], d["machine"].get("http_stack"))
    return out


def bounded_builds_table() -> list[str]:
    """The sizes assemble.py took from the bounded-memory builds (10M: bm25_shards.py's single index and
    compressed_vectors.py's IVF-PQ), and the 100M table extrapolated per shard from them."""
    d = load("scale.json")
    if not d:
        return []
    out: list[str] = []
    bounded = {n: r for n, r in d["sizes"].items() if "commands" in r}
    if bounded:
        commands = next(iter(bounded.values()))["commands"]
        out += ["Built within the memory budget, each build a child process of its own (its peak RSS from rusage; the "
                f"size's peak is the larger build's): BM25 as one index (`{commands['bm25']}`), dense as IVF-PQ with "
                f"exact re-ranking over vectors synthesised from the real 1M (`{commands['dense']}`), searched at the "
                f"settings and with the quantizer a build of its size now gets"
                + "".join(sorted({f" (`{r['dense']['searched_by']}`)" for r in bounded.values()
                                  if r["dense"].get("searched_by", commands["dense"]) != commands["dense"]}))
                + "; one query at a time on one thread:",
                "", *header("documents", "peak RSS GiB (x the smaller size's)", "disk GiB",
                            "BM25 p50 / p99 ms (searched by)", "BM25 on PISA p50 / p99 ms (bm25_pisa.py)",
                            "BM25 NDCG@10", "dense recall@10 (quantizer)", "dense p50 / p99 ms",
                            "resident / disk after the queries")]
        for n, r in sorted(bounded.items(), key=lambda item: int(item[0])):
            ratio = r.get("peak_rss_ratio_to") or {}
            out.append(f"| {int(n):,} | {r['peak_rss_gib']:.2f}"
                       + (f" ({ratio['ratio']:.2f}x {ratio['documents']:,})" if ratio else "")
                       + f" | {r['disk_gib']:.1f} | {r['bm25']['p50_ms']:.2f} / {r['bm25']['p99_ms']:.2f} "
                       f"({r['bm25'].get('searched_by', 'bm25s')}) | "
                       + (f"{pisa['p50_ms']:.2f} / {pisa['p99_ms']:.2f}" if (pisa := r["bm25"].get("pisa")) else "-")
                       + f" | {_fmt(r['bm25'].get('ndcg10'), 2)} | {r['dense']['recall_at_10']:.3f} "
                       f"({r['dense'].get('quantizer', 'flat')}) | "
                       f"{r['dense']['search_only']['p50_ms']:.2f} / {r['dense']['search_only']['p99_ms']:.2f} | "
                       f"{r['resident_after_queries_share_of_disk']:.1%} |")
    ex = d.get("extrapolation_shards")
    if ex:
        out += ["" if out else None, f"**Extrapolated, not measured**: {ex['documents']:,} documents in shards, one "
                f"a machine ({ex['note']}; the lines through {', '.join(f'{n:,}' for n in ex['from_sizes'])} documents; "
                f"encoding at {ex['encode_docs_per_s']:.0f} documents/s; merge +{ex['merge_ms']} ms):", "",
                *header("documents a shard", "shards = machines", "build peak GiB a machine", "disk GiB a machine",
                        "resident GiB a machine", "build h (of it encoding)", "BM25 p50 ms", "dense p50 ms")]
        for r in ex["rows"]:
            out.append(f"| {r['documents_per_shard']:,} | {r['shards']} | {r['build_peak_gib_per_machine']} | "
                       f"{r['disk_gib_per_machine']} | {r['resident_gib_per_machine']} | {r['build_h']} "
                       f"({r['encode_h']}) | {r['bm25_p50_ms']} | {r['dense_search_p50_ms']} |")
    return [line for line in out if line is not None]


def compressed_vectors_table() -> list[str]:
    """`benchmarks/scale/compressed_vectors.py`: IVF-PQ with exact re-ranking, searched from disk, at each size."""
    d = load("compressed_vectors.json")
    if not d:
        return []
    out = [f"Compressed dense search (`{d['command']}`; {describe_machine(d['machine'])}; {load_text(d)}): IVF-PQ "
           f"over MiniLM vectors, its candidates re-ranked exactly from the full vectors on disk, one query "
           f"at a time on one thread, opened from disk as `taskret serve` opens it; {d['base_vectors']:,} real "
           f"vectors, past them noisy copies at the real nearest-neighbour cosine ({d['base_nn_cosine_median']}); "
           f"queries: {d['queries']}:", "",
           *header("vectors (real)", "lists / codes a vector / nprobe / re-ranked", "build s", "build peak RSS GiB",
                   "recall@10 vs exact", "p50 / p99 ms", "disk GiB (index + vectors)",
                   "resident after the queries GiB (share of disk)")]
    for n, r in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        st = r["settings"]
        out.append(f"| {int(n):,} ({r['real_vectors']:,}) | {st['nlist']:,} / {st['m']} / {st['nprobe']} / "
                   f"{st['rerank']} | {r['build_s']:,.1f} | {r['build_peak_rss_gib']} | {r['recall_at_10']:.3f} | "
                   f"{r['p50_ms']} / {r['p99_ms']} | {r['disk_gib']} | {r['resident_after_queries_gib']} "
                   f"({r['resident_share_of_disk']:.1%}) |")
    for n, r in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        if "sweep" in r:
            out += [""] + sweep_rows(int(n), r["sweep"])
    return out


def sweep_rows(n: int, sweep: dict) -> list[str]:
    """compressed_vectors.py's sweep of one size: the tuning half's grid, then the chosen pair on the held-out half."""
    held, chosen = sweep["held_out"], sweep["chosen"]
    nprobes = sorted({p["nprobe"] for p in sweep["tuning"]})
    reranks = sorted({p["rerank"] for p in sweep["tuning"]})
    at = {(p["nprobe"], p["rerank"]): p for p in sweep["tuning"]}
    out = [f"Search settings at {n:,} vectors, chosen on {sweep['tuning_queries']} of the queries (recall@10 / p50 ms "
           f"by nprobe and re-rank depth; the fastest reaching {sweep['target_recall']} is chosen"
           + ("" if chosen["reached_target_on_tuning"] else ": none reached it, so the one of highest recall") + "):",
           "", *header("nprobe", *(f"re-rank {r}" for r in reranks))]
    for nprobe in nprobes:
        out.append(f"| {nprobe} | " + " | ".join(
            f"{at[(nprobe, r)]['recall_at_10']:.3f} / {at[(nprobe, r)]['p50_ms']:.2f}" if (nprobe, r) in at else ""
            for r in reranks) + " |")
    out += ["", f"Chosen: nprobe {held['nprobe']}, re-rank {held['rerank']}; on the {held['queries']} held-out "
            f"queries recall@10 **{held['recall_at_10']:.3f}** at **{held['p50_ms']:.2f} ms** p50."]
    return out


def served_rows(serve: dict, http: dict | None) -> list[str]:
    """scale.py's serve part (also engines.py's, which adds Break's 6K index as ``floor_6k`` / ``bm25_6k``): each
    endpoint under wrk with the /health floor of the same run, and the issue's targets."""
    out = ["", f"Served at {serve['size']:,} documents (`taskret serve --workers {serve['workers']}`"
           + (f" on {http['http']} + {http['loop']}" if http else "") + ", "
           f"{serve['tool']}, {serve['connections']} connections, {serve['duration_s']:.0f} s per run, "
           "real queries in turn, k=10; memory per worker after the load):", "",
           *header("endpoint", "requests/s", "p50 ms", "p99 ms", "errors", "worker RSS / PSS MiB")]
    out.append(f"| /health (the floor) | {serve['floor']['req_per_s']:,.0f} | {serve['floor']['p50_ms']} | "
               f"{serve['floor']['p99_ms']} | {serve['floor']['errors']} | |")
    for name in ("bm25", "docs-fast"):
        r = serve[name]
        out.append(f"| /retrieve, {name} | {r['req_per_s']:,.1f} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                   f"{worker_memory(r['memory_mib']['workers'])} |")
    for name, label in (("floor_6k", "/health, Break's 6,208 examples"), ("bm25_6k", "/retrieve, bm25, Break's")):
        if name in serve:
            r = serve[name]
            out.append(f"| {label} | {r['req_per_s']:,.1f} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | |")
    t = serve["targets"]
    out += ["", f"BM25 /retrieve at **{t['bm25_share_of_floor']:.0%}** of the floor's requests/s (target >= 50%), "
            f"p99 {t['bm25_p99_over_floor']}x the floor's (target <= 2x); docs-fast at "
            f"**{_fmt(100 * t['docs_fast_share_of_encoder'] if t['docs_fast_share_of_encoder'] else None, 0)}%** "
            f"of the query encoder's batched rate in the same run "
            f"({serve['docs-fast']['encoder_queries_per_s']} queries/s; target >= 70%)."
            + (f" At Break's 6,208 examples, BM25 /retrieve at **{t['bm25_6k_share_of_floor']:.0%}** of that "
               "index's floor (target >= 50%)." if "bm25_6k_share_of_floor" in t else "")]
    return out


def build_memory_table() -> list[str]:
    """`benchmarks/scale/build_memory.py`: memory growth per document of a streaming dense build, by variant."""
    d = load("build_memory.json")
    if not d:
        return []
    what = {"hnsw": "HNSW, glibc's default malloc (before taskret.allocator)",
            "hnsw-release": "HNSW, taskret's default: `malloc_trim(0)` after each 256-document chunk",
            "hnsw-mmap-threshold": "HNSW, glibc's mmap threshold fixed at 128 KiB",
            "flat": "flat index (no graph)", "hnsw-trim": "HNSW, `malloc_trim(0)` every 2 s from a thread",
            "hnsw-onednn-cache-0": "HNSW, oneDNN's primitive cache off",
            "hnsw-mmap-threshold-onednn-cache-0": "HNSW, threshold fixed and oneDNN's cache off",
            "hnsw-float32": "HNSW, encoding in float32", "encode-only": "the encoder alone (no shards, no FAISS)",
            "hnsw-tracemalloc": "HNSW, tracemalloc on (slower)"}
    out = [f"Memory of a streaming dense build (`{d['command']}`; {describe_machine(d['machine'])}; one run per "
           "variant, one after another): growth per document encoded, a least-squares slope over the samples after "
           "the first shard, and the value at the end; RSS of the process, its glibc heap (`[heap]`), the Python "
           "objects tracemalloc traces; the encoding's rate:", "",
           *header("variant", "docs/s", "RSS bytes/doc", "heap bytes/doc", "traced bytes/doc", "RSS at end MiB",
                   "heap at end MiB")]
    for r in d["runs"]:
        out.append(f"| {what.get(r['variant'], r['variant'])} | {_fmt(r.get('docs_per_s'), 0)} | "
                   f"{_fmt(r.get('rss_bytes_per_doc'), 0)} | {_fmt(r.get('heap_bytes_per_doc'), 0)} | "
                   f"{_fmt(r.get('traced_bytes_per_doc'), 0)} | {_fmt(r.get('rss_end_mib'), 0)} | "
                   f"{_fmt(r.get('heap_end_mib'), 0)} |")
    sites = [site for r in d["runs"] for site in r.get("grew_most", []) if site["kib"] > 0][:3]
    if sites:
        where = lambda site: re.sub(r"^.*?/(src|benchmarks|site-packages)/", "", site["where"][0])  # noqa: E731
        out += ["", "The Python allocation sites that grew most after the first shard (tracemalloc): " + "; ".join(
            f"`{where(site)}` {site['kib']:,} KiB in {site['count']:,} blocks" for site in sites) + "."]
    return out


#: The gain that makes another engine taskret's default, at NDCG@10 within ADOPT_NDCG points of bm25s's (issue 62).
ADOPT_SPEED, ADOPT_NDCG = 2.0, 0.5
#: How close taskret's BM25 must stay to the fastest engine's single-query p50.
WITHIN_FASTEST = 1.25


def engines_verdict(size: dict, default: str, target: bool = True) -> str | None:
    """Whether another BM25 engine wins by the issue's rule, and how close taskret's default stays to the fastest."""
    rows = {name: r for name, r in size.get("bm25", {}).items() if "error" not in r}
    if default not in rows:
        return None
    ours = rows[default]
    fastest = min(rows, key=lambda name: rows[name]["p50_ms"])
    winners = [name for name, r in rows.items() if ours["p50_ms"] / r["p50_ms"] >= ADOPT_SPEED
               and abs(r["ndcg10"] - ours["ndcg10"]) <= ADOPT_NDCG]
    within = ours["p50_ms"] / rows[fastest]["p50_ms"]
    met = f" (target at 1M <= {WITHIN_FASTEST}x: {'met' if within <= WITHIN_FASTEST else 'missed'})" if target else ""
    text = (f"Fastest single query: {fastest} ({rows[fastest]['p50_ms']:.2f} ms p50); taskret's {default} "
            f"{ours['p50_ms']:.2f} ms, **{within:.2f}x** the fastest{met}. ")
    if winners:
        return text + f"{', '.join(winners)} is >= {ADOPT_SPEED:g}x faster at NDCG@10 within {ADOPT_NDCG} points."
    return text + (f"No engine is >= {ADOPT_SPEED:g}x faster than {default} at NDCG@10 within {ADOPT_NDCG} points "
                   "of it: none is adopted.")


#: The recall an HNSW library must reach for its latency to count on the frontier (issue 62).
FRONTIER_RECALL = 0.95


def dense_verdict(libs: dict, default: str, target: bool = True) -> str | None:
    """Whether taskret's HNSW index is on the recall/latency frontier: the lowest p50 at which each library reaches
    recall@10 >= FRONTIER_RECALL, taskret's against the fastest library's, its own included (within WITHIN_FASTEST:
    on it)."""
    reach = {name: min((p["p50_ms"] for p in r["curve"] if p["recall_at_10"] >= FRONTIER_RECALL), default=None)
             for name, r in libs.items() if "curve" in r}
    reach = {name: p50 for name, p50 in reach.items() if p50 is not None}
    if default not in reach:
        return None
    fastest = min(reach, key=reach.get)
    ratio = reach[default] / reach[fastest]
    met = f" (target at 1M <= {WITHIN_FASTEST}x: {'met' if ratio <= WITHIN_FASTEST else 'missed'})" if target else ""
    others = ", ".join(f"{name} {p50:.2f} ms" for name, p50 in reach.items() if name != default)
    return (f"Recall@10 >= {FRONTIER_RECALL} at the lowest p50: taskret's {default} {reach[default]:.2f} ms "
            f"({others or 'no other library reaches it'}); **{ratio:.2f}x** the fastest{met}.")


def engines_table() -> list[str]:
    """`benchmarks/scale/engines.py`: taskret's BM25 and HNSW against the engines users would pick instead."""
    d = load("engines.json")
    if not d:
        return []
    out: list[str] = []
    for n, size in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        if "bm25" in size:
            run = size.get("bm25_run", d)
            out += ["" if out else None,
                    f"BM25 engines at {int(n):,} documents (`{run['command']}`; {describe_machine(run['machine'])}, "
                    f"{load_text(run)}; {d['queries']:,} real queries, {d['queries_with_qrels']:,} of them with "
                    "qrels). Each index built in a child process and searched in another; p50 / p99: one query at a "
                    f"time on one thread; batched: all queries at once on {d['settings']['threads']} threads; "
                    "NDCG@10 (%) on the queries with qrels; overlap: the share of bm25s-numpy's top 10 (k1 1.5, b "
                    "0.75) an engine's top 10 holds (tantivy's in brackets: against bm25s at tantivy's own k1 1.2):",
                    "", *header("engine", "k1 / b", "index s", "disk GiB", "build / search RSS GiB", "p50 / p99 ms",
                                "batched q/s", "NDCG@10", "top-10 overlap", "analyser")]
            for name, r in size["bm25"].items():
                if "error" in r:
                    out.append(f"| {name} | not measured: {r['error'][:160]} | | | | | | | | |")
                    continue
                same = r.get("overlap10_vs_bm25s_same_k1_b")
                analyser = r["analyser"]
                index_s = "(taskret's segmented build)" if r["index_s"] is None else f"{r['index_s']:,.1f}"
                build_rss = "-" if r["peak_rss_gib"] is None else f"{r['peak_rss_gib']:.2f}"
                out.append(f"| {name} | {r['k1']:g} / {r['b']:g} | {index_s} | {r['disk_gib']:.3f} | "
                           f"{build_rss} / {r['search_rss_gib']:.2f} | {r['p50_ms']:.2f} / "
                           f"{r['p99_ms']:.2f} | {r['batched_qps']:,.0f} | {r['ndcg10']:.2f} | "
                           f"{r['overlap10_vs_bm25s']:.3f}{f' ({same:.3f})' if same is not None else ''} | "
                           f"{analyser['tokenizer']}; {analyser['stopwords']}; {analyser['stemmer']} |")
            verdict = engines_verdict(size, d["default"]["bm25"], target=int(n) == 1_000_000)
            if verdict:
                out += ["", verdict]
        if "dense" in size and "error" not in size["dense"]:
            run = size.get("dense_run", d)
            out += ["", f"HNSW libraries at {int(n):,} vectors (`{run['command']}`; {describe_machine(run['machine'])}"
                    f", {load_text(run)}): the same vectors, the same graph (M {d['settings']['hnsw_m']}, "
                    f"ef_construction {d['settings']['ef_construction']}; vectors: "
                    f"{size['dense']['vectors']['source']}); recall@10 against exact search, counted by score as "
                    "ann-benchmarks does (a result scoring at least the exact 10th's counts: the corpus holds "
                    "identical documents) / the index's own single-query p50 ms at each ef_search:", ""]
            libs = {name: r for name, r in size["dense"].items() if name != "vectors"}
            efs = sorted({p["ef"] for r in libs.values() if "curve" in r for p in r["curve"]})
            out += header("library", "build s", "RSS GiB", *(f"ef {ef}" for ef in efs))
            for name, r in libs.items():
                if "error" in r:
                    out.append(f"| {name} | not measured: {r['error'][:160]} |" + " |" * (len(efs) + 1))
                    continue
                curve = {p["ef"]: p for p in r["curve"]}
                out.append(f"| {name} | {r['build_s']:,.1f} | {r['rss_gib']:.2f} | " + " | ".join(
                    f"{curve[ef]['recall_at_10']:.3f} / {curve[ef]['p50_ms']:.2f}" if ef in curve else "-"
                    for ef in efs) + " |")
            verdict = dense_verdict(libs, d["default"]["dense"], target=int(n) == 1_000_000)
            if verdict:
                out += ["", verdict]
    if d.get("serve"):
        run = d.get("serve_run", {})
        out += served_rows(d["serve"], run.get("machine", {}).get("http_stack"))
        if run:
            out += ["", f"(`{run['command']}`; {describe_machine(run['machine'])}, {load_text(run)}.)"]
    return [line for line in out if line is not None]


def ray_shards_table() -> list[str]:
    """`benchmarks/scale/ray_shards.py`: BM25 shards on a local multi-node Ray cluster against the single index."""
    d = load("ray_shards.json")
    if not d:
        return []
    single, ray, same, killed = d["single"], d["ray"], d["vs_single_index"], d["killed_shard"]
    out = [f"{d['documents']:,} documents in {d['shards']} BM25 shards on a {d['nodes']}-node local Ray cluster, one "
           f"actor a shard (`{d['command']}`; {describe_machine(d['machine'])}; {load_text(d)}; every node on the "
           "same 2 cores), against the single index of the same corpus:", "",
           *header("", "build s", "build peak RSS GiB", "disk GiB", "one query p50 / p99 ms")]
    out.append(f"| single index (one process, one thread) | {single['build_s']} | {single['build_peak_rss_gib']} | "
               f"{single['disk_gib']} | {single['p50_ms']} / {single['p99_ms']} |")
    out.append(f"| {d['shards']} shards on Ray (tasks, then actors) | {ray['build_s']} | {ray['peak_rss_gib']} "
               f"(driver + Ray processes, RSS summed) | {ray['disk_gib']} | {ray['p50_ms']} / {ray['p99_ms']} |")
    out += ["", f"Merged top 10 of {same['queries']:,} real queries: the single index's ten ids in its order for "
            f"**{same['same_top10_share']:.1%}**, the same up to the order of tied scores for "
            f"**{same['same_top10_up_to_ties_share']:.1%}**; largest score difference {same['max_score_diff']}."]
    strict = killed["strict"]
    out.append(f"A shard's actor killed (`{killed['shard']}`, SIGKILL): the strict search "
               + (f"raised `ShardFailed` naming it in {strict['seconds']} s" if strict.get("raised") and
                  strict.get("names_shard") else "**did not name it**")
               + f"; with `allow_partial` every query was answered from the others, missing {killed['partial_missing']}"
               + (", none of its documents in a top 10." if killed["partial_has_no_killed_shard_documents"]
                  else ", **with its documents still in a top 10**."))
    serve = d.get("serve")
    if serve:
        # files written before the count was recorded say only that answers came before wrk
        warm_up = serve.get("warm_up_queries")
        first_answers = f"first {warm_up} answers" if warm_up else "the answers before wrk"
        out += ["", f"Served (`taskret serve`, one worker; {serve['tool']}, {serve['connections']} connections, "
                f"{serve['duration_s']:.0f} s per run, real queries in turn, k=10):", "",
                *header("index", "requests/s", "p50 ms", "p99 ms", "errors",
                        f"{first_answers}, one at a time, s")]
        for name, label in (("single", "`--index` (the single index)"), ("ray_shards", "`--shards` (Ray actors)")):
            r = serve[name]
            out.append(f"| {label} | {r['req_per_s']:,.1f} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                       f"{_fmt(r.get('warm_up_s'), 1)} |")
        first = load("ray_shards_no_warm_up.json") or {}
        earlier = first.get("serve")
        if earlier:
            one, many = earlier["single"], earlier["ray_shards"]
            out += ["", f"An earlier run of the same command, before the script answered requests one at a time ahead of "
                    f"wrk and before taskret's BM25 ranked equal scores in corpus order (`ray_shards_no_warm_up.json`; "
                    f"its merged top 10 in the single index's order for "
                    f"{first['vs_single_index']['same_top10_share']:.1%}, the same up to tied scores for "
                    f"{first['vs_single_index']['same_top10_up_to_ties_share']:.1%}): the single index "
                    f"{one['req_per_s']:,.1f} requests/s, p99 "
                    f"{one['p99_ms']} ms; the shards {many['req_per_s']:,.1f} requests/s, p99 {many['p99_ms']:,.0f} "
                    f"ms, wrk's load having begun while the actors still loaded their shards. Between the two runs "
                    f"the single index's rate moved {one['req_per_s'] / serve['single']['req_per_s']:.2f}x, the "
                    f"shards' {many['req_per_s'] / serve['ray_shards']['req_per_s']:.2f}x."]
        after = serve.get("killed_shard") or {}
        out += ["", f"A shard actor of the service killed: the next answer HTTP {after.get('status')}, "
                f"`missing_shards` {after.get('missing_shards')}, {after.get('results')} results."]
    return out


def bm25_ties_lines() -> list[str]:
    """`benchmarks/scale/bm25_ties.py`: NDCG@10 at one size under each order of the documents with equal scores."""
    d = load("bm25_ties.json")
    if not d or "ndcg10_whole_top" not in d:
        return []
    rank10, whole = d["ndcg10"], d["ndcg10_whole_top"]
    engines = ", ".join(f"{name} {value}" for name, value in d.get("engines_ndcg10", {}).items())
    return ["", f"Why the engines' NDCG@10 spread apart at {d['documents']:,} documents (`{d['command']}`; "
            f"{describe_machine(d['machine'])}): the corpus scored exactly (bm25s, k1 1.5, b 0.75), then ranked under "
            f"each order of equal scores. {d['queries_with_a_tie_across_rank_10']} of {d['queries']:,} queries have a "
            f"tie across rank 10 (mean {d['mean_documents_in_that_tie']} documents), "
            f"holding {d['copies_of_judged_documents_in_those_ties']} word-for-word copies of a judged document. "
            f"Every tie in corpus order (originals first): **{rank10['by_row_ascending']}**; bm25s's own order "
            f"(its partial sort's): **{whole['bm25s_retrieve']}**; every tie copies first: "
            f"{whole['every_tie_by_row_descending']}; the tie at rank 10 alone reordered, best to worst: "
            f"{rank10['relevant_first']} to {rank10['relevant_last']}. The engines in the table: {engines}. "
            "taskret's BM25 now ranks equal scores in corpus order."]


def bm25_shards_table(name: str = "bm25_shards.json", what: str | None = None) -> list[str]:
    """`benchmarks/scale/bm25_shards.py`: one corpus as 1, 2 and 4 BM25 shards served as one index, in one process
    (``name``: its result file; ``what``: the sentence's subject, for a file of other shard counts)."""
    d = load(name)
    if not d:
        return []
    rows = [(n, count, r) for n, by_count in d["sizes"].items()
            for count, r in sorted(by_count.items(), key=lambda item: int(item[0]))]
    judged = next((r["judged_queries"] for _, _, r in rows if r.get("judged_queries")), None)
    what = what or "The same corpus as 1, 2 and 4 BM25 shards with the whole corpus's statistics, served as one index"
    out = [f"{what} in one "
           f"process (`{d['command']}`; {describe_machine(d['machine'])}; {load_text(d)}; one thread a search; each "
           "build and search a child process of its own, peak RSS from rusage):", "",
           *header("documents", "shards", "build s", "build peak RSS GiB", "disk GiB", "p50 / p99 ms",
                   "resident after the queries GiB", "same document as the single index, untied ranks",
                   *([f"NDCG@10 ({judged} judged queries)"] if judged else []))]
    for n, count, r in rows:
        same = r.get("vs_single_index", {}).get("same_document_untied")
        agreement = "(the single index)" if count == "1" else f"{_fmt(None if same is None else 100 * same)}%"
        out.append(f"| {int(n):,} | {count} | {r['build_s']} | {r['build_peak_rss_gib']} | {r['disk_gib']} | "
                   f"{r['p50_ms']} / {r['p99_ms']} | {r['resident_after_queries_gib']} | {agreement} |"
                   + (f" {_fmt(r.get('ndcg10'))} |" if judged else ""))
    by_run: dict[str, tuple[dict, list[str]]] = {}  # sizes kept from earlier runs (--keep-earlier), by their run
    for n, run in d.get("earlier_runs", {}).items():
        by_run.setdefault(json.dumps(run, sort_keys=True), (run, []))[1].append(f"{int(n):,}")
    for run, sizes in by_run.values():
        out += ["", f"The {' and '.join(sizes)}-document rows come from an earlier run (`{run['command']}`; "
                f"{describe_machine(run['machine'])}; {load_text(run)})."]
    return out


def dense_shards_table() -> list[str]:
    """`benchmarks/scale/dense_shards.py`: the single dense index's vectors as shards on a local Ray cluster."""
    d = load("dense_shards.json")
    if not d:
        return []
    single, ray, index = d["single"], d["ray"], d["index"]
    return [f"Dense: {d['documents']:,} documents' {index['encoder']} vectors ({index['dtype']}, {index['index_type']}"
            + (f", M {index['hnsw_m']}, efSearch {index['ef_search']}" if index["index_type"] == "hnsw" else "")
            + f") in {d['shards']} shards on a {d['nodes']}-node local Ray cluster, each shard its rows of the single "
            f"index's vectors indexed as it was, by a Ray task (`{d['command']}`; {describe_machine(d['machine'])}; "
            f"{load_text(d)}), recall@10 against exact search over every vector, {d['queries']:,} real queries:", "",
            *header("", "recall@10", "one query p50 / p99 ms", "index build s"),
            f"| single index (one thread) | {single['recall_at_10']} | {single['p50_ms']} / {single['p99_ms']} | "
            "(scale.py's build) |",
            f"| {d['shards']} shards on Ray (tasks, then actors) | {ray['recall_at_10']} | {ray['p50_ms']} / "
            f"{ray['p99_ms']} | {ray['build_s']} |", "",
            f"Recall difference (shards minus single): **{d['recall_delta']:+.4f}**; the merged top 10 is the single "
            f"index's ten for {d['same_top10_set_share']:.1%} of the queries."]
