"""The README's results block: at most six rows, each a number beside its baseline, and the commands that
reproduce them (make bench runs each)."""

from __future__ import annotations

from _common import describe_machine

from taskret.icl.evaluation import mcnemar

from . import common
from .common import MACHINE, MTOP_TEST_INPUTS, correct, header, load, p_text
from .epr_beyond import EPR_SHORT
from .epr_tasks import METRIC_NAMES, TASK_NAMES, _paired, task_sections
from .setups import SETUPS_COMMAND

# The README's results and the commands that reproduce them, in the order `make bench` runs them (the Makefile's
# bench target holds each, with --data-dir; a results file's own "commands" keep the history of how it was filled).
CPU60 = ("tart_distil_len256_neg2_q350_cpu60", "tart_distil_len256_neg2_q350_cpu60_seed2",
         "tart_distil_len256_neg2_q350_cpu60_seed3")  # the 60-minute CPU recipe's three seeds


README_COMMANDS = {
    "icl": "python benchmarks/epr/icl_baselines.py --tasks mtop,break --methods random,sbert,bm25 --lm smollm2-135m "
           "--n 300 --seed 0 --context-window 640 --max-new-tokens 128",
    "epr_small": "taskret epr run benchmarks/epr/configs/epr_mtop_small.json",
    "epr_full": "taskret epr run benchmarks/epr/configs/epr_mtop_full.json",
    "epr_beyond": "python benchmarks/epr/epr_beyond.py --tasks mtop --n 0 --methods epr,lm-oracle --base "
                  "mtop=epr:runs/bench/epr_full/mtop/epr --reuse mtop:epr=runs/bench/epr_full/mtop/epr/eval --variant "
                  "bm25=bm25 --reuse mtop:bm25=runs/bench/epr_full/mtop/epr/baseline --variant "
                  "llm-r=epr:runs/bench/epr_full/mtop/llm-r --reuse mtop:llm-r=runs/bench/epr_full/mtop/llm-r/eval "
                  "--variant udr=epr:runs/bench/epr_full/mtop/udr --reuse mtop:udr=runs/bench/epr_full/mtop/udr/eval "
                  "--variant ceil=epr:runs/bench/epr_full/mtop/ceil --reuse "
                  "mtop:ceil=runs/bench/epr_full/mtop/ceil/eval --work runs/bench/epr_full/beyond",
    "setups": SETUPS_COMMAND,
    "docs": "python benchmarks/documents/tart_berri.py --systems bm25,minilm,hybrid,upr --columns no_instruction,rerank_instruction "
            "--rerank-first hybrid --merge",
    "docs_e5": "python benchmarks/documents/tart_berri.py --systems bm25,minilm,e5,hybrid,upr --rerank-depth 20 "
               "--columns no_instruction,rerank_instruction --rerank-first hybrid+minilm+e5 --merge",
    **{f"train_{n}": f"taskret tart run benchmarks/documents/configs/{n}.json" for n in CPU60},
    "tart_dual": "python benchmarks/documents/tart_berri.py --systems bm25 " + " ".join(
        f"--tart-dual {n}=runs/{n}/distil" for n in CPU60) + " --merge",
}


def readme_table() -> list[str]:
    """The README's results: at most six rows, each a number beside its baseline, each with its commands."""
    rows, notes = [], []
    cited: list[str] = []
    commands = dict(README_COMMANDS)  # and those a result file records (epr_tasks.json's)

    def cite(*keys: str) -> str:
        marks = []
        for key in keys:
            if key not in cited:
                cited.append(key)
            marks.append(f"[{cited.index(key) + 1}]")
        return " ".join(marks)

    icl = load("icl_baselines.json")
    bm25_correct = correct(common.RESULTS / "icl_baselines/mtop/bm25/predictions.jsonl")
    if icl and bm25_correct:
        bm25 = next(r["metrics"]["em"] for r in icl["results"] if r["task"] == "mtop" and r["retriever"] == "bm25")
        for name, scale, key in (("epr_mtop_small", "300 x 8", "epr_small"),):
            summary, mine = load(f"{name}/eval/summary.json"), correct(common.RESULTS / f"{name}/eval/predictions.jsonl")
            if summary and mine and mine.keys() == bm25_correct.keys():
                only_epr, only_bm25, p = mcnemar(mine, bm25_correct)
                rows.append(f"| MTOP in-context examples for SmolLM2-135M, exact match, {summary['n']} test inputs | "
                            f"`examples-epr:DIR`, {scale} LM-scored pairs | **{summary['metrics']['em']:.1f}** "
                            f"(`examples-bm25` {bm25:.1f}; {only_epr} / {only_bm25} solved by one only, {p_text(p)}) | "
                            f"{cite('icl', key)} |")
    beyond = (load("epr_beyond.json") or {}).get("mtop", {})
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
                    f"{test['only_method']} / {test['only_epr']} solved by one only, {p_text(test['p'])}) | "
                    f"{cite('epr_beyond')} |")
        gpu = (" (its evaluation; its training rounds and their LM scoring ran on one H200: "
               "`docs/how-to/gpu.md`)" if row.get("training_cost", {}).get("gpu_stages") else "")
        notes.append(f"The EPR-successor row ({cite('epr_beyond')}) was measured on "
                     f"{describe_machine(load('epr_beyond.json')['machine'])}{gpu}.")
    berri = load("tart_berri.json")
    sci = berri["scifact"] if berri else {}
    setups = (load("setups.json") or {}).get("tasks", {}).get("scifact", {}).get("results", {})
    if {"bm25", "docs-fast", "docs-rerank"} <= setups.keys():  # the setups as a user runs them
        claims = f"SciFact zero-shot, NDCG@10, {setups['bm25']['n_queries']} claims"
        bm25, fast = setups["bm25"]["ndcg@10"], setups["docs-fast"]["ndcg@10"]
        rows.append(f"| {claims} | `docs-fast` | **{fast:.1f}** (BM25 {bm25:.1f}) | {cite('setups')} |")
        rows.append(f"| {claims} | `docs-rerank` (the instruction at the reranker) | "
                    f"**{setups['docs-rerank']['ndcg@10']:.1f}** (`docs-fast` {fast:.1f}) | {cite('setups')} |")
        notes.append(f"The `docs-fast` and `docs-rerank` rows ({cite('setups')}) were measured on "
                     f"{describe_machine(load('setups.json')['machine'])}; the machine line below is the others'.")
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
    tasks = load("epr_tasks.json") or {}
    beyond_mtop = [(task, section) for task, section in task_sections(tasks).items()
                   if {"bm25", "recipe"} <= section["methods"].keys()]
    if beyond_mtop:  # the recipe on each other task at its whole test set, side by side in one row
        commands["epr_tasks"] = tasks["command"]
        cells = []
        for task, section in beyond_mtop:
            methods = section["methods"]
            recipe, bm25 = methods["recipe"], methods["bm25"]
            epr = (f"; plain EPR {methods['epr']['score']:.1f}, {p_text(recipe['vs_epr']['p'])}"
                   if "epr" in methods and "vs_epr" in recipe else "")
            cells.append(f"{TASK_NAMES.get(task, task)} {METRIC_NAMES.get(section['metric'], section['metric'])}, "
                         f"{recipe['n']} inputs: **{recipe['score']:.1f}** (BM25 {bm25['score']:.1f}, "
                         f"{_paired(recipe, 'vs_bm25')}{epr})")
        rows.append(f"| In-context examples beyond MTOP, every test input | `listwise`, one round (no LM calls beyond plain EPR's) | "
                    f"{'; '.join(cells)} | {cite('epr_tasks')} |")
    if not rows:
        return []
    return [*header("job, metric", "setup", "result (baseline)", "command"), *rows, "",
            *(f"{i}. `{commands[key]}`" for i, key in enumerate(cited, 1)), "",
            *([" ".join(notes), ""] if notes else []), f"Machine: {MACHINE}."]  # the notes as one paragraph
