"""benchmarks/scale/bm25_pisa_rescore.py end to end on a small saved index in PISA parts: both ways searched twice,
paired over every query, and the top 10s the same."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("pyterrier_pisa", reason="the pisa backend needs pyterrier-pisa (the engines extra)")


def test_both_ways_are_paired_and_rank_alike(tmp_path, monkeypatch):
    from taskret.retrieval import BM25Retriever, bm25_pisa

    rng = random.Random(2)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(1500)]
    monkeypatch.setattr(bm25_pisa, "PART_POSTINGS", 2000)
    BM25Retriever(backend="pisa").index_texts([f"d{i}" for i in range(len(texts))], texts).save(tmp_path / "index")
    (tmp_path / "queries.json").write_text(json.dumps([" ".join(rng.sample(words, 3)) for _ in range(30)]))
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_pisa_rescore.py"), "--index",
                    str(tmp_path / "index"), "--queries", str(tmp_path / "queries.json"), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["documents"] == 1500 and result["queries"] == 30 and result["parts"] > 2
    assert result["same_top10_share"] == 1.0 and result["paired"]["queries"] == 30
    assert all(len(setting["runs"]) == 2 for setting in result["settings"].values())
