"""benchmarks/scale/bm25_pisa_depth.py end to end on a small saved index with its PISA index: every margin searched
twice, paired with the first on half the queries (Holm), the chosen one held out on the other half, and every margin's
top 10s the first's."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("pyterrier_pisa", reason="the pisa backend needs pyterrier-pisa (the engines extra)")


def test_margins_are_paired_chosen_on_half_and_rank_alike(tmp_path):
    from taskret.retrieval import BM25Retriever

    rng = random.Random(1)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(1500)]
    texts += texts[:300]  # copies: ties at rank 10 that a small first depth must search past
    BM25Retriever(backend="pisa").index_texts([f"d{i}" for i in range(len(texts))], texts).save(tmp_path / "index")
    (tmp_path / "queries.json").write_text(json.dumps([" ".join(rng.sample(words, 2)) for _ in range(40)]))
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_pisa_depth.py"), "--index",
                    str(tmp_path / "index"), "--queries", str(tmp_path / "queries.json"), "--margins", "0,50",
                    "--out", str(out)], check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["documents"] == 1800 and result["queries"] == 40 and result["current_margin"] == 0
    shallow, deep = result["settings"]["0"], result["settings"]["50"]
    assert len(shallow["runs"]) == len(deep["runs"]) == 2  # in order and reversed
    assert shallow["same_top10_as_current"] == deep["same_top10_as_current"] == 1.0
    # at a first depth of k every tie at rank k sends a query deeper; k + 50 leaves fewer to search again
    assert shallow["queries_searched_again"] > deep["queries_searched_again"]
    assert shallow["pisa_searches"] >= 40 + shallow["queries_searched_again"] > 40
    tuning = result["tuning"]["50"]
    assert tuning["queries"] == 20 and tuning["wilcoxon_p_holm"] >= tuning["wilcoxon_p"]
    assert result["chosen_margin"] in (0, 50)
    assert (result["held_out"] is None) == (result["chosen_margin"] == 0)
