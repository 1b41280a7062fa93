"""On the device: a distillation run's teacher pass alone, written where ``train_tart_distil`` reads it
(:func:`taskret.tart.distil.teacher_cache_path`), so the student then trains on a CPU without scoring anything::

    python benchmarks/studies/tart/device/teacher_pass.py PIPELINE_CONFIG TRAIN_JSONL OUT_DIR

The UPR teacher runs in float32 (as on a CPU), not the GPU's default bfloat16.
"""

from __future__ import annotations

import json
import sys
import time

from taskret.backends.transformers import CausalLM
from taskret.rerank.causal_lm import CausalLMReranker
from taskret.tart.distil import TartDistilConfig, teacher_cache_path, teacher_scores
from taskret.tart.training_data import read_training_examples


def main(pipeline_config: str, train_jsonl: str, out_dir: str) -> None:
    pipeline = json.load(open(pipeline_config))
    config = TartDistilConfig.from_dict(pipeline["distil"])
    spec = pipeline["distil_teacher"]
    if not spec.startswith("upr:"):
        raise SystemExit(f"{pipeline_config}: this script runs a upr: teacher, not {spec!r}")
    lm = CausalLM.load(spec[len("upr:"):], dtype="float32", max_batch_size=config.teacher_batch_size)
    teacher = CausalLMReranker(lm)
    rows = read_training_examples(train_jsonl)
    cache = teacher_cache_path(out_dir, teacher)
    start = time.perf_counter()
    # teacher_scores keeps the usable rows itself: the same pairs train_tart_distil asks for
    scores = teacher_scores(rows, teacher, config, source=train_jsonl, cache=cache, progress=True)
    print(f"{teacher.name}: {len(scores)} pairs in {time.perf_counter() - start:.1f} s -> {cache}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
