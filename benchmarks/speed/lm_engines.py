"""How fast is the LM on this machine, engine by engine, and how close to the machine's limit?

The same inputs go through every engine (``--engines``, LM backends by name) on one machine:

- generation: --mtop MTOP, --break-n Break and --nl2bash nl2bash test inputs (seeded), each prompt filled with BM25
  demonstrations to the budget as ``taskret evaluate`` fills it (--context-window 2048, the answer room from the
  training outputs), greedy, ending at a newline; at each engine's best batch over all inputs, and at batch 1 over
  the first --batch1-n of them;
- scoring: --pairs EPR scoring pairs (training inputs with their top 50 BM25 candidates, as ``taskret epr score``
  cuts them), each engine's fastest path (``score_shared``).

Against the reference engine (transformers in float32) it reports the share of identical greedy answers, the task
metrics on the same inputs with their paired tests (McNemar or Wilcoxon, bootstrap interval), the Spearman
correlation of each training input's candidate scores and the share of its top 5 kept. Beside the engines' rates
stand the machine's own bounds, measured in the same run: float32 matrix products (FLOP/s) and memory reads (GB/s),
and what they allow a prefill (tokens/s) and a batch-1 decoding step (ms).

Every measured part is a shard under --work (``ENGINE/TASK.json``, ``ENGINE/scoring.json``) that records its
machine and load; a run started again skips the shards it holds, and shards from another CPU are not compared.

    python benchmarks/speed/lm_engines.py --data-dir ../shared/data
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, scoring_shard, write_result  # noqa: E402

from taskret.backends import make_backend  # noqa: E402
from taskret.backends.base import cut_at_stop  # noqa: E402
from taskret.data import load_task, sample  # noqa: E402
from taskret.icl.compare import paired_comparison, paired_graded_comparison  # noqa: E402
from taskret.icl.evaluation import GRADED_METRICS, graded_metrics_for, headline_metric, match, metrics_for  # noqa: E402
from taskret.icl.inference import build_prompts  # noqa: E402
from taskret.icl.prompt import PromptBuilder, max_new_tokens_for, prompt_token_budget  # noqa: E402
from taskret.io import read_json, write_json  # noqa: E402
from taskret.models import machine_info  # noqa: E402
from taskret.retrieval import make_retriever  # noqa: E402

REFERENCE = "transformers-float32"
#: engine name -> (LM spec template, backend options at its best batch, options at batch 1)
ENGINES = {
    REFERENCE: ("transformers:{lm}", {"dtype": "float32"}, {"dtype": "float32", "max_batch_size": 1}),
    "llamacpp": ("llamacpp:{lm}", {"max_batch_size": 8}, {"max_batch_size": 1}),
    "llamacpp-q8_0": ("llamacpp:{lm}", {"max_batch_size": 8, "weights": "q8_0"},
                      {"max_batch_size": 1, "weights": "q8_0"}),
}
#: the report's task name -> the task taskret loads
TASKS = {"mtop": "mtop", "break": "break", "nl2bash": "berri-lite/nl2bash"}


# -- inputs -------------------------------------------------------------------------------------------------

def task_prompts(data_dir: str, name: str, n: int, lm, context_window: int, seed: int) -> dict:
    """``n`` seeded test inputs of ``name`` with their prompts as ``taskret evaluate`` builds them."""
    task = load_task(TASKS[name], data_dir=data_dir)
    room, _ = max_new_tokens_for([task.prompt_output(e) for e in task.train], lm.count_tokens)
    room = min(room, context_window // 2)
    budget = prompt_token_budget(context_window, room, lm.context_length)
    examples = sample(task.test, n, seed=seed)
    prompts, _, _ = build_prompts(task, make_retriever("bm25").index(task.train), examples,
                                  PromptBuilder(lm.count_tokens, budget=budget))
    return {"task": task, "examples": examples, "prompts": [p.text for p in prompts], "max_new_tokens": room,
            "prompt_tokens": [p.n_tokens for p in prompts]}


def scoring_pairs(data_dir: str, n_pairs: int) -> tuple[list[str], list[str], list[str]]:
    """The first ``n_pairs`` // 50 training inputs of a seeded MTOP scoring shard, each with its 50 candidates."""
    _, _, (prefixes, prompts, targets) = scoring_shard(data_dir, "mtop", 50, max(n_pairs // 50, 1),
                                                       examples=max(n_pairs // 50, 1))
    return prefixes[:n_pairs], prompts[:n_pairs], targets[:n_pairs]


# -- measuring one shard ---------------------------------------------------------------------------------------

def load_engine(engine: str, lm: str, batch1: bool = False):
    spec, options, options_batch1 = ENGINES[engine]
    return make_backend(spec.format(lm=lm), **(options_batch1 if batch1 else options))


class LazyEngine:
    """An engine loaded the first time a shard needs it (a run whose shards all exist loads none)."""

    def __init__(self, engine: str, lm: str, batch1: bool = False):
        self.engine, self.lm, self.batch1, self.backend = engine, lm, batch1, None

    def __call__(self):
        if self.backend is None:
            self.backend = load_engine(self.engine, self.lm, batch1=self.batch1)
        return self.backend

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def shard_machine(backend) -> dict:
    return {**machine_info(), **backend.runtime(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def prompts_fingerprint(prompts: list[str]) -> str:
    """What a generation shard was measured on: its answers pair with these prompts and no others."""
    return hashlib.sha1("\x00".join(prompts).encode()).hexdigest()[:16]


def measure_generation(engine: LazyEngine, inputs: dict, n: int | None = None) -> dict:
    backend = engine()
    prompts = inputs["prompts"][:n] if n else inputs["prompts"]
    backend.generate_raw(prompts[:1], max_new_tokens=4)  # warm-up: first-call allocations are not the engine's rate
    where = shard_machine(backend)
    start = time.perf_counter()
    raw = backend.generate_raw(prompts, max_new_tokens=inputs["max_new_tokens"])
    seconds = time.perf_counter() - start
    return {"n": len(prompts), "seconds": round(seconds, 2), "generated_tokens": sum(k for _, k in raw),
            "prompt_tokens": sum(inputs["prompt_tokens"][: len(prompts)]),
            "answers": [cut_at_stop(text, "\n").strip() for text, _ in raw], "machine": where,
            "prompts_sha1": prompts_fingerprint(prompts)}


def measure_scoring(engine: LazyEngine, pairs: tuple[list[str], list[str], list[str]]) -> dict:
    backend = engine()
    prefixes, prompts, targets = pairs
    backend.score(prompts[:4], targets[:4])  # warm-up
    where = shard_machine(backend)
    start = time.perf_counter()
    scores = backend.score_shared(prefixes, prompts, targets)
    seconds = time.perf_counter() - start
    return {"n": len(prompts), "seconds": round(seconds, 2), "scores": [s.logprob for s in scores], "machine": where}


def shard(path: Path, measure: bool, make, *args, prompts: list[str] | None = None) -> dict | None:
    """The shard at ``path``; when missing and ``measure``, ``make(*args)`` measures it and it is written first (a
    run started again skips it). None: neither there nor measured now. A generation shard measured on other
    ``prompts`` (another --mtop, seed or context) stops the run: its answers would pair with the wrong inputs."""
    if path.exists():
        held = read_json(path)
        if prompts is not None and held.get("prompts_sha1") != prompts_fingerprint(prompts[: held["n"]]):
            raise SystemExit(f"{path}: measured on other prompts than this run's (--mtop/--break-n/--nl2bash, "
                             "--seed or --context-window differ); remove it or use another --work")
        return held
    if not measure:
        return None
    result = make(*args)
    write_json(path, result)
    print(f"{path}: {result['n']} in {result['seconds']} s (load {result['machine']['load_average'][0]})", flush=True)
    return result


# -- the machine's bounds -----------------------------------------------------------------------------------------

def machine_bounds(threads: int, seconds: float = 2.0) -> dict:
    """The fastest float32 matrix product torch reaches here (``threads`` threads; of a square 2048 one and the
    shapes of a 135M LM's prefill: 2048 tokens x 576 -> 1536 and back) in GFLOP/s, and a streaming read of 1 GiB in
    GB/s."""
    import torch

    torch.set_num_threads(threads)

    def rate(m: int, k: int, n: int) -> float:
        a, b = torch.randn(m, k), torch.randn(k, n)
        a @ b
        repeats, start = 0, time.perf_counter()
        while repeats == 0 or time.perf_counter() - start < seconds:
            a @ b
            repeats += 1
        return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9

    gflops = max(rate(2048, 2048, 2048), rate(2048, 576, 1536), rate(2048, 1536, 576))
    block = torch.ones(2**28)  # 1 GiB of float32
    block.sum()
    repeats, start = 0, time.perf_counter()
    while repeats == 0 or time.perf_counter() - start < seconds:
        block.sum()
        repeats += 1
    read_gbps = block.numel() * 4 * repeats / (time.perf_counter() - start) / 1e9
    return {"matmul_gflops_float32": round(gflops, 1), "memory_read_gbps": round(read_gbps, 1), "threads": threads}


def lm_costs(lm: str) -> dict:
    """What one token costs the LM: FLOPs of its matrices (2 x non-embedding parameters) and of attention per
    position of context, and the bytes of float32 weights a decoding step reads (the vocabulary projection
    included)."""
    from transformers import AutoConfig

    from taskret.models import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(lm))
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config.intermediate_size
    matrix_params = layers * per_layer
    vocab = config.vocab_size * hidden
    return {"flops_per_token": 2 * matrix_params, "attention_flops_per_context_token": 4 * layers * heads * head_dim,
            "decode_bytes_float32": 4 * (matrix_params + vocab), "head_flops": 2 * vocab}


def bounds_for(bounds: dict, costs: dict, mean_prompt_tokens: float) -> dict:
    """What the measured matmul and read rates allow: prefill tokens/s of a prompt of this length (causal
    attention over half of it on average) and a batch-1 float32 decoding step's time (all weights read once)."""
    flops = costs["flops_per_token"] + costs["attention_flops_per_context_token"] * mean_prompt_tokens / 2
    return {"prefill_tokens_per_s": round(bounds["matmul_gflops_float32"] * 1e9 / flops, 1),
            "decode_step_ms_float32_batch1": round(costs["decode_bytes_float32"] / (bounds["memory_read_gbps"] * 1e9)
                                                   * 1e3, 1)}


# -- agreement ----------------------------------------------------------------------------------------------------

def per_input(task, examples, answers: list[str]) -> dict[str, dict[str, float]]:
    """Each match metric (and sentence chrF for the graded tasks) per input id."""
    rows: dict[str, dict[str, float]] = {}
    graded = graded_metrics_for(task)
    for example, answer in zip(examples, answers):
        prediction = task.output_format.from_prompt(answer)
        row = {name: float(match(name, fn, prediction, example.output, example.input))
               for name, fn in metrics_for(task).items()}
        for name in graded:
            row[name] = GRADED_METRICS[name].sentence(prediction, example.output)
        rows[example.id] = row
    return rows


def task_metrics(task, examples, answers: list[str]) -> dict[str, float]:
    rows = per_input(task, examples, answers)
    names = next(iter(rows.values())).keys()
    result = {name: round(100 * statistics.fmean(r[name] for r in rows.values()), 2) for name in names
              if name not in GRADED_METRICS}
    for name in graded_metrics_for(task):
        predictions = [task.output_format.from_prompt(a) for a in answers]
        result[name] = round(GRADED_METRICS[name].corpus(predictions, [e.output for e in examples]), 2)
    return result


def paired_check(task, examples, answers: list[str], reference: list[str]) -> dict:
    """The headline metric (chrF for the graded tasks) of an engine against the reference on the same inputs."""
    mine, theirs = per_input(task, examples, answers), per_input(task, examples, reference)
    graded = graded_metrics_for(task)
    if graded:
        name = graded[0]
        test = paired_graded_comparison({k: v[name] for k, v in mine.items()}, {k: v[name] for k, v in theirs.items()})
    else:
        name = headline_metric(task)
        test = paired_comparison({k: bool(v[name]) for k, v in mine.items()},
                                 {k: bool(v[name]) for k, v in theirs.items()})
    return {"metric": name, "n": len(examples), **test, "within_noise": test["p"] >= 0.05}


def ranking_agreement(scores: list[float], reference: list[float], per_input_n: int = 50) -> dict:
    """Mean Spearman correlation of each training input's candidate scores, and mean share of its top 5 kept."""
    from scipy.stats import spearmanr

    rhos, kept = [], []
    for start in range(0, len(reference), per_input_n):
        a, b = np.array(scores[start:start + per_input_n]), np.array(reference[start:start + per_input_n])
        rhos.append(float(spearmanr(a, b)[0]))
        kept.append(len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5])) / 5)
    return {"spearman_mean": round(statistics.fmean(rhos), 4), "spearman_min": round(min(rhos), 4),
            "top5_kept": round(statistics.fmean(kept), 3), "inputs": len(rhos),
            "max_abs_logprob_diff": round(float(np.abs(np.array(scores) - np.array(reference)).max()), 4)}


# -- the report ---------------------------------------------------------------------------------------------------

def rates(result: dict) -> dict:
    return {"answers_per_s": round(result["n"] / result["seconds"], 4),
            "tokens_per_s": round(result["generated_tokens"] / result["seconds"], 2),
            "prompt_tokens_per_s": round(result["prompt_tokens"] / result["seconds"], 1), "n": result["n"],
            "load_average": result["machine"]["load_average"][0]}


def same_machine(a: dict, b: dict) -> bool:
    return all(a["machine"].get(k) == b["machine"].get(k) for k in ("cpu", "cpu_flags", "cores"))


#: How much slower than the reference an engine may be on one task and still be the default: the timing noise of one
#: run on a shared 2-core machine (its float32 matrix-product rate alone varied 79-115 GFLOP/s within 20 minutes).
SLOWER_WITHIN_NOISE = 0.95


def choose_default(engines: dict, tasks: list[str]) -> str:
    """The engine to make the default for generation here: among those that agree with the reference on every task
    (>= 95% identical answers, or the headline metric within noise) and are nowhere slower than it beyond timing
    noise (answers/s >= :data:`SLOWER_WITHIN_NOISE` of the reference's on every task), the fastest on the geometric
    mean of its speed-ups; the reference until every task of :data:`TASKS` is measured."""
    def agrees(name: str) -> bool:
        gen = engines[name].get("generation", {})
        return all(gen[t].get("same_as_reference", 0) >= 0.95 or gen[t].get("within_noise", False)
                   for t in tasks if t in gen)

    def speedups(name: str) -> list[float]:
        return [engines[name]["generation"][t]["answers_per_s"] / engines[REFERENCE]["generation"][t]["answers_per_s"]
                for t in tasks]

    if set(tasks) != set(TASKS):
        return REFERENCE
    candidates = [name for name in engines if name == REFERENCE or agrees(name)]
    measured = [name for name in candidates if all(t in engines[name].get("generation", {}) for t in tasks)]
    allowed = [name for name in measured if min(speedups(name)) >= SLOWER_WITHIN_NOISE]
    return max(allowed or [REFERENCE], key=lambda name: statistics.geometric_mean(speedups(name)))


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/lm_engines.json", lm="smollm2-135m", seed=0)
    options.add_argument("--engines", default=f"{REFERENCE},llamacpp", help="engines to measure, of "
                         f"{', '.join(ENGINES)} (default: %(default)s)")
    options.add_argument("--tasks", default=",".join(TASKS))
    options.add_argument("--mtop", type=int, default=300, help="MTOP inputs (300: the issue's EM check)")
    options.add_argument("--break-n", type=int, default=100)
    options.add_argument("--nl2bash", type=int, default=100)
    options.add_argument("--batch1-n", type=int, default=5, help="inputs per task timed at batch 1")
    options.add_argument("--pairs", type=int, default=1000)
    options.add_argument("--context-window", type=int, default=2048)
    options.add_argument("--work", default="benchmarks/results/lm_engines", help="the shards (committed: a run resumes)")
    options.add_argument("--only", choices=["scoring", "generation", "batch1", "report"], default=None,
                         help="measure one part only (the report is always written from the shards there are)")
    args = options.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        options.error(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    if REFERENCE not in engines:
        engines.insert(0, REFERENCE)
    tasks = [t for t in args.tasks.split(",") if t]
    work = Path(args.work)
    sizes = {"mtop": args.mtop, "break": args.break_n, "nl2bash": args.nl2bash}

    tokenizer_lm = load_engine(REFERENCE, args.lm)  # the prompts are the same for every engine: one tokenizer
    inputs = {t: task_prompts(args.data_dir, t, sizes[t], tokenizer_lm, args.context_window, args.seed) for t in tasks}
    import torch

    bounds = machine_bounds(torch.get_num_threads())
    del tokenizer_lm
    pairs = scoring_pairs(args.data_dir, args.pairs)

    results: dict[str, dict] = {}
    for engine in engines:
        folder = work / engine
        best, single = LazyEngine(engine, args.lm), LazyEngine(engine, args.lm, batch1=True)
        measure = {part: args.only in (None, part) for part in ("scoring", "generation", "batch1")}
        scoring = shard(folder / "scoring.json", measure["scoring"], measure_scoring, best, pairs)
        generation = {t: shard(folder / f"{t}.json", measure["generation"], measure_generation, best, inputs[t],
                               prompts=inputs[t]["prompts"]) for t in tasks}
        best.close()
        batch1 = {t: shard(folder / f"{t}_batch1.json", measure["batch1"], measure_generation, single, inputs[t],
                           args.batch1_n, prompts=inputs[t]["prompts"][: args.batch1_n]) for t in tasks}
        single.close()
        # a shard neither on disk nor measured now is left out
        results[engine] = {"scoring": scoring, "generation": {t: r for t, r in generation.items() if r is not None},
                           "batch1": {t: r for t, r in batch1.items() if r is not None}}

    report = build_report(results, inputs, tasks, bounds, args.lm)
    report["command"] = command_line(args, options, leave_out=("data_dir", "only"))  # the whole run: shards resume
    report["machine"] = machine(threads=bounds["threads"])
    write_result(args.out, report)


def build_report(results: dict, inputs: dict, tasks: list[str], bounds: dict, lm: str) -> dict:
    reference = results[REFERENCE]
    costs = lm_costs(lm)
    engines: dict[str, dict] = {}
    em_within_noise: dict[str, dict] = {}
    for engine, found in results.items():
        row: dict = {"generation": {}, "runtime": None,
                     "batch1": {t: rates(result) for t, result in found["batch1"].items()}}
        for t, result in found["generation"].items():
            ref = reference["generation"].get(t)
            task, examples = inputs[t]["task"], inputs[t]["examples"]
            entry = {**rates(result), "metric": task_metrics(task, examples, result["answers"])}
            if ref is not None and same_machine(result, ref):
                entry["speedup"] = round(entry["answers_per_s"] / rates(ref)["answers_per_s"], 2)
                entry["same_as_reference"] = round(statistics.fmean(
                    a == b for a, b in zip(result["answers"], ref["answers"])), 4)
                check = paired_check(task, examples, result["answers"], ref["answers"])
                entry["within_noise"] = check["within_noise"]
                if engine != REFERENCE:
                    em_within_noise.setdefault(engine, {})[t] = check
            row["generation"][t] = entry
            row["runtime"] = {k: result["machine"].get(k) for k in ("engine", "device", "dtype", "weights")
                              if result["machine"].get(k) is not None}
        if found["scoring"] is not None:
            scoring = {"pairs_per_s": round(found["scoring"]["n"] / found["scoring"]["seconds"], 2),
                       "n": found["scoring"]["n"], "load_average": found["scoring"]["machine"]["load_average"][0]}
            if reference["scoring"] is not None and same_machine(found["scoring"], reference["scoring"]):
                scoring.update(ranking_agreement(found["scoring"]["scores"], reference["scoring"]["scores"]))
                scoring["speedup"] = round(scoring["pairs_per_s"] / (reference["scoring"]["n"]
                                                                     / reference["scoring"]["seconds"]), 2)
            row["scoring"] = scoring
        engines[engine] = row
    measured_tasks = [t for t in tasks if all(t in engines[e]["generation"] for e in engines)]
    mean_prompt = {t: statistics.fmean(inputs[t]["prompt_tokens"]) for t in tasks}
    return {"engines": engines, "reference": REFERENCE, "default": choose_default(engines, measured_tasks),
            "default_chosen_on": measured_tasks, "em_within_noise": em_within_noise, "lm": lm,
            "bounds": {**bounds, **costs, "per_task": {t: {"mean_prompt_tokens": round(mean_prompt[t], 1),
                                                           **bounds_for(bounds, costs, mean_prompt[t])}
                                                       for t in tasks}}}


if __name__ == "__main__":
    main()
