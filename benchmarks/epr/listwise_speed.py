"""How fast does UDR's listwise training run on this machine, and what made it faster?

Trains the listwise retriever (``taskret.epr.listwise.train_listwise``) for one epoch over the first ``--inputs``
MTOP training inputs with their committed LM scores, once per variant, and reports inputs per second (timed from
the first to the last optimiser step, so loading and saving the model are left out):

- ``padded_batch``: the batch's 32 x 8 candidate texts padded to the longest and encoded together (UDR's code; the
  variant before ``encode_chunk``);
- ``distinct_chunks``: each distinct candidate encoded once, in chunks of 32 texts of similar length (the default).

Both variants see the same lists and the same loss (``tests/epr/test_listwise.py`` checks that the two encodings
give the same embeddings and gradients); only the work differs.

    python benchmarks/epr/listwise_speed.py --data-dir ../shared/data
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.data import load_task
from taskret.epr.listwise import ListwiseConfig, train_listwise
from taskret.epr.scoring import read_scores

VARIANTS = {"padded_batch": 0, "distinct_chunks": 32}


def timed_training(examples, rows, encode_chunk: int, epochs: int) -> dict:
    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as out:
        config = ListwiseConfig(from_top=2, epochs=epochs, encode_chunk=encode_chunk)
        train_listwise(examples, rows, out, config, progress=lambda n: stamps.append(time.perf_counter()))
    # inputs from the second step to the last, over the time between the first and the last step's end
    steps = len(stamps)
    per_step = len(rows) * epochs / steps
    seconds = stamps[-1] - stamps[0]
    return {"steps": steps, "seconds": round(seconds, 1), "inputs_per_s": round(per_step * (steps - 1) / seconds, 3)}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/listwise_speed.json", task="mtop")
    options.add_argument("--scores", default="benchmarks/results/epr_mtop_full/scoring/scores.jsonl",
                         help="LM scores of the task's training inputs (default: %(default)s)")
    options.add_argument("--inputs", type=int, default=160, help="training inputs (5 steps of 32 by default)")
    options.add_argument("--epochs", type=int, default=1)
    args = options.parse_args()
    task = load_task(args.task, data_dir=args.data_dir)
    rows = read_scores(args.scores)[: args.inputs]
    info = machine()
    results = {name: timed_training(task.train, rows, chunk, args.epochs) for name, chunk in VARIANTS.items()}
    info["load_average_after"] = machine()["load_average"]
    before, after = results["padded_batch"]["inputs_per_s"], results["distinct_chunks"]["inputs_per_s"]
    write_result(args.out, {"benchmark": "listwise_speed", "machine": info, "command": command_line(args, options),
                            "inputs": len(rows), "epochs": args.epochs, "variants": results,
                            "speed_up": round(after / before, 2)})
    print(f"listwise training: {before:.2f} -> {after:.2f} inputs/s ({after / before:.2f}x)")


if __name__ == "__main__":
    main()
