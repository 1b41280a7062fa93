"""Here: merge what run_sweep.sh sent back (one logs.tar.gz per device call) into one results file.

    python benchmarks/studies/tart/device/collect_sweep.py CALL1/logs.tar.gz CALL2/logs.tar.gz \
        --out benchmarks/results/tart_distil_sweep_gpu.json --logs benchmarks/results/tart_distil_sweep_gpu_logs

Each variant gets its overrides, training time, SciFact NDCG@10 alone and in the dev-weighted hybrid with BM25,
and its held-out dev-task scores (None from a call that skipped them); ``selected`` is the variant with the best
held-out dev-task mean over both columns (the four dev tasks, never SciFact, choose).
"""
import argparse
import json
import tarfile
from pathlib import Path

from taskret.io import write_json

COLUMNS = ("no_instruction", "instruction")


def best_on_dev(held_out_mean: dict, names) -> str:
    """The student among ``names`` with the best held-out dev-task mean over both columns."""
    return max(names, key=lambda name: sum(held_out_mean[name][c] for c in COLUMNS))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("archives", nargs="+", help="logs.tar.gz files, in the order the calls ran")
    p.add_argument("--out", required=True)
    p.add_argument("--logs", default=None, help="folder for each variant's training log and config")
    args = p.parse_args()
    result: dict = {"variants": {}, "baselines": {}, "calls": []}
    for archive in args.archives:
        with tarfile.open(archive) as tar:
            files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        sweep, berri = json.loads(files["sweep.json"]), json.loads(files["tart_berri_gpu.json"])
        # a short call (run_sweep.sh with SKIP_HELD_OUT=1) scores SciFact only
        held = json.loads(files["held_out_gpu.json"]) if "held_out_gpu.json" in files else None
        result["base"] = sweep["base"]
        result["calls"].append({"gpu": files["gpu.txt"].decode().strip().splitlines(), "commands": berri["commands"]
                                + ([held["held_out_setup"]["command"]] if held else []), "timings": berri["timings"]})
        for name, spec in sweep["variants"].items():
            result["variants"][name] = {
                "overrides": spec["overrides"], "train_s": spec["wall_s"],
                "scifact": berri["scifact"][name], "hybrid": berri["scifact"][f"hybrid+{name}"],
                "hybrid_weight": berri["weights"][f"hybrid+{name}"],
                "held_out": {task: scores[name] for task, scores in held["held_out"].items()} if held else None,
                "held_out_mean": held["held_out_mean"][name] if held else None}
            if args.logs:
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for suffix in ("training_log.jsonl", "tart_distil_config.json"):
                    (Path(args.logs) / f"{name}.{suffix}").write_bytes(files[f"{name}.{suffix}"])
        for name in ("bm25", "minilm", "hybrid"):  # the same in every call (checked)
            entry = {"scifact": berri["scifact"][name]}
            if held and name in held["held_out_mean"]:
                entry["held_out_mean"] = held["held_out_mean"][name]
            earlier = result["baselines"].setdefault(name, entry)
            if any(earlier.get(key, value) != value for key, value in entry.items()):
                raise SystemExit(f"{archive}: {name} differs from the earlier call's: {entry}")
            earlier.update(entry)
        result["device"] = next(line for line in files["gpu.txt"].decode().splitlines() if line.startswith("NVIDIA"))
        result["machine"] = berri["machine"]
    means = {name: v["held_out_mean"] for name, v in result["variants"].items() if v["held_out_mean"]}
    result["selected"] = best_on_dev(means, means)
    write_json(args.out, result)
    print(f"{len(result['variants'])} variants -> {args.out}; selected on the dev tasks: {result['selected']}")


if __name__ == "__main__":
    main()
