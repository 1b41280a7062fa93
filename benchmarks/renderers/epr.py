"""In-context examples with EPR (benchmarks/epr/): the unsupervised baselines, EPR by training scale, the paper's
Tables 2 and 4 and its analysis (icl_baselines.json, epr_mtop_*/, epr_table_*.json, epr_lm_transfer_*.json,
epr_analysis/)."""

from __future__ import annotations

from taskret.icl.evaluation import mcnemar

from . import common
from .common import correct, header, load


def icl_table() -> list[str]:
    data = load("icl_baselines.json")
    if not data:
        return []
    epr = load("epr_mtop_small/eval/summary.json")
    rows = {(r["task"], r["retriever"]): r for r in data["results"]}
    if epr:
        rows[("mtop", "epr")] = epr
    methods = ["random", "sbert", "bm25", "epr"]
    out = [f"In-context learning with SmolLM2-135M (`{data['command']}`; EPR: "
           "`taskret epr run benchmarks/epr/configs/epr_mtop_small.json`). Same seeded sample of test examples for "
           "every method; context window 640 tokens (512 for the prompt; the mean number of demonstrations per "
           "run is in the second table).", "",
           *header("task", "N", *methods)]
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
    pairs = []
    for task, a, b in (("mtop", "sbert", "bm25"), ("break", "sbert", "bm25"), ("mtop", "epr", "bm25")):
        base = common.RESULTS / ("epr_mtop_small/eval" if a == "epr" else f"icl_baselines/{task}/{a}")
        ca, cb = correct(base / "predictions.jsonl"), correct(common.RESULTS / f"icl_baselines/{task}/{b}/predictions.jsonl")
        if ca and cb and ca.keys() == cb.keys():
            only_a, only_b, p = mcnemar(ca, cb)
            pairs.append(f"{task} {a} vs {b}: {only_a} examples only {a} solves, {only_b} only {b}, McNemar p{'<0.001' if p < 0.001 else f'={p:.2f}'}")
    if pairs:
        out += ["", "Paired on the same examples: " + "; ".join(pairs) + "."]
    out += ["", "Wall times below were taken while other benchmarks shared the 2 cores (1 thread each), so they "
            "vary between runs; `benchmarks/speed/lm_throughput.py` is the clean speed measurement.", "",
            *header("run", "wall time (s)", "examples/s", "prompt tokens/s", "mean demos")]
    for (task, m), r in rows.items():
        out.append(f"| {task}/{m} | {r['wall_time_s']:.0f} | {r['examples_per_s']} | {r['prompt_tokens_per_s']} | "
                   f"{r['mean_demos']:.1f} |")
    return out


def epr_scale_table() -> list[str]:
    """EPR on MTOP at each training scale that `taskret epr run` has finished, paired with BM25."""
    bm25 = correct(common.RESULTS / "icl_baselines/mtop/bm25/predictions.jsonl")
    rows = []
    for name in ("epr_mtop_small", "epr_mtop_full"):
        summary, config = load(f"{name}/eval/summary.json"), load(f"{name}/pipeline_config.json")
        trained = load(f"{name}/retriever/epr_config.json")
        if not (summary and config and trained):
            continue
        epr = correct(common.RESULTS / f"{name}/eval/predictions.jsonl")
        versus = "–"
        if bm25 and epr and epr.keys() == bm25.keys():
            only_a, only_b, p = mcnemar(epr, bm25)
            versus = f"{only_a} / {only_b}, p{'<0.001' if p < 0.001 else f'={p:.2f}'}"
        rows.append(f"| `benchmarks/epr/configs/{name}.json` | {trained['n_labelled']} x {config['n_candidates']} "
                    f"({trained['n_labelled'] * config['n_candidates']:,} pairs) | {config['k']} | "
                    f"{trained['epochs']} | {trained['batch_size']} | {trained['wall_time_s'] / 60:.1f} | "
                    f"{summary['n']} | {summary['metrics']['em']:.1f} | {versus} |")
    if not rows:
        return []
    return ["EPR on MTOP by training scale (`taskret epr run CONFIG`; SmolLM2-135M scores and infers; the same "
            "seeded test examples as the table above; only-EPR / only-BM25 solved examples with McNemar's p):", "",
            *header("config", "labelled x L (pairs scored)", "k", "epochs", "batch", "training (min)", "N", "EM",
                    "vs BM25"), *rows]


def epr_table() -> list[str]:
    """The paper's Table 2, one row per task that benchmarks/epr/epr_table.py has run."""
    runs = [load(p.name) for p in sorted(common.RESULTS.glob("epr_table_*.json"))]
    runs = [d for d in runs if d]
    if not runs:
        return []
    methods = ["random", "bm25", "sbert", "dr-bm25", "cbr", "epr", "bm25-oracle", "lm-oracle"]
    out = ["EPR and the paper's other methods on the same test examples (`benchmarks/epr/epr_table.py`; the "
           "scoring and inference LM is the same). EM (Break: normalised match in brackets):", "",
           *header("task", "N", "scale", *methods)]
    for d in runs:
        sc = d["scale"]
        cells = []
        for m in methods:
            r = d["results"].get(m)
            if r is None:
                cells.append("–")
                continue
            cell = f"{r['metrics']['em']:.1f}"
            if "normalized_match" in r["metrics"]:
                cell += f" ({r['metrics']['normalized_match']:.1f})"
            cells.append(cell)
        scale = (f"{sc['examples_labelled']}/{sc['train_pool']} labelled x L={sc['n_candidates']}, k={sc['k']}, "
                 f"{sc['epochs']} epochs, batch {sc['effective_batch']}")
        if "lm-oracle" in d["results"] and "lm_oracle_candidates" in sc:
            scale += f"; LM-Oracle re-ranks BM25-Oracle's top {sc['lm_oracle_candidates']}"
        out.append(f"| {d['task']} ({d['lm']}) | {d['n']} | {scale} | " + " | ".join(cells) + " |")
    out += [""] + [f"- {d['task']}: `{d['command']}`" for d in runs]
    return out


def lm_transfer_table() -> list[str]:
    """The paper's Table 4: EPR trained on one LM's scores, used to prompt another."""
    out = []
    for path in sorted(common.RESULTS.glob("epr_lm_transfer_*.json")):
        d = load(path.name)
        if not d:
            continue
        lms, res = d["lms"], d["results"]
        out += [f"Score with one LM, infer with another on {d['task']} (`{d['command']}`, N={d['n']}). EM; rows: "
                "the LM whose scores trained EPR, columns: the inference LM:", "",
                *header("retriever", *lms),
                "| BM25 | " + " | ".join(f"{res['bm25'][lm]['em']:.1f}" for lm in lms) + " |"]
        def epr_cell(c: dict) -> str:
            if "vs_bm25" not in c:
                return f"{c['em']:.1f}"
            v = c["vs_bm25"]
            p = "p<0.001" if v["mcnemar_p"] < 0.001 else f"p={v['mcnemar_p']:.2f}"
            return f"{c['em']:.1f} ({v['only_epr']} / {v['only_bm25']}, {p})"

        for scorer, row in res["epr"].items():
            out.append(f"| EPR scored by {scorer} | " + " | ".join(
                epr_cell(row[lm]) if lm in row else "–" for lm in lms) + " |")
        if any("vs_bm25" in c for row in res["epr"].values() for c in row.values() if isinstance(c, dict)):
            out += ["", "In brackets: examples only EPR solves / only BM25 solves with the same inference LM, "
                    "and McNemar's p."]
        for pair, a in d.get("label_agreement", {}).items():
            kept = [f"{v:.0%} of the {k.split('_')[0].replace('top', 'top-').replace('bottom', 'bottom-')} {k.split('_')[1]}"
                    for k, v in a.items() if k.endswith("_shared")]
            out += ["", f"Label agreement, {pair}, on the same {a['n_examples']} training examples' candidates: "
                    f"Spearman {a['spearman_mean']} between their log-probabilities; " + ", ".join(kept) + " shared."]
        out.append("")
    return out


def analysis_table() -> list[str]:
    d = load("epr_analysis/analysis.json")
    if not d:
        return []
    ks = list(next(iter(d["recall_at_k"].values())).keys())
    out = [f"EPR analysis on MTOP test (`{d['command']}`, N={d['n']}).", "",
           "Recall@K of the LM-labelled positives (`benchmarks/results/epr_analysis/recall_at_k.png`):", "",
           *header("retriever", *(f"R@{k}" for k in ks))]
    for name, values in d["recall_at_k"].items():
        out.append(f"| {name} | " + " | ".join(f"{values[k]:.1f}" for k in ks) + " |")
    out += ["", *header("method", "one-shot EM", "full-context EM")]
    names = sorted({k.split("/")[0] for k in d["em"]}, key=lambda n: list(d["em"]).index(next(
        k for k in d["em"] if k.startswith(n + "/"))))
    for name in names:
        out.append(f"| {name} | {d['em'].get(name + '/one_shot', '–')} | {d['em'].get(name + '/full', '–')} |")
    return out
