"""On the device: score the pairs of ``export_pairs.py`` with a trained reranker (a TART-full run folder, whichever
its objective: ``load_reranker`` picks the backend); write ``{task: [score, ...]}`` (raw logits, or log-likelihoods
for a query-likelihood TART-full, in the file's pair order) as JSON, and the scoring time of each task::

    python benchmarks/studies/tart/device/score_pairs.py RUN_DIR pairs.json.xz OUT_DIR
"""

from __future__ import annotations

import json
import lzma
import sys
import time
from pathlib import Path

from taskret.io import write_json
from taskret.rerank import load_reranker


def main(run_dir: str, pairs_file: str, out_dir: str, batch_size: int = 128, chunk: int = 4096) -> None:
    reranker = load_reranker(run_dir, batch_size=batch_size)
    with lzma.open(pairs_file, "rt", encoding="utf-8") as f:
        tasks = json.load(f)
    scores, timings = {}, {}
    # the dev tasks first (they choose the fusion weights), and the file rewritten after each task, so a run
    # stopped at its time limit still sends back what it scored (written atomically: a kill mid-write keeps the
    # last whole file)
    for task, d in sorted(tasks.items(), key=lambda item: item[0] == "scifact"):
        pairs = [(d["queries"][q], d["docs"][i]) for q, i in d["pairs"]]
        # shortest first: a batch of like lengths pads little
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = [0.0] * len(pairs)
        start = time.perf_counter()
        for s in range(0, len(order), chunk):
            part = order[s:s + chunk]
            for i, score in zip(part, reranker.score_pairs([pairs[i] for i in part])):
                out[i] = round(float(score), 6)
            print(f"{task}: {min(s + chunk, len(order))}/{len(order)} pairs", flush=True)
        timings[task] = {"pairs": len(pairs), "seconds": round(time.perf_counter() - start, 1)}
        scores[task] = out
        write_json(Path(out_dir, "scores.json"), {"scores": scores, "timings": timings})
    print(json.dumps(timings))


if __name__ == "__main__":
    main(*sys.argv[1:4])
