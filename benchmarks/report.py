"""Render the benchmark results in benchmarks/results/ as Markdown: the README's results table and the
documentation's benchmark page.

    python benchmarks/report.py                             # print every table
    python benchmarks/report.py --readme                    # rewrite README.md's results block
    python benchmarks/report.py --docs docs/benchmarks.md   # rewrite the docs page's blocks, one per question

The README has one block (``<!-- BENCHMARKS:START (...) -->`` ... ``<!-- BENCHMARKS:END -->``): at most six rows,
each a number beside its baseline, and the commands that reproduce them (``make bench`` runs each). The docs page has
one named block per question (``<!-- BENCHMARKS:START NAME (...) -->``, NAME from ``SECTIONS``) holding that
question's tables; the question, its answer and the discussion around the blocks are written by hand. Every number
comes from a JSON file a benchmark script wrote, and every table names the command that wrote it; a benchmark that
has not been run yet is left out rather than shown with made-up values.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from _common import describe_machine

from taskret.icl.evaluation import mcnemar, read_correct

RESULTS = Path(__file__).parent / "results"
README = Path(__file__).parent.parent / "README.md"
START, END = "<!-- BENCHMARKS:START", "<!-- BENCHMARKS:END -->"
# the earlier runs (EPR, the first TART tables) had AVX2 only; the TART runs from the 256-token students on had
# AVX512-BF16 (float32 encoders either way): the CPU times of the two are not comparable step for step
MACHINE = ("x86_64 AMD EPYC, 2 cores (AVX2 for the earlier runs, AVX512-BF16 for the TART runs from the 256-token "
           "students on), 24 GiB, no GPU, Python 3.11, torch 2.13 CPU")


def _load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _correct(path: Path) -> dict[str, bool] | None:
    return read_correct(path) if path.exists() else None


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
           "every method; context window 640 tokens (512 for the prompt; the mean number of demonstrations per "
           "run is in the second table).", "",
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
    pairs = []
    for task, a, b in (("mtop", "sbert", "bm25"), ("break", "sbert", "bm25"), ("mtop", "epr", "bm25")):
        base = RESULTS / ("epr_mtop_small/eval" if a == "epr" else f"icl_baselines/{task}/{a}")
        ca, cb = _correct(base / "predictions.jsonl"), _correct(RESULTS / f"icl_baselines/{task}/{b}/predictions.jsonl")
        if ca and cb and ca.keys() == cb.keys():
            only_a, only_b, p = mcnemar(ca, cb)
            pairs.append(f"{task} {a} vs {b}: {only_a} examples only {a} solves, {only_b} only {b}, McNemar p{'<0.001' if p < 0.001 else f'={p:.2f}'}")
    if pairs:
        out += ["", "Paired on the same examples: " + "; ".join(pairs) + "."]
    out += ["", "Wall times below were taken while other benchmarks shared the 2 cores (1 thread each), so they "
            "vary between runs; `benchmarks/lm_throughput.py` is the clean speed measurement.", "",
            "| run | wall time (s) | examples/s | prompt tokens/s | mean demos |", "|---|---|---|---|---|"]
    for (task, m), r in rows.items():
        out.append(f"| {task}/{m} | {r['wall_time_s']:.0f} | {r['examples_per_s']} | {r['prompt_tokens_per_s']} | "
                   f"{r['mean_demos']:.1f} |")
    return out


def epr_scale_table() -> list[str]:
    """EPR on MTOP at each training scale that `taskret epr run` has finished, paired with BM25."""
    bm25 = _correct(RESULTS / "icl_baselines/mtop/bm25/predictions.jsonl")
    rows = []
    for name in ("epr_mtop_small", "epr_mtop_full"):
        summary, config = _load(f"{name}/eval/summary.json"), _load(f"{name}/pipeline_config.json")
        trained = _load(f"{name}/retriever/epr_config.json")
        if not (summary and config and trained):
            continue
        epr = _correct(RESULTS / f"{name}/eval/predictions.jsonl")
        versus = "–"
        if bm25 and epr and epr.keys() == bm25.keys():
            only_a, only_b, p = mcnemar(epr, bm25)
            versus = f"{only_a} / {only_b}, p{'<0.001' if p < 0.001 else f'={p:.2f}'}"
        rows.append(f"| `benchmarks/configs/{name}.json` | {trained['n_labelled']} x {config['n_candidates']} "
                    f"({trained['n_labelled'] * config['n_candidates']:,} pairs) | {config['k']} | "
                    f"{trained['epochs']} | {trained['batch_size']} | {trained['wall_time_s'] / 60:.1f} | "
                    f"{summary['n']} | {summary['metrics']['em']:.1f} | {versus} |")
    if not rows:
        return []
    return ["EPR on MTOP by training scale (`taskret epr run CONFIG`; SmolLM2-135M scores and infers; the same "
            "seeded test examples as the table above; only-EPR / only-BM25 solved examples with McNemar's p):", "",
            "| config | labelled x L (pairs scored) | k | epochs | batch | training (min) | N | EM | vs BM25 |",
            "|---|---|---|---|---|---|---|---|---|", *rows]


def epr_table() -> list[str]:
    """The paper's Table 2, one row per task that benchmarks/epr_table.py has run."""
    runs = [_load(p.name) for p in sorted(RESULTS.glob("epr_table_*.json"))]
    runs = [d for d in runs if d]
    if not runs:
        return []
    methods = ["random", "bm25", "sbert", "dr-bm25", "cbr", "epr", "bm25-oracle", "lm-oracle"]
    out = ["EPR and the paper's other methods on the same test examples (`benchmarks/epr_table.py`; the "
           "scoring and inference LM is the same). EM (Break: normalised match in brackets):", "",
           "| task | N | scale | " + " | ".join(methods) + " |", "|---|---|---|" + "---|" * len(methods)]
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
    for path in sorted(RESULTS.glob("epr_lm_transfer_*.json")):
        d = _load(path.name)
        if not d:
            continue
        lms, res = d["lms"], d["results"]
        out += [f"Score with one LM, infer with another on {d['task']} (`{d['command']}`, N={d['n']}). EM; rows: "
                "the LM whose scores trained EPR, columns: the inference LM:", "",
                "| retriever | " + " | ".join(lms) + " |", "|---|" + "---|" * len(lms),
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


def index_speed_table() -> list[str]:
    """Indexing a corpus with the docs-fast first stage: float32 against the dtype ``auto`` picks, paired in one run."""
    d = _load("index_speed.json")
    if not d:
        return []
    out = [f"Indexing SciFact's {d['n_docs']:,} abstracts with `{d['retriever']}` (`{d['command']}`; "
           f"{describe_machine(d['machine'])}): each way run in alternating rounds in one process.", "",
           "| round | encoder dtype | index s | CPU s | docs/s | NDCG@10 | load average after |", "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        out.append(f"| {r['round']} | {r['dtype']} | {r['index_s']:.0f} | {r.get('cpu_s', 0):.0f} | {r['docs_per_s']} | "
                   f"{r['metrics']['ndcg@10']:.2f} | {r.get('load_average_after', ['-'])[0]} |")
    old, new = d["float32"], d["new"]
    out += ["", f"{new['dtype']} against float32: **{d['speedup']}x** best against best wall time "
            f"({old['index_s_best']:.0f} s -> {new['index_s_best']:.0f} s), {old['cpu_s_best'] / new['cpu_s_best']:.2f}x "
            f"less CPU time; NDCG@10 {old['metrics']['ndcg@10']:.2f} -> {new['metrics']['ndcg@10']:.2f} "
            f"(target: >= {d['target']['speedup_at_least']}x, |change| <= {d['target']['abs_ndcg_delta_at_most']}: "
            f"{'met' if d['target']['met'] else 'not met'})."]
    return out


def throughput_table() -> list[str]:
    d = _load("lm_throughput.json")
    if not d:
        return []
    out = [f"LM throughput (`{d['command']}`; {describe_machine(d['machine'])}).", "",
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


def tart_table(name: str = "tart_zero_shot.json",
               title: str = "TART zero-shot retrieval, no training yet") -> list[str]:
    d = _load(name)
    if not d:
        return []
    sf = d["scifact_test"]
    out = [f"{title} (`{d['command']}`).", "",
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


def scoring_speed_table(name: str = "scoring_speed.json") -> list[str]:
    d = _load(name)
    if not d:
        return []
    t, b = d["taskret"], d["batch_size_1_loop"]
    shard = d.get("shard")
    what = (f"one shard of the pipeline ({shard['examples']} MTOP examples x {shard['n_candidates']} BM25 candidates, "
            f"{d['n_pairs']} pairs, {shard['pairs_per_candidate']} pairs per distinct candidate)" if shard
            else f"{d['n_pairs']} MTOP (example, candidate) pairs")
    out = [f"EPR scoring throughput (`{d['command']}`; {describe_machine(d['machine'])}; {d['lm']} in {d['dtype']}): {what}, "
           f"{d['n_target_tokens']} target tokens, batches of up to {d['max_batch_tokens']} tokens.", "",
           "| scorer | seconds | pairs/s | target tokens/s | speed-up |", "|---|---|---|---|---|",
           f"| taskret `score` (length-grouped, token-budget batches, target-only projection) | {t['seconds']} | "
           f"{t['pairs_per_s']} | {t['target_tokens_per_s']} | {d['speedup']}x |"]
    if "taskret_shared_prefix" in d:
        sp = d["taskret_shared_prefix"]
        out.append(f"| taskret `score_shared` (as above, each candidate's demonstration computed once; the pipeline's) "
                   f"| {sp['seconds']} | {sp['pairs_per_s']} | {sp['target_tokens_per_s']} | "
                   f"{d['speedup_shared_prefix']}x |")
    loop_n = f" (timed on {b['n_pairs']} of the pairs)" if "n_pairs" in b else ""
    out += [f"| batch-size-1 loop, full-vocabulary logits (the original code's way){loop_n} | {b['seconds']} | "
            f"{b['pairs_per_s']} | {b['target_tokens_per_s']} | 1x |", "",
            f"Largest |log-probability difference| against the loop {d['max_abs_logprob_diff']:.2e}"
            + (f"; `score_shared` against `score` {d['max_abs_logprob_diff_shared_prefix']:.2e}"
               if "max_abs_logprob_diff_shared_prefix" in d else "")
            + f". Matrix-multiply peak of this machine: {d['matmul_gflops']['float32']} GFLOP/s float32, "
            f"{d['matmul_gflops']['bfloat16']} GFLOP/s bf16; `score` reaches {d['scorer_gflops']} GFLOP/s "
            f"({100 * d['scorer_fraction_of_matmul']['float32']:.0f}% of float32 peak, "
            f"{100 * d['scorer_fraction_of_matmul']['bfloat16']:.0f}% of bf16 peak)."]
    return out


EPR_VARIANTS = {  # epr_beyond.json's methods, as the benchmark page names them
    "epr": "plain EPR (300 x 8 LM-scored pairs, BM25 candidates)",
    "epr+dpp": "+ DPP selection over its top 50, untrained (CEIL's kernel; weight chosen on training inputs)",
    "epr+mmr": "+ MMR selection over its top 50 (weight chosen on training inputs)",
    "epr+reward": "+ reward model fused when reranking its top 30 (LLM-R's cross-encoder; weight chosen on training "
                  "inputs)",
    "epr-round2": "UDR: a second round, candidates mined by the round-1 retriever (`rounds: 2`)",
    "epr-reward": "LLM-R: the reward model distilled into the retriever (`reward_model: {}`)",
    "ceil": "CEIL: the query encoder trained on LM-scored sets, and its DPP (`set_training: {}`)",
    "udr": "UDR: listwise loss over sampled lists of 8, 3 rounds re-mining 50 (`listwise`, `rounds: 3`)",
    "llm-r": "LLM-R: a reward model reading the gold output, distilled into a retriever (`reward_model: {}`)",
    "bm25": "BM25 (no training)",
    "lm-oracle": "LM-Oracle: BM25-Oracle's top 50 ranked by the LM with the gold output (an upper reference)",
}


EPR_SHORT = {"ceil": "CEIL set training (`set_training`) and its DPP", "epr-round2": "UDR round 2 (`rounds: 2`)",
             "epr-reward": "LLM-R distillation (`reward_model`)", "epr+dpp": "EPR + untrained DPP",
             "epr+mmr": "EPR + MMR", "epr+reward": "EPR + reward model fused",
             "udr": "UDR (`listwise`, `rounds: 3`)", "llm-r": "LLM-R (`reward_model`)"}


def _variant_cost(row: dict) -> str:
    cost = row.get("training_cost", {})
    parts = []
    if "lm_pairs_later_rounds" in cost:
        parts.append(f"+{cost['lm_pairs_later_rounds']:,} LM-scored pairs")
    if "lm_sets" in cost:
        parts.append(f"+{cost['lm_sets']:,} LM-scored sets")
    stages = cost.get("stages", {})
    own = [s for s in stages if s.startswith(("round", "set", "reward"))]
    if own:
        on_gpu = set(own) <= set(cost.get("gpu_stages", ()))
        parts.append(f"{sum(stages[s]['wall_s'] for s in own) / 60:.1f} min of own stages"
                     + (" on one H200 (`benchmarks/gpu/README.md`)" if on_gpu else ""))
    if "tuning" in row:
        parts.append(f"{row['tuning']['n'] * len(row['tuning']['scores'])} LM generations to choose the weight")
    return ", ".join(parts) or "-"


def epr_beyond_table() -> list[str]:
    """Issue 48: EPR's successors against plain EPR on the same test inputs, and the multi-task retriever on
    held-out tasks against BM25."""
    d = _load("epr_beyond.json")
    if d is None:
        return []
    out = [f"EPR and its successors on the same test inputs, SmolLM2-135M, exact match, each paired with plain EPR "
           f"(McNemar: inputs solved only by the variant / only by EPR) (`{d['commands'][-1]}`; "
           f"{describe_machine(d['machine'])}). The gap closed is (EM - BM25) / (LM-Oracle - BM25), BM25's and "
           "LM-Oracle's EM " + ("measured in the same run, on the same inputs." if "lm-oracle" in d.get("mtop", {})
                                else "from `benchmarks/epr_table.py` on the same inputs."), "",
           "| task | variant | N | EM | gap closed | only variant / only EPR | p | EM diff, 95% CI | detectable at 80% "
           "| what it costs beyond EPR |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for task in ("mtop", "break"):
        if task not in d:
            continue
        bm25, oracle = d.get("bm25", {}).get(task), d.get("lm_oracle", {}).get(task)
        for method, row in d[task].items():
            if method == "base":
                continue
            gap = f"{100 * (row['em'] - bm25) / (oracle - bm25):.0f}%" if bm25 is not None and oracle else "-"
            paired = row.get("vs_epr")
            test = f"{paired['only_method']} / {paired['only_epr']} | {_p(paired['p'])}" if paired else "- | -"
            interval = paired.get("diff_ci95") if paired else None
            interval = f"[{interval[0]:+.1f}, {interval[1]:+.1f}]" if interval else "-"
            detectable = f"{row['min_detectable_diff']:.1f}" if row.get("min_detectable_diff") else "-"
            name = EPR_VARIANTS.get(method, method)
            if method == "epr" and task == "mtop" and row["n"] == MTOP_TEST_INPUTS:  # issue 52's full recipe
                name = "plain EPR (full recipe: 1,237 x 50 LM-scored pairs, BM25 candidates)"
            out.append(f"| {task} | {name} | {row['n']} | {row['em']:.1f} | {gap} | {test} | "
                       f"{interval} | {detectable} | {_variant_cost(row)} |")
    held = d.get("held_out")
    if held:
        setup = held and d["held_out_setup"]
        out += ["", f"A new task with no scoring budget: for each held-out task, one retriever trained on the EPR labels "
                f"of the other tasks of {', '.join(setup['train_tasks'])} (300 labelled inputs x 8 candidates each, "
                f"{setup['epochs']} epochs), each query written "
                "`{instruction} [SEP] {input}`, then queried on the held-out task with its own instruction; "
                f"{setup['n']} test inputs each, chrF (sacrebleu) and EM, each paired with BM25 (Wilcoxon on the "
                "per-input chrF; McNemar on EM). `epr` is the reference a scoring budget buys: trained on the "
                "task's own labels.", "",
                "| held-out task | retriever | chrF | vs BM25 (p) | EM | only it / only BM25 (p) |", "|---|---|---|---|---|---|"]
        for task, rows in held.items():
            for method, row in rows.items():
                vs = row.get("vs_bm25")
                chrf_vs = f"{vs['chrf_diff']:+.1f} ({_p(vs['chrf_p'])})" if vs else "-"
                em_vs = f"{vs['only_method']} / {vs['only_bm25']} ({_p(vs['em_p'])})" if vs else "-"
                out.append(f"| {task} | {method} | {row['chrf']:.1f} | {chrf_vs} | {row['em']:.1f} | {em_vs} |")
        means = {m: sum(rows[m]["chrf"] for rows in held.values()) / len(held) for m in next(iter(held.values()))}
        out += ["", "Mean chrF over the held-out tasks: " + ", ".join(f"{m} {v:.1f}" for m, v in means.items()) + "."]
    return out


def scoring_precision_table(name: str = "scoring_precision.json") -> list[str]:
    d = _load(name)
    if not d:
        return []
    out = [f"EPR scoring precision (`{d['command']}`; {describe_machine(d['machine'])}; {d['n_pairs']} pairs of one output-ordered "
           "shard): agreement of each precision's candidate ranking with float32's, per training example.", "",
           "| precision | pairs/s | speed-up | max abs log-prob diff | Spearman mean (min) | top-5 kept | bottom-5 kept |",
           "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        if r["precision"] == "float32":
            out.append(f"| float32 | {r['pairs_per_s']} | 1.00x | 0 | 1 | 100% | 100% |")
        else:
            out.append(f"| {r['precision']} | {r['pairs_per_s']} | {r['speedup']:.2f}x | {r['max_abs_logprob_diff']} | "
                       f"{r['spearman_mean']} ({r['spearman_min']}) | {r['top5_kept']:.0%} | {r['bottom5_kept']:.0%} |")
    return out


def tart_trained_table(name: str = "tart_trained.json") -> list[str]:
    d = _load(name)
    if not d:
        return []
    tr, sf = d["training"], d["scifact_test"]
    if "scifact:train" in tr["tasks"]:
        seen = ("in domain: the models also trained on SciFact's train claims (same corpus), never on its "
                "test claims")
    else:
        seen = "zero-shot: no model saw SciFact (claims or corpus)"
    out = [f"TART trained here (`{d['command']}`): {tr['limit_per_task']} training queries per task from "
           f"{', '.join(tr['tasks'])}; evaluated on SciFact test ({sf['n_queries']} claims, "
           f"{sf['n_docs']} abstracts; TART-full reranks BM25's top {sf['rerank_top_k']}), {seen}. "
           "NDCG@10 (Recall@100):", "",
           "| system | no instruction | with instruction | eval time (s) |", "|---|---|---|---|"]
    for system, r in sf["results"].items():
        if not r:  # left out of this run (--skip)
            continue
        cells = [f"{r[tag]['ndcg@10']:.1f} ({r[tag]['recall@100']:.1f})" if tag in r else "–"
                 for tag in ("no_instruction", "instruction")]
        seconds = " / ".join(f"{r[tag]['eval_s']:.0f}" for tag in ("no_instruction", "instruction") if tag in r)
        out.append(f"| {system} | " + " | ".join(cells) + f" | {seconds} |")
    out += ["", "| model | training time (s) |", "|---|---|"]
    for name, m in tr["models"].items():
        out.append(f"| {name} | {m['wall_time_s']:.0f} |")
    rerank = [r[tag] for r in sf["results"].values() for tag in r if "rerank_pairs_per_s" in r[tag]]
    if rerank:
        out += ["", "Reranking throughput (TART-full, MiniLM cross-encoder): "
                + ", ".join(f"{r['rerank_pairs_per_s']} pairs/s" for r in rerank)
                + f" ({d['machine']['cpu']}, {d['machine']['threads']} torch thread, 256-token pairs)."]
    return out


def _worker_memory(workers: list[dict]) -> str:
    """Each serving worker's RSS / PSS (MiB), as serve_load.py's ``Server.memory`` measures them."""
    return ", ".join(f"{w['rss']:.0f} / {w['pss']:.0f}" for w in workers)  # no thousands commas: commas part workers


def serve_table() -> list[str]:
    d = _load("serve_load.json")
    if not d:
        return []
    out = [f"Retrieval service under load (`{d['command']}`; {describe_machine(d['machine'])}, load average "
           f"{d['machine'].get('load_average', ['?'])[0]} before and {d.get('load_average_after', ['?'])[0]} after; "
           f"{d['tool']}, 1 thread, on the same machine as the server; real queries in turn). Memory per worker "
           "after the load: RSS, and PSS (pages shared between processes divided among them):", "",
           "| workers | endpoint | index | connections | requests/s | p50 ms | p90 ms | p99 ms | errors | "
           "worker RSS / PSS MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lat = r["latency_ms"]
        out.append(f"| {r['workers']} | {r['name']} | {r['index']} | {r['connections']} | {r['requests_per_s']} | "
                   f"{lat['p50']} | {lat['p90']} | {lat['p99']} | {r['errors']} | "
                   f"{_worker_memory(r['server_memory_mib']['workers'])} |")
    for workers, t in d["targets"].items():
        out += ["", f"Target (workers={workers}): /retrieve on BM25 at **{t['share_of_floor']:.0%}** of the /health "
                f"floor's requests/s (target >= 50%: {'met' if t['share_met'] else 'missed'}), p99 "
                f"**{t['p99_over_floor_p99']}x** the floor's (target <= 2x: {'met' if t['p99_met'] else 'missed'}), "
                f"{t['errors']} errors."]
    return out + _http_stack_table(d)


def _http_stack_table(after: dict) -> list[str]:
    """serve_load.json against serve_load_h11.json: the same runs on uvicorn's pure-Python HTTP stack."""
    before = _load("serve_load_h11.json")
    if not before or "http_stack" not in after["machine"]:
        return []
    stack = lambda d: f"{d['machine']['http_stack']['http']} + {d['machine']['http_stack']['loop']}"  # noqa: E731
    rate = {(r["workers"], r["name"]): r["requests_per_s"] for r in before["runs"]}
    out = ["", f"The HTTP stack (`uvicorn[standard]`, measured once before and after on the same machine): "
           f"requests/s on {stack(before)} (`{before['command']}`) against {stack(after)} (the table above):", "",
           "| workers | endpoint | before | after | after / before |", "|---|---|---|---|---|"]
    for r in after["runs"]:
        was = rate.get((r["workers"], r["name"]))
        if was:
            out.append(f"| {r['workers']} | {r['name']} | {was:,.1f} | {r['requests_per_s']:,.1f} | "
                       f"{r['requests_per_s'] / was:.2f}x |")
    return out


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bm25_backends(d: dict) -> str:
    backends = sorted({r["bm25"].get("backend", "numpy") for r in d["sizes"].values()})
    return " / ".join(backends)


def _index_kind(dense: dict) -> str:
    return f"hnsw, ef_search {dense['ef_search']}" if dense.get("ef_search") else dense["index_type"]


def scale_table() -> list[str]:
    """`benchmarks/scale.py`: indexing and search cost at each corpus size, the fitted extrapolation, serving."""
    d = _load("scale.json")
    if not d:
        return []
    out = [f"Cost as the corpus grows (`{d['command']}`; {describe_machine(d['machine'])}; {d['corpus']}; "
           f"{d['queries']} real queries). Build: `docs-fast` (BM25 + MiniLM in bf16, HNSW from 20K vectors), each "
           "stage in seconds; peak RSS of the build process; single-query p50 / p99 ms, top 10, each index loaded "
           "and warmed as `taskret serve` does (BM25 on bm25s's " + _bm25_backends(d) + " backend); the dense index "
           "alone is its search for an encoded query (end to end, a dense query is mostly its encoder pass); "
           "recall@10 of the dense index against exact search, at the ef_search it records:", "",
           "| documents | encode docs/s | encode s | ANN s | BM25 s | peak RSS GiB | disk GiB | BM25 p50 / p99 | "
           "dense index alone p50 / p99 | recall@10 | dense end to end p50 | docs-fast p50 / p99 | docs-rerank p50 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, r in sorted(d["sizes"].items(), key=lambda item: int(item[0])):
        t, dense, alone = r["index_s"], r["dense"], r["dense"].get("search_only", {})
        out.append(f"| {int(n):,} | {r['encode_docs_per_s']:.0f} | {t['encode']:,.0f} | {t['ann']:,.1f} | "
                   f"{t['bm25']:,.1f} | {r['peak_rss_gib']:.2f} | {r['disk_gib']:.2f} | {r['bm25']['p50_ms']:.2f} / "
                   f"{r['bm25']['p99_ms']:.2f} | {_fmt(alone.get('p50_ms'), 3)} / {_fmt(alone.get('p99_ms'), 3)} | "
                   f"{dense['recall_at_10']:.3f} ({_index_kind(dense)}) | {dense['p50_ms']:.1f} | "
                   f"{r['docs-fast']['p50_ms']:.1f} / {r['docs-fast']['p99_ms']:.1f} | "
                   f"{r['docs-rerank']['p50_ms']:,.0f} |")
    curves = {n: r["dense"]["ef_search_curve"] for n, r in d["sizes"].items() if r["dense"].get("ef_search_curve")}
    if curves:
        efs = [point["ef_search"] for point in next(iter(curves.values()))]
        out += ["", "HNSW's search width (`ef_search`) at each size: recall@10 against exact search / the index's "
                "own single-query p50 ms (`taskret.retrieval.dense.ef_search_for` chooses by size from these):", "",
                "| documents | " + " | ".join(f"ef_search {ef}" for ef in efs) + " |", "|---|" + "---|" * len(efs)]
        for n, curve in sorted(curves.items(), key=lambda item: int(item[0])):
            out.append(f"| {int(n):,} | " + " | ".join(f"{c['recall_at_10']:.3f} / {c['p50_ms']:.2f}" for c in curve)
                       + " |")
    ex = d.get("extrapolation")
    if ex:
        cluster = ex["cluster"]
        out += ["", f"Extrapolated ({ex['note']}):", "",
                f"| documents | peak RSS GiB | disk GiB | build h, one machine | build h, {cluster} machines | "
                "BM25 p50 ms | dense index alone p50 ms |", "|---|---|---|---|---|---|---|"]
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
    serve = d.get("serve")
    if serve:
        http = d["machine"].get("http_stack")
        out += ["", f"Served at {serve['size']:,} documents (`taskret serve --workers {serve['workers']}`"
                + (f" on {http['http']} + {http['loop']}" if http else "") + ", "
                f"{serve['tool']}, {serve['connections']} connections, {serve['duration_s']:.0f} s per run, "
                "real queries in turn, k=10; memory per worker after the load):", "",
                "| endpoint | requests/s | p50 ms | p99 ms | errors | worker RSS / PSS MiB |", "|---|---|---|---|---|---|"]
        out.append(f"| /health (the floor) | {serve['floor']['req_per_s']:,.0f} | {serve['floor']['p50_ms']} | "
                   f"{serve['floor']['p99_ms']} | {serve['floor']['errors']} | |")
        for name in ("bm25", "docs-fast"):
            r = serve[name]
            out.append(f"| /retrieve, {name} | {r['req_per_s']:,.1f} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                       f"{_worker_memory(r['memory_mib']['workers'])} |")
        t = serve["targets"]
        out += ["", f"BM25 /retrieve at **{t['bm25_share_of_floor']:.0%}** of the floor's requests/s (target >= 50%), "
                f"p99 {t['bm25_p99_over_floor']}x the floor's (target <= 2x); docs-fast at "
                f"**{_fmt(100 * t['docs_fast_share_of_encoder'] if t['docs_fast_share_of_encoder'] else None, 0)}%** "
                f"of the query encoder's batched rate in the same run "
                f"({serve['docs-fast']['encoder_queries_per_s']} queries/s; target >= 70%)."]
    return out


def build_memory_table() -> list[str]:
    """`benchmarks/build_memory.py`: memory growth per document of a streaming dense build, by variant."""
    d = _load("build_memory.json")
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
           "| variant | docs/s | RSS bytes/doc | heap bytes/doc | traced bytes/doc | RSS at end MiB | heap at end MiB |",
           "|---|---|---|---|---|---|---|"]
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


def dense_latency_table() -> list[str]:
    d = _load("dense_latency.json")
    if not d:
        return []
    k = d["k"]
    out = [f"Dense retrieval latency (`{d['command']}`; {describe_machine(d['machine'])}; {d['vectors']}), top-{k}, "
           f"{d['search_threads']} search thread. Single query p50 / p99 ms; batched: queries/s for a batch of "
           f"{d['batch']}; recall@{k} against exact search; per HNSW setting, the smallest ef_search reaching "
           f"recall@{k} >= 0.99 (else the largest tried):", "",
           f"| n | index | build s | single p50 | single p99 | batched q/s | recall@{k} |", "|---|---|---|---|---|---|---|"]
    for run in d["runs"]:
        flat = run["flat"]
        out.append(f"| {run['n']:,} | exact (flat IP) | | {flat['single']['p50_ms']:.2f} | "
                   f"{flat['single']['p99_ms']:.2f} | {flat['batched']['queries_per_s']} | 1.00 |")
        for c in run["hnsw"]:
            good = [b for b in c["by_ef_search"] if b[f"recall@{k}"] >= 0.99]
            b = good[0] if good else c["by_ef_search"][-1]
            out.append(f"| {run['n']:,} | HNSW M={c['M']} efC={c['ef_construction']} ef={b['ef_search']} | "
                       f"{c['build_s']} | {b['single']['p50_ms']:.2f} | {b['single']['p99_ms']:.2f} | "
                       f"{b['batched']['queries_per_s']} | {b[f'recall@{k}']:.3f} |")
    defaults = d.get("defaults")
    if defaults:
        out += ["", f"The defaults of `dense:` (HNSW M={defaults['M']}, ef_construction={defaults['ef_construction']}, "
                f"ef_search={defaults['ef_search']}): " + "; ".join(
                    f"{r['n']:,} vectors {r['single_p50_ms']:.2f} ms single-query p50 (flat {r['flat_single_p50_ms']:.2f}), "
                    f"recall@{k} {r[f'recall@{k}']:.3f}" for r in defaults["by_n"])
                + f". `index_type=auto` builds HNSW from {d['auto_hnsw_from']:,} vectors on, flat below."]
    return out


def ray_table() -> list[str]:
    d = _load("ray_scoring.json")
    if not d:
        return []
    out = [f"EPR scoring on Ray (`{d['command']}`; {d['lm']}, {d['n_pairs']} pairs, shards of {d['shard_size']} "
           "examples, a local Ray cluster on this 2-core machine):", "",
           "| run | scoring s | pairs/s | output identical to the local scorer |", "|---|---|---|---|"]
    for r in d["runs"]:
        out.append(f"| {r['run']} | {r['scoring_s']} | {r['pairs_per_s']} | "
                   f"{'yes' if r['identical'] else 'no'} (max diff {r['max_abs_diff']}) |")
    return out


def robustness_table() -> list[str]:
    d = _load("robustness.json")
    if not d:
        return []
    kr, bad = d["kill_resume"], d["bad_inputs_summary"]
    return [f"Robustness (`{d['command']}`): a scoring job ({kr['n_pairs']} pairs, {kr['n_shards']} shards) "
            f"SIGKILLed at {kr['kills_that_landed']} random moments and restarted each time ends "
            f"{'byte-identical to' if kr['identical_to_uninterrupted'] else 'DIFFERENT from'} an uninterrupted run, "
            f"with {len(kr['temp_files_after_final_run'])} temporary files left. {bad['cases']} bad inputs "
            f"(malformed JSON, wrong types, empty strings, invalid UTF-8, huge lines, missing files, mismatched "
            f"indexes) across every reader and endpoint: {bad['as_expected']} behave as expected "
            f"({bad['clean_error_exit_2']} clean errors naming file/line/field, the rest accepted on purpose), "
            f"{len(bad['cases_with_temp_files_left'])} leave temporary files, "
            f"{len(bad['failed_cases_with_outputs_written'])} leave a half-written output; each message is "
            "listed in `benchmarks/results/robustness.json`."]


def tart_in_domain_table() -> list[str]:
    return tart_trained_table("tart_trained_scifact_train.json")


def tart_x2_scifact_table() -> list[str]:
    return tart_trained_table("tart_x2_scifact.json")


def tart_pooled_table() -> list[str]:
    return tart_table("tart_trained_pooled.json", "Trained TART-dual against the untrained baselines, closed and "
                      "pooled, on tasks whose test queries no model trained on")


X2_NAMES = {
    "bm25": "BM25",
    "dense:minilm-l6": "MiniLM, untrained",
    "dense:runs/bench/tart_trained/dual/model": "TART-dual (trained: mtop, break, ambigqa)",
    "dense:runs/bench/tart_trained/dual_no_instruction/model": "same, trained without instructions",
    "dense:runs/bench/tart_x2/dual/model": "TART-dual (trained: + mtop-similar)",
    "dense:runs/bench/tart_x2/dual_no_instruction/model": "same, trained without instructions",
    "dense:runs/tart_dual_berri/dual/model": "TART-dual, berri-lite mixture (`tart_dual_berri.json`)",
    "dense:runs/tart_dual_berri_pooled/dual/model": "same, unfollowing negatives from the pooled corpora",
    "dense:runs/tart_dual_berri_pooled_instructed/dual/model": "same, and only for instructed anchors",
    "dense:runs/tart_dual_berri_pooled_mtop/dual/model": "same, and MTOP, MTOP-similar at 500 queries",
    "dense:runs/tart_dual_berri_pooled_mtop_siblings/dual/model": "same, and sibling tasks batched together",
    "dense:runs/tart_dual_berri_siblings_instructed/dual/model": "same, and sibling tasks always instructed",
    "dense:runs/tart_dual_berri_siblings_instructed_seed1/dual/model": "same recipe, seed 1",
    "dense:runs/tart_dual_berri_siblings_instructed_u4/dual/model": "same recipe, 4 unfollowing negatives per row",
    "dense:runs/tart_dual_berri_siblings_dense/dual/model": "the sibling recipe, unfollowing negatives mined by "
                                                            "untrained MiniLM",
    "dense:runs/tart_dual_berri_siblings_instructed_e2/dual/model": "sibling tasks batched together and always "
                                                                    "instructed, 2 epochs",
    "dense:runs/tart_dual_berri_siblings_instructed_e2_seed1/dual/model": "the same 2-epoch recipe, seed 1",
}


def tart_x2_table() -> list[str]:
    """MTOP and its X^2 twin pooled: one set of commands, two intents (parse vs similar commands)."""
    files = [d for d in (_load("tart_x2_mtop.json"), _load("tart_x2_mtop_trained.json"),
                         _load("tart_x2_mtop_berri.json"), _load("tart_x2_mtop_berri_negatives.json")) if d]
    if not files:
        return []
    ct = files[0]["cross_task"]
    tasks = list(ct["tasks"])
    out = ["X^2-style pooled retrieval on MTOP: the same test commands are the queries of two tasks, `mtop` "
           "(the command's parse) and `mtop-similar` (training commands with the same parse template), and the "
           f"pooled corpus ({ct['pooled_n_docs']} documents) holds both kinds; only the instruction says which "
           f"is wanted. {ct['limit']} queries per task; commands: "
           + "; ".join(f"`{d['command']}`" for d in files) + ".", "",
           "| retriever | instruction at test | " + " | ".join(f"{t}: closed -> pooled (other kind in top 10)" for t in tasks)
           + " | mean gap |", "|---|---|" + "---|" * (len(tasks) + 1)]
    for d in files:
        for name, by_mode in d["cross_task"]["results"].items():
            for mode, r in by_mode.items():
                cells = [f"{r['closed'][t]['ndcg@10']:.1f} -> {r['pooled'][t]['ndcg@10']:.1f} "
                         f"({r['pooled'][t]['other_task@10']:.0f}%)" for t in tasks]
                out.append(f"| {X2_NAMES.get(name, name)} | {mode.replace('_', ' ')} | " + " | ".join(cells)
                           + f" | {r['gap_ndcg@10']['mean']:+.2f} |")
    return out


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.2f}"


MTOP_TEST_INPUTS = 859  # MTOP's test file here: the successors' comparison runs on all of it

SETUPS_COMMAND = "python benchmarks/setups.py --tasks scifact,berri-lite/pubmedqa,berri-lite/medical_question_pairs"

# The README's results and the commands that reproduce them, in the order `make bench` runs them (the Makefile's
# bench target holds each, with --data-dir; a results file's own "commands" keep the history of how it was filled).
CPU60 = ("tart_distil_len256_neg2_q350_cpu60", "tart_distil_len256_neg2_q350_cpu60_seed2",
         "tart_distil_len256_neg2_q350_cpu60_seed3")  # the 60-minute CPU recipe's three seeds
README_COMMANDS = {
    "icl": "python benchmarks/icl_baselines.py --tasks mtop,break --methods random,sbert,bm25 --lm smollm2-135m "
           "--n 300 --seed 0 --context-window 640 --max-new-tokens 128",
    "epr_small": "taskret epr run benchmarks/configs/epr_mtop_small.json",
    "epr_full": "taskret epr run benchmarks/configs/epr_mtop_full.json",
    "epr_beyond": "python benchmarks/epr_beyond.py --tasks mtop --n 0 --methods epr,lm-oracle --base "
                  "mtop=epr:runs/bench/epr_full/mtop/epr --reuse mtop:epr=runs/bench/epr_full/mtop/epr/eval --variant "
                  "bm25=bm25 --reuse mtop:bm25=runs/bench/epr_full/mtop/epr/baseline --variant "
                  "llm-r=epr:runs/bench/epr_full/mtop/llm-r --reuse mtop:llm-r=runs/bench/epr_full/mtop/llm-r/eval "
                  "--variant udr=epr:runs/bench/epr_full/mtop/udr --reuse mtop:udr=runs/bench/epr_full/mtop/udr/eval "
                  "--variant ceil=epr:runs/bench/epr_full/mtop/ceil --reuse "
                  "mtop:ceil=runs/bench/epr_full/mtop/ceil/eval --work runs/bench/epr_full/beyond",
    "setups": SETUPS_COMMAND,
    "docs": "python benchmarks/tart_berri.py --systems bm25,minilm,hybrid,upr --columns no_instruction,rerank_instruction "
            "--rerank-first hybrid --merge",
    "docs_e5": "python benchmarks/tart_berri.py --systems bm25,minilm,e5,hybrid,upr --rerank-depth 20 "
               "--columns no_instruction,rerank_instruction --rerank-first hybrid+minilm+e5 --merge",
    **{f"train_{n}": f"taskret tart run benchmarks/configs/{n}.json" for n in CPU60},
    "tart_dual": "python benchmarks/tart_berri.py --systems bm25 " + " ".join(
        f"--tart-dual {n}=runs/{n}/distil" for n in CPU60) + " --merge",
}


def readme_table() -> list[str]:
    """The README's results: at most six rows, each a number beside its baseline, each with its commands."""
    rows, notes = [], []
    cited: list[str] = []

    def cite(*keys: str) -> str:
        marks = []
        for key in keys:
            if key not in cited:
                cited.append(key)
            marks.append(f"[{cited.index(key) + 1}]")
        return " ".join(marks)

    icl = _load("icl_baselines.json")
    bm25_correct = _correct(RESULTS / "icl_baselines/mtop/bm25/predictions.jsonl")
    if icl and bm25_correct:
        bm25 = next(r["metrics"]["em"] for r in icl["results"] if r["task"] == "mtop" and r["retriever"] == "bm25")
        for name, scale, key in (("epr_mtop_small", "300 x 8", "epr_small"),):
            summary, mine = _load(f"{name}/eval/summary.json"), _correct(RESULTS / f"{name}/eval/predictions.jsonl")
            if summary and mine and mine.keys() == bm25_correct.keys():
                only_epr, only_bm25, p = mcnemar(mine, bm25_correct)
                rows.append(f"| MTOP in-context examples for SmolLM2-135M, exact match, {summary['n']} test inputs | "
                            f"`examples-epr:DIR`, {scale} LM-scored pairs | **{summary['metrics']['em']:.1f}** "
                            f"(`examples-bm25` {bm25:.1f}; {only_epr} / {only_bm25} solved by one only, {_p(p)}) | "
                            f"{cite('icl', key)} |")
    beyond = (_load("epr_beyond.json") or {}).get("mtop", {})
    variants = {m: r for m, r in beyond.items() if m not in ("base", "epr", "bm25", "lm-oracle") and "vs_epr" in r}
    # The README cites EPR's successors only as measured on every MTOP test input (issue 52: N=300 cannot show
    # the papers' 2.5-3.5 EM); the benchmark page keeps the smaller runs.
    if "epr" in beyond and variants and beyond["epr"]["n"] == MTOP_TEST_INPUTS:  # EPR's best successor here, paired with plain EPR on the same inputs
        top = max(r["em"] for r in variants.values())
        best = [m for m, r in variants.items() if r["em"] == top]
        row, test = variants[best[0]], variants[best[0]]["vs_epr"]
        tied = f"; {', '.join(EPR_SHORT.get(m, m).split(' (')[0] for m in best[1:])} ties" if best[1:] else ""
        rows.append(f"| MTOP in-context examples, as above | EPR's best successor here: {EPR_SHORT.get(best[0], best[0])}"
                    f"{tied} | **{row['em']:.1f}** (plain EPR {beyond['epr']['em']:.1f} on the same run; "
                    f"{test['only_method']} / {test['only_epr']} solved by one only, {_p(test['p'])}) | "
                    f"{cite('epr_beyond')} |")
        gpu = (" (its evaluation; its training rounds and their LM scoring ran on one H200: "
               "`benchmarks/gpu/README.md`)" if row.get("training_cost", {}).get("gpu_stages") else "")
        notes.append(f"The EPR-successor row ({cite('epr_beyond')}) was measured on "
                     f"{describe_machine(_load('epr_beyond.json')['machine'])}{gpu}.")
    berri = _load("tart_berri.json")
    sci = berri["scifact"] if berri else {}
    setups = (_load("setups.json") or {}).get("tasks", {}).get("scifact", {}).get("results", {})
    if {"bm25", "docs-fast", "docs-rerank"} <= setups.keys():  # the setups as a user runs them
        claims = f"SciFact zero-shot, NDCG@10, {setups['bm25']['n_queries']} claims"
        bm25, fast = setups["bm25"]["ndcg@10"], setups["docs-fast"]["ndcg@10"]
        rows.append(f"| {claims} | `docs-fast` | **{fast:.1f}** (BM25 {bm25:.1f}) | {cite('setups')} |")
        rows.append(f"| {claims} | `docs-rerank` (the instruction at the reranker) | "
                    f"**{setups['docs-rerank']['ndcg@10']:.1f}** (`docs-fast` {fast:.1f}) | {cite('setups')} |")
        notes.append(f"The `docs-fast` and `docs-rerank` rows ({cite('setups')}) were measured on "
                     f"{describe_machine(_load('setups.json')['machine'])}; the machine line below is the others'.")
    elif {"bm25", "hybrid"} <= sci.keys():
        claims = f"SciFact zero-shot, NDCG@10, {berri['n_scifact_queries']} claims"
        bm25, hybrid = sci["bm25"]["no_instruction"], sci["hybrid"]["no_instruction"]
        rows.append(f"| {claims} | `docs-fast` | **{hybrid:.1f}** (BM25 {bm25:.1f}) | {cite('docs')} |")
        upr = sci.get("hybrid+upr", {})
        if "rerank_instruction" in upr:
            rows.append(f"| {claims} | `docs-rerank`, the instruction at the reranker | **{upr['rerank_instruction']:.1f}** "
                        f"(`docs-fast` {hybrid:.1f}) | {cite('docs')} |")
        elif "no_instruction" in upr:  # recorded before the instruction went to the reranker: say which it is
            rows.append(f"| {claims} | `docs-rerank`, the reranker given no instruction | **{upr['no_instruction']:.1f}** "
                        f"(`docs-fast` {hybrid:.1f}) | {cite('docs')} |")
            notes.append("`docs-rerank` with the instruction at the reranker (its default) is not recorded yet: "
                         f"`make bench` runs it ({cite('docs')}).")
    if {"bm25", "hybrid"} <= sci.keys():
        claims = f"SciFact zero-shot, NDCG@10, {berri['n_scifact_queries']} claims"
        best = sci.get("hybrid+minilm+e5+upr_top20", {})
        if {"rerank_instruction", "no_instruction"} <= best.keys():
            rows.append(f"| {claims} | `docs-rerank` + e5 in the first stage, top 20 reranked | "
                        f"**{best['rerank_instruction']:.1f}** (the reranker without the instruction "
                        f"{best['no_instruction']:.1f}) | {cite('docs_e5')} |")
        students = [n for n in CPU60 if n in sci]
        if students and "minilm" in sci:
            minilm = sci["minilm"]["no_instruction"]
            first = sci[students[0]]["no_instruction"]
            mean = sum(sci[n]["no_instruction"] for n in students) / len(students)
            rows.append(f"| {claims}, the first stage alone | TART-dual distilled in 53 min on 2 cores | **{first:.1f}**, "
                        f"{len(students)} seeds {mean:.1f} (untrained MiniLM {minilm:.1f}) | {cite('docs', *(f'train_{n}' for n in students), 'tart_dual')} |")
    if not rows:
        return []
    return ["| job, metric | setup | result (baseline) | command |", "|---|---|---|---|", *rows, "",
            *(f"{i}. `{README_COMMANDS[key]}`" for i, key in enumerate(cited, 1)), "", *notes,
            *([""] if notes else []), f"Machine: {MACHINE}."]


def _scoring_rate(d: dict) -> float:
    """taskret's own EPR scoring rate (pairs/s) in ``scoring_speed.json``."""
    return d["taskret"]["pairs_per_s"]


def setups_table(detail: bool = False) -> list[str]:
    """Which named setup for which job: each setup's quality beside its baseline and its cost on 2 cores, from
    ``setups.json`` (documents), ``index_speed.json`` (indexing) and the EPR results (examples). ``detail``: the
    benchmark page's per-task table instead of the README's summary."""
    d = _load("setups.json")
    speed = _load("index_speed.json")
    if not d:
        return []
    tasks = d["tasks"]
    if detail:
        out = [f"Each setup ranks each task's judged queries as `taskret tart evaluate --setup NAME` does, the task's "
               f"instruction given (the setups' first stages read the query alone; `docs-rerank`'s reranker reads it); "
               f"BM25 reads the query alone (`{d['command']}`; {describe_machine(d['machine'])}).", "",
               "| task | N queries / docs | setup | NDCG@10 | Recall@100 | index s | query ms | rerank pairs/s |",
               "|---|---|---|---|---|---|---|---|"]
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
    rows = ["| setup | job | what it is | NDCG@10 (BM25) | cost on 2 cores |", "|---|---|---|---|---|"]
    for name, setup in d["setups"].items():
        timed = [t["results"][name] for task, t in tasks.items() if task not in paused and name in t["results"]]
        cost = index_cost
        if setup["rerank"] and timed:
            per_query = sum(1000 * r["rerank_s"] / r["n_queries"] for r in timed) / len(timed)
            cost += f"; + {per_query / 1000:.1f} s per query to rerank the top {setup['rerank_depth']}"
        elif timed:
            cost += f"; {sum(r['query_ms'] for r in timed) / len(timed):.0f} ms per query"
        rows.append(f"| `{name}` | documents | {setup['summary']} | {quality(name)} | {cost} |")
    icl = _load("icl_baselines.json")
    small = _load("epr_mtop_small/eval/summary.json")
    trained = _load("epr_mtop_small/retriever/epr_config.json")
    scored = _load("epr_mtop_small/scoring/scoring_meta.json")
    speed_lm = _load("scoring_speed.json")
    if icl and small and trained and scored:
        bm25 = next(r["metrics"]["em"] for r in icl["results"] if r["task"] == "mtop" and r["retriever"] == "bm25")
        rows.append(f"| `examples-bm25` | in-context examples, no training | BM25 over the examples' inputs | MTOP exact "
                    f"match {bm25:.1f} (random 2.3) | 6,208 queries in 1.7 s |")
        rows.append(f"| `examples-epr:DIR` | in-context examples, trained | a trained EPR run (`taskret epr run`) | "
                    f"MTOP exact match {small['metrics']['em']:.1f} (BM25 {bm25:.1f}) | LM scoring of {scored['n_pairs']:,} "
                    f"pairs" + (f" (~{scored['n_pairs'] / _scoring_rate(speed_lm) / 60:.0f} min)" if speed_lm else "")
                    + f" + training {trained['wall_time_s'] / 60:.1f} min |")
    mtop = (_load("epr_beyond.json") or {}).get("mtop", {})
    udr = mtop.get("udr", {})
    if udr.get("n") == MTOP_TEST_INPUTS and udr["vs_epr"]["p"] < 0.05 and udr["em"] > mtop["epr"]["em"]:
        # issue 52: a successor that beats plain EPR (p < 0.05) is the recommended recipe
        plain = mtop["epr"]["em"]
        cost = udr["training_cost"]
        pairs = cost.get("lm_pairs_later_rounds", 0)
        gpu = [s for s in cost.get("gpu_stages", ()) if s in cost["stages"]]
        where = (f"; its rounds took {sum(cost['stages'][s]['wall_s'] for s in gpu) / 60:.1f} min on one H200"
                 if gpu else "")
        rows.append(f"| `examples-epr:DIR`, the recommended recipe: UDR | in-context examples, trained | the same, "
                    "trained with UDR's listwise loss over 3 mining rounds (`benchmarks/configs/epr_full/mtop_udr.json`)"
                    f" | MTOP exact match {udr['em']:.1f} on all {udr['n']} inputs (plain EPR's full recipe "
                    f"{plain:.1f}, {_p(udr['vs_epr']['p'])}) | EPR's scoring + {pairs:,} LM-scored pairs and 3 "
                    f"trainings (hours on 2 cores){where} |")
    return [*rows, "", f"Documents: NDCG@10 over each task's judged queries, its instruction given (`{SETUPS_COMMAND}`); "
            f"examples: SmolLM2-135M's exact match over 300 MTOP test inputs. {describe_machine(d['machine'])}."]


def tart_berri_table() -> list[str]:
    d = _load("tart_berri.json")
    if d is None:
        return []
    labels = {"bm25": "BM25", "minilm": "MiniLM (untrained)", "mpnet": "mpnet (untrained)", "tart_dual": "TART-dual",
              "hybrid": "hybrid: BM25 + MiniLM", "hybrid+mpnet": "hybrid: BM25 + mpnet",
              "hybrid+tart_dual": "hybrid: BM25 + TART-dual",
              "e5": "multilingual-e5-small (4-bit, frozen)", "hybrid+e5": "hybrid: BM25 + e5",
              "tart_distil": "TART-dual distilled from BM25 + MiniLM (fusion teacher)",
              "hybrid+tart_distil": "hybrid: BM25 + TART-dual distilled from BM25 + MiniLM",
              "tart_distil2": "TART-dual distilled, second round (350 new queries per task)",
              "hybrid+tart_distil2": "hybrid: BM25 + TART-dual distilled, second round",
              "tart_distil3": "TART-dual distilled, third round, instruction excluded from pooling (350 new queries)",
              "hybrid+tart_distil3": "hybrid: BM25 + TART-dual distilled, third round (instruction excluded from pooling)",
              "tart_distil_query": "TART-dual distilled, query encoder only (documents keep MiniLM's vectors; 500 "
                                   "queries per task, one round)",
              "hybrid+tart_distil_query": "hybrid: BM25 + TART-dual distilled, query encoder only",
              "tart_distil_query_lr": "TART-dual distilled, query encoder only, learning rate 1.5e-4",
              "hybrid+tart_distil_query_lr": "hybrid: BM25 + TART-dual distilled, query encoder only, learning rate "
                                             "1.5e-4",
              "hybrid+minilm+e5": "hybrid: BM25 + MiniLM + e5",
              "hybrid+tart_distil_query+e5": "hybrid: BM25 + TART-dual distilled, query encoder only, + e5",
              "tart_distil_gpu": "TART-dual distilled at scale on a GPU (2,000 queries per task, 7 negatives; H200)",
              "hybrid+tart_distil_gpu": "hybrid: BM25 + TART-dual distilled at scale (GPU)",
              "hybrid+tart_distil_gpu+e5": "hybrid: BM25 + TART-dual distilled at scale (GPU) + e5",
              "tart_distil_gpu_e2": "TART-dual distilled at scale on a GPU, 2 epochs (H200)",
              "hybrid+tart_distil_gpu_e2": "hybrid: BM25 + TART-dual distilled at scale, 2 epochs (GPU)",
              "hybrid+tart_distil_gpu_e2+e5": "hybrid: BM25 + TART-dual distilled at scale, 2 epochs (GPU) + e5",
              "tart_distil_dev_out": "TART-dual distilled without the four dev tasks (350 queries per task)",
              "hybrid+tart_distil_dev_out": "hybrid: BM25 + TART-dual distilled without the dev tasks",
              "hybrid+tart_distil_dev_out+e5": "hybrid: BM25 + TART-dual distilled without the dev tasks + e5",
              "tart_distil_dev_out_seed1": "the same distillation recipe, seed 1 (other queries drawn; "
                                           "`tart_distil_dev_out_seed1.json`)",
              "hybrid+tart_distil_dev_out_seed1": "hybrid: BM25 + TART-dual distilled without the dev tasks, seed 1",
              "tart_distil_len256": "the seed-1 recipe with the student trained on 256 tokens, not 128 "
                                    "(`tart_distil_dev_out_len256.json`)",
              "hybrid+tart_distil_len256": "hybrid: BM25 + TART-dual distilled on 256 tokens",
              "hybrid+tart_distil_len256+e5": "hybrid: BM25 + TART-dual distilled on 256 tokens + e5",
              "tart_distil_len256_excl": "the 256-token recipe with the instruction out of the pooling and dropped "
                                         "from a quarter of the queries, trained on an H200 "
                                         "(`tart_distil_dev_out_len256_excl_d25.json`, chosen on the dev tasks)",
              "hybrid+tart_distil_len256_excl": "hybrid: BM25 + that TART-dual (instruction out of the pooling, H200)",
              "hybrid+tart_distil_len256_excl+e5": "hybrid: BM25 + that TART-dual (instruction out of the pooling, "
                                                   "H200) + e5",
              "tart_distil_len256_cpu60": "the dev-picked 256-token recipe on 180 queries per task, to fit 60 min on "
                                          "2 cores (`tart_distil_len256_cpu60.json`)",
              "hybrid+tart_distil_len256_cpu60": "hybrid: BM25 + the 60-minute 256-token TART-dual",
              "tart_distil_len256_neg2_cpu60": "the dev-picked 256-token recipe on 300 queries per task with 2 "
                                               "negatives per query, not 4, to fit 60 min on 2 cores "
                                               "(`tart_distil_len256_neg2_cpu60.json`)",
              "hybrid+tart_distil_len256_neg2_cpu60": "hybrid: BM25 + the 300-query, 2-negative 256-token TART-dual",
              "tart_distil_len256_neg2_q350_cpu60": "the dev-picked 256-token recipe on all 350 queries per task, 2 "
                                                    "negatives per query drawn from 4, to fit 60 min on 2 cores "
                                                    "(`tart_distil_len256_neg2_q350_cpu60.json`)",
              "hybrid+tart_distil_len256_neg2_q350_cpu60": "hybrid: BM25 + the 350-query, 2-negative 256-token "
                                                           "TART-dual",
              "hybrid+tart_distil_len256_neg2_q350_cpu60+e5": "hybrid: BM25 + the 350-query, 2-negative 256-token "
                                                              "TART-dual + e5",
              "tart_distil_len256_neg2_q350_cpu60_seed2": "the same 60-minute CPU recipe, seed 2 (other queries and "
                                                          "negatives drawn; "
                                                          "`tart_distil_len256_neg2_q350_cpu60_seed2.json`)",
              "hybrid+tart_distil_len256_neg2_q350_cpu60_seed2": "hybrid: BM25 + the 60-minute CPU TART-dual, seed 2",
              "hybrid+tart_distil_len256_neg2_q350_cpu60_seed2+e5": "hybrid: BM25 + the 60-minute CPU TART-dual, "
                                                                    "seed 2, + e5",
              "tart_soup_cpu60": "soup of the 60-minute CPU recipe's three seeds (`taskret tart soup`; 155 CPU "
                                 "minutes of training in all)",
              "hybrid+tart_soup_cpu60": "hybrid: BM25 + the three-seed soup",
              "hybrid+tart_soup_cpu60+e5": "hybrid: BM25 + the three-seed soup + e5",
              "tart_distil_len256_neg2_q350_cpu60_seed3": "the same 60-minute CPU recipe, seed 3 "
                                                          "(`tart_distil_len256_neg2_q350_cpu60_seed3.json`)",
              "hybrid+tart_distil_len256_neg2_q350_cpu60_seed3": "hybrid: BM25 + the 60-minute CPU TART-dual, seed 3",
              "hybrid+tart_distil_len256_neg2_q350_cpu60_seed3+e5": "hybrid: BM25 + the 60-minute CPU TART-dual, "
                                                                    "seed 3, + e5",
              "tart_distil_len256_neg2_q250_all_cpu60_seed3": "the 60-minute CPU recipe over all 14 berri-lite tasks, "
                                                              "the dev tasks included, 250 queries each, seed 3 "
                                                              "(`tart_distil_len256_neg2_q250_all_cpu60_seed3.json`)",
              "hybrid+tart_distil_len256_neg2_q250_all_cpu60_seed3": "hybrid: BM25 + the 60-minute CPU TART-dual over "
                                                                     "all 14 tasks",
              "hybrid+tart_distil_len256_neg2_q250_all_cpu60_seed3+e5": "hybrid: BM25 + the 60-minute CPU TART-dual "
                                                                        "over all 14 tasks, + e5",
              "tart_soup": "TART-dual soup: the dev-out and both GPU students averaged (`taskret tart soup`)",
              "hybrid+tart_soup": "hybrid: BM25 + TART-dual soup",
              "hybrid+tart_soup+e5": "hybrid: BM25 + TART-dual soup + e5",
              "tart_distil_e5t": "TART-dual distilled from BM25 + MiniLM + e5 (three-way teacher, without the dev "
                                 "tasks)",
              "hybrid+tart_distil_e5t": "hybrid: BM25 + TART-dual distilled from the three-way teacher",
              "hybrid+tart_distil_e5t+e5": "hybrid: BM25 + TART-dual distilled from the three-way teacher + e5",
              "tart_distil_mpnet_t": "TART-dual distilled from BM25 + mpnet (teacher reads 128 tokens; without the dev "
                                     "tasks)",
              "hybrid+tart_distil_mpnet_t": "hybrid: BM25 + TART-dual distilled from the BM25 + mpnet teacher",
              "tart_soup_teachers": "TART-dual soup: the seed-1 dev-out student and the mpnet-teacher student averaged",
              "hybrid+tart_soup_teachers": "hybrid: BM25 + the two-teacher soup",
              "tart_distil_ict": "TART-dual distilled without the dev tasks, plus inverse-cloze tasks from scitldr and "
                                 "medquad (300 queries per task)",
              "hybrid+tart_distil_ict": "hybrid: BM25 + TART-dual distilled with inverse-cloze tasks",
              "hybrid+tart_distil_ict+e5": "hybrid: BM25 + TART-dual distilled with inverse-cloze tasks + e5",
              "tart_distil_upr": "TART-dual distilled without the dev tasks from UPR (SmolLM2) as the teacher",
              "hybrid+tart_distil_upr": "hybrid: BM25 + TART-dual distilled from UPR",
              "hybrid+tart_distil_upr+e5": "hybrid: BM25 + TART-dual distilled from UPR + e5",
              "tart_soup_ict": "TART-dual soup: the dev-out and inverse-cloze students averaged",
              "hybrid+tart_soup_ict": "hybrid: BM25 + the dev-out / inverse-cloze soup",
              "hybrid+tart_soup_ict+e5": "hybrid: BM25 + the dev-out / inverse-cloze soup + e5",
              "tart_dual_pooled": "TART-dual, berri-lite mixture, unfollowing negatives from the pooled corpora",
              "hybrid+tart_dual_pooled": "hybrid: BM25 + TART-dual (pooled unfollowing negatives)",
              "tart_dual_pooled_instructed": "TART-dual, berri-lite mixture, pooled unfollowing negatives for "
                                             "instructed anchors only",
              "hybrid+tart_dual_pooled_instructed": "hybrid: BM25 + TART-dual (pooled, instructed anchors only)",
              "tart_dual_pooled_mtop": "TART-dual, berri-lite mixture, pooled unfollowing negatives for instructed "
                                       "anchors only, MTOP and MTOP-similar at 500 queries "
                                       "(`tart_dual_berri_pooled_mtop.json`)",
              "hybrid+tart_dual_pooled_mtop": "hybrid: BM25 + TART-dual (pooled, instructed anchors, MTOP at 500)",
              "tart_dual_siblings": "TART-dual, as `tart_dual_berri_pooled_mtop.json` with sibling tasks batched "
                                    "together (`tart_dual_berri_pooled_mtop_siblings.json`)",
              "hybrid+tart_dual_siblings": "hybrid: BM25 + TART-dual (sibling batches)",
              "tart_dual_siblings_instructed": "TART-dual, sibling tasks batched together and always instructed "
                                               "(`tart_dual_berri_siblings_instructed.json`)",
              "hybrid+tart_dual_siblings_instructed": "hybrid: BM25 + TART-dual (sibling batches, always "
                                                      "instructed)",
              "tart_dual_siblings_instructed_seed1": "the same TART-dual recipe, seed 1 "
                                                     "(`tart_dual_berri_siblings_instructed_seed1.json`)",
              "hybrid+tart_dual_siblings_instructed_seed1": "hybrid: BM25 + TART-dual (sibling batches, always "
                                                            "instructed, seed 1)",
              "tart_dual_siblings_dense": "the same TART-dual recipe, unfollowing negatives mined by untrained MiniLM "
                                          "(`tart_dual_berri_siblings_dense.json`)",
              "hybrid+tart_dual_siblings_dense": "hybrid: BM25 + TART-dual (sibling batches, always instructed, "
                                                 "MiniLM-mined unfollowing negatives)",
              "tart_dual_siblings_instructed_e2": "the same TART-dual recipe, 2 epochs "
                                                  "(`tart_dual_berri_siblings_instructed_e2.json`)",
              "hybrid+tart_dual_siblings_instructed_e2": "hybrid: BM25 + TART-dual (sibling batches, always "
                                                         "instructed, 2 epochs)",
              "tart_dual_siblings_instructed_e2_seed1": "the same 2-epoch TART-dual recipe, seed 1 "
                                                        "(`tart_dual_berri_siblings_instructed_e2_seed1.json`)",
              "hybrid+tart_dual_siblings_instructed_e2_seed1": "hybrid: BM25 + TART-dual (sibling batches, always "
                                                               "instructed, 2 epochs, seed 1)",
              # Not zero-shot: the one system trained on SciFact's own corpus (its abstracts, no claims, no labels).
              "scifact_adapt_ict": "NOT zero-shot: the dev-out student adapted to SciFact's corpus by the inverse "
                                   "cloze task (1,000 sentences of its abstracts; no claims, no labels)",
              "hybrid+scifact_adapt_ict": "NOT zero-shot: hybrid: BM25 + the student adapted to SciFact's corpus",
              "hybrid+scifact_adapt_ict+e5": "NOT zero-shot: hybrid: BM25 + the student adapted to SciFact's corpus "
                                             "+ e5"}

    rerankers = {"upr": "UPR (SmolLM2)", "upr384": "UPR (SmolLM2, 384 document tokens)",
                 "upr_both": "UPR (SmolLM2, instructed and bare prompts averaged)",
                 "upr_gemma3": "UPR (gemma-3-270m)",
                 "upr_ensemble": "UPR (SmolLM2 and gemma-3-270m averaged)", "yesno": "yes/no SmolLM2 (zero-shot)",
                 "yesno_tuned": "yes/no SmolLM2 fine-tuned as TART-full (560 berri-lite rows)",
                 "yesno_gpu": "yes/no SmolLM2 fine-tuned as TART-full on an H100 (8,095 berri-lite rows)",
                 "tart_ql_gpu": "SmolLM2 fine-tuned by query likelihood as TART-full on an H100 (8,095 berri-lite rows)",
                 "tart_ql_gpu_b": "the query-likelihood TART-full trained again (same recipe, second H100 run)",
                 "tart_full": "TART-full"}

    def label(name: str) -> str:
        if name.endswith("_rrf"):
            return f"{label(name[:-len('_rrf')])}, reciprocal-rank fusion (no weight)"
        # the three-way fusion's other share choices (its own: BM25's share from the two-way hybrid, e5's on the
        # dev tasks along that line)
        if name.endswith("_joint"):
            return f"{label(name[:-len('_joint')])}, all three shares chosen at once on the dev tasks"
        if name.endswith("_equal"):
            return f"{label(name[:-len('_equal')])}, a third each (no weight chosen)"
        stem, wise, weight = name.rpartition("_wise")
        if wise and weight.replace(".", "", 1).isdigit():  # see tart_berri.py --wise-ft
            return f"{label(stem)}, weights averaged with untrained MiniLM (WiSE-FT, base share {weight})"
        first, _, reranker = name.rpartition("+")
        raw = reranker.endswith("_raw")
        reranker = reranker[:-len("_raw")] if raw else reranker
        reranker, top, depth = reranker.rpartition("_top")  # FIRST+NAME_topN: reranked N deep, not 10
        reranker, depth = (reranker, f" (top {depth})") if top and depth.isdigit() else (reranker + top + depth, "")
        base, _, other = first.rpartition("+")
        if base and other in rerankers and reranker in rerankers:  # two rerankings averaged (tart_berri's FIRST+NAME+upr)
            first, what = base, f"{rerankers[other]} and {rerankers[reranker]} averaged"
        elif first and reranker in rerankers:
            what = rerankers[reranker]
        else:
            return labels.get(name, name)
        return (f"{labels.get(first, first)}, {what} reranking alone{depth}" if raw else
                f"{labels.get(first, first)}, reranked by {what}{depth} and interpolated")

    def shares(name: str, v: dict) -> str:  # one weight (the first component's share), or every component's share
        named = {k: w for k, w in v.items() if k not in ("dev_mean_ndcg", "best", "confidence")}
        text = " ".join(f"{w}" for w in named.values()) if len(named) == 1 else "/".join(
            f"{k} {w}" for k, w in named.items())
        if "confidence" in v:  # a reranker's guarded weight (taskret.tart.fusion.choose_weight)
            if v["best"] != next(iter(named.values())):
                return text + f" (best {v['best']} held in {v['confidence']:.0%}: first stage kept)"
            return text + (f" (held in {v['confidence']:.0%})" if v["best"] != 1.0 else "")
        return text + (" (unguarded)" if label(name).endswith("and interpolated") else "")

    weights = "; ".join(f"{name} {', '.join(f'{c}: {shares(name, v)}' for c, v in cols.items())}"
                        for name, cols in d["weights"].items())
    overlap = (" Trained on dev tasks (their dev scores are in-domain, so the weights favour them): " + "; ".join(
        f"{name} ({', '.join(tasks)})" for name, tasks in d["dev_overlap"].items()) + "."
        if d.get("dev_overlap") else "")
    out = [f"TART zero-shot on SciFact test ({d['n_scifact_queries']} claims), NDCG@10 ({' then '.join(f'`{c}`' for c in d['commands'])}; "
           f"{describe_machine(d['machine'])}{'; ' + d['compute_note'] if d.get('compute_note') else ''}). Fusion weights chosen on the dev "
           f"queries of {', '.join(d['dev_tasks'])} ({d['dev_limit']} each), never on SciFact: {weights}. "
           f"Rerankers reorder the first stage's top {d['rerank_depth']} unless a row says otherwise. A reranker's "
           "weight is its first stage's share, chosen as `taskret tart tune-weight --rerank` chooses it: over 0.1-1, "
           "and kept only if the best weight beats the first stage alone in at least 95% of 2,000 paired bootstrap "
           "resamples of the dev queries (the share shown), else 1. Weights marked unguarded were chosen before "
           "that guard (grid 0-1, best dev mean) and not rerun: a guard could only keep such a weight or return "
           "the first stage's order, except for a weight of 0." + overlap, "",
           "| system | no instruction | instruction |", "|---|---|---|"]
    for name, cols in d["scifact"].items():
        if not {"no_instruction", "instruction"} & set(cols):
            continue  # run only with the instruction at the reranker: the next table
        shown = [f"{cols[c]:.1f}" if c in cols else "not run" for c in ("no_instruction", "instruction")]
        out.append(f"| {label(name)} | {shown[0]} | {shown[1]} |")
    # tart_berri.py --columns rerank_instruction: the first stage reads the claim alone, the reranker the instructed
    # claim (`taskret tart evaluate --no-first-stage-instruction`)
    reranked = [name for name, cols in d["scifact"].items() if "rerank_instruction" in cols and "+" in name
                and label(name) != name and ("reranked by" in label(name) or "reranking alone" in label(name))]
    if reranked:
        # --columns tart_instruction: the TART-duals and the reranker read the instruction, BM25 and the untrained
        # encoders the claim alone (hybrid:...?read_instruction=0,1,0)
        columns = ["no_instruction", "instruction", "rerank_instruction"]
        header = "| system | no instruction | instruction | instruction to the reranker only |"
        tart_instructed = any("tart_instruction" in d["scifact"][name] for name in reranked)
        if tart_instructed:
            columns.append("tart_instruction")
            header += " instruction to TART-dual and the reranker |"
        out += ["", "The instruction at the reranker only (`--columns rerank_instruction`): the first stage reads the "
                "claim alone, the reranker reads `\"{instruction} [SEP] {claim}\"` (`taskret tart evaluate "
                "--no-first-stage-instruction`); weights chosen on the dev tasks in the same setting. Two decimals: "
                "the target, 75.0, lies within rounding of the best rows."
                + (" To TART-dual and the reranker (`--columns tart_instruction`): the models trained to read an "
                   "instruction read it, BM25 and the untrained encoders (MiniLM, e5) read the claim alone "
                   "(`hybrid:bm25+dense:TART_DUAL+dense:e5-small?...&read_instruction=0,1,0`)."
                   if tart_instructed else ""), "",
                header, "|---" * (len(columns) + 1) + "|"]
        firsts = list(dict.fromkeys(name.rpartition("+")[0] for name in reranked))  # their first stages
        for name in [f for f in firsts if f in d["scifact"]] + reranked:
            cols = d["scifact"][name]
            shown = [f"{cols[c]:.2f}" if c in cols else "not run" for c in columns]
            out.append(f"| {label(name)} | {' | '.join(shown)} |")
    return out


HELD_OUT_LABELS = {
    "bm25": "BM25", "minilm": "MiniLM (untrained)", "tart_dual_held_out": "TART-dual, task held out",
    "tart_dual_all_tasks": "TART-dual, all tasks (task seen)",
    "tart_dual_held_out+upr": "TART-dual held out, reranked by UPR (SmolLM2) and interpolated",
    "tart_dual_held_out+upr_raw": "TART-dual held out, UPR (SmolLM2) reranking alone",
    "tart_dual_held_out_excluded": "TART-dual held out, trained with the instruction excluded from pooling",
    "tart_distil_dev_out_seed1": "TART-dual distilled, dev-out recipe (seed 1)",
    "tart_distil_dev_out_seed1+upr": "dev-out recipe (seed 1) reranked by UPR (SmolLM2) and interpolated",
    "tart_distil_dev_out_seed1+upr_raw": "dev-out recipe (seed 1), UPR (SmolLM2) reranking alone",
    "tart_distil_mpnet_t": "TART-dual distilled, dev-out recipe, BM25 + mpnet teacher",
    "tart_distil_len256": "TART-dual distilled, dev-out recipe (seed 1), trained on 256 tokens",
    "tart_soup_teachers": "soup of the seed-1 and mpnet-teacher students (`taskret tart soup`)",
    "tart_distil_len256_cpu60": "256-token recipe cut to 60 CPU minutes: 180 queries per task",
    "tart_distil_len256_neg2_cpu60": "256-token recipe cut to 60 CPU minutes: 300 queries per task, 2 negatives",
    "tart_distil_len256_neg2_q350_cpu60": "256-token recipe cut to 60 CPU minutes: 350 queries per task, 2 negatives",
    "tart_distil_len256_neg2_q350_cpu60_seed2": "the same 60-minute CPU recipe, seed 2",
    "tart_distil_len256_neg2_q350_cpu60_seed3": "the same 60-minute CPU recipe, seed 3",
    "tart_soup_cpu60": "soup of the 60-minute CPU recipe's three seeds"}


def tart_confidence_table() -> list[str]:
    return _confidence_rows(_load("tart_confidence.json"), "How sure the SciFact numbers are: 95% bootstrap intervals "
                            "over the {n} test claims", "the same claims", "`benchmarks/tart_berri.py`")


def tart_confidence_held_out_table() -> list[str]:
    """One table per ``tart_confidence_held_out*.json`` (each a set of held-out tasks), blank-line separated."""
    out: list[str] = []
    for path in sorted(RESULTS.glob("tart_confidence_held_out*.json")):
        d = _load(path.name)
        sources = [d["source"]] if isinstance(d["source"], str) else d["source"]
        tasks = ", ".join(Path(p).parent.name for p in sources)
        over = (f"of the mean over {len(sources)} tasks ({tasks}), {{n}} dev queries in all, each task's queries "
                "resampled among themselves (stratified)" if len(sources) > 1 else f"over {tasks}'s {{n}} dev queries")
        out += ([""] if out else []) + _confidence_rows(
            d, f"How sure the held-out means are: 95% bootstrap intervals {over}", "the same queries",
            "`benchmarks/studies/tart/tart_held_out.py`")
    return out


def _confidence_rows(d: dict | None, opening: str, paired: str, scorer: str) -> list[str]:
    """A tart_confidence.py result as a table: each system's interval, then each paired difference's."""
    if d is None:
        return []
    out = [opening.format(n=_first_n(d)) + f", {d['resamples']:,} resamples; a difference resamples {paired} for "
           f"both systems (paired), and \"ahead in\" is the share of resamples in which the first system's mean is "
           f"higher (`{d['commands'][0]}`; per-query scores from {scorer}).", "",
           "| NDCG@10 | mean | 95% interval | ahead in |", "|---|---|---|---|"]
    for spec, r in d["systems"].items():
        out.append(f"| {_named(spec, r)} | {r['mean']:.2f} | {r['ci95'][0]:.2f} to {r['ci95'][1]:.2f} | |")
    for spec, r in d["differences"].items():
        out.append(f"| {_named(spec, r)} | {r['mean']:+.2f} | {r['ci95'][0]:+.2f} to "
                   f"{r['ci95'][1]:+.2f} | {r['share_above_zero']:.1%} |")
    return out


def _named(spec: str, row: dict) -> str:
    return f"{row['label']} (`{spec}`)" if row.get("label") else f"`{spec}`"


def _first_n(d: dict) -> str:
    counts = sorted({r["n_queries"] for r in [*d["systems"].values(), *d["differences"].values()]})
    return " / ".join(map(str, counts)) or "0"


def _pair(cols: dict) -> str:
    return " / ".join(f"{cols[c]:.1f}" if c in cols else "not run" for c in ("no_instruction", "instruction"))


def _held_out_rows(d: dict) -> list[str]:
    """The held-out block as a table: one row per system, one column per task, then the mean."""
    tasks = list(d["held_out"])
    out = ["| system | " + " | ".join(tasks) + " | mean |", "|---|" + "---|" * (len(tasks) + 1)]
    for system in sorted(d["held_out_mean"], key=lambda name: "+" in name):  # rerankings after first stages
        cells = [_pair(d["held_out"][t][system]) for t in tasks]
        out.append(f"| {HELD_OUT_LABELS.get(system, system)} | " + " | ".join(cells)
                   + f" | {_pair(d['held_out_mean'][system])} |")
    return out


def _rerank_weights_text(setup: dict) -> str:
    chosen = ", ".join(f"{t} {w['first_stage']}" + (f" ({w['confidence']:.0%})" if "confidence" in w else "")
                       for t, w in setup["rerank_weights"].items())
    if not all("confidence" in w for w in setup["rerank_weights"].values()):
        chosen += " (chosen before the guard of `tune-weight --rerank`, on the grid 0-1)"
    return (f" The reranker reorders the top {setup['rerank_depth']}; its first stage's share is chosen on "
            f"the SciFact benchmark's dev tasks other than the held-out one: {chosen}.")


def tart_held_out_table() -> list[str]:
    d = _load("tart_berri.json")
    if d is None or "held_out" not in d:
        return []
    setup = d["held_out_setup"]
    rerank = ""
    if "rerank_weights" in setup:
        rerank = _rerank_weights_text(setup)
        now = setup.get("rerank_weights_now")
        if now:  # the same weights chosen again under the current rule (tart_held_out.py --weights-only)
            first_stage = "tart_dual_held_out"
            kept = [t for t, w in now["rerank_weights"].items() if w["first_stage"] == 1.0]
            rerank += (" Chosen again with the guard (`" + now["command"] + "`): " + ", ".join(
                f"{t} {w['first_stage']} (best {w['best']}, held in {w['confidence']:.0%})"
                for t, w in now["rerank_weights"].items()) + ". The table's reranked rows were computed with the "
                "weights before the guard (retraining the four held-out models to recompute them costs about an hour "
                "here)" + ("; with weight 1 a reranked row is its first stage's order, so under the guard "
                           + ", ".join(f"{t}'s would read {_pair(d['held_out'][t][first_stage])}" for t in kept)
                           if kept else "") + ".")
    out = [f"TART-dual on tasks it never saw: leave-one-task-out over {len(d['held_out'])} berri-lite tasks, NDCG@10 "
           f"on {setup['dev_queries_per_task']} dev queries each, closed corpus, `no instruction / instruction` "
           f"(`{setup['command']}`; recipe `{setup['recipe']}` at {setup['cap_per_task']} training queries per task; "
           f"{describe_machine(setup['machine'])}).{rerank}"
           + "".join(f" {HELD_OUT_LABELS.get(name, name)}: `{more['command']}` (recipe `{more['recipe']}`)."
                     for name, more in setup.get("more", {}).items()), ""]
    return out + _held_out_rows(d)


def tart_held_out_trained_table() -> list[str]:
    d = _load("tart_held_out_dev_out.json")
    if d is None or "held_out" not in d:
        return []
    setup = d["held_out_setup"]
    rerank = _rerank_weights_text(setup) if "rerank_weights" in setup else ""
    trained_on = sorted({t for tasks in setup["train_tasks"].values() for t in tasks})
    out = [f"Full-size students on tasks none of them saw: the distillation recipe of the SciFact table trains on "
           f"{len(trained_on)} berri-lite tasks ({', '.join(trained_on)}) and never on these {len(d['held_out'])}, "
           f"NDCG@10 on {setup['dev_queries_per_task']} dev queries each, closed corpus, `no instruction / "
           f"instruction` (`{setup['command']}`; nothing trained by the command; {describe_machine(setup['machine'])})."
           f"{rerank}" + "".join(f" {HELD_OUT_LABELS.get(name, name)}: `{more['command']}`."
                                 for name, more in setup.get("more", {}).items()), ""]
    return out + _held_out_rows(d)


def _seed_spread(variants: dict, names: list[str], column: str) -> str:
    values = [variants[n]["scifact"][column] for n in names]
    return f"{sum(values) / len(values):.2f} ({min(values):.1f}-{max(values):.1f})"


def tart_distil_sweep_table() -> list[str]:
    d = _load("tart_distil_sweep_gpu.json")
    if d is None:
        return []
    gpu = d["device"].split(",")[0]
    base, minilm = d["baselines"]["bm25"], d["baselines"]["minilm"]
    out = [f"The 256-token distillation recipe (`{d['base']}`) trained again on a GPU ({gpu}, in "
           f"{len(d['calls'])} calls of `benchmarks/studies/tart/device/run_sweep.sh`, scored there by `tart_berri.py` and "
           "`tart_held_out.py --trained-without` as on the CPU): every variant starts from the CPU run's rows and "
           "cached teacher scores and changes only the fields named. SciFact test NDCG@10 alone and in the "
           "dev-weighted hybrid with BM25; held-out dev-task mean over the four dev tasks (100 queries each), never "
           "trained on; all `no instruction / instruction`. The dev tasks choose the variant (best mean of both "
           f"columns): **{d['selected']}**.", "",
           "| student | changes | SciFact alone | hybrid with BM25 | held-out dev mean | GPU training |",
           "|---|---|---|---|---|---|",
           f"| BM25 | - | {_pair(base['scifact'])} | - | {_pair(base['held_out_mean'])} | - |",
           f"| MiniLM (untrained) | - | {_pair(minilm['scifact'])} | {_pair(d['baselines']['hybrid']['scifact'])} | "
           f"{_pair(minilm['held_out_mean'])} | - |"]
    recipes: dict[str, list[str]] = {}  # the variants that differ only in their seed
    for name, v in d["variants"].items():
        changes = ", ".join(f"{k} {json.dumps(val)}" for k, val in v["overrides"].items())
        label = f"**{name}**" if name == d["selected"] else name
        held = _pair(v["held_out_mean"]) if v["held_out_mean"] else "not run"
        trained = f"{v['train_s']:.0f} s" if v["train_s"] is not None else "earlier call"
        out.append(f"| {label} | {changes} | {_pair(v['scifact'])} | {_pair(v['hybrid'])} | {held} | {trained} |")
        recipe = ", ".join(f"{k} {json.dumps(val)}" for k, val in v["overrides"].items() if k != "seed")
        recipes.setdefault(recipe or "the recipe as it is", []).append(name)
    spreads = [f"{recipe}: {_seed_spread(d['variants'], names, 'no_instruction')} / "
               f"{_seed_spread(d['variants'], names, 'instruction')} ({len(names)} seeds)"
               for recipe, names in recipes.items() if len(names) > 1]
    out += ["", "SciFact alone over seeds, mean (range), `no instruction / instruction`: " + "; ".join(spreads)
            + f"; untrained MiniLM {_pair(minilm['scifact'])}. The first variant of each call includes loading "
              "(~15 s)."]
    return out


def instruction_pooling_table() -> list[str]:
    d = _load("instruction_pooling.json")
    if d is None:
        return []
    out = [f"The instruction in the query vector, SciFact test ({d['n_queries']} claims), NDCG@10 (`{d['command']}`; "
           f"{describe_machine(d['machine'])}). Instruction: \"{d['instruction']}\"; \"excluded\" keeps its tokens "
           "out of the mean pooling (INSTRUCTOR's pooling) while the claim's tokens still attend to them.", "",
           "| model | bare claim | instruction, all tokens pooled | instruction excluded from pooling |",
           "|---|---|---|---|"]
    for name, r in d["scifact"].items():
        trained = ", trained with the instruction excluded" if r.get("trained_excluding_instruction") else ""
        out.append(f"| {name} (`{d['models'][name]}`{trained}) | {r['no_instruction']:.1f} | {r['instruction']:.1f} | "
                   f"{r['instruction_excluded']:.1f} |")
    return out


def tart_full_lm_table() -> list[str]:
    d = _load("tart_full_lm.json")
    if d is None:
        return []
    return [f"TART-full on a causal LM, the cost on this CPU (`{d['commands'][0]}`; {describe_machine(d['machine'])}): "
            f"{d['base']} fine-tuned as a yes/no cross-encoder on {d['n_pairs']} pairs ({d['n_rows']} berri-lite rows, "
            f"batch {d['batch_size']}, {d['max_length']} tokens) trains at **{d['train_pairs_per_s']} pairs/s** and scores "
            f"at {d['score_pairs_per_s']} pairs/s; one epoch of the default recipe's {d['recipe_rows']:,} rows x 5 pairs "
            f"would take ~{d['recipe_epoch_hours']} h here: a GPU job."]


# The benchmark page's sections, each a question (docs/benchmarks.md asks it and answers it by hand above its block):
# each block ``<!-- BENCHMARKS:START NAME ... -->`` holds NAME's tables.
SECTIONS = (
    ("machine", ()),
    ("setups", (lambda: setups_table(detail=True),)),
    ("epr", (icl_table, epr_scale_table, epr_table, lm_transfer_table, analysis_table)),
    ("epr-v2", (epr_beyond_table, lambda: scoring_speed_table("scoring_speed_amx.json"),
                lambda: scoring_precision_table("scoring_precision_amx.json"))),
    ("scifact", (tart_berri_table,)),
    ("tart-dual", (tart_distil_sweep_table, tart_table, tart_trained_table)),
    ("confidence", (tart_confidence_table, tart_confidence_held_out_table)),
    ("instructions", (tart_held_out_table, tart_held_out_trained_table, instruction_pooling_table)),
    ("pooled", (tart_pooled_table, tart_x2_table, tart_x2_scifact_table)),
    ("tart-full", (tart_full_lm_table, tart_in_domain_table)),
    ("speed", (bm25_table, index_speed_table, throughput_table, scoring_speed_table, scoring_precision_table, ray_table)),
    ("serving", (serve_table, dense_latency_table)),
    ("scale", (scale_table,)),
    ("build-memory", (build_memory_table,)),
    ("robustness", (robustness_table,)),
)

# Where the TART study's scripts and configs live now (benchmarks/studies/tart/): a results file's recorded
# commands keep the paths they ran with; the rendered tables show the paths to run them with today.
STUDY = "benchmarks/studies/tart"
STUDY_SCRIPTS = ("hybrid_instruction", "instruction_mix", "instruction_pooling", "tart_held_out", "tart_confidence",
                 "tart_full_lm")
TOP_CONFIGS = ("epr_mtop_small", "epr_mtop_full", *CPU60)  # benchmarks/configs/ keeps the README's


def current_paths(text: str) -> str:
    """``text`` with the moved scripts', configs' and device folder's old paths replaced by their new ones."""
    text = re.sub(r"(?<![\w/])benchmarks/device/", f"{STUDY}/device/", text)
    text = re.sub(r"(?<![\w/])benchmarks/configs/(?!(?:" + "|".join(TOP_CONFIGS) + r")\.json)(\w+\.json)",
                  rf"{STUDY}/configs/\1", text)
    return re.sub(r"(?<![\w/])benchmarks/(" + "|".join(STUDY_SCRIPTS) + r")\.py", rf"{STUDY}/\1.py", text)


def _sections(functions) -> str:
    return "\n".join("\n".join(section) + "\n" for section in (f() for f in functions) if section)


def render() -> str:
    """Every table, one after another."""
    return current_paths(_sections(f for _, functions in SECTIONS for f in functions))


def docs_blocks() -> dict[str, str]:
    """The benchmark page's blocks by name: the machine line, then each question's tables."""
    blocks = {name: current_paths(_sections(functions)) for name, functions in SECTIONS}
    blocks["machine"] = f"All numbers on this page: {MACHINE}; raw results in `benchmarks/results/`.\n"
    return blocks


MARKER = re.compile(r"^<!-- BENCHMARKS:START(?: (?P<name>[\w-]+))? \(.*\) -->$", re.M)


def rewrite_blocks(path: Path, bodies: dict[str | None, str]) -> None:
    """Replace the lines between each ``<!-- BENCHMARKS:START [NAME] (...) -->`` and the next
    ``<!-- BENCHMARKS:END -->`` with ``bodies[NAME]``, atomically; every block needs a body and every body a block."""
    text = path.read_text()
    found = [m.group("name") for m in MARKER.finditer(text)]
    if sorted(map(str, found)) != sorted(map(str, bodies)):
        raise SystemExit(f"{path}: blocks {found} do not match the report's {list(bodies)}")
    parts, at = [], 0
    for m in MARKER.finditer(text):
        stop = text.index(END, m.end())
        parts += [text[at:m.end()], "\n", bodies[m.group("name")]]
        at = stop
    parts.append(text[at:])
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(parts))
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's results block in place")
    parser.add_argument("--docs", type=Path, metavar="PAGE",
                        help="rewrite this Markdown page's blocks, each question's tables (docs/benchmarks.md)")
    args = parser.parse_args()
    if not (args.readme or args.docs):
        print(render())
        return
    if args.readme:
        rewrite_blocks(README, {None: current_paths("\n".join(readme_table()) + "\n"),
                                "setups": "\n".join(setups_table()) + "\n"})
    if args.docs:
        rewrite_blocks(args.docs, docs_blocks())


if __name__ == "__main__":
    main()
