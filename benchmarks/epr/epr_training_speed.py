"""How fast does EPR's dual-encoder training run on this machine, where does its time go, and what made it faster?

Trains EPR's dual encoder (``taskret.epr.training.train_dual_encoder``, the DPR loss over (input, positive, hard
negative) triplets, batch 120, demonstrations as input and output) for one epoch over the first ``--inputs``
labelled MTOP training inputs (the committed labels), once per variant, and reports triplets per second over the
training loop (``epoch_times_s``: loading and saving the model are left out):

- ``gradcache_16``: the batch embedded 16 sequences at a time, GradCache's way (an embedding pass without
  gradients, then each mini-batch again with them): memory bounded by 16 sequences (the default);
- ``whole_batch``: ``mini_batch_size: 0``, the same loss over the whole batch at once (one pass with gradients).

Both see the same triplets in the same batches, so the loss is the same function of the weights; only the work
(and the memory) differs. With ``--profile``, the first variant's run is profiled (``torch.profiler``) and the
operators taking most of its time are written out with their shares.

    python benchmarks/epr/epr_training_speed.py --data-dir ../shared/data
"""

from __future__ import annotations

import contextlib
import resource
import sys
import tempfile
from pathlib import Path

import torch.profiler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.data import load_task
from taskret.epr.training import TrainingConfig, train_dual_encoder
from taskret.io import read_json, read_jsonl, write_jsonl

VARIANTS = {"gradcache_16": 16, "whole_batch": 0}


def timed_training(examples, labels: Path, mini_batch_size: int, profile: bool) -> dict:
    config = TrainingConfig(epochs=1, batch_size=120, mini_batch_size=mini_batch_size, field="both",
                            learning_rate=5e-5)
    profiler = (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile
                else contextlib.nullcontext())
    with tempfile.TemporaryDirectory() as out:
        with profiler:
            train_dual_encoder(examples, labels, out, config, progress=False)
        done = read_json(Path(out) / "epr_config.json")
    seconds = sum(done["epoch_times_s"])
    result = {"steps": done["steps"], "triplets": done["n_pairs"], "seconds": round(seconds, 1),
              "triplets_per_s": round(done["n_pairs"] / seconds, 3)}
    if profile:
        ops = profiler.key_averages()
        total = sum(op.self_cpu_time_total for op in ops)
        result["profile_top_ops"] = [
            {"op": op.key, "share": round(op.self_cpu_time_total / total, 3), "calls": op.count}
            for op in sorted(ops, key=lambda op: -op.self_cpu_time_total)[:12]]
    return result


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/epr_training_speed.json", task="mtop")
    options.add_argument("--labels", default="benchmarks/results/epr_mtop_full/labels.jsonl",
                         help="EPR labels of the task's training inputs (default: %(default)s)")
    options.add_argument("--inputs", type=int, default=480, help="labelled inputs (4 steps of 120 by default)")
    options.add_argument("--profile", action="store_true", help="profile the first variant's run")
    args = options.parse_args()
    task = load_task(args.task, data_dir=args.data_dir)
    info = machine()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        labels = Path(folder) / "labels.jsonl"
        write_jsonl(labels, list(read_jsonl(args.labels))[: args.inputs])
        for number, (name, mini) in enumerate(VARIANTS.items()):
            results[name] = timed_training(task.train, labels, mini, args.profile and number == 0)
    info["load_average_after"] = machine()["load_average"]
    info["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    before, after = results["gradcache_16"]["triplets_per_s"], results["whole_batch"]["triplets_per_s"]
    write_result(args.out, {"benchmark": "epr_training_speed", "machine": info,
                            "command": command_line(args, options), "inputs": args.inputs, "variants": results,
                            "speed_up": round(after / before, 2)})


if __name__ == "__main__":
    main()
