"""Gather the scale results that other scripts measure into ``scale.json``, under the keys the issue's readers use
(issue 78): ``shards`` from ray_shards.py's result, with dense_shards.py's recall difference where it was run. Each
part is copied from its own results file, never measured here; a result that is not there leaves its key out (or
null), and the line printed says so.

    python benchmarks/scale/assemble.py --scale benchmarks/results/scale.json \\
        --ray-shards benchmarks/results/ray_shards.json --dense-shards benchmarks/results/dense_shards.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import write_result  # noqa: E402


def shards_entry(ray_shards: dict, dense_shards: dict | None = None) -> dict:
    """ray_shards.py's result as ``scale.json``'s ``shards``: the merged top 10 against the single index's, the
    killed shard (tested when the strict search named it, the partial one left it and its documents out, and the
    service marked its answer), and the served numbers beside the single index's."""
    killed = ray_shards["killed_shard"]
    serve = ray_shards.get("serve") or {}
    service_killed = serve.get("killed_shard") or {}
    tested = (killed["strict"].get("raised") and killed["strict"].get("names_shard")
              and killed["partial_missing"] == [killed["shard"]] and killed["partial_has_no_killed_shard_documents"]
              and service_killed.get("status") == 200 and len(service_killed.get("missing_shards") or []) == 1)
    compared = ray_shards["vs_single_index"]
    return {"nodes": ray_shards["nodes"], "shards": ray_shards["shards"], "documents": ray_shards["documents"],
            "queries": compared["queries"],
            "bm25_same_top10_share": compared["same_top10_share"],
            "bm25_same_top10_up_to_ties_share": compared["same_top10_up_to_ties_share"],
            "bm25_max_score_diff": compared["max_score_diff"],
            "dense_recall_delta": dense_shards["recall_delta"] if dense_shards else None,
            "dense": {"documents": dense_shards["documents"], "shards": dense_shards["shards"],
                      "recall_at_10": {"single": dense_shards["single"]["recall_at_10"],
                                       "ray_shards": dense_shards["ray"]["recall_at_10"]},
                      "command": dense_shards["command"]} if dense_shards else None,
            "killed_shard_tested": bool(tested),
            "search_p50_ms": {"single": ray_shards["single"]["p50_ms"], "ray_shards": ray_shards["ray"]["p50_ms"]},
            "serve": {name: serve[name] for name in ("single", "ray_shards", "connections", "duration_s", "tool")
                      if name in serve},
            "machine": ray_shards["machine"], "command": ray_shards["command"]}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--scale", default="benchmarks/results/scale.json", help="the file to add to")
    options.add_argument("--ray-shards", default="benchmarks/results/ray_shards.json")
    options.add_argument("--dense-shards", default="benchmarks/results/dense_shards.json")
    args = options.parse_args()
    scale = json.loads(Path(args.scale).read_text())
    ray_shards = Path(args.ray_shards)
    dense_shards = Path(args.dense_shards)
    if ray_shards.is_file():
        dense = json.loads(dense_shards.read_text()) if dense_shards.is_file() else None
        scale["shards"] = shards_entry(json.loads(ray_shards.read_text()), dense)
        print(f"shards: from {ray_shards}" + (f" and {dense_shards}" if dense else f" ({dense_shards} is not there)"))
    else:
        print(f"shards: left out ({ray_shards} is not there)")
    write_result(args.scale, scale)


if __name__ == "__main__":
    main()
