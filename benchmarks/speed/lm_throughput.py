"""Inference and scoring throughput of the bundled LM on the CPU, at two token-batch sizes.

Generation: N MTOP test inputs with BM25 demonstrations filled to the context window, greedy, stop at
newline. Scoring: EPR scoring pairs (BM25-by-output candidates of training examples).

    python benchmarks/speed/lm_throughput.py --data-dir ../shared/data
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.backends.transformers import CausalLM
from taskret.data import load_task, sample
from taskret.epr.candidates import mine_candidates
from taskret.epr.scoring import scoring_pair
from taskret.icl.inference import build_prompts
from taskret.icl.prompt import PromptBuilder
from taskret.retrieval import make_retriever


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/lm_throughput.json", icl=True)
    options.add_argument("--n", type=int, default=48)
    options.add_argument("--pairs", type=int, default=200)
    options.add_argument("--batch-tokens", default="2048,8192")
    args = options.parse_args()

    task = load_task("mtop", data_dir=args.data_dir)
    lm = CausalLM.load("smollm2-135m")
    builder = PromptBuilder(lm.count_tokens, budget=args.context_window - args.max_new_tokens)
    examples = sample(task.test, args.n, seed=1)
    prompts, _, _ = build_prompts(task, make_retriever("bm25").index(task.train), examples, builder)
    texts = [p.text for p in prompts]
    prompt_tokens = sum(p.n_tokens for p in prompts)

    pool = {e.id: e for e in task.train}
    rows = mine_candidates(task.train, n=10)
    pairs = [scoring_pair(pool[c], pool[r["id"]], task.output_format) for r in rows for c in r["candidates"]]
    pairs = pairs[: args.pairs]

    results = []
    lm.generate(texts[:2], max_new_tokens=8)  # warm-up
    for batch_tokens in [int(b) for b in args.batch_tokens.split(",")]:
        lm.max_batch_tokens = batch_tokens
        start = time.perf_counter()
        generations = lm.generate(texts, max_new_tokens=args.max_new_tokens)
        gen_s = time.perf_counter() - start
        new_tokens = sum(lm.count_tokens(g) + 1 for g in generations)
        start = time.perf_counter()
        lm.score([p for p, _ in pairs], [t for _, t in pairs])
        score_s = time.perf_counter() - start
        scored_tokens = sum(lm.count_tokens(p) + lm.count_tokens(t) for p, t in pairs)
        results.append({
            "max_batch_tokens": batch_tokens,
            "generation": {"examples": len(texts), "seconds": round(gen_s, 1),
                           "examples_per_s": round(len(texts) / gen_s, 3),
                           "prompt_tokens_per_s": round(prompt_tokens / gen_s, 1),
                           "generated_tokens_per_s": round(new_tokens / gen_s, 1),
                           "mean_prompt_tokens": round(prompt_tokens / len(texts), 1)},
            "scoring": {"pairs": len(pairs), "seconds": round(score_s, 1), "pairs_per_s": round(len(pairs) / score_s, 2),
                        "tokens_per_s": round(scored_tokens / score_s, 1)},
        })
        print(results[-1])
    write_result(args.out, {
        "benchmark": "lm_throughput",
        "command": command_line(args, options),
        "machine": machine(dtype="float32"),
        "lm": "smollm2-135m", "results": results,
    })


if __name__ == "__main__":
    main()
