"""EPR scoring precision: does a cheaper number format keep the scoring LM's rankings of candidates?

EPR only uses the scores to rank each training example's candidates (top-k positives, bottom-k hard
negatives), so a faster precision is acceptable exactly when it keeps those rankings. This benchmark scores
the same pairs (--examples training examples of one output-ordered shard, each with its --n-candidates BM25
candidates, the pipeline's ``score_shared``) in float32 and in each of --precisions, and reports pairs/s,
the largest log-probability difference, the mean and worst per-example Spearman correlation with float32, and
how many of float32's top-k and bottom-k candidates (the labels) each keeps.

    int8     dynamic int8 quantisation (per output channel) of every Linear in the decoder layers, the
             vocabulary projection kept in float32 (``torch.ao`` quantize_dynamic, fbgemm kernels)
    bfloat16 the model in bf16 (emulated and very slow on CPUs without AVX512-BF16/AMX; keep --examples small)

    python benchmarks/speed/scoring_precision.py --data-dir ../shared/data
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, scoring_shard, write_result  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from taskret.backends.transformers import CausalLM


def quantize_int8(lm: CausalLM) -> CausalLM:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao eager quantisation is deprecated in favour of torchao
        layers = quantize_dynamic(lm.model.model.layers, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                  dtype=torch.qint8)
    lm.model.model.layers = layers
    return lm


def timed_scores(lm: CausalLM, prefixes, prompts, targets) -> tuple[list[float], float]:
    lm.score(prompts[:4], targets[:4])  # warm-up
    start = time.perf_counter()
    scores = lm.score_shared(prefixes, prompts, targets)
    return [s.logprob for s in scores], time.perf_counter() - start


def agreement(reference: list[float], other: list[float], per_example: int, k: int) -> dict:
    rhos, top, bottom = [], [], []
    for start in range(0, len(reference), per_example):
        ref, oth = reference[start: start + per_example], other[start: start + per_example]
        order_ref = sorted(range(len(ref)), key=lambda j: -ref[j])
        order_oth = sorted(range(len(oth)), key=lambda j: -oth[j])
        rhos.append(float(spearmanr(ref, oth).correlation))
        top.append(len(set(order_ref[:k]) & set(order_oth[:k])) / k)
        bottom.append(len(set(order_ref[-k:]) & set(order_oth[-k:])) / k)
    return {"spearman_mean": round(sum(rhos) / len(rhos), 3), "spearman_min": round(min(rhos), 3),
            f"top{k}_kept": round(sum(top) / len(top), 3), f"bottom{k}_kept": round(sum(bottom) / len(bottom), 3)}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/scoring_precision.json", task="mtop", lm="smollm2-135m",
                     threads=1)
    options.add_argument("--examples", type=int, default=10, help="training examples scored (x --n-candidates pairs)")
    options.add_argument("--n-candidates", type=int, default=50)
    options.add_argument("--k", type=int, default=5, help="positives / hard negatives per example (the labels)")
    options.add_argument("--precisions", default="int8", help="comma-separated: int8, bfloat16")
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    measured_on = machine()  # with the load average now: other work on the machine slows both precisions alike

    # The first --examples examples of the shard scoring_speed.py times.
    shard, _, (prefixes, prompts, targets) = scoring_shard(args.data_dir, args.task, args.n_candidates, 25,
                                                           examples=args.examples)

    reference, reference_s = timed_scores(CausalLM.load(args.lm, dtype="float32"), prefixes, prompts, targets)
    runs = [{"precision": "float32", "pairs_per_s": round(len(prompts) / reference_s, 2)}]
    for precision in [p.strip() for p in args.precisions.split(",") if p.strip()]:
        if precision == "int8":
            lm = quantize_int8(CausalLM.load(args.lm, dtype="float32"))
        elif precision in ("bfloat16", "bf16"):
            lm = CausalLM.load(args.lm, dtype="bfloat16")
        else:
            raise SystemExit(f"--precisions: unknown precision '{precision}' (expected int8 or bfloat16)")
        scores, seconds = timed_scores(lm, prefixes, prompts, targets)
        runs.append({"precision": precision, "pairs_per_s": round(len(prompts) / seconds, 2),
                     "speedup": round(reference_s / seconds, 2),
                     "max_abs_logprob_diff": round(max(abs(a - b) for a, b in zip(reference, scores)), 3),
                     **agreement(reference, scores, args.n_candidates, args.k)})
        print(runs[-1])
    result = {
        "command": command_line(args, options),
        "machine": measured_on,
        "lm": args.lm, "task": args.task, "n_pairs": len(prompts), "shard": shard, "runs": runs,
    }
    print(result)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
