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
            assert row["resident_after_queries_gib"] > 0 and row["searched_on_pisa"] is False  # bm25s below 10M
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

    # a size measured in a run of its own keeps the sizes already there, each with the run it came from
    first = json.loads(out.read_text())
    again = [*command[:command.index("--sizes")], "--sizes", "300", "--shards", "1", "--queries", "25", "--work",
             str(tmp_path / "work"), "--out", str(out), "--keep-earlier"]
    subprocess.run(again, check=True, cwd=ROOT, capture_output=True, timeout=600)
    merged = json.loads(out.read_text())
    assert list(merged["sizes"]) == ["200", "300", "500"] and merged["sizes"]["500"] == first["sizes"]["500"]
    assert "--sizes 300" in merged["command"] and "--keep-earlier" in merged["command"]
    assert merged["earlier_runs"] == {n: {"command": first["command"], "machine": first["machine"]}
                                      for n in ("200", "500")}


def test_rows_kept_from_an_earlier_run_render_with_that_runs_command(monkeypatch):
    from .test_engines import import_scale_renderer

    row = {"build_s": 1.0, "build_peak_rss_gib": 0.5, "disk_gib": 0.1, "p50_ms": 1.0, "p99_ms": 2.0,
           "resident_after_queries_gib": 0.2}
    earlier = {"command": "python benchmarks/scale/bm25_shards.py --sizes 1000000",
               "machine": {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "load_average": [1.79, 1, 1]}}
    result = {"command": "python benchmarks/scale/bm25_shards.py --sizes 10000000 --keep-earlier",
              "machine": {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "load_average": [0.4, 1, 1]},
              "sizes": {"1000000": {"1": row}, "10000000": {"1": row}}, "earlier_runs": {"1000000": earlier}}
    render = import_scale_renderer()
    monkeypatch.setattr(render, "load", lambda name: result)
    text = "\n".join(render.bm25_shards_table())
    assert "| 10,000,000 | 1 |" in text and "--sizes 10000000 --keep-earlier" in text
    assert ("The 1,000,000-document rows come from an earlier run (`python benchmarks/scale/bm25_shards.py --sizes "
            "1000000`; ") in text and "load average 1.79 at the start" in text


def test_score_array_pairs_the_two_allocator_settings_query_by_query(tmp_path):
    data = _data(tmp_path / "data")
    work = tmp_path / "work"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_shards.py"), "--data-dir", str(data), "--sizes",
                    "300", "--shards", "1", "--queries", "25", "--work", str(work), "--out", str(tmp_path / "s.json")],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    out = tmp_path / "array.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_score_array.py"), "--folder",
                    str(work / "300" / "shards-1"), "--queries", str(work / "queries.json"), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["documents"] == 300 and result["order"] == ["default", "kept", "kept", "default"]
    for setting in ("default", "kept"):
        runs = result["settings"][setting]["runs"]
        assert len(runs) == 2 and all(run["queries"] == 25 for run in runs)
        assert 0 < result["settings"][setting]["p50_ms"] <= result["settings"][setting]["p99_ms"]
    paired = result["paired"]
    assert paired["queries"] == 25 and paired["ratio_ci95"][0] <= paired["ratio_kept_over_default"] <= \
        paired["ratio_ci95"][1] and 0 <= paired["wilcoxon_p"] <= 1


def test_build_memory_samples_each_size_with_where_the_build_was(tmp_path):
    corpus = _data(tmp_path / "data") / "berri-lite" / "toy" / "corpus.jsonl"
    out = tmp_path / "memory.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_build_memory.py"), "--corpus", str(corpus),
                    "--sizes", "100,300", "--every", "0.005", "--work", str(tmp_path / "work"), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert set(result["sizes"]) == {"100", "300"} and set(result["growth_bytes_per_doc"]) == {
        "max_anon_mib", "max_file_mib", "peak_rss_bytes_per_doc"}
    for size in result["sizes"].values():
        peak = size["peak"]
        assert size["samples"] > 0 and peak["rss_mib"] >= peak["anon_mib"] > 0
        assert isinstance(peak["stack"], list) and any(name.startswith("bm25_segments.") for name in size["by_function"])
    assert (tmp_path / "work" / "corpus-100.jsonl").read_text().splitlines() == corpus.read_text().splitlines()[:100]
