"""How fast each stage runs (benchmarks/speed/): BM25 candidate search, indexing, LM throughput, scoring speed and
precision, Ray scoring (bm25_speed.json, index_speed.json, lm_throughput.json, scoring_*.json, ray_scoring.json)."""

from __future__ import annotations

from _common import describe_machine

from .common import header, load


def bm25_table() -> list[str]:
    d = load("bm25_speed.json")
    if not d:
        return []
    return [f"Candidate search (`{d['command']}`): top-{d['k']} for each of the {d['n_queries']} Break training "
            f"examples against the Break training set, by output, one thread.", "",
            *header("library", "seconds", "queries/s"),
            f"| bm25s | {d['bm25s_s']} | {d['bm25s_queries_per_s']} |",
            f"| rank_bm25 | {d['rank_bm25_s']} | {d['rank_bm25_queries_per_s']} |",
            "", f"bm25s is **{d['speedup']}x** faster; top-50 overlap between the two {d['top50_overlap']} "
            "(they differ in IDF flooring)."]


def index_speed_table() -> list[str]:
    """Indexing a corpus with the docs-fast first stage: float32 against the dtype ``auto`` picks, paired in one run."""
    d = load("index_speed.json")
    if not d:
        return []
    out = [f"Indexing SciFact's {d['n_docs']:,} abstracts with `{d['retriever']}` (`{d['command']}`; "
           f"{describe_machine(d['machine'])}): each way run in alternating rounds in one process.", "",
           *header("round", "encoder dtype", "index s", "CPU s", "docs/s", "NDCG@10", "load average after")]
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
    d = load("lm_throughput.json")
    if not d:
        return []
    out = [f"LM throughput (`{d['command']}`; {describe_machine(d['machine'])}).", "",
           *header("max batch tokens", "generation examples/s", "prompt tokens/s", "generated tokens/s",
                   "scoring pairs/s", "scoring tokens/s")]
    for r in d["results"]:
        g, s = r["generation"], r["scoring"]
        out.append(f"| {r['max_batch_tokens']} | {g['examples_per_s']} | {g['prompt_tokens_per_s']} | "
                   f"{g['generated_tokens_per_s']} | {s['pairs_per_s']} | {s['tokens_per_s']} |")
    return out


def scoring_speed_table(name: str = "scoring_speed.json") -> list[str]:
    d = load(name)
    if not d:
        return []
    t, b = d["taskret"], d["batch_size_1_loop"]
    shard = d.get("shard")
    what = (f"one shard of the pipeline ({shard['examples']} MTOP examples x {shard['n_candidates']} BM25 candidates, "
            f"{d['n_pairs']} pairs, {shard['pairs_per_candidate']} pairs per distinct candidate)" if shard
            else f"{d['n_pairs']} MTOP (example, candidate) pairs")
    out = [f"EPR scoring throughput (`{d['command']}`; {describe_machine(d['machine'])}; {d['lm']} in {d['dtype']}): {what}, "
           f"{d['n_target_tokens']} target tokens, batches of up to {d['max_batch_tokens']} tokens.", "",
           *header("scorer", "seconds", "pairs/s", "target tokens/s", "speed-up"),
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


def scoring_precision_table(name: str = "scoring_precision.json") -> list[str]:
    d = load(name)
    if not d:
        return []
    out = [f"EPR scoring precision (`{d['command']}`; {describe_machine(d['machine'])}; {d['n_pairs']} pairs of one output-ordered "
           "shard): agreement of each precision's candidate ranking with float32's, per training example.", "",
           *header("precision", "pairs/s", "speed-up", "max abs log-prob diff", "Spearman mean (min)", "top-5 kept",
                   "bottom-5 kept")]
    for r in d["runs"]:
        if r["precision"] == "float32":
            out.append(f"| float32 | {r['pairs_per_s']} | 1.00x | 0 | 1 | 100% | 100% |")
        else:
            out.append(f"| {r['precision']} | {r['pairs_per_s']} | {r['speedup']:.2f}x | {r['max_abs_logprob_diff']} | "
                       f"{r['spearman_mean']} ({r['spearman_min']}) | {r['top5_kept']:.0%} | {r['bottom5_kept']:.0%} |")
    return out


def ray_table() -> list[str]:
    d = load("ray_scoring.json")
    if not d:
        return []
    out = [f"EPR scoring on Ray (`{d['command']}`; {d['lm']}, {d['n_pairs']} pairs, shards of {d['shard_size']} "
           "examples, a local Ray cluster on this 2-core machine):", "",
           *header("run", "scoring s", "pairs/s", "output identical to the local scorer")]
    for r in d["runs"]:
        out.append(f"| {r['run']} | {r['scoring_s']} | {r['pairs_per_s']} | "
                   f"{'yes' if r['identical'] else 'no'} (max diff {r['max_abs_diff']}) |")
    return out


def lm_engines_table() -> list[str]:
    """Each LM engine on the same inputs (lm_engines.json): generation and scoring rates against transformers in
    float32, their agreement with it, and the machine's bounds measured in the same run."""
    d = load("lm_engines.json")
    if not d:
        return []
    engines, bounds = d["engines"], d["bounds"]
    out = [f"LM engines (`{d['command']}`; {describe_machine(d['machine'])}, load average "
           f"{d['machine']['load_average'][0]} at the report; each row's own load at its start is in the file). "
           f"Reference: {d['reference']}. Default for generation here: **{d['default']}**.", "",
           *header("task", "engine", "answers/s (best batch)", "x reference", "tokens/s", "identical answers",
                   "metric", "paired test")]
    for task in ("mtop", "break", "nl2bash"):
        for name, row in engines.items():
            g = row.get("generation", {}).get(task)
            if not g:
                continue
            metric = ", ".join(f"{k} {v:.1f}" for k, v in g["metric"].items())
            check = d["em_within_noise"].get(name, {}).get(task)
            test = (f"{check['metric']} p={check['p']:.2f}, diff {check['diff_ci95']}" if check else "-")
            out.append(f"| {task} ({g['n']}) | {name} | {g['answers_per_s']:.3f} | {g.get('speedup', '-')} | "
                       f"{g['tokens_per_s']:.1f} | {g.get('same_as_reference', '-')} | {metric} | {test} |")
    single = [(task, name, row["batch1"][task]) for task in ("mtop", "break", "nl2bash") for name, row in engines.items()
              if task in row.get("batch1", {})]
    if single:
        out += ["", *header("task (batch 1: the first inputs)", "engine", "answers/s", "tokens/s", "load at start")]
        out += [f"| {task} ({b['n']}) | {name} | {b['answers_per_s']:.3f} | {b['tokens_per_s']:.1f} | "
                f"{b['load_average']} |" for task, name, b in single]
    scored = [(name, row["scoring"]) for name, row in engines.items() if row.get("scoring")]
    if scored:
        out += ["", *header("scoring engine", "pairs/s", "x reference", "Spearman (mean, min)", "top 5 kept",
                            "max abs log-prob diff")]
        for name, s in scored:
            out.append(f"| {name} ({s['n']} pairs) | {s['pairs_per_s']} | {s.get('speedup', '-')} | "
                       f"{s.get('spearman_mean', '-')}, {s.get('spearman_min', '-')} | {s.get('top5_kept', '-')} | "
                       f"{s.get('max_abs_logprob_diff', '-')} |")
    out += ["", f"The machine in the same run: float32 matrix products {bounds['matmul_gflops_float32']} GFLOP/s, "
            f"memory reads {bounds['memory_read_gbps']} GB/s ({bounds['threads']} threads). What they allow:", "",
            *header("task", "mean prompt tokens", "prefill bound (tokens/s)",
                    "prompt tokens/s reached, per engine", "batch-1 float32 step bound (ms)")]
    for task, b in bounds["per_task"].items():
        reached = ", ".join(f"{name} {row['generation'][task]['prompt_tokens_per_s']}"
                            for name, row in engines.items() if task in row.get("generation", {}))
        out.append(f"| {task} | {b['mean_prompt_tokens']} | {b['prefill_tokens_per_s']} | {reached or '-'} | "
                   f"{b['decode_step_ms_float32_batch1']} |")
    return out
