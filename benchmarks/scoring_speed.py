"""EPR scoring speed: taskret's scorer against a plain batch-size-1 loop over the same pairs.

The baseline is how the original EPR code scores: one (candidate, example) pair at a time, a full
forward pass with the vocabulary projection at every position, log-softmax, and the target tokens'
log-probabilities summed. taskret's scorer groups pairs by length into token-budgeted batches and
projects onto the vocabulary only at target positions. Both run the same model in the same dtype; the
largest absolute difference of the summed log-probabilities is reported.

The same run measures the machine's matrix-multiply FLOP/s (float32 and bf16, 1024x1024 matmuls for ~3 s each) and
the scorer's achieved FLOP/s (2 x non-embedding parameters per token + the attention score/value
products + 2 x hidden x vocab per projected position), as a fraction of each.

    python benchmarks/scoring_speed.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from taskret.data import load_task, sample  # noqa: E402
from taskret.epr.candidates import mine_candidates  # noqa: E402
from taskret.epr.scoring import scoring_pair  # noqa: E402
from taskret.io import write_json  # noqa: E402
from taskret.lm import CausalLM  # noqa: E402


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("TASKRET_DATA_DIR", "../shared/data"))
    parser.add_argument("--task", default="mtop")
    parser.add_argument("--lm", default="smollm2-135m")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--max-batch-tokens", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/scoring_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    task = load_task(args.task, data_dir=args.data_dir)
    examples = sample(task.train, max(1, args.pairs // 10), seed=0)
    pool = task.train
    by_id = {e.id: e for e in pool}
    rows = mine_candidates(pool, n=10)
    chosen = {e.id for e in examples}
    prompts, targets = [], []
    for row in rows:
        if row["id"] in chosen:
            for cand in row["candidates"]:
                prompt, target = scoring_pair(by_id[cand], by_id[row["id"]], task.output_format)
                prompts.append(prompt)
                targets.append(target)
    prompts, targets = prompts[: args.pairs], targets[: args.pairs]

    lm = CausalLM.load(args.lm, max_batch_tokens=args.max_batch_tokens)
    n_target = sum(len(lm.tokenizer(t, add_special_tokens=False).input_ids) for t in targets)

    lm.score(prompts[:8], targets[:8])  # warm-up
    start = time.perf_counter()
    fast = lm.score(prompts, targets)
    fast_s = time.perf_counter() - start

    naive_scores(lm, prompts[:2], targets[:2])  # warm-up
    start = time.perf_counter()
    slow = naive_scores(lm, prompts, targets)
    slow_s = time.perf_counter() - start

    max_diff = max(abs(a.logprob - b) for a, b in zip(fast, slow))
    flops = scorer_flops(lm, prompts, targets)
    peak_fp32 = matmul_flops(torch.float32)
    peak_bf16 = matmul_flops(torch.bfloat16)
    achieved = flops / fast_s
    result = {
        "command": "python benchmarks/scoring_speed.py --data-dir ../shared/data",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads",
        "lm": args.lm,
        "dtype": str(next(lm.model.parameters()).dtype),
        "n_pairs": len(prompts),
        "n_target_tokens": n_target,
        "max_batch_tokens": args.max_batch_tokens,
        "taskret": {"seconds": round(fast_s, 2), "pairs_per_s": round(len(prompts) / fast_s, 2),
                    "target_tokens_per_s": round(n_target / fast_s, 1)},
        "batch_size_1_loop": {"seconds": round(slow_s, 2), "pairs_per_s": round(len(prompts) / slow_s, 2),
                              "target_tokens_per_s": round(n_target / slow_s, 1)},
        "speedup": round(slow_s / fast_s, 2),
        "max_abs_logprob_diff": max_diff,
        "matmul_gflops": {"float32": round(peak_fp32 / 1e9, 1), "bfloat16": round(peak_bf16 / 1e9, 1)},
        "scorer_gflops": round(achieved / 1e9, 1),
        "scorer_fraction_of_matmul": {"float32": round(achieved / peak_fp32, 3),
                                      "bfloat16": round(achieved / peak_bf16, 3)},
    }
    write_json(args.out, result)
    print(result)


if __name__ == "__main__":
    main()
