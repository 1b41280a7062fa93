"""What TART-full costs on a causal LM: fine-tuning a bundled LM as a yes/no cross-encoder
(:func:`taskret.rerank.cross_encoder.load_cross_encoder`, TART-full's binary cross-entropy at 1:4) on a small
seeded sample of berri-lite training rows, timed, and its zero-shot and trained scoring speed; with the pair
count of the default multi-task recipe (``--recipe-rows`` rows x 5 pairs an epoch) it estimates what one epoch
of the full recipe would take on this machine. A measurement of cost, not of quality: the sample is far too
small to train a reranker. Writes ``{"base", "train_pairs_per_s", "score_pairs_per_s", "recipe_epoch_hours",
...}``::

    python benchmarks/studies/tart/tart_full_lm.py --data-dir ../shared/data --base smollm2-135m
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.formats import format_query
from taskret.io import read_json
from taskret.rerank import CrossEncoderReranker
from taskret.tart.cross_encoder import TartFullConfig, train_tart_full
from taskret.tart.tasks import load_training_tasks
from taskret.tart.training_data import build_training_examples


def main() -> None:
    arg_parser = _parser()
    args = arg_parser.parse_args()
    torch.set_num_threads(args.threads)
    tasks, _ = load_training_tasks(args.tasks.split(","), args.data_dir, limit=args.queries, seed=0)
    rows = build_training_examples(tasks, n_hard=2, n_random=1, n_unfollowing=1, seed=0)
    config = TartFullConfig(base_model=args.base, epochs=1, batch_size=args.batch_size, learning_rate=args.lr,
                            max_length=args.max_length, seed=0)
    pairs = [(format_query(r["instruction"], r["query"]), text)
             for r in rows for text in [r["positive_text"], *(n["text"] for n in r["negatives"][:4])]]
    with tempfile.TemporaryDirectory() as work:
        reranker = CrossEncoderReranker(args.base, batch_size=args.batch_size)
        started = time.perf_counter()
        zero_shot = reranker.score_pairs(pairs[:args.score_pairs])
        score_s = time.perf_counter() - started
        started = time.perf_counter()
        train_tart_full(rows, Path(work) / "full", config, progress=False)
        train_s = time.perf_counter() - started
        summary = read_json(Path(work) / "full" / "tart_full_config.json")
    n_pairs = summary["n_pairs"]
    result = {
        "base": args.base, "tasks": args.tasks.split(","), "n_rows": len(rows), "n_pairs": n_pairs,
        "steps": summary["steps"], "batch_size": args.batch_size, "max_length": args.max_length,
        "train_s": round(train_s, 1), "train_pairs_per_s": round(n_pairs / train_s, 3),
        "score_pairs": len(zero_shot), "score_pairs_per_s": round(len(zero_shot) / score_s, 3),
        "recipe_rows": args.recipe_rows,
        "recipe_epoch_hours": round(args.recipe_rows * 5 / (n_pairs / train_s) / 3600, 1),
        "device": "cpu", "threads": args.threads, "machine": machine(), "commands": [command_line(args, arg_parser)],
    }
    write_result(args.out, result)
    print(f"{args.base}: training {result['train_pairs_per_s']} pairs/s ({n_pairs} pairs, {train_s:.0f} s), scoring "
          f"{result['score_pairs_per_s']} pairs/s; one epoch of the {args.recipe_rows}-row recipe: "
          f"~{result['recipe_epoch_hours']} h")


def _parser():
    p = parser(__doc__, out="benchmarks/results/tart_full_lm.json", threads=2)
    p.add_argument("--base", default="smollm2-135m", help="the causal LM (a registered name or a folder)")
    p.add_argument("--tasks", default="berri-lite/argkp,berri-lite/conala", help="training tasks of the sample")
    p.add_argument("--queries", type=int, default=12, help="training queries per task (seeded sample)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--max-length", type=int, default=256, help="tokens of prompt, query and document together")
    p.add_argument("--score-pairs", type=int, default=60, help="pairs scored zero-shot to time inference")
    p.add_argument("--recipe-rows", type=int, default=7245,
                   help="rows of the default recipe (benchmarks/studies/tart/configs/tart_dual_berri.json) for the estimate")
    return p


if __name__ == "__main__":
    main()
