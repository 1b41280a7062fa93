"""benchmarks/scale/bm25_pisa.py end to end on a small saved index of its own making: the PISA index derived and
timed, both backends searched in their ABBA order, paired, and their top 10s the same."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("pyterrier_pisa", reason="the pisa backend needs pyterrier-pisa (the engines extra)")


def test_both_backends_are_timed_paired_and_rank_alike(tmp_path):
    from taskret.retrieval import BM25Retriever

    rng = random.Random(0)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(2000)]
    BM25Retriever().index_texts([f"d{i}" for i in range(len(texts))], texts).save(tmp_path / "index")
    (tmp_path / "queries.json").write_text(json.dumps([" ".join(rng.sample(words, 2)) for _ in range(30)]))
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_pisa.py"), "--index", str(tmp_path / "index"),
                    "--queries", str(tmp_path / "queries.json"), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    row = next(iter(result["sizes"].values()))
    assert row["queries"] == 30 and row["same_top10_share"] == 1.0 and row["documents"] == 2000
    assert row["derive"]["derive_s"] >= 0 and row["derive"]["disk_gib"] >= 0 and row["derive"]["peak_rss_gib"] > 0
    for setting in ("bm25s", "pisa"):
        assert len(row["settings"][setting]["runs"]) == 2  # ABBA: each setting twice
        assert 0 < row["settings"][setting]["p50_ms"] <= row["settings"][setting]["p99_ms"]
    paired = row["paired"]
    assert paired["queries"] == 30 and paired["ratio_ci95"][0] <= paired["ratio_pisa_over_bm25s"] <= \
        paired["ratio_ci95"][1]
    assert (tmp_path / "index" / "pisa" / "pisa.json").is_file()
    assert all(run["searched_on_pisa"] == (setting == "pisa") for setting in ("bm25s", "pisa")
               for run in row["settings"][setting]["runs"])
