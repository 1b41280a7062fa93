"""EPR scoring speed: taskret's scorer against a plain batch-size-1 loop over the same pairs.

The pairs are what the pipeline scores: one shard of ``taskret epr score`` (--shard-size training examples, taken
in output order as the scorer cuts them, each with its top --n-candidates BM25 candidates; --shard picks which).

The baseline is how the original EPR code scores: one (candidate, example) pair at a time, a full
forward pass with the vocabulary projection at every position, log-softmax, and the target tokens'
log-probabilities summed (timed on a seeded sample of --loop-pairs of the pairs: it is slow). taskret's
scorer groups pairs by length into token-budgeted batches and projects onto the vocabulary only at target
positions (``score``); ``score_shared``, what the pipeline uses, also computes each candidate's
demonstration once per shard and runs every example that uses it on top of its cached keys and values. All
run the same model in the same dtype; the largest absolute differences of the summed log-probabilities are
reported.

The same run measures the machine's matrix-multiply FLOP/s (float32 and bf16, 1024x1024 matmuls for ~3 s each) and
the scorer's achieved FLOP/s (2 x non-embedding parameters per token + the attention score/value
products + 2 x hidden x vocab per projected position), as a fraction of each.

    python benchmarks/speed/scoring_speed.py --data-dir ../shared/data
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, scoring_shard, write_result  # noqa: E402

from taskret.backends.transformers import CausalLM


def matmul_flops(dtype: torch.dtype, size: int = 1024, seconds: float = 3.0) -> float:
    """Square matmuls repeated for about ``seconds`` (bf16 without native support is slow, so time-bound)."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    repeats, start = 0, time.perf_counter()
    while repeats == 0 or time.perf_counter() - start < seconds:
        a @ b
        repeats += 1
    return 2 * size**3 * repeats / (time.perf_counter() - start)


@torch.inference_mode()
def naive_scores(lm: CausalLM, prompts: list[str], targets: list[str]) -> list[float]:
    out = []
    for prompt, target in zip(prompts, targets):
        prompt_ids = lm.tokenizer(prompt).input_ids
        target_ids = lm.tokenizer(target, add_special_tokens=False).input_ids
        ids = torch.tensor([prompt_ids + target_ids])
        logits = lm.model(input_ids=ids).logits[0].float()  # every position projected onto the vocabulary
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        picked = logprobs[torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1), torch.tensor(target_ids)]
        out.append(float(picked.double().sum()))
    return out


def scorer_flops(lm: CausalLM, prompts: list[str], targets: list[str]) -> float:
    config = lm.model.config
    hidden, vocab, layers = config.hidden_size, config.vocab_size, config.num_hidden_layers
    params = sum(p.numel() for p in lm.model.parameters())
    embedding = lm.model.get_input_embeddings().weight.numel()
    tied = lm.model.get_output_embeddings().weight.data_ptr() == lm.model.get_input_embeddings().weight.data_ptr()
    body = params - embedding - (0 if tied else vocab * hidden)
    total = 0.0
    for prompt, target in zip(prompts, targets):
        n = len(lm.tokenizer(prompt).input_ids)
        t = len(lm.tokenizer(target, add_special_tokens=False).input_ids)
        length = n + t
        total += 2 * body * length + 2 * 2 * layers * hidden * length * length / 2 + 2 * hidden * vocab * t
    return total


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/scoring_speed.json", task="mtop", lm="smollm2-135m", threads=2)
    options.add_argument("--shard-size", type=int, default=25, help="training examples per shard (the pipeline's)")
    options.add_argument("--n-candidates", type=int, default=50)
    options.add_argument("--shard", type=int, default=None, help="which shard (default: a seeded random one)")
    options.add_argument("--loop-pairs", type=int, default=200, help="pairs the batch-size-1 loop is timed on")
    options.add_argument("--max-batch-tokens", type=int, default=8192)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    shard, shards, (prefixes, prompts, targets) = scoring_shard(args.data_dir, args.task, args.n_candidates,
                                                                args.shard_size, args.shard)
    reuse = len(prefixes) / len(set(prefixes))

    lm = CausalLM.load(args.lm, max_batch_tokens=args.max_batch_tokens)
    n_target = sum(len(lm.tokenizer(t, add_special_tokens=False).input_ids) for t in targets)

    lm.score(prompts[:8], targets[:8])  # warm-up
    start = time.perf_counter()
    fast = lm.score(prompts, targets)
    fast_s = time.perf_counter() - start

    start = time.perf_counter()
    shared = lm.score_shared(prefixes, prompts, targets)
    shared_s = time.perf_counter() - start

    loop_idx = sorted(random.Random(1).sample(range(len(prompts)), min(args.loop_pairs, len(prompts))))
    naive_scores(lm, prompts[:2], targets[:2])  # warm-up
    start = time.perf_counter()
    slow = naive_scores(lm, [prompts[i] for i in loop_idx], [targets[i] for i in loop_idx])
    slow_s = time.perf_counter() - start
    slow_rate = len(loop_idx) / slow_s
    loop_target = sum(len(lm.tokenizer(targets[i], add_special_tokens=False).input_ids) for i in loop_idx)

    max_diff = max(abs(fast[i].logprob - b) for i, b in zip(loop_idx, slow))
    max_diff_shared = max(abs(a.logprob - b.logprob) for a, b in zip(fast, shared))
    flops = scorer_flops(lm, prompts, targets)
    peak_fp32 = matmul_flops(torch.float32)
    peak_bf16 = matmul_flops(torch.bfloat16)
    achieved = flops / fast_s
    result = {
        "command": command_line(args, options),
        "machine": machine(),
        "lm": args.lm,
        "dtype": str(next(lm.model.parameters()).dtype),
        "n_pairs": len(prompts),
        "shard": {"index": shard, "of": len(shards), "examples": len(shards[shard]),
                  "n_candidates": args.n_candidates, "distinct_candidates": len(set(prefixes)),
                  "pairs_per_candidate": round(reuse, 2)},
        "n_target_tokens": n_target,
        "max_batch_tokens": args.max_batch_tokens,
        "taskret": {"seconds": round(fast_s, 2), "pairs_per_s": round(len(prompts) / fast_s, 2),
                    "target_tokens_per_s": round(n_target / fast_s, 1)},
        "taskret_shared_prefix": {"seconds": round(shared_s, 2), "pairs_per_s": round(len(prompts) / shared_s, 2),
                                  "target_tokens_per_s": round(n_target / shared_s, 1)},
        "batch_size_1_loop": {"seconds": round(slow_s, 2), "n_pairs": len(loop_idx),
                              "pairs_per_s": round(slow_rate, 2),
                              "target_tokens_per_s": round(loop_target / slow_s, 1)},
        "speedup": round(len(prompts) / fast_s / slow_rate, 2),
        "speedup_shared_prefix": round(len(prompts) / shared_s / slow_rate, 2),
        "max_abs_logprob_diff": max_diff,
        "max_abs_logprob_diff_shared_prefix": max_diff_shared,
        "matmul_gflops": {"float32": round(peak_fp32 / 1e9, 1), "bfloat16": round(peak_bf16 / 1e9, 1)},
        "scorer_gflops": round(achieved / 1e9, 1),
        "scorer_fraction_of_matmul": {"float32": round(achieved / peak_fp32, 3),
                                      "bfloat16": round(achieved / peak_bf16, 3)},
    }
    print(result)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
