"""benchmarks/scale/bm25_shards.py end to end on a small corpus of its own making: 1, 2 and 4 shards built and served,
the shards' merged top 10 the single index's, every cost recorded."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _data(folder: Path) -> Path:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    task = folder / "berri-lite" / "toy"
    task.mkdir(parents=True)
    with open(task / "corpus.jsonl", "w") as out:
        for i in range(300):
            text = ". ".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(2)) + "."
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(task / "queries.jsonl", "w") as out:
        for i in range(25):
            out.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.sample(words, 3))}) + "\n")
    (task / "qrels").mkdir()
    # every query judges three documents: NDCG@10 is then a number each shard count must reproduce
    (task / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{rng.randrange(300)}\t1\n" for i in range(25) for _ in range(3)))
    return folder


def test_shards_cost_and_agreement_are_recorded_for_each_size_and_count(tmp_path):
    data = _data(tmp_path / "data")
    out = tmp_path / "result.json"
    command = [sys.executable, str(ROOT / "benchmarks/scale/bm25_shards.py"), "--data-dir", str(data), "--sizes",
               "200,500", "--shards", "2,4", "--queries", "25", "--work", str(tmp_path / "work"), "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=600)
    sizes = json.loads(out.read_text())["sizes"]
    assert set(sizes) == {"200", "500"} and set(sizes["500"]) == {"1", "2", "4"}  # 1: the single index, always
    for n, rows in sizes.items():
        for count, row in rows.items():
            assert row["documents"] == int(n) and row["queries"] == 25
            assert 0 < row["p50_ms"] <= row["p99_ms"] and row["build_peak_rss_gib"] > 0
            assert row["resident_after_queries_gib"] > 0
            assert row["judged_queries"] == 25 and 0 <= row["ndcg10"] <= 100
            assert row["ndcg10"] == rows["1"]["ndcg10"]  # the merged top 10 is the single index's
            if count != "1":
                assert row["vs_single_index"] == {"max_score_diff": 0.0, "same_document_untied": 1.0}
    shards = json.loads((tmp_path / "work" / "500" / "shards-4" / "shards.json").read_text())["shards"]
    assert list(shards) == ["shard-0", "shard-1", "shard-2", "shard-3"]
    lines = [json.loads(line) for line in open(tmp_path / "work" / "500" / "shards-4" / "index" / "shard-3" /
                                               "items.jsonl")]
    corpus = [json.loads(line)["_id"] for line in open(tmp_path / "work" / "500" / "corpus.jsonl")]
    assert [row["id"] for row in lines] == corpus[375:]  # the last quarter of the corpus, with its texts
