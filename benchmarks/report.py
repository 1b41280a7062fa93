"""Render the benchmark results in benchmarks/results/ as Markdown: the README's results table and the
documentation's benchmark page.

    python benchmarks/report.py                             # print every table
    python benchmarks/report.py --readme                    # rewrite README.md's results block
    python benchmarks/report.py --docs docs/benchmarks.md   # rewrite the docs page's blocks, one per question

The README has one block (``<!-- BENCHMARKS:START (...) -->`` ... ``<!-- BENCHMARKS:END -->``): at most six rows,
each a number beside its baseline, and the commands that reproduce them (``make bench`` runs each). The docs page has
one named block per question (``<!-- BENCHMARKS:START NAME (...) -->``, NAME from ``SECTIONS``) holding that
question's tables; the question, its answer and the discussion around the blocks are written by hand. Every number
comes from a JSON file a benchmark script wrote, and every table names the command that wrote it; a benchmark that
has not been run yet is left out rather than shown with made-up values.

The tables come from ``renderers/``, one module per family of results files (they share ``renderers/common.py``);
the commands they show go through ``renderers/paths.py``, so a script moved since a result was recorded is shown
where it lives now.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from renderers import epr, epr_beyond, epr_tasks, robustness, scale, scale_search, scifact, serve, setups, speed, tart
from renderers.common import MACHINE, README
from renderers.paths import current_paths
from renderers.readme import readme_table

END = "<!-- BENCHMARKS:END -->"

# The benchmark page's sections, each a question (docs/benchmarks.md asks it and answers it by hand above its block):
# each block ``<!-- BENCHMARKS:START NAME ... -->`` holds NAME's tables.
SECTIONS = (
    ("machine", ()),
    ("setups", (lambda: setups.setups_table(detail=True),)),
    ("epr", (epr.icl_table, epr.epr_scale_table, epr.epr_table, epr.lm_transfer_table, epr.analysis_table)),
    ("epr-v2", (epr_beyond.epr_beyond_table, lambda: speed.scoring_speed_table("scoring_speed_amx.json"),
                lambda: speed.scoring_precision_table("scoring_precision_amx.json"))),
    ("epr-ladder-answer", (epr_beyond.epr_ladder_answer,)),
    ("epr-ladder", (epr_beyond.epr_ladder_table,)),
    ("epr-tasks", (epr_tasks.headroom_table, epr_tasks.epr_tasks_table)),
    ("scifact", (scifact.tart_berri_table,)),
    ("tart-dual", (tart.tart_distil_sweep_table, tart.tart_table, tart.tart_trained_table)),
    ("confidence", (scifact.tart_confidence_table, scifact.tart_confidence_held_out_table)),
    ("instructions", (scifact.tart_held_out_table, scifact.tart_held_out_trained_table, tart.instruction_pooling_table)),
    ("pooled", (tart.tart_pooled_table, tart.tart_x2_table, tart.tart_x2_scifact_table)),
    ("tart-full", (tart.tart_full_lm_table, tart.tart_in_domain_table)),
    ("lm-engines", (speed.lm_engines_table,)),
    ("speed", (speed.bm25_table, speed.index_speed_table, speed.throughput_table, speed.scoring_speed_table,
               speed.scoring_precision_table, speed.ray_table)),
    ("serving", (serve.serve_table, serve.request_path_table, serve.dense_latency_table)),
    ("scale", (scale.scale_table, scale.compressed_vectors_table, scale_search.ivf_quantizer_table,
               scale.bounded_builds_table,
               lambda: scale.bm25_shards_table("bm25_single.json", "BM25 as one index, built in segments within the "
                                                "memory budget, at 1M and 10M documents, searched"),
               scale_search.bm25_score_array_lines, scale_search.bm25_pisa_table, scale_search.bm25_pisa_depth_table,
               scale_search.bm25_pisa_parts_table, scale_search.bm25_pisa_rescore_line)),
    ("engines", (scale.engines_table, scale.bm25_ties_lines)),
    ("build-memory", (scale.build_memory_table,)),
    ("ray-shards", (scale.ray_shards_table, scale.bm25_shards_table, scale.dense_shards_table)),
    ("robustness", (robustness.robustness_table,)),
)


def _sections(functions) -> str:
    return "\n".join("\n".join(section) + "\n" for section in (f() for f in functions) if section)


def render() -> str:
    """Every table, one after another."""
    return current_paths(_sections(f for _, functions in SECTIONS for f in functions))


def docs_blocks() -> dict[str, str]:
    """The benchmark page's blocks by name: the machine line, then each question's tables."""
    blocks = {name: current_paths(_sections(functions)) for name, functions in SECTIONS}
    blocks["machine"] = f"All numbers on this page: {MACHINE}; raw results in `benchmarks/results/`.\n"
    return blocks


MARKER = re.compile(r"^<!-- BENCHMARKS:START(?: (?P<name>[\w-]+))? \(.*\) -->$", re.M)


def rewrite_blocks(path: Path, bodies: dict[str | None, str]) -> None:
    """Replace the lines between each ``<!-- BENCHMARKS:START [NAME] (...) -->`` and the next
    ``<!-- BENCHMARKS:END -->`` with ``bodies[NAME]``, atomically; every block needs a body and every body a block."""
    text = path.read_text()
    found = [m.group("name") for m in MARKER.finditer(text)]
    if sorted(map(str, found)) != sorted(map(str, bodies)):
        raise SystemExit(f"{path}: blocks {found} do not match the report's {list(bodies)}")
    parts, at = [], 0
    for m in MARKER.finditer(text):
        stop = text.index(END, m.end())
        parts += [text[at:m.end()], "\n", bodies[m.group("name")]]
        at = stop
    parts.append(text[at:])
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(parts))
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's results block in place")
    parser.add_argument("--docs", type=Path, metavar="PAGE",
                        help="rewrite this Markdown page's blocks, each question's tables (docs/benchmarks.md)")
    args = parser.parse_args()
    if not (args.readme or args.docs):
        print(render())
        return
    if args.readme:
        rewrite_blocks(README, {None: current_paths("\n".join(readme_table()) + "\n"),
                                "setups": "\n".join(setups.setups_table()) + "\n"})
    if args.docs:
        rewrite_blocks(args.docs, docs_blocks())


if __name__ == "__main__":
    main()
