"""benchmarks/scale/dense_shards.py end to end on a small corpus of its own making, on a real three-node local Ray
cluster: the single docs-fast index built (real MiniLM), its vectors indexed as three shards by Ray tasks, searched by
one actor each, and the merged top 10 scored against exact search; then assemble.py carrying the difference into
scale.json's ``shards``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_assemble import ray_shards_result
from .test_bm25_shards import _data

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]


def test_dense_shards_on_three_nodes_find_what_the_single_index_finds(tmp_path):
    data = _data(tmp_path / "data")
    out, work = tmp_path / "dense.json", tmp_path / "work"
    command = [sys.executable, str(ROOT / "benchmarks/scale/dense_shards.py"), "--data-dir", str(data), "--size",
               "300", "--shards", "3", "--queries", "25", "--work", str(work), "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=900)
    result = json.loads(out.read_text())
    assert result["nodes"] == 3 and result["ray"]["nodes"] == 3 and result["ray"]["documents"] == 300
    assert result["index"]["index_type"] == "flat"  # 300 vectors: exact, so the shards must be exact too
    assert result["single"]["recall_at_10"] == 1.0 and result["ray"]["recall_at_10"] == 1.0
    assert result["recall_delta"] == 0.0 and result["same_top10_set_share"] == 1.0
    assert 0 < result["ray"]["p50_ms"] <= result["ray"]["p99_ms"]
    shards = json.loads((work / "300" / "dense-3" / "shards.json").read_text())["shards"]
    last = [json.loads(line)["id"] for line in open(work / "300" / "dense-3" / shards["shard-2"] / "items.jsonl")]
    corpus = [json.loads(line)["_id"] for line in open(work / "300" / "corpus.jsonl")]
    assert last == corpus[200:]  # the last third of the corpus, with its texts

    (tmp_path / "ray.json").write_text(json.dumps(ray_shards_result()))
    scale = tmp_path / "scale.json"
    scale.write_text(json.dumps({"sizes": {}}))
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/assemble.py"), "--scale", str(scale),
                    "--ray-shards", str(tmp_path / "ray.json"), "--dense-shards", str(out),
                    "--bm25-shards", str(tmp_path / "none.json")],
                   check=True, cwd=ROOT, capture_output=True, timeout=60)
    entry = json.loads(scale.read_text())["shards"]
    assert entry["dense_recall_delta"] == 0.0 and entry["dense"]["recall_at_10"] == {"single": 1.0, "ray_shards": 1.0}
