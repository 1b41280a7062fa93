"""benchmarks/scale/ivf_quantizer.py end to end on a small index of compressed_vectors.py's making: each quantizer
searched twice in its order, paired, with recall against the exact top 10s and their paired difference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from .test_compressed_vectors import _clustered

ROOT = Path(__file__).resolve().parents[2]


def test_flat_and_hnsw_quantizers_are_paired_with_their_recall(tmp_path):
    np.save(tmp_path / "base.npy", _clustered(6000, seed=4))
    np.save(tmp_path / "queries.npy", _clustered(50, seed=5))
    work = tmp_path / "work"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/compressed_vectors.py"), "--base",
                    str(tmp_path / "base.npy"), "--queries", str(tmp_path / "queries.npy"), "--sizes", "6000",
                    "--work", str(work), "--out", str(tmp_path / "cv.json")],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/ivf_quantizer.py"), "--work", str(work), "--sizes",
                    "6000", "--queries", str(tmp_path / "queries.npy"), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    row = json.loads(out.read_text())["sizes"]["6000"]
    assert row["queries"] == 50 and row["settings"]["nlist"] >= 16
    for quantizer in ("flat", "hnsw"):
        measured = row["quantizers"][quantizer]
        assert len(measured["runs"]) == 2 and 0 < measured["p50_ms"] <= measured["p99_ms"]
        assert 0.8 <= measured["recall_at_10"] <= 1
    assert row["quantizers"]["flat"]["runs"][0]["graph_s"] == 0 < row["quantizers"]["hnsw"]["runs"][0]["graph_s"]
    difference = row["recall_difference"]
    assert difference["ci95"][0] <= difference["mean"] <= difference["ci95"][1]
    assert abs(difference["mean"] - (row["quantizers"]["hnsw"]["recall_at_10"]
                                     - row["quantizers"]["flat"]["recall_at_10"])) < 1e-3
    assert row["paired"]["queries"] == 50
