"""Metrics and evaluation runs (tiny LM) writing their artifacts."""

from __future__ import annotations

import json

import pytest

from taskret.data import Example, Task
from taskret.formats import BREAK_FORMAT
from taskret.icl.evaluation import (
    break_normalized_match,
    evaluate,
    exact_match,
    machine_differences,
    mcnemar,
    metrics_for,
    prediction_rows,
    read_correct,
    score_predictions,
)
from taskret.icl.inference import Prediction, predict
from taskret.icl.prompt import Prompt
from taskret.retrieval import BM25Retriever

from ..conftest import read_jsonl_rows
from .test_break_lf import needs_lexicon

# --- metrics --------------------------------------------------------------------------------------


@pytest.mark.parametrize("prediction,gold,expected", [
    ("[IN:GET_WEATHER ]", "[IN:GET_WEATHER ]", True),
    ("[IN:GET_WEATHER  [SL:DATE_TIME today ] ]", "[IN:GET_WEATHER [SL:DATE_TIME today ] ]", True),
    (" return flights ;return #1 from washington\t", "return flights ;return #1 from  washington", True),
    ("a\n b", "a b", True),
    ("[IN:GET_WEATHER ]", "[IN:GET_WEATHER]", False),  # a missing space is not a whitespace run
    ("[in:get_weather ]", "[IN:GET_WEATHER ]", False),
    ("[IN:GET_WEATHER ]", "[IN:GET_ALARM ]", False),
    ("", "x", False),
])
def test_exact_match(prediction, gold, expected):
    assert exact_match(prediction, gold) is expected


@pytest.mark.parametrize("prediction,gold,expected", [
    ("Return the flights ;return #1 from Washington.", "return flights ;return #1 from  washington", True),
    ("return flights; return #1 from washington", "return flights ;return #1 from washington", True),
    ("return an apple ;return #1 that is red?", "return apple ;return #1 that is red", True),
    ("return flights ;return #1 from boston", "return flights ;return #1 from washington", False),
    ("return flights", "return flights ;return #1 from washington", False),
    ("return #1 from washington ;return flights", "return flights ;return #1 from washington", False),
    ("return flights ;return #2 from washington", "return flights ;return #1 from washington", False),
])
def test_break_normalized_match(prediction, gold, expected):
    assert break_normalized_match(prediction, gold) is expected


def _prediction(example: Example, text: str) -> Prediction:
    return Prediction(example=example, retrieved_ids=["r1", "r2"], retrieved_scores=[2.0, 1.0],
                      prompt=Prompt(text=f"demo\tx\n{example.input}\t", demo_ids=["r1"], n_tokens=7),
                      prediction=text, raw_generation=text)


def test_score_predictions_exact_match():
    task = Task("mtop", train=[], test=[])
    examples = [Example(str(i), f"q{i}", f"[IN:X{i} ]") for i in range(4)]
    predictions = [_prediction(examples[0], "[IN:X0 ]"), _prediction(examples[1], "[IN:X1  ]"),
                   _prediction(examples[2], "[IN:X2 ]"), _prediction(examples[3], "[IN:Y ]")]
    assert score_predictions(task, predictions) == {"em": 75.0}
    assert score_predictions(task, []) == {"em": 0.0}


@needs_lexicon
def test_score_predictions_break_has_both_metrics():
    task = Task("break", train=[], test=[], output_format=BREAK_FORMAT)
    gold = "return flights ;return #1 from  washington"
    examples = [Example("a", "q", gold), Example("b", "q", gold)]
    predictions = [_prediction(examples[0], "return flights ;return #1 from washington"),
                   _prediction(examples[1], "return the flights ;return #1 from Washington")]
    assert score_predictions(task, predictions) == {"em": 50.0, "lf_em": 100.0, "normalized_match": 100.0}
    assert set(metrics_for(Task("mtop", [], []))) == {"em"}


@needs_lexicon
def test_prediction_rows():
    task = Task("break", train=[], test=[], output_format=BREAK_FORMAT)
    example = Example("b1", "flights from DC?", "return flights ;return #1 from  DC")
    rows = prediction_rows(task, [_prediction(example, "return flights ;return #1 from dc")])
    assert rows == [{
        "id": "b1", "input": "flights from DC?", "retrieved_ids": ["r1", "r2"], "retrieved_scores": [2.0, 1.0],
        "prompt_ids": ["r1"], "prompt_tokens": 7, "prompt": "demo\tx\nflights from DC?\t",
        "generation": "return flights ;return #1 from dc", "prediction": "return flights ;return #1 from dc",
        "gold": "return flights ;return #1 from  DC", "correct": False, "lf_em": True,
        "normalized_match": True,
    }]


# --- evaluation runs ------------------------------------------------------------------------------


def test_evaluate_writes_predictions_and_summary(tmp_path, demo_task, tiny_lm):
    retriever = BM25Retriever().index(demo_task.train)
    examples = demo_task.test[:3]
    progressed = []
    summary = evaluate(demo_task, retriever, tiny_lm, examples, tmp_path / "run", retriever_name="bm25",
                       context_window=256, max_new_tokens=8, progress=progressed.append, extra={"note": "unit"})
    assert sum(progressed) == 3
    rows = read_jsonl_rows(tmp_path / "run" / "predictions.jsonl")
    assert [r["id"] for r in rows] == [e.id for e in examples]
    assert [r["gold"] for r in rows] == [e.output for e in examples]
    for row in rows:
        assert row["correct"] == (" ".join(row["prediction"].split()) == " ".join(row["gold"].split()))
        assert row["prompt"].endswith(row["input"] + "\t")
        assert row["prompt_tokens"] <= 256 - 8
    saved = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert saved == summary
    assert saved["n"] == 3 and saved["task"] == "demo" and saved["retriever"] == "bm25" and saved["lm"] == "tiny"
    assert saved["metrics"]["em"] == pytest.approx(100.0 * sum(r["correct"] for r in rows) / 3)
    assert saved["context_window"] == 256 and saved["max_new_tokens"] == 8 and saved["note"] == "unit"
    assert saved["token_budget"] == 256 - 8
    assert isinstance(saved["load_average_at_start"], float) and saved["load_average_at_start"] >= 0
    assert saved["mean_demos"] == pytest.approx(sum(len(r["prompt_ids"]) for r in rows) / 3)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["predictions.jsonl", "summary.json"]
    assert read_correct(tmp_path / "run" / "predictions.jsonl") == {r["id"]: r["correct"] for r in rows}
    # Where it ran: what the LM's outputs depend on, recorded so that another machine's run is not taken as this one's.
    machine = saved["machine"]
    assert machine["cpu"] and machine["torch"] and machine["transformers"]
    assert machine["dtype"] == str(next(tiny_lm.model.parameters()).dtype).removeprefix("torch.")
    assert machine_differences(saved, machine["dtype"]) == {}


def test_an_evaluation_from_another_machine_or_an_unrecorded_one_differs():
    from taskret.models import machine_info

    here = {**machine_info(), "dtype": "float32"}
    assert machine_differences({"machine": here}, "float32") == {}
    assert machine_differences({"machine": here}, "bfloat16") == {"dtype": ("float32", "bfloat16")}
    elsewhere = {**here, "cpu": "Some Other CPU", "torch": "1.0"}
    assert set(machine_differences({"machine": elsewhere}, "float32")) == {"cpu", "torch"}
    assert set(machine_differences({"n": 3})) == {"machine"}  # a summary written before machines were recorded


def test_evaluate_counts_a_correct_answer(tmp_path, tiny_lm):
    """Gold outputs set to what the LM answers: em must be 100, showing predictions reach the metric."""
    examples = [Example("a", "set an alarm", "placeholder"), Example("b", "call mom", "placeholder")]
    task = Task("toy", train=[Example("t", "set a timer", "[IN:CREATE_TIMER ]")], test=examples)
    retriever = BM25Retriever().index(task.train)
    first = predict(task, retriever, tiny_lm, examples, context_window=128, max_new_tokens=6)
    gold = [Example(e.id, e.input, p.prediction or "-") for e, p in zip(examples, first)]
    summary = evaluate(task, retriever, tiny_lm, gold, tmp_path, retriever_name="bm25", context_window=128,
                       max_new_tokens=6)
    expected = 100.0 * sum(bool(p.prediction) for p in first) / 2
    assert summary["metrics"]["em"] == expected


def test_evaluate_refuses_a_window_with_no_room_for_a_prompt(tmp_path, demo_task, tiny_lm):
    with pytest.raises(ValueError, match="no room for a prompt"):
        evaluate(demo_task, BM25Retriever().index(demo_task.train), tiny_lm, demo_task.test[:1], tmp_path / "run",
                 retriever_name="bm25", context_window=64, max_new_tokens=64)
    assert not (tmp_path / "run").exists()


def test_mcnemar_counts_discordant_examples_and_gives_the_exact_p_value():
    a = {"1": True, "2": True, "3": True, "4": False, "5": True}
    b = {"1": True, "2": False, "3": False, "4": True, "5": True}
    test = mcnemar(a, b)
    assert (test.only_a, test.only_b) == (2, 1)
    # 3 discordant, split 2:1 -> two-sided binomial p = 2 * P(X <= 1 | n=3) = 2 * 4/8, capped at 1.
    assert test.p_value == 1.0
    lopsided = mcnemar({str(i): True for i in range(10)}, {str(i): False for i in range(10)})
    assert lopsided == (10, 0, pytest.approx(2 / 2 ** 10))
    assert mcnemar(a, a) == (0, 0, 1.0)


def test_mcnemar_refuses_unpaired_examples():
    with pytest.raises(ValueError, match="same examples"):
        mcnemar({"1": True}, {"2": True})


# --- graded metrics (chrF) ------------------------------------------------------------------------------


def test_chrf_is_sacrebleus_corpus_chrf():
    sacrebleu = pytest.importorskip("sacrebleu")
    from taskret.icl.evaluation import chrf_corpus, chrf_sentence

    predictions = ["find . -name '*.txt' -delete", "ls -la /tmp", "The cat sat on a mat."]
    golds = ["find . -type f -name '*.txt' -delete", "ls -l /tmp", "The cat sat on the mat."]
    expected = sacrebleu.corpus_chrf(predictions, [golds]).score
    assert chrf_corpus(predictions, golds) == pytest.approx(expected)
    assert 0 < expected < 100
    # the corpus score sums n-gram statistics: it is not the mean of the sentence scores
    assert chrf_corpus(predictions, golds) != pytest.approx(
        sum(chrf_sentence(p, g) for p, g in zip(predictions, golds)) / 3)
    assert chrf_sentence("ls -l /tmp", "ls -l /tmp") == pytest.approx(100.0)
    assert chrf_corpus([], []) == 0.0


def test_chrf_is_reported_beside_exact_match():
    pytest.importorskip("sacrebleu")
    from taskret.icl.evaluation import chrf_corpus, chrf_sentence, graded_metrics_for

    task = Task("mtop", train=[], test=[])
    examples = [Example("a", "q", "ls -l /tmp"), Example("b", "q", "du -sh .")]
    predictions = [_prediction(examples[0], "ls -l /tmp"), _prediction(examples[1], "du -h .")]
    assert graded_metrics_for(task) == []
    assert graded_metrics_for(task, ["em", "chrf"]) == ["chrf"]
    scores = score_predictions(task, predictions, ["chrf"])
    assert scores["em"] == 50.0
    assert scores["chrf"] == pytest.approx(chrf_corpus(["ls -l /tmp", "du -h ."], ["ls -l /tmp", "du -sh ."]))
    rows = prediction_rows(task, predictions, ["chrf"])
    assert rows[0]["chrf"] == pytest.approx(100.0) and rows[0]["correct"] is True
    assert rows[1]["chrf"] == pytest.approx(chrf_sentence("du -h .", "du -sh ."), abs=1e-4)


def test_generation_tasks_report_chrf_by_default_and_unknown_metrics_are_refused():
    pytest.importorskip("sacrebleu")
    from taskret.icl.evaluation import graded_metrics_for

    assert graded_metrics_for(Task("berri-lite/nl2bash", [], [])) == ["chrf"]
    assert graded_metrics_for(Task("break", [], []), ["normalized_match"]) == []
    with pytest.raises(ValueError, match="unknown metric 'bleu' for task 'mtop'; known: chrf, em"):
        graded_metrics_for(Task("mtop", [], []), ["bleu"])


def test_evaluate_writes_chrf(tmp_path, demo_task, tiny_lm):
    pytest.importorskip("sacrebleu")
    summary = evaluate(demo_task, BM25Retriever().index(demo_task.train), tiny_lm, demo_task.test[:2], tmp_path,
                       retriever_name="bm25", context_window=200, max_new_tokens=4, metrics=["chrf"])
    rows = read_jsonl_rows(tmp_path / "predictions.jsonl")
    import sacrebleu

    expected = sacrebleu.corpus_chrf([r["prediction"] for r in rows], [[r["gold"] for r in rows]]).score
    assert list(summary["metrics"]) == ["em", "chrf"]
    assert summary["metrics"]["chrf"] == pytest.approx(expected)
    assert all("chrf" in r for r in rows)
