"""benchmarks/scale/bm25_pisa_parts.py end to end on a small saved index: a PISA index made for each part size
(linked beside the index), every setting searched twice and paired, a part size chosen on half the queries within the
peak limit, held out against one part on the other half, and every setting's top 10s one part's."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("pyterrier_pisa", reason="the pisa backend needs pyterrier-pisa (the engines extra)")


def _run(tmp_path, limit: float) -> dict:
    out = tmp_path / f"result-{limit}.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_pisa_parts.py"), "--index",
                    str(tmp_path / "index"), "--queries", str(tmp_path / "queries.json"), "--work",
                    str(tmp_path / "work"), "--part-postings", "0,3000", "--peak-limit-gib", str(limit),
                    "--out", str(out)], check=True, cwd=ROOT, capture_output=True, timeout=600)
    return json.loads(out.read_text())


def test_part_sizes_are_built_paired_and_chosen_within_the_limit(tmp_path):
    from taskret.retrieval import BM25Retriever

    rng = random.Random(1)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(1500)]
    texts += texts[:300]  # copies: ties across parts
    BM25Retriever().index_texts([f"d{i}" for i in range(len(texts))], texts).save(tmp_path / "index")
    (tmp_path / "queries.json").write_text(json.dumps([" ".join(rng.sample(words, 2)) for _ in range(40)]))
    result = _run(tmp_path, 100.0)
    assert result["documents"] == 1800 and result["queries"] == 40
    assert result["builds"]["0"]["parts"] == 1 and result["builds"]["3000"]["parts"] > 2
    assert set(result["settings"]) == {"0", "3000:0", "3000:30"}
    for setting in result["settings"].values():
        assert len(setting["runs"]) == 2 and setting["same_top10_as_one_part"] == 1.0
        assert setting["pisa_searches"] >= 40
    assert result["settings"]["3000:0"]["runs"][0]["parts"] == result["builds"]["3000"]["parts"]
    assert result["chosen"] in ("3000:0", "3000:30") and result["held_out"]["queries"] == 20
    assert result["choice"]["margin"]["queries"] == 20
    assert not (tmp_path / "index" / "pisa").exists()  # the index itself is left as it was
    strict = _run(tmp_path, 0.001)  # no part size builds within it: one part stays
    assert strict["chosen"] == "0" and strict["held_out"] is None and strict["choice"] == {}
