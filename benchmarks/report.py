"""Render the benchmark results in benchmarks/results/ as the Markdown tables the README shows.

    python benchmarks/report.py > benchmarks/results/REPORT.md
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def icl_table() -> list[str]:
    data = _load("icl_baselines.json")
    if not data:
        return []
    epr = _load("epr_mtop_small/eval/summary.json")
    rows = {(r["task"], r["retriever"]): r for r in data["results"]}
    if epr:
        rows[("mtop", "epr")] = epr
    methods = ["random", "sbert", "bm25", "epr"]
    out = [f"In-context learning with SmolLM2-135M (`{data['command']}`; EPR: "
           "`taskret epr run benchmarks/configs/epr_mtop_small.json`). Same seeded sample of test examples for "
           "every method; context window 640 tokens (512 for the prompt, ~14 MTOP / ~6 Break demonstrations).", "",
           "| task | N | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for task in ("mtop", "break"):
        cells = []
        n = None
        for m in methods:
            r = rows.get((task, m))
            if r is None:
                cells.append("–")
                continue
            n = r["n"]
            metric = f"{r['metrics']['em']:.1f}"
            if "normalized_match" in r["metrics"]:
                metric += f" ({r['metrics']['normalized_match']:.1f})"
            cells.append(metric)
        out.append(f"| {task} EM{' (normalised match)' if task == 'break' else ''} | {n} | " + " | ".join(cells) + " |")
    out += ["", "| run | wall time (s) | examples/s | prompt tokens/s | mean demos |", "|---|---|---|---|---|"]
    for (task, m), r in rows.items():
        out.append(f"| {task}/{m} | {r['wall_time_s']:.0f} | {r['examples_per_s']} | {r['prompt_tokens_per_s']} | "
                   f"{r['mean_demos']:.1f} |")
    return out


def bm25_table() -> list[str]:
    d = _load("bm25_speed.json")
    if not d:
        return []
    return [f"Candidate search (`{d['command']}`): top-{d['k']} for each of the {d['n_queries']} Break training "
            f"examples against the Break training set, by output, one thread.", "",
            "| library | seconds | queries/s |", "|---|---|---|",
            f"| bm25s | {d['bm25s_s']} | {d['bm25s_queries_per_s']} |",
            f"| rank_bm25 | {d['rank_bm25_s']} | {d['rank_bm25_queries_per_s']} |",
            "", f"bm25s is **{d['speedup']}x** faster; top-50 overlap between the two {d['top50_overlap']} "
            "(they differ in IDF flooring)."]


def throughput_table() -> list[str]:
    d = _load("lm_throughput.json")
    if not d:
        return []
    out = [f"LM throughput (`{d['command']}`; {d['machine']}).", "",
           "| max batch tokens | generation examples/s | prompt tokens/s | generated tokens/s | scoring pairs/s | "
           "scoring tokens/s |", "|---|---|---|---|---|---|"]
    for r in d["results"]:
        g, s = r["generation"], r["scoring"]
        out.append(f"| {r['max_batch_tokens']} | {g['examples_per_s']} | {g['prompt_tokens_per_s']} | "
                   f"{g['generated_tokens_per_s']} | {s['pairs_per_s']} | {s['tokens_per_s']} |")
    return out


def analysis_table() -> list[str]:
    d = _load("epr_analysis/analysis.json")
    if not d:
        return []
    ks = list(next(iter(d["recall_at_k"].values())).keys())
    out = [f"EPR analysis on MTOP test (`{d['command']}`, N={d['n']}).", "",
           "Recall@K of the LM-labelled positives (`benchmarks/results/epr_analysis/recall_at_k.png`):", "",
           "| retriever | " + " | ".join(f"R@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, values in d["recall_at_k"].items():
        out.append(f"| {name} | " + " | ".join(f"{values[k]:.1f}" for k in ks) + " |")
    out += ["", "| method | one-shot EM | full-context EM |", "|---|---|---|"]
    names = sorted({k.split("/")[0] for k in d["em"]}, key=lambda n: list(d["em"]).index(next(
        k for k in d["em"] if k.startswith(n + "/"))))
    for name in names:
        out.append(f"| {name} | {d['em'].get(name + '/one_shot', '–')} | {d['em'].get(name + '/full', '–')} |")
    return out


def tart_table() -> list[str]:
    d = _load("tart_zero_shot.json")
    if not d:
        return []
    sf = d["scifact_test"]
    out = [f"TART zero-shot retrieval, no training yet (`{d['command']}`).", "",
           f"SciFact test, {sf['n_queries']} claims, {sf['n_docs']} abstracts, NDCG@10 (BEIR paper BM25: "
           f"{sf['reference_bm25_ndcg@10_beir']}):", "", "| retriever | no instruction | with instruction |", "|---|---|---|"]
    for name, r in sf["results"].items():
        out.append(f"| {name} | {r['no_instruction']['ndcg@10']} | {r['instruction']['ndcg@10']} |")
    ct = d["cross_task"]
    tasks = list(ct["tasks"])
    out += ["", f"Closed (own corpus) -> pooled (all {ct['pooled_n_docs']} documents) NDCG@10, {ct['limit']} queries "
            "per task:", "", "| retriever | instruction | " + " | ".join(tasks) + " | mean gap |",
            "|---|---|" + "---|" * (len(tasks) + 1)]
    for name, by_mode in ct["ndcg@10"].items():
        for mode, r in by_mode.items():
            cells = [f"{r['closed'][t]:.1f} -> {r['pooled'][t]:.1f}" for t in tasks]
            out.append(f"| {name} | {mode.replace('_', ' ')} | " + " | ".join(cells) + f" | {r['gap']['mean']:+.2f} |")
    return out


def main() -> None:
    for section in (icl_table(), bm25_table(), throughput_table(), analysis_table(), tart_table()):
        if section:
            print("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
