"""Where the benchmarks' scripts and configs live now, for the commands the results recorded where they lived then.

A results file keeps the commands that filled it as they ran (its history); the README and the benchmark page show
them with today's paths, so that each one shown can be run. This is the one place that knows the moves:
``benchmarks/`` regrouped by question (epr/, documents/, speed/, serve/, scale/, robustness/), the TART study's
scripts and configs (studies/tart/), and the GPU runs' notes, now docs/how-to/gpu.md.
"""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]

_GROUPS = {
    "epr": ("icl_baselines", "epr_table", "epr_analysis", "epr_lm_transfer", "epr_beyond", "llmr_agreement",
            "answer_room"),
    "documents": ("setups", "tart_berri", "tart_zero_shot", "tart_trained", "query_batching"),
    "speed": ("bm25_speed", "lm_throughput", "scoring_speed", "scoring_precision", "ray_scoring", "index_speed"),
    "serve": ("serve_load", "dense_latency"),
    "scale": ("scale", "build_memory", "shard_size"),
    "robustness": ("robustness",),
}
_STUDY = "benchmarks/studies/tart"
_STUDY_SCRIPTS = ("hybrid_instruction", "instruction_mix", "instruction_pooling", "tart_held_out", "tart_confidence",
                  "tart_full_lm")

#: Old path (or path prefix) -> new one.
MOVED: dict[str, str] = {
    **{f"benchmarks/{script}.py": f"benchmarks/{group}/{script}.py"
       for group, scripts in _GROUPS.items() for script in scripts},
    "benchmarks/configs/epr_mtop_small.json": "benchmarks/epr/configs/epr_mtop_small.json",
    "benchmarks/configs/epr_mtop_full.json": "benchmarks/epr/configs/epr_mtop_full.json",
    "benchmarks/configs/epr_full/": "benchmarks/epr/configs/epr_full/",
    "benchmarks/configs/epr_v2/": "benchmarks/epr/configs/epr_v2/",
    # the 60-minute CPU TART-dual recipe, its three seeds
    "benchmarks/configs/tart_distil_len256_neg2_q350_cpu60": "benchmarks/documents/configs/tart_distil_len256_neg2_q350_cpu60",
    "benchmarks/wrk/": "benchmarks/serve/wrk/",
    **{f"benchmarks/{script}.py": f"{_STUDY}/{script}.py" for script in _STUDY_SCRIPTS},
    # every other config that was under benchmarks/configs/ is one the TART study trained
    **{f"benchmarks/configs/{config.name}": f"{_STUDY}/configs/{config.name}"
       for config in sorted((BENCHMARKS / "studies" / "tart" / "configs").glob("*.json"))},
    # the scripts that carried runs to a GPU are gone; what those runs were is on the GPU page
    "benchmarks/gpu/README.md": "docs/how-to/gpu.md",
    f"{_STUDY}/device/README.md": "docs/how-to/gpu.md",
    "benchmarks/device/README.md": "docs/how-to/gpu.md",
}

_OLD = re.compile(r"(?<![\w/])(" + "|".join(map(re.escape, sorted(MOVED, key=len, reverse=True))) + ")")


def current_paths(text: str) -> str:
    """``text`` with every moved script's, config's and folder's old path replaced by its new one."""
    return _OLD.sub(lambda m: MOVED[m.group(1)], text)
