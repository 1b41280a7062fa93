"""Here, after a device run: put the pair scores of ``score_pairs.py`` into the benchmark's pair caches
(``WORK/{task}/NAME.pairs.jsonl``, keyed like ``tart_berri.PairCache``), so that
``benchmarks/tart_berri.py --scored NAME`` ranks with them without the model::

    python benchmarks/studies/tart/device/unpack_scores.py .gpu2/b/pairs.json.xz scores.json yesno_gpu --work runs/bench/tart_berri
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/: tart_berri
from tart_berri import PairCache, ScoredElsewhere  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pairs")
    p.add_argument("scores")
    p.add_argument("name")
    p.add_argument("--work", default="runs/bench/tart_berri")
    args = p.parse_args()
    with lzma.open(args.pairs, "rt", encoding="utf-8") as f:
        tasks = json.load(f)
    scores = json.loads(Path(args.scores).read_text())["scores"]
    for task, d in tasks.items():
        if len(scores[task]) != len(d["pairs"]):
            raise SystemExit(f"{args.scores}: {task} has {len(scores[task])} scores for {len(d['pairs'])} pairs")
        cache = PairCache(ScoredElsewhere(args.name), Path(args.work) / task / f"{args.name}.pairs.jsonl")
        cache.add([(d["queries"][q], d["docs"][i]) for q, i in d["pairs"]], scores[task])
        print(f"{task}: {len(scores[task])} scores -> {cache.path}")


if __name__ == "__main__":
    main()
