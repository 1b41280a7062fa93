"""The recipe beyond MTOP: the headroom pilot that chooses the tasks (headroom.json, benchmarks/epr/headroom.py), then
each chosen task at one label budget on all its test inputs, and the multitask retriever on held-out tasks
(epr_tasks.json, benchmarks/epr/epr_tasks.py)."""

from __future__ import annotations

from _common import describe_machine

from .common import header, load, p_text, prefixed, simd_kind

METHOD_NAMES = {"bm25": "BM25", "epr": "plain EPR", "recipe": "the recipe", "lm_oracle": "LM-Oracle"}
METRIC_NAMES = {"lf_em": "LF-EM", "chrf": "chrF", "em": "EM", "accuracy": "accuracy"}
TASK_NAMES = {"trec": "TREC", "geoquery": "GeoQuery", "sst2": "SST-2", "sst5": "SST-5", "atis": "ATIS", "mtop": "MTOP"}
LM_NAMES = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}


def headroom_table() -> list[str]:
    """Per task and LM, on the pilot's seeded test inputs: random, BM25 and the LM-Oracle, the gap with its interval
    beside what the task's full test N can detect, the verdict, and what the LM costs on the machine that ran it."""
    d = load("headroom.json")
    if d is None or not d.get("tasks"):
        return []
    out = [f"`{d['command']}` ({describe_machine(d['machine'])}, each row's CPU kind beside its timings, which hold "
           f"only there; each row on {d['n']} seeded test inputs; gap = "
           "LM-Oracle minus BM25 with its paired bootstrap 95% interval; detectable = the smallest difference the "
           "task's whole test set detects at 80% power, from the pilot's pairs; at the floor when the gap is under "
           "twice that):", "",
           *header("task", "LM", "metric", "N (full N)", "random", "BM25", "LM-Oracle", "gap [95% CI]",
                   "detectable at full N", "verdict", "s per LM-scored pair", "s per answer (engine)")]
    for task, rows in d["tasks"].items():
        for lm_name, row in rows.items():
            low, high = row["gap_ci95"]
            detectable = row["min_detectable_diff_full_n"]
            verdict = "at the floor" if row["floor"] else "passes"
            per_pair = f"{row['s_per_pair']:.3f}" if row.get("s_per_pair") is not None else ""
            out.append(f"| {task} | {LM_NAMES.get(lm_name, lm_name)} | {METRIC_NAMES.get(row['metric'], row['metric'])} "
                       f"| {row['n']} ({row['n_full']:,}) | {row['random']:.1f} | {row['bm25']:.1f} | "
                       f"{row['lm_oracle']:.1f} | {row['gap']:+.1f} [{low:+.1f}, {high:+.1f}] | "
                       f"{'' if detectable is None else f'{detectable:.2f}'} | {verdict} | {per_pair} | "
                       f"{row['s_per_answer']:.2f} ({row.get('generation_engine', 'transformers')}"
                       f"{prefixed('; ', simd_kind(row.get('machine') or {}))}{_load(row)}) |")
    return out


def _load(row: dict) -> str:
    """The machine's load when the row's evaluations started, where recorded: a timing holds only under 1.5."""
    load = row.get("load_average_at_start")
    return "" if load is None else f"; load {load:.1f}"


def _paired(row: dict, key: str) -> str:
    """``only it / only the other, p, [CI]`` (a verdict) or ``higher for it / for the other, p, [CI]`` (a score)."""
    if key not in row:
        return ""
    v = row[key]
    mine, other = (v["only_method"], v["only_other"]) if "only_method" in v else (v["higher_method"], v["higher_other"])
    low, high = v["diff_ci95"]
    return f"{mine} / {other}, {p_text(v['p'], 3)}, [{low:+.1f}, {high:+.1f}]"


def _cost(cost: dict) -> str:
    calls = cost.get("lm_calls")
    parts = [f"{calls:,} LM calls" if calls is not None else "LM calls not kept"]
    if cost.get("gpu_minutes") is not None:
        parts.append(f"{cost['gpu_minutes']:.1f} GPU min")
    if cost.get("cpu_hours"):
        parts.append(f"{cost['cpu_hours']:.1f} h CPU")
    return ", ".join(parts)


def task_sections(d: dict) -> dict[str, dict]:
    """epr_tasks.json's per-task sections (beside its command, machine and held-out parts)."""
    return {task: section for task, section in d.items() if isinstance(section, dict) and "methods" in section}


def _machines(d: dict) -> str:
    """The one machine every evaluation ran on, or each task's where tasks ran on different machines (a task's own
    methods always on one: they are paired)."""
    if d.get("machine"):
        return describe_machine(d["machine"]) + prefixed(", ", simd_kind(d["machine"]))
    by_machine: dict[str, list[str]] = {}
    for name, info in d.get("machines", {}).items():
        line = describe_machine(info) + prefixed(", ", simd_kind(info)) + prefixed(", LM in ", info.get("dtype") or "")
        task = name.removeprefix("held_out/")
        by_machine.setdefault(line, []).append(("held-out " if task != name else "") + TASK_NAMES.get(task, task))
    return "; ".join(f"{', '.join(names)} on {line}" for line, names in by_machine.items())


def epr_tasks_table() -> list[str]:
    """Each task's methods on all its test inputs, paired with BM25 and plain EPR; then the held-out tasks."""
    d = load("epr_tasks.json")
    if d is None:
        return []
    out = [f"`{d['command']}` ({_machines(d)}; SmolLM2-135M, every method on the same test inputs; "
           "paired: inputs only it / only the other gets right (McNemar) or on which it / the other scores higher "
           "(Wilcoxon), p, the paired bootstrap's 95% interval of the difference):", "",
           *header("task", "method", "N", "score", "share of the BM25 -> LM-Oracle gap", "against BM25",
                   "against plain EPR", "cost of its retriever")]
    tasks = list(task_sections(d))
    for task in tasks:
        section = d[task]
        metric = METRIC_NAMES.get(section["metric"], section["metric"])
        for method, row in section["methods"].items():
            share = f"{row['gap_share']:.2f}" if row.get("gap_share") is not None else ""
            out.append(f"| {task} | {METHOD_NAMES.get(method, method)} | {row['n']} | {row['score']:.1f} {metric} | "
                       f"{share} | {_paired(row, 'vs_bm25')} | {_paired(row, 'vs_epr')} | {_cost(row['cost'])} |")
    labels = [f"{task} {_cost(d[task]['labelling_cost'])} for {d[task]['labelling_cost'].get('labelled_inputs') or '?'} "
              "labelled inputs" for task in tasks]
    if labels:
        out += ["", "Labels (LM scorings of training pairs, shared by plain EPR and the recipe): " + "; ".join(labels)
                + "."]
    held = d.get("held_out")
    if held:
        out += ["", "Held out: one retriever trained on the other tasks' labels (the recipe's loss), each query "
                "written `{instruction} [SEP] {input}`, against BM25 and the task's own single-task retriever:", "",
                *header("held-out task", "metric", "N", "multitask", "BM25", "single-task", "against BM25",
                        "against single-task")]
        for task, row in held.items():
            out.append(f"| {task} | {METRIC_NAMES.get(row['metric'], row['metric'])} | {row['n']} | "
                       f"{row['multitask']:.1f} | {row['bm25']:.1f} | {row['single_task']:.1f} | "
                       f"{_paired(row, 'vs_bm25')} | {_paired(row, 'vs_single_task')} |")
        mean = d["held_out_mean"]
        out += ["", f"Mean over the held-out tasks: multitask {mean['multitask']:.1f}, BM25 {mean['bm25']:.1f}, "
                f"single-task {mean['single_task']:.1f}."]
    return out
