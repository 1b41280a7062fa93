"""SciFact zero-shot, every first stage and reranker, and how sure and how general its numbers are
(benchmarks/documents/tart_berri.py and the TART study: tart_berri.json, tart_confidence*.json)."""

from __future__ import annotations

from pathlib import Path

from _common import describe_machine

from . import common
from .common import header, instruction_pair, load


def tart_berri_table() -> list[str]:
    d = load("tart_berri.json")
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
           *header("system", "no instruction", "instruction")]
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
        names = ["system", "no instruction", "instruction", "instruction to the reranker only"]
        tart_instructed = any("tart_instruction" in d["scifact"][name] for name in reranked)
        if tart_instructed:
            columns.append("tart_instruction")
            names.append("instruction to TART-dual and the reranker")
        out += ["", "The instruction at the reranker only (`--columns rerank_instruction`): the first stage reads the "
                "claim alone, the reranker reads `\"{instruction} [SEP] {claim}\"` (`taskret tart evaluate "
                "--no-first-stage-instruction`); weights chosen on the dev tasks in the same setting. Two decimals: "
                "the target, 75.0, lies within rounding of the best rows."
                + (" To TART-dual and the reranker (`--columns tart_instruction`): the models trained to read an "
                   "instruction read it, BM25 and the untrained encoders (MiniLM, e5) read the claim alone "
                   "(`hybrid:bm25+dense:TART_DUAL+dense:e5-small?...&read_instruction=0,1,0`)."
                   if tart_instructed else ""), "",
                *header(*names)]
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
    return _confidence_rows(load("tart_confidence.json"), "How sure the SciFact numbers are: 95% bootstrap intervals "
                            "over the {n} test claims", "the same claims", "`benchmarks/documents/tart_berri.py`")


def tart_confidence_held_out_table() -> list[str]:
    """One table per ``tart_confidence_held_out*.json`` (each a set of held-out tasks), blank-line separated."""
    out: list[str] = []
    for path in sorted(common.RESULTS.glob("tart_confidence_held_out*.json")):
        d = load(path.name)
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
           *header("NDCG@10", "mean", "95% interval", "ahead in")]
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


def _held_out_rows(d: dict) -> list[str]:
    """The held-out block as a table: one row per system, one column per task, then the mean."""
    tasks = list(d["held_out"])
    out = header("system", *tasks, "mean")
    for system in sorted(d["held_out_mean"], key=lambda name: "+" in name):  # rerankings after first stages
        cells = [instruction_pair(d["held_out"][t][system]) for t in tasks]
        out.append(f"| {HELD_OUT_LABELS.get(system, system)} | " + " | ".join(cells)
                   + f" | {instruction_pair(d['held_out_mean'][system])} |")
    return out


def _rerank_weights_text(setup: dict) -> str:
    chosen = ", ".join(f"{t} {w['first_stage']}" + (f" ({w['confidence']:.0%})" if "confidence" in w else "")
                       for t, w in setup["rerank_weights"].items())
    if not all("confidence" in w for w in setup["rerank_weights"].values()):
        chosen += " (chosen before the guard of `tune-weight --rerank`, on the grid 0-1)"
    return (f" The reranker reorders the top {setup['rerank_depth']}; its first stage's share is chosen on "
            f"the SciFact benchmark's dev tasks other than the held-out one: {chosen}.")


def tart_held_out_table() -> list[str]:
    d = load("tart_berri.json")
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
                           + ", ".join(f"{t}'s would read {instruction_pair(d['held_out'][t][first_stage])}" for t in kept)
                           if kept else "") + ".")
    out = [f"TART-dual on tasks it never saw: leave-one-task-out over {len(d['held_out'])} berri-lite tasks, NDCG@10 "
           f"on {setup['dev_queries_per_task']} dev queries each, closed corpus, `no instruction / instruction` "
           f"(`{setup['command']}`; recipe `{setup['recipe']}` at {setup['cap_per_task']} training queries per task; "
           f"{describe_machine(setup['machine'])}).{rerank}"
           + "".join(f" {HELD_OUT_LABELS.get(name, name)}: `{more['command']}` (recipe `{more['recipe']}`)."
                     for name, more in setup.get("more", {}).items()), ""]
    return out + _held_out_rows(d)


def tart_held_out_trained_table() -> list[str]:
    d = load("tart_held_out_dev_out.json")
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
