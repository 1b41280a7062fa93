"""The named document setups against BM25, quality and cost (benchmarks/documents/setups.py: setups.json)."""

from __future__ import annotations

from _common import describe_machine

from .common import built_on, header, load, p_text

SETUPS_COMMAND = "python benchmarks/documents/setups.py --tasks scifact,berri-lite/pubmedqa,berri-lite/medical_question_pairs"


def _scoring_rate(d: dict) -> float:
    """taskret's own EPR scoring rate (pairs/s) in ``scoring_speed.json``."""
    return d["taskret"]["pairs_per_s"]


def setups_table(detail: bool = False) -> list[str]:
    """Which named setup for which job: each setup's quality beside its baseline and its cost on 2 cores, from
    ``setups.json`` (documents), ``index_speed.json`` (indexing) and the EPR results (examples). ``detail``: the
    benchmark page's per-task table instead of the README's summary."""
    d = load("setups.json")
    speed = load("index_speed.json")
    if not d:
        return []
    tasks = d["tasks"]
    if detail:
        out = [f"Each setup ranks each task's judged queries as `taskret tart evaluate --setup NAME` does, the task's "
               f"instruction given (the setups' first stages read the query alone; `docs-rerank`'s reranker reads it); "
               f"BM25 reads the query alone (`{d['command']}`; {describe_machine(d['machine'])}).", "",
               *header("task", "N queries / docs", "setup", "NDCG@10", "Recall@100", "index s", "query ms",
                       "rerank pairs/s")]
        for name, task in tasks.items():
            for label, r in task["results"].items():
                out.append(f"| {name} | {r['n_queries']} / {r['n_docs']} | `{label}` | {r['ndcg@10']:.1f} | "
                           f"{r['recall@100']:.1f} | {r['index_s']:.0f} | {r['query_ms']:.0f} | "
                           f"{(r['rerank_pairs_per_s'] or '-') if name not in d.get('paused', {}) else 'paused'} |")
        return [*out, *("", *(f"{task}: {why}." for task, why in d.get("paused", {}).items()))]

    def quality(label: str) -> str:
        cells = []
        for name, task in tasks.items():
            mine, base = task["results"][label]["ndcg@10"], task["results"][d["baseline"]]["ndcg@10"]
            cells.append(f"{name} {mine:.1f} (BM25 {base:.1f})")
        return "; ".join(cells)

    paused = d.get("paused", {})  # task -> why its timings are no cost measure (the run was stopped a while)
    index_cost = (f"index {speed['n_docs']:,} abstracts {speed['new']['index_s_best'] / 60:.1f} min "
                  f"({speed['new']['dtype']})" if speed else "")
    rows = [*header("setup", "job", "what it is", "NDCG@10 (BM25)", "cost on 2 cores")]
    for name, setup in d["setups"].items():
        timed = [t["results"][name] for task, t in tasks.items() if task not in paused and name in t["results"]]
        cost = index_cost
        if setup["rerank"] and timed:
            per_query = sum(1000 * r["rerank_s"] / r["n_queries"] for r in timed) / len(timed)
            cost += f"; + {per_query / 1000:.1f} s per query to rerank the top {setup['rerank_depth']}"
        elif timed:
            cost += f"; {sum(r['query_ms'] for r in timed) / len(timed):.0f} ms per query"
        rows.append(f"| `{name}` | documents | {setup['summary']} | {quality(name)} | {cost} |")
    icl = load("icl_baselines.json")
    small = load("epr_mtop_small/eval/summary.json")
    trained = load("epr_mtop_small/retriever/epr_config.json")
    scored = load("epr_mtop_small/scoring/scoring_meta.json")
    speed_lm = load("scoring_speed.json")
    if icl and small and trained and scored:
        bm25 = next(r["metrics"]["em"] for r in icl["results"] if r["task"] == "mtop" and r["retriever"] == "bm25")
        rows.append(f"| `examples-bm25` | in-context examples, no training | BM25 over the examples' inputs | MTOP exact "
                    f"match {bm25:.1f} (random 2.3) | 6,208 queries in 1.7 s |")
        rows.append(f"| `examples-epr:DIR` | in-context examples, trained | a trained EPR run (`taskret epr run`) | "
                    f"MTOP exact match {small['metrics']['em']:.1f} (BM25 {bm25:.1f}) | LM scoring of {scored['n_pairs']:,} "
                    f"pairs" + (f" (~{scored['n_pairs'] / _scoring_rate(speed_lm) / 60:.0f} min)" if speed_lm else "")
                    + f" + training {trained['wall_time_s'] / 60:.1f} min |")
    rows.extend(_recipe_row())
    return [*rows, "", f"Documents: NDCG@10 over each task's judged queries, its instruction given (`{SETUPS_COMMAND}`); "
            f"examples: SmolLM2-135M's exact match over 300 MTOP test inputs. {describe_machine(d['machine'])}."]


#: what each rung of the EPR ladder (benchmarks/epr/epr_ladder.py) trains, and the config a user runs for it
LADDER_RECIPES = {
    "a": ("plain EPR, demonstrations encoded as their inputs", "benchmarks/epr/configs/epr_full/mtop.json"),
    "b": ("EPR, demonstrations encoded as input and output", "benchmarks/epr/configs/epr_ladder/b.json"),
    "c": ("EPR with its code's training settings", "benchmarks/epr/configs/epr_ladder/c.json"),
    "d": ("UDR's listwise loss, one round", "benchmarks/epr/configs/epr_ladder/d.json"),
    "e": ("UDR's listwise loss over 2 mining rounds", "benchmarks/epr/configs/epr_ladder/e.json"),
    "f": ("UDR's listwise loss over 3 mining rounds", "benchmarks/epr/configs/epr_full/mtop_udr.json"),
    "g": ("UDR's listwise loss over 2 mining rounds, the second labelled by a reward model (no new LM call)",
          "benchmarks/epr/configs/epr_ladder/g.json"),
    "h": ("UDR's listwise loss over 2 mining rounds, the second LM-scored within 1.1x plain EPR's calls",
          "benchmarks/epr/configs/epr_ladder/h.json"),
}


def _recipe_row() -> list[str]:
    """The recommended recipe's row: the ladder's pick (the cheapest rung within noise of its best under Holm's
    correction, all 859 MTOP inputs on one machine); none without ``epr_ladder.json``."""
    final = load("epr_ladder.json") or {}
    ladder = final.get("mtop", {})
    pick = ladder.get("recommended")
    if pick in LADDER_RECIPES:
        rung, rungs = ladder["rungs"][pick], ladder["rungs"]
        what, config = LADDER_RECIPES[pick]
        best = max(rungs, key=lambda r: rungs[r]["em"])
        against = [f"plain EPR {rungs['a']['em']:.1f}, {p_text(rung['vs_epr']['p'])}"] if pick != "a" else []
        if best != pick:
            holm = f", Holm {p_text(rung['vs_best_p_holm'])}" if "vs_best_p_holm" in rung else ""
            against.append(f"the best rung, {LADDER_RECIPES[best][0]}, {rungs[best]['em']:.1f}, "
                           f"{p_text(rung['vs_best_p'])}{holm}")
        # what the next lever adds to the pick, and at what cost: the rung paired with it as the one it builds on
        following = next((r for r, row in rungs.items() if (row.get("vs_prev") or {}).get("rung") == pick), None)
        if following in LADDER_RECIPES:
            extra = rungs[following]["lm_calls"] / rung["lm_calls"] - 1
            against.append(f"{LADDER_RECIPES[following][0]}: {rungs[following]['em'] - rung['em']:+.1f} EM, "
                           f"{p_text(rungs[following]['vs_prev']['p'])}, for {100 * extra:.0f}% more LM calls")
        return [f"| `examples-epr:DIR`, the recommended recipe | in-context examples, trained | the same, {what} "
                f"(`{config}`) | MTOP exact match {rung['em']:.1f} on all {rung['n']} inputs ({'; '.join(against)}) | "
                f"{rung['lm_calls']:,} LM-scored pairs, {rung['cpu_hours_to_index']:.1f} h on 2 cores "
                + (f"(measured end to end{built_on(rung)}) |" if rung.get("end_to_end")
                   else f"({final['machine']['cpu']}; LM scoring modelled, not measured) |")]
    return []
