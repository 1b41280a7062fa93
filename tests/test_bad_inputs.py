"""Bad inputs found by benchmarks/robustness/robustness.py: a scores file with wrong types or missing fields, an empty
scores file, and a BM25 index whose meta.json ids do not match it, each stop with an error that names the
problem (they used to crash with TypeError/KeyError/IndexError or write an empty labels file)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.data import Example
from taskret.epr.scoring import read_scores
from taskret.io import DataError
from tests.conftest import write_jsonl_rows


def good_row(i: int = 1) -> dict:
    return {"id": f"ex{i}", "candidates": [{"id": "ex2", "logprob": -1.5, "n_tokens": 3},
                                           {"id": "ex3", "logprob": -2, "n_tokens": 0}]}


@pytest.mark.parametrize("row, message", [
    ({"candidates": []}, "field 'id': missing or not a string"),
    ({"id": "ex1"}, "field 'candidates': missing or not a list"),
    ({"id": "ex1", "candidates": ["ex2"]}, "field 'candidates[0]': expected an object with a string id"),
    ({"id": "ex1", "candidates": [{"id": "ex2", "logprob": "high", "n_tokens": 3}]},
     "field 'candidates[0].logprob': expected a number, got 'high'"),
    ({"id": "ex1", "candidates": [{"id": "ex2", "logprob": True, "n_tokens": 3}]},
     "field 'candidates[0].logprob': expected a number, got True"),
    ({"id": "ex1", "candidates": [{"id": "ex2", "logprob": -1.0, "n_tokens": -1}]},
     "field 'candidates[0].n_tokens': expected a non-negative integer"),
])
def test_read_scores_names_the_bad_field(tmp_path, row, message):
    path = write_jsonl_rows(tmp_path / "scores.jsonl", [good_row(0), row])
    with pytest.raises(DataError, match="line 2, " + message.replace("[", r"\[").replace("]", r"\]")):
        read_scores(path)


def test_read_scores_accepts_scoring_output_and_refuses_an_empty_file(tmp_path):
    assert read_scores(write_jsonl_rows(tmp_path / "s.jsonl", [good_row(1), good_row(2)]))[1]["id"] == "ex2"
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="no score rows in file"):
        read_scores(tmp_path / "empty.jsonl")


def test_epr_label_reports_a_bad_scores_file_and_writes_nothing(tmp_path):
    scores = write_jsonl_rows(tmp_path / "scores.jsonl", [{"id": "ex1"}])
    out = tmp_path / "out" / "labels.jsonl"
    result = CliRunner().invoke(app, ["epr", "label", "--scores", str(scores), "--out", str(out)],
                                env={"COLUMNS": "2000"})
    assert result.exit_code == 2, result.output
    assert "line 1, field 'candidates': missing or not a list" in result.output
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_a_bm25_index_that_does_not_match_its_ids_is_refused(tmp_path):
    from taskret.ids import IdList
    from taskret.retrieval import Retriever, make_retriever

    make_retriever("bm25").index([Example(f"e{i}", f"text number {i}", "o") for i in range(5)]).save(tmp_path / "ix")
    IdList.of(["e0", "e1", "e2"]).save(tmp_path / "ix")
    with pytest.raises(ValueError, match="holds 5 documents but the index lists 3 ids"):
        Retriever.load(tmp_path / "ix")
    result = CliRunner().invoke(app, ["retrieve", "--index", str(tmp_path / "ix"), "hello"], env={"COLUMNS": "2000"})
    assert result.exit_code == 2 and "mismatched or partial index" in result.output


def test_bm25_refuses_a_pool_whose_texts_have_no_terms():
    """Texts of stop words only used to fail inside bm25s with "max() arg is an empty sequence" after a numpy
    warning (tests/cli/test_errors.py checks what `taskret evaluate` prints)."""
    from taskret.retrieval import make_retriever

    examples = [Example("a", "the a an", "weather forecast"), Example("b", "is it", "alarm clock")]
    with pytest.raises(ValueError, match=r"^bm25: the 2 indexed texts have no terms .* \(e\.g\. 'the a an'\)"):
        make_retriever("bm25").index(examples)
    with pytest.raises(ValueError, match="the 0 indexed texts have no terms"):
        make_retriever("bm25").index([])
    assert make_retriever("bm25:output").index(examples).retrieve(["alarm"], k=1).ids == [["b"]]
