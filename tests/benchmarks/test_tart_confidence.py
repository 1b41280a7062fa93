"""``benchmarks/studies/tart/tart_confidence.py``: bootstrap intervals of per-query NDCG@10, and ``tart_berri.py``'s per-query
file that feeds it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap

from taskret.retrieval.base import RetrievalResult
from taskret.tart.tasks import Document, RetrievalTask

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "benchmarks" / "studies" / "tart"  # the TART study's scripts
FOLDERS = [str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "documents"), str(STUDY)]
sys.path[:0] = FOLDERS
from renderers import common, scifact  # noqa: E402
from tart_berri import Rankings  # noqa: E402
from tart_confidence import interval, paired_difference, query_scores  # noqa: E402

for folder in FOLDERS:
    sys.path.remove(folder)


def _scores(values) -> dict[str, float]:
    return {f"q{i}": float(v) for i, v in enumerate(values)}


def test_interval_holds_the_mean_and_narrows_with_more_queries():
    rng = np.random.default_rng(1)
    few, many = _scores(rng.uniform(0, 100, 30)), _scores(rng.uniform(0, 100, 600))
    small, large = interval(few), interval(many)
    for out, scores in ((small, few), (large, many)):
        assert out["ci95"][0] < out["mean"] < out["ci95"][1]
        assert out["mean"] == pytest.approx(np.mean(list(scores.values())), abs=0.01)
    assert large["ci95"][1] - large["ci95"][0] < small["ci95"][1] - small["ci95"][0]


def test_paired_difference_sees_a_small_consistent_gain_that_unpaired_noise_would_hide():
    rng = np.random.default_rng(2)
    base = rng.uniform(0, 100, 300)  # queries differ wildly; the second system is 1 point better on each
    better = paired_difference(_scores(base + 1.0), _scores(base))
    assert better["mean"] == pytest.approx(1.0)
    assert better["ci95"] == [1.0, 1.0] and better["share_above_zero"] == 1.0
    mixed = paired_difference(_scores(base + rng.normal(0, 5, 300)), _scores(base))
    assert mixed["ci95"][0] < 0 < mixed["ci95"][1] and 0.0 < mixed["share_above_zero"] < 1.0
    same = paired_difference(_scores(base), _scores(base))
    assert same == {"mean": 0.0, "ci95": [0.0, 0.0], "share_above_zero": 0.0, "n_queries": 300}


def test_several_tasks_give_the_mean_of_task_means_with_each_task_resampled_on_its_own():
    rng = np.random.default_rng(4)
    # a small task far above a large one: a pooled mean over queries would be near the large task's 20
    high, low = _scores(rng.uniform(80, 100, 20)), _scores(rng.uniform(10, 30, 400))
    both = interval([high, low], resamples=2000)
    expected = (np.mean(list(high.values())) + np.mean(list(low.values()))) / 2
    assert both["mean"] == pytest.approx(expected, abs=0.01) and both["n_queries"] == 420
    assert both["ci95"][0] < both["mean"] < both["ci95"][1]
    # stratified: each task keeps its share, so the width is the normal approximation's for a mean of two means
    # (~2.6 here), not the spread between the tasks (a pooled resample would move the small task's share)
    spread = 1.96 * np.sqrt(sum(np.var(list(t.values()), ddof=1) / len(t) for t in (high, low))) / 2
    assert both["ci95"][1] - both["ci95"][0] == pytest.approx(2 * spread, rel=0.2)
    # one task: exactly scipy's plain percentile bootstrap of the mean
    plain = bootstrap((np.array(list(low.values())),), np.mean, n_resamples=500, method="percentile",
                      rng=np.random.default_rng(1)).confidence_interval
    assert interval([low], resamples=500, seed=1)["ci95"] == [round(plain.low, 2), round(plain.high, 2)]
    gain = paired_difference([_scores(np.full(20, 50.0) + 2), _scores(np.full(30, 10.0))],
                             [_scores(np.full(20, 50.0)), _scores(np.full(30, 10.0) + 1)], resamples=500)
    assert gain["mean"] == pytest.approx(0.5) and gain["ci95"] == [0.5, 0.5]  # (+2 and -1) / 2, every resample
    with pytest.raises(ValueError, match="different queries"):
        paired_difference([{"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}], [{"a": 1.0, "b": 2.0}, {"a": 1.0, "c": 2.0}])
    with pytest.raises(ValueError, match="cover 2 and 1 tasks"):
        paired_difference([{"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}], [{"a": 1.0, "b": 2.0}])


def test_mismatched_queries_and_missing_systems_are_named():
    with pytest.raises(ValueError, match="different queries"):
        paired_difference({"a": 1.0, "b": 2.0}, {"a": 1.0, "c": 2.0})
    per_query = {"bm25": {"no_instruction": {"a": 1.0}}}
    with pytest.raises(ValueError, match="no system 'minilm'.*it holds bm25"):
        query_scores(per_query, "minilm@no_instruction")
    with pytest.raises(ValueError, match="no column 'instruction'.*it has no_instruction"):
        query_scores(per_query, "bm25@instruction")
    with pytest.raises(ValueError, match="SYSTEM@COLUMN"):
        query_scores(per_query, "bm25")


def _task() -> RetrievalTask:
    corpus = {f"d{i}": Document(f"d{i}", "", f"text {i}") for i in range(4)}
    return RetrievalTask("facts", corpus, {"q1": "one", "q2": "two", "q3": "three"},
                         {"q1": {"d0": 1}, "q2": {"d1": 1}, "q3": {"d2": 0}})  # q3 has no relevant document


def test_rankings_save_per_query_ndcg_that_average_to_the_reported_ndcg(tmp_path):
    rankings = Rankings(_task(), tmp_path, depth=4)
    good = RetrievalResult([["d0", "d1"], ["d1", "d0"], ["d2"]], np.array([[2, 1], [2, 1], [1, np.nan]]))
    half = RetrievalResult([["d0", "d1"], ["d0", "d1"], ["d2"]], np.array([[2, 1], [2, 1], [1, np.nan]]))
    path = rankings.save_query_ndcgs({"good": rankings.query_ndcgs(good), "half": rankings.query_ndcgs(half)},
                                     "no_instruction")
    rankings.save_query_ndcgs({"good": rankings.query_ndcgs(half)}, "instruction")  # a second column merges
    saved = json.loads(path.read_text())
    assert path == tmp_path / "facts" / "per_query.json"
    assert set(saved["good"]) == {"no_instruction", "instruction"}
    assert saved["good"]["no_instruction"] == {"q1": 100.0, "q2": 100.0}  # q3: nothing relevant, not judged
    assert saved["half"]["no_instruction"]["q1"] == 100.0 and saved["half"]["no_instruction"]["q2"] < 100.0
    other = Rankings(_task(), tmp_path, depth=4)  # another sample of queries in the same work folder
    other.qids = ["q1"]
    other.save_query_ndcgs({"bm25": other.query_ndcgs(RetrievalResult([["d0"]], np.array([[1.0]])))},
                           "no_instruction")
    assert json.loads(path.read_text()) == {"bm25": {"no_instruction": {"q1": 100.0}}}  # the old sample's are gone
    path.write_text(json.dumps(saved))
    for name, result in (("good", good), ("half", half)):
        values = saved[name]["no_instruction"].values()
        assert rankings.ndcg(result) == pytest.approx(sum(values) / len(values), abs=0.01)


def _confidence(out: Path, per_query: list[Path], *args: str) -> subprocess.CompletedProcess:
    """benchmarks/studies/tart/tart_confidence.py run as a user runs it, one ``--per-query`` per file."""
    files = [a for f in per_query for a in ("--per-query", str(f))]
    return subprocess.run([sys.executable, str(STUDY / "tart_confidence.py"), "--out", str(out),
                           *files, *args], capture_output=True, text=True, cwd=ROOT)


def test_the_script_writes_intervals_and_refuses_a_system_it_does_not_have(tmp_path):
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 100, 50)
    source = tmp_path / "per_query.json"
    source.write_text(json.dumps({"bm25": {"no_instruction": _scores(base)},
                                  "hybrid": {"no_instruction": _scores(np.minimum(base + 3, 100))}}))
    out = tmp_path / "conf.json"
    done = _confidence(out, [source], "--resamples", "500", "--system", "hybrid@no_instruction",
                       "--difference", "hybrid - BM25=hybrid@no_instruction, bm25@no_instruction")
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["systems"]["hybrid@no_instruction"]["n_queries"] == 50
    assert result["systems"]["hybrid@no_instruction"]["label"] is None
    gain = result["differences"]["hybrid@no_instruction - bm25@no_instruction"]
    assert gain["mean"] > 0 and gain["ci95"][0] > 0 and gain["share_above_zero"] == 1.0
    assert gain["label"] == "hybrid - BM25"
    assert "--resamples 500" in result["commands"][0]
    assert "'hybrid - BM25=hybrid@no_instruction, bm25@no_instruction'" in result["commands"][0]  # quoted: one word
    before = out.read_text()
    missing = _confidence(out, [source], "--system", "e5@no_instruction")
    assert missing.returncode != 0 and "no system 'e5'" in missing.stderr
    assert out.read_text() == before  # a refused run leaves the earlier result as it was


def test_the_script_pools_several_tasks_and_names_the_file_that_lacks_a_system(tmp_path):
    files = []
    for task, level in (("argkp", 70.0), ("conala", 40.0)):
        (tmp_path / task).mkdir()
        files.append(tmp_path / task / "per_query.json")
        files[-1].write_text(json.dumps({"student": {"no_instruction": _scores(np.full(10, level)),
                                                     "instruction": _scores(np.full(10, level + 1))}}))
    out = tmp_path / "held_out.json"
    done = _confidence(out, files, "--resamples", "200", "--system", "student@no_instruction",
                       "--difference", "student@instruction,student@no_instruction")
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["systems"]["student@no_instruction"]["mean"] == 55.0
    assert result["systems"]["student@no_instruction"]["n_queries"] == 20
    assert result["differences"]["student@instruction - student@no_instruction"]["mean"] == 1.0
    assert "stratified by task" in result["method"] and result["source"] == [str(f) for f in files]
    twice = _confidence(out, [files[0], files[0]], "--system", "student@no_instruction")
    assert twice.returncode != 0 and "given twice" in twice.stderr
    files[1].write_text(json.dumps({"student": {"no_instruction": _scores(np.full(10, 1.0)),
                                                "instruction": _scores(np.full(9, 1.0))}}))
    unpaired = _confidence(out, files, "--difference", "student@instruction,student@no_instruction")
    assert unpaired.returncode != 0 and f"{files[1]}: student@instruction and student@no_instruction scored " \
        "different queries (1 differ)" in unpaired.stderr
    files[1].write_text(json.dumps({"bm25": {"no_instruction": _scores(np.full(10, 1.0))}}))
    missing = _confidence(out, files, "--system", "student@no_instruction")
    assert missing.returncode != 0 and f"{files[1]}: no system 'student'" in missing.stderr


def test_the_report_renders_each_interval_with_its_label_or_its_spec(tmp_path, monkeypatch):
    result = {"systems": {"a@no_instruction": {"label": "pipeline", "mean": 74.95, "ci95": [73.1, 76.8],
                                               "n_queries": 300}},
              "differences": {"a@x - b@x": {"label": None, "mean": -1.47, "ci95": [-3.06, 0.04],
                                            "share_above_zero": 0.0275, "n_queries": 300}},
              "resamples": 10000, "commands": ["python benchmarks/studies/tart/tart_confidence.py"]}
    (tmp_path / "tart_confidence.json").write_text(json.dumps(result))
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    table = scifact.tart_confidence_table()
    assert "over the 300 test claims, 10,000 resamples" in table[0]
    assert "| pipeline (`a@no_instruction`) | 74.95 | 73.10 to 76.80 | |" in table
    assert "| `a@x - b@x` | -1.47 | -3.06 to +0.04 | 2.8% |" in table
    held_out = {**result, "source": ["runs/eval/argkp/per_query.json", "runs/eval/conala/per_query.json"],
                "systems": {"s@instruction": {"label": None, "mean": 56.7, "ci95": [52.5, 61.0], "n_queries": 199}}}
    (tmp_path / "tart_confidence_held_out.json").write_text(json.dumps(held_out))
    table = scifact.tart_confidence_held_out_table()
    assert "mean over 2 tasks (argkp, conala), 199 / 300 dev queries in all" in table[0]
    assert "| `s@instruction` | 56.70 | 52.50 to 61.00 | |" in table
    (tmp_path / "tart_confidence_held_out.json").write_text(json.dumps({**held_out, "source": "e/argkp/q.json"}))
    assert "over argkp's 199 / 300 dev queries" in scifact.tart_confidence_held_out_table()[0]  # one task, no mean
    # another set of held-out tasks in its own file: a table of its own after the first, a blank line between
    (tmp_path / "tart_confidence_held_out_capped.json").write_text(json.dumps(held_out))
    tables = scifact.tart_confidence_held_out_table()
    openings = [i for i, line in enumerate(tables) if line.startswith("How sure the held-out means are")]
    assert len(openings) == 2 and tables[openings[1] - 1] == ""
    assert "over argkp's" in tables[openings[0]] and "mean over 2 tasks (argkp, conala)" in tables[openings[1]]
    monkeypatch.setattr(common, "RESULTS", tmp_path / "none")
    assert scifact.tart_confidence_table() == []  # not run yet: left out, not made up
    assert scifact.tart_confidence_held_out_table() == []


def test_held_out_refuses_a_column_it_does_not_score_before_loading_anything(tmp_path):
    done = subprocess.run([sys.executable, str(STUDY / "tart_held_out.py"), "--rerank", "upr",
                           "--rerank-columns", "no_instruction,rerank_instruction", "--out", str(tmp_path / "o.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "--rerank-columns: unknown rerank_instruction; expected no_instruction and/or instruction" in done.stderr
    assert not (tmp_path / "o.json").exists()
