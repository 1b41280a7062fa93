"""Two evaluation runs paired on the same test inputs (taskret.icl.compare, `taskret compare`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.icl.compare import compare_rows, compare_runs, comparison_line, wilcoxon
from tests.conftest import write_jsonl_rows


def _rows(correct: list[bool], chrf: list[float] | None = None) -> list[dict]:
    return [{"id": f"t{i}", "correct": c, **({"chrf": chrf[i]} if chrf is not None else {})}
            for i, c in enumerate(correct)]


def _run(folder, retriever: str, correct: list[bool], chrf: list[float] | None = None, corpus: float | None = None):
    write_jsonl_rows(folder / "predictions.jsonl", _rows(correct, chrf))
    metrics = {"em": 100.0 * sum(correct) / len(correct), **({"chrf": corpus} if corpus is not None else {})}
    (folder / "summary.json").write_text(json.dumps({"retriever": retriever, "metrics": metrics}))
    return folder


def test_exact_match_is_paired_with_mcnemar_and_each_graded_metric_with_wilcoxon():
    a = _rows([True] * 8 + [False] * 12, chrf=[90.0] * 15 + [10.0] * 5)
    b = _rows([False] * 8 + [False] * 12, chrf=[20.0] * 15 + [10.0] * 5)
    c = compare_rows(a, b, "EPR", "BM25", corpus_a={"chrf": 71.5})
    assert (c.n, c.em_a, c.em_b) == (20, 40.0, 0.0)
    assert (c.paired.only_a, c.paired.only_b) == (8, 0) and c.paired.p_value == pytest.approx(2 / 2 ** 8)
    chrf = c.graded["chrf"]
    assert (chrf.higher_a, chrf.higher_b) == (15, 0) and chrf.p_value < 0.01
    assert chrf.a == 71.5 and chrf.b == pytest.approx((20.0 * 15 + 10.0 * 5) / 20)  # corpus score, else the mean
    line = comparison_line(c)
    assert line.startswith("EPR solves 8 test inputs BM25 misses and misses 0 BM25 solves (McNemar p=0.0078): EPR "
                           "beats BM25 by 40.0 EM points on these 20 test inputs")
    assert "chrf: EPR 71.5, BM25 17.5; higher for EPR on 15 inputs, for BM25 on 0 (Wilcoxon p=" in line


def test_a_metric_only_one_run_reports_is_left_out_and_other_inputs_are_refused():
    c = compare_rows(_rows([True, False], chrf=[1.0, 2.0]), _rows([True, True]))
    assert c.graded == {} and "chrf" not in comparison_line(c)
    with pytest.raises(ValueError, match="not run on the same test inputs: 1 ids only in A, 0 only in B"):
        compare_rows(_rows([True, False, True]), _rows([True, False]))


def test_wilcoxon_of_equal_scores_is_one():
    assert wilcoxon({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}) == 1.0


def test_compare_command_pairs_two_evaluation_folders(tmp_path):
    a = _run(tmp_path / "a", "epr:runs/x", [True, True, False, True], [80.0, 70.0, 5.0, 60.0], corpus=55.0)
    b = _run(tmp_path / "b", "bm25", [False, True, False, False], [30.0, 70.0, 5.0, 20.0], corpus=31.0)
    result = CliRunner().invoke(app, ["compare", str(a), str(b)], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    assert "epr:runs/x solves 2 test inputs bm25 misses and misses 0 bm25 solves (McNemar p=0.5)" in result.stderr
    assert "chrf: epr:runs/x 55.0, bm25 31.0; higher for epr:runs/x on 2 inputs, for bm25 on 0" in result.stderr
    as_json = CliRunner().invoke(app, ["compare", str(a), str(b), "--json", "--name-a", "EPR"])
    data = json.loads(as_json.stdout)
    assert data["name_a"] == "EPR" and data["paired"]["only_a"] == 2 and data["graded"]["chrf"]["higher_a"] == 2
    assert compare_runs(a, b).to_dict() == {**data, "name_a": "epr:runs/x"}
    missing = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "nope")], env={"COLUMNS": "2000"})
    assert missing.exit_code == 2 and "is not an evaluation folder: it has no predictions.jsonl" in missing.stderr
