"""TART zero-shot and trained, pooled corpora, the distillation sweep, TART-full's cost (benchmarks/documents/ and
the TART study: tart_zero_shot.json, tart_trained*.json, tart_x2_*.json, tart_distil_sweep_gpu.json,
instruction_pooling.json, tart_full_lm.json)."""

from __future__ import annotations

import json

from _common import describe_machine

from .common import header, instruction_pair, load


def tart_table(name: str = "tart_zero_shot.json",
               title: str = "TART zero-shot retrieval, no training yet") -> list[str]:
    d = load(name)
    if not d:
        return []
    sf = d["scifact_test"]
    out = [f"{title} (`{d['command']}`).", "",
           f"SciFact test, {sf['n_queries']} claims, {sf['n_docs']} abstracts, NDCG@10 (BEIR paper BM25: "
           f"{sf['reference_bm25_ndcg@10_beir']}):", "", *header("retriever", "no instruction", "with instruction")]
    for name, r in sf["results"].items():
        out.append(f"| {name} | {r['no_instruction']['ndcg@10']} | {r['instruction']['ndcg@10']} |")
    ct = d["cross_task"]
    tasks = list(ct["tasks"])
    out += ["", f"Closed (own corpus) -> pooled (all {ct['pooled_n_docs']} documents) NDCG@10, {ct['limit']} queries "
            "per task:", "", *header("retriever", "instruction", *tasks, "mean gap")]
    for name, by_mode in ct["ndcg@10"].items():
        for mode, r in by_mode.items():
            cells = [f"{r['closed'][t]:.1f} -> {r['pooled'][t]:.1f}" for t in tasks]
            out.append(f"| {name} | {mode.replace('_', ' ')} | " + " | ".join(cells) + f" | {r['gap']['mean']:+.2f} |")
    return out


def tart_trained_table(name: str = "tart_trained.json") -> list[str]:
    d = load(name)
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
           *header("system", "no instruction", "with instruction", "eval time (s)")]
    for system, r in sf["results"].items():
        if not r:  # left out of this run (--skip)
            continue
        cells = [f"{r[tag]['ndcg@10']:.1f} ({r[tag]['recall@100']:.1f})" if tag in r else "–"
                 for tag in ("no_instruction", "instruction")]
        seconds = " / ".join(f"{r[tag]['eval_s']:.0f}" for tag in ("no_instruction", "instruction") if tag in r)
        out.append(f"| {system} | " + " | ".join(cells) + f" | {seconds} |")
    out += ["", *header("model", "training time (s)")]
    for name, m in tr["models"].items():
        out.append(f"| {name} | {m['wall_time_s']:.0f} |")
    rerank = [r[tag] for r in sf["results"].values() for tag in r if "rerank_pairs_per_s" in r[tag]]
    if rerank:
        out += ["", "Reranking throughput (TART-full, MiniLM cross-encoder): "
                + ", ".join(f"{r['rerank_pairs_per_s']} pairs/s" for r in rerank)
                + f" ({d['machine']['cpu']}, {d['machine']['threads']} torch thread, 256-token pairs)."]
    return out


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
    files = [d for d in (load("tart_x2_mtop.json"), load("tart_x2_mtop_trained.json"),
                         load("tart_x2_mtop_berri.json"), load("tart_x2_mtop_berri_negatives.json")) if d]
    if not files:
        return []
    ct = files[0]["cross_task"]
    tasks = list(ct["tasks"])
    out = ["X^2-style pooled retrieval on MTOP: the same test commands are the queries of two tasks, `mtop` "
           "(the command's parse) and `mtop-similar` (training commands with the same parse template), and the "
           f"pooled corpus ({ct['pooled_n_docs']} documents) holds both kinds; only the instruction says which "
           f"is wanted. {ct['limit']} queries per task; commands: "
           + "; ".join(f"`{d['command']}`" for d in files) + ".", "",
           *header("retriever", "instruction at test", *(f"{t}: closed -> pooled (other kind in top 10)" for t in tasks),
                   "mean gap")]
    for d in files:
        for name, by_mode in d["cross_task"]["results"].items():
            for mode, r in by_mode.items():
                cells = [f"{r['closed'][t]['ndcg@10']:.1f} -> {r['pooled'][t]['ndcg@10']:.1f} "
                         f"({r['pooled'][t]['other_task@10']:.0f}%)" for t in tasks]
                out.append(f"| {X2_NAMES.get(name, name)} | {mode.replace('_', ' ')} | " + " | ".join(cells)
                           + f" | {r['gap_ndcg@10']['mean']:+.2f} |")
    return out


def _seed_spread(variants: dict, names: list[str], column: str) -> str:
    values = [variants[n]["scifact"][column] for n in names]
    return f"{sum(values) / len(values):.2f} ({min(values):.1f}-{max(values):.1f})"


def tart_distil_sweep_table() -> list[str]:
    d = load("tart_distil_sweep_gpu.json")
    if d is None:
        return []
    gpu = d["device"].split(",")[0]
    base, minilm = d["baselines"]["bm25"], d["baselines"]["minilm"]
    out = [f"The 256-token distillation recipe (`{d['base']}`) trained again on a GPU ({gpu}, in "
           f"{len(d['calls'])} calls (configs and training logs: `benchmarks/results/tart_distil_sweep_gpu_logs/`), scored there by `tart_berri.py` and "
           "`tart_held_out.py --trained-without` as on the CPU): every variant starts from the CPU run's rows and "
           "cached teacher scores and changes only the fields named. SciFact test NDCG@10 alone and in the "
           "dev-weighted hybrid with BM25; held-out dev-task mean over the four dev tasks (100 queries each), never "
           "trained on; all `no instruction / instruction`. The dev tasks choose the variant (best mean of both "
           f"columns): **{d['selected']}**.", "",
           *header("student", "changes", "SciFact alone", "hybrid with BM25", "held-out dev mean", "GPU training"),
           f"| BM25 | - | {instruction_pair(base['scifact'])} | - | {instruction_pair(base['held_out_mean'])} | - |",
           f"| MiniLM (untrained) | - | {instruction_pair(minilm['scifact'])} | {instruction_pair(d['baselines']['hybrid']['scifact'])} | "
           f"{instruction_pair(minilm['held_out_mean'])} | - |"]
    recipes: dict[str, list[str]] = {}  # the variants that differ only in their seed
    for name, v in d["variants"].items():
        changes = ", ".join(f"{k} {json.dumps(val)}" for k, val in v["overrides"].items())
        label = f"**{name}**" if name == d["selected"] else name
        held = instruction_pair(v["held_out_mean"]) if v["held_out_mean"] else "not run"
        trained = f"{v['train_s']:.0f} s" if v["train_s"] is not None else "earlier call"
        out.append(f"| {label} | {changes} | {instruction_pair(v['scifact'])} | {instruction_pair(v['hybrid'])} | {held} | {trained} |")
        recipe = ", ".join(f"{k} {json.dumps(val)}" for k, val in v["overrides"].items() if k != "seed")
        recipes.setdefault(recipe or "the recipe as it is", []).append(name)
    spreads = [f"{recipe}: {_seed_spread(d['variants'], names, 'no_instruction')} / "
               f"{_seed_spread(d['variants'], names, 'instruction')} ({len(names)} seeds)"
               for recipe, names in recipes.items() if len(names) > 1]
    out += ["", "SciFact alone over seeds, mean (range), `no instruction / instruction`: " + "; ".join(spreads)
            + f"; untrained MiniLM {instruction_pair(minilm['scifact'])}. The first variant of each call includes loading "
              "(~15 s)."]
    return out


def instruction_pooling_table() -> list[str]:
    d = load("instruction_pooling.json")
    if d is None:
        return []
    out = [f"The instruction in the query vector, SciFact test ({d['n_queries']} claims), NDCG@10 (`{d['command']}`; "
           f"{describe_machine(d['machine'])}). Instruction: \"{d['instruction']}\"; \"excluded\" keeps its tokens "
           "out of the mean pooling (INSTRUCTOR's pooling) while the claim's tokens still attend to them.", "",
           *header("model", "bare claim", "instruction, all tokens pooled", "instruction excluded from pooling")]
    for name, r in d["scifact"].items():
        trained = ", trained with the instruction excluded" if r.get("trained_excluding_instruction") else ""
        out.append(f"| {name} (`{d['models'][name]}`{trained}) | {r['no_instruction']:.1f} | {r['instruction']:.1f} | "
                   f"{r['instruction_excluded']:.1f} |")
    return out


def tart_full_lm_table() -> list[str]:
    d = load("tart_full_lm.json")
    if d is None:
        return []
    return [f"TART-full on a causal LM, the cost on this CPU (`{d['commands'][0]}`; {describe_machine(d['machine'])}): "
            f"{d['base']} fine-tuned as a yes/no cross-encoder on {d['n_pairs']} pairs ({d['n_rows']} berri-lite rows, "
            f"batch {d['batch_size']}, {d['max_length']} tokens) trains at **{d['train_pairs_per_s']} pairs/s** and scores "
            f"at {d['score_pairs_per_s']} pairs/s; one epoch of the default recipe's {d['recipe_rows']:,} rows x 5 pairs "
            f"would take ~{d['recipe_epoch_hours']} h here: a GPU job."]
