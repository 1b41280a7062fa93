"""Search speed on one machine at millions of documents (issue 78): the BM25 score array, BM25 on PISA (its
first depth, its parts) and the IVF-PQ index's quantizer, each a paired benchmark under ``benchmarks/scale/``."""

from __future__ import annotations

from _common import describe_machine

from .common import header, load, load_text


def bm25_score_array_lines() -> list[str]:
    """`benchmarks/scale/bm25_score_array.py`: a query's score array kept in glibc's heap against mapped anew."""
    d = load("bm25_score_array.json")
    if not d:
        return []
    kept, default, paired = d["settings"]["kept"], d["settings"]["default"], d["paired"]
    low, high = paired["ratio_ci95"]
    return [f"A query's score array kept from query to query at {d['documents']:,} documents (`{d['command']}`; "
            f"{describe_machine(d['machine'])}; {load_text(d)}; bm25_shards.py's search, each setting twice in "
            f"{', '.join(d['order'])} order): kept in glibc's heap (taskret's default) **{kept['p50_ms']:.1f} ms** p50 "
            f"/ {kept['p99_ms']:.1f} p99 against **{default['p50_ms']:.1f}** / {default['p99_ms']:.1f} mapped anew "
            f"for each query (`TASKRET_GLIBC_MALLOC=1`); per query kept / default {paired['ratio_kept_over_default']:.3f}x "
            f"(95% interval {low:.3f}-{high:.3f}), median difference {paired['median_difference_ms']:.1f} ms over "
            f"{paired['queries']:,} queries (Wilcoxon p {paired['wilcoxon_p']:.0e}); resident after the queries "
            f"{kept['runs'][0]['resident_after_queries_gib']:.2f} against "
            f"{default['runs'][0]['resident_after_queries_gib']:.2f} GiB."]


def bm25_pisa_table() -> list[str]:
    """`benchmarks/scale/bm25_pisa.py`: one BM25 index searched by bm25s and by PISA over bm25s's scores, paired."""
    d = load("bm25_pisa.json")
    if not d:
        return []
    out = [f"BM25's top 10 found by bm25s (numba from 100K documents) or by PISA's MaxScore over bm25s's scores (`bm25?backend=pisa`), "
           f"one index each size (`{d['command']}`; {describe_machine(d['machine'])}; {load_text(d)}; one thread, "
           f"each query alone; each setting twice in {', '.join(d['order'])} order, a child process each run):", "",
           *header("documents", "bm25s p50 / p99 ms", "pisa p50 / p99 ms", "pisa / bm25s per query (95% interval)",
                   "Wilcoxon p", "same top 10 (ids and scores)", "PISA index made in s", "its peak RSS GiB",
                   "its disk GiB (bm25s's)", "resident after the queries GiB, bm25s / pisa")]
    for n, r in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        bm25s, pisa, paired = r["settings"]["bm25s"], r["settings"]["pisa"], r["paired"]
        low, high = paired["ratio_ci95"]
        out.append("| " + " | ".join((f"{int(n):,}", f"{bm25s['p50_ms']:.2f} / {bm25s['p99_ms']:.1f}",
                       f"**{pisa['p50_ms']:.2f}** / {pisa['p99_ms']:.1f}",
                       f"{paired['ratio_pisa_over_bm25s']:.3f}x ({low:.3f}-{high:.3f})", f"{paired['wilcoxon_p']:.0e}",
                       f"{r['same_top10_share']:.1%} of {r['queries']:,}", f"{r['derive']['derive_s']:.1f}",
                       f"{r['derive']['peak_rss_gib']:.2f}", f"{r['derive']['disk_gib']:.2f} ({r['bm25s_disk_gib']:.2f})",
                       f"{bm25s['runs'][0]['resident_after_queries_gib']:.2f} / "
                       f"{pisa['runs'][0]['resident_after_queries_gib']:.2f}")) + " |")
    return out


def ivf_quantizer_table() -> list[str]:
    """`benchmarks/scale/ivf_quantizer.py`: the IVF-PQ index's lists found by a scan of the centroids or an HNSW graph."""
    d = load("ivf_quantizer.json")
    if not d:
        return []
    out = [f"The lists a compressed dense query visits found by a scan of every centroid (flat) or an HNSW graph over "
           f"them, on compressed_vectors.py's indexes at their default settings (`{d['command']}`; "
           f"{describe_machine(d['machine'])}; {load_text(d)}; one thread, each query alone; each quantizer twice in "
           f"{', '.join(d['order'])} order, a child process each run):", "",
           *header("vectors", "lists / nprobe / re-ranked", "flat p50 / p99 ms", "hnsw p50 / p99 ms",
                   "hnsw / flat per query (95% interval)", "Wilcoxon p", "recall@10 flat / hnsw",
                   "recall difference (95% interval)", "graph made in s", "resident after the queries GiB, flat / hnsw")]
    for n, r in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        flat, hnsw, paired, recall = r["quantizers"]["flat"], r["quantizers"]["hnsw"], r["paired"], r["recall_difference"]
        settings = r["settings"]
        out.append("| " + " | ".join((
            f"{int(n):,}", f"{settings['nlist']:,} / {settings['nprobe']} / {settings['rerank']}",
            f"{flat['p50_ms']:.2f} / {flat['p99_ms']:.1f}", f"**{hnsw['p50_ms']:.2f}** / {hnsw['p99_ms']:.1f}",
            f"{paired['ratio_hnsw_over_flat']:.3f}x ({paired['ratio_ci95'][0]:.3f}-{paired['ratio_ci95'][1]:.3f})",
            f"{paired['wilcoxon_p']:.0e}", f"{flat['recall_at_10']:.4f} / **{hnsw['recall_at_10']:.4f}**",
            f"{recall['mean']:+.4f} ({recall['ci95'][0]:+.4f} to {recall['ci95'][1]:+.4f})",
            f"{hnsw['runs'][0]['graph_s']:.1f}",
            f"{flat['runs'][0]['resident_after_queries_gib']:.2f} / {hnsw['runs'][0]['resident_after_queries_gib']:.2f}"))
            + " |")
    return out


def bm25_pisa_depth_table() -> list[str]:
    """`benchmarks/scale/bm25_pisa_depth.py`: the first depth of a search on PISA, chosen on half the queries."""
    d = load("bm25_pisa_depth.json")
    if not d:
        return []
    current, chosen, k = d["current_margin"], d["chosen_margin"], d["k"]
    out = [f"How deep a BM25 search on PISA looks first (k + margin; deeper searches x4 start again), one index of "
           f"{d['documents']:,} documents (`{d['command']}`; {describe_machine(d['machine'])}; {load_text(d)}; one thread, each "
           f"query alone; each margin twice, in order and reversed); chosen on {d['queries'] // 2:,} queries (each "
           f"margin paired with {current}, Holm-corrected), held out on the other {d['queries'] - d['queries'] // 2:,}:",
           "", *header("margin (first depth)", "queries searched again (of all)", "held-out p50 / p99 ms",
                       "held-out mean ms", f"tuning: per query / margin {current} (95% interval)", "Holm p",
                       "same top 10 as the current")]
    for m, r in sorted(d["settings"].items(), key=lambda item: int(item[0])):
        row = d["tuning"].get(m)
        paired = "(the current)" if row is None else \
            f"{row[f'ratio_margin{m}_over_margin{current}']:.3f}x ({row['ratio_ci95'][0]:.3f}-{row['ratio_ci95'][1]:.3f})"
        name = f"**{m}**" if int(m) == chosen else m
        out.append("| " + " | ".join((f"{name} ({int(m) + k})", f"{r['queries_searched_again']:,}",
                                       f"{r['held_out']['p50_ms']:.2f} / {r['held_out']['p99_ms']:.1f}",
                                       f"{r['mean_ms_held_out']:.2f}", paired,
                                       "" if row is None else f"{row['wilcoxon_p_holm']:.0e}",
                                       f"{r['same_top10_as_current']:.1%}")) + " |")
    held = d["held_out"]
    if held:
        out += ["", _held_out_line(held, f"margin {chosen} against {current}",
                                   f"ratio_margin{chosen}_over_margin{current}")]
    return out


def _held_out_line(held: dict, what: str, ratio: str) -> str:
    low, high = held["ratio_ci95"]
    return (f"Held out, {what}: {held[ratio]:.3f}x a query ({low:.3f}-{high:.3f}), median difference "
            f"{held['median_difference_ms']:+.2f} ms, Wilcoxon p {held['wilcoxon_p']:.0e}, {held['queries']:,} queries.")


def _setting_text(name: str, d: dict) -> str:
    if name == "0":
        return "one part (as before: k + 30)"
    postings, _, margin = name.partition(":")
    return f"{d['builds'][postings]['parts']} parts of 2^{int(postings).bit_length() - 1} postings, k + {margin} a part"


def bm25_pisa_parts_table() -> list[str]:
    """`benchmarks/scale/bm25_pisa_parts.py`: a PISA index in document-range parts: the build's peak, and its search
    paired with one part's, chosen on half the queries within the peak limit."""
    d = load("bm25_pisa_parts.json")
    if not d:
        return []
    out = [f"BM25 on PISA in document-range parts, one index of {d['documents']:,} documents (`{d['command']}`; "
           f"{describe_machine(d['machine'])}; {load_text(d)}; one thread, each query alone; each setting twice, in "
           f"order and reversed). The PISA index made from the bm25s arrays in a child process (the index loaded, as a "
           f"save has it); chosen on {d['queries'] // 2:,} queries within {d['peak_limit_gib']} GiB, held out on the "
           f"other {d['queries'] - d['queries'] // 2:,}:", "",
           *header("setting", "made in s", "peak GiB", "disk GiB", "held-out p50 / p99 ms", "mean ms (all)",
                   "queries searched again", "same top 10 as one part")]
    for name, r in d["settings"].items():
        postings = name.partition(":")[0]
        build = d["builds"][postings]
        label = f"**{_setting_text(name, d)}**" if name == d["chosen"] else _setting_text(name, d)
        out.append("| " + " | ".join((label, f"{build['derive_s']}", f"{build['peak_rss_gib']:.2f}",
                                       f"{build['disk_gib']:.2f}",
                                       f"{r['held_out']['p50_ms']:.2f} / {r['held_out']['p99_ms']:.1f}",
                                       f"{r['mean_ms']:.2f}", f"{r['queries_searched_again']:,}",
                                       f"{r['same_top10_as_one_part']:.1%}")) + " |")
    margin = d["choice"].get("margin")
    if margin:
        low, high = margin["ratio_ci95"]
        out += ["", f"Tuning half, k + 30 a part against k + 0 at the chosen size: {margin['ratio_deeper_over_first']:.3f}x"
                    f" a query ({low:.3f}-{high:.3f}), Wilcoxon p {margin['wilcoxon_p']:.0e}."]
    if d["held_out"]:
        out += ["", _held_out_line(d["held_out"], f"{_setting_text(d['chosen'], d)} against one part",
                                   "ratio_chosen_over_one_part")]
    return out


def bm25_pisa_rescore_line() -> list[str]:
    """`benchmarks/scale/bm25_pisa_rescore.py`: every PISA candidate re-scored against those within reach."""
    d = load("bm25_pisa_rescore.json")
    if not d:
        return []
    paired, every, reach = d["paired"], d["settings"]["all"], d["settings"]["within_reach"]
    low, high = paired["ratio_ci95"]
    # the lever was dropped and its script removed: the command is named as it ran, from the commit that had it
    command = d["command"].replace("benchmarks/scale/", "")
    return [f"Re-scoring only the candidates within reach of the top k, against all of them (dropped), "
            f"{d['documents']:,} documents in {d['parts']} part(s) (`{command}`, its script as of commit 83d3788; "
            f"{describe_machine(d['machine'])}; {load_text(d)}; "
            f"one thread, each query alone, ABBA): p50 {reach['p50_ms']:.2f} against {every['p50_ms']:.2f} ms, p99 "
            f"{reach['p99_ms']:.1f} against {every['p99_ms']:.1f}; {paired['ratio_within_reach_over_all']:.3f}x a "
            f"query ({low:.3f}-{high:.3f}), median difference {paired['median_difference_ms']:+.2f} ms, Wilcoxon p "
            f"{paired['wilcoxon_p']:.0e}, {paired['queries']:,} queries; the same top 10 for "
            f"{d['same_top10_share']:.1%} of them."]
