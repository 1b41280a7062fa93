"""On the device: train variants of one TART distillation recipe from rows and teacher scores built elsewhere.

The 256-token recipe (``benchmarks/studies/tart/configs/tart_distil_dev_out_len256.json``) took 101 min on a 2-core CPU, so it
had one seed. Here each variant is that config with a few fields changed (``VARIANTS``), trained by
``taskret.tart.pipeline.run_pipeline`` in a work folder of its own that starts with the CPU run's ``train.jsonl``,
``train_stats.json`` and cached teacher scores (``--work-from``: that run's folder, or a tar.xz of those files): the rows, negatives and teacher are the
CPU run's, so a variant differs only in what it names. Prints one ``NAME=RUN/distil`` per trained variant (the
``--tart-dual`` / ``--trained-without`` arguments of the evaluation scripts) and writes ``sweep.json`` (overrides,
wall times) to ``--out``. Stops starting variants after ``--budget-s`` seconds, so the evaluation still runs; run
again, it keeps the variants already trained.

    python benchmarks/studies/tart/device/sweep_distil.py --base CONFIG --work-from work.tar.xz --runs /tmp/runs --out $OUT
"""
import argparse
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

from taskret.io import write_json
from taskret.tart.pipeline import TartRunConfig, run_pipeline

# name -> (top-level overrides, distil overrides). seed 1 is the CPU run's own seed (its GPU twin).
VARIANTS = {
    "len256_s1": ({"seed": 1}, {}),
    "len256_s0": ({"seed": 0}, {}),
    "len256_s2": ({"seed": 2}, {}),
    "len256_e2_s1": ({"seed": 1}, {"epochs": 2}),
    "len256_excl_s1": ({"seed": 1}, {"exclude_instruction_from_pooling": True}),
    # second call: the instruction kept out of the pooling (the first call's best instructed dev mean), more seeds
    # and the two levers that train more on instructed queries
    "len256_excl_s0": ({"seed": 0}, {"exclude_instruction_from_pooling": True}),
    "len256_excl_s2": ({"seed": 2}, {"exclude_instruction_from_pooling": True}),
    "len256_excl_e2_s1": ({"seed": 1}, {"exclude_instruction_from_pooling": True, "epochs": 2}),
    "len256_excl_d25_s1": ({"seed": 1}, {"exclude_instruction_from_pooling": True, "instruction_dropout": 0.25}),
    # third call: the dev tasks' pick over two more seeds
    "len256_excl_d25_s0": ({"seed": 0}, {"exclude_instruction_from_pooling": True, "instruction_dropout": 0.25}),
    "len256_excl_d25_s2": ({"seed": 2}, {"exclude_instruction_from_pooling": True, "instruction_dropout": 0.25}),
}


def copy_work(source: str, work: Path) -> None:
    """The rows, their stats and the cached teacher scores from a run folder or a tar.xz of them into ``work``."""
    if not Path(source).is_dir():
        with tarfile.open(source) as tar:
            tar.extractall(work, filter="data")
        return
    folder = Path(source)
    teacher = [path.relative_to(folder).as_posix() for path in folder.glob("distil/teacher_scores.*.jsonl")]
    for path in ["train.jsonl", "train_stats.json", *teacher]:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / path, work / path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the recipe every variant starts from")
    p.add_argument("--work-from", required=True,
                   help="a run folder, or a tar.xz of its train.jsonl, train_stats.json and distil/teacher_scores.*")
    p.add_argument("--runs", default="/tmp/runs", help="one work folder per variant under here")
    p.add_argument("--out", required=True, help="folder for sweep.json")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names from VARIANTS")
    p.add_argument("--budget-s", type=float, default=270.0, help="start no variant after this many seconds")
    args = p.parse_args()
    base = json.loads(Path(args.base).read_text())
    started, record = time.perf_counter(), {"base": args.base, "variants": {}}
    for name in [v.strip() for v in args.variants.split(",") if v.strip()]:
        if time.perf_counter() - started > args.budget_s:
            print(f"skip {name}: {time.perf_counter() - started:.0f}s spent of {args.budget_s:.0f}", file=sys.stderr)
            continue
        if name not in VARIANTS:
            raise SystemExit(f"--variants: unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        top, distil = VARIANTS[name]
        work = Path(args.runs) / name
        work.mkdir(parents=True, exist_ok=True)
        # A variant already trained is kept (run_pipeline skips stages whose output exists, and refuses a folder
        # made with another config), so a stopped sweep resumes where it stopped.
        if not (work / "train.jsonl").exists():
            copy_work(args.work_from, work)
        config = TartRunConfig(**{**base, **top, "work_dir": str(work), "distil": {**base["distil"], **distil}})
        kept = (work / "distil" / "tart_distil_config.json").exists()
        t0 = time.perf_counter()
        run_pipeline(config, progress=False)
        seconds = round(time.perf_counter() - t0, 1)
        record["variants"][name] = {"overrides": {**top, **distil}, "wall_s": None if kept else seconds}
        print(f"{name}={work / 'distil'}", flush=True)
        print(f"kept {name} (trained before)" if kept else f"trained {name} in {seconds}s", file=sys.stderr, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_json(Path(args.out) / "sweep.json", record)


if __name__ == "__main__":
    main()
