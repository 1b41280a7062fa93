"""Classification and multiple choice by the options' likelihood (taskret.icl.options), with the tiny real Llama:
the option the LM scores highest is the prediction, accuracy is computed over the chosen options, and a run compares
with another as generation runs do."""

from __future__ import annotations

import json

import pytest

from taskret.backends.base import TargetScore
from taskret.data import DataError, Example, Task, read_examples
from taskret.icl.compare import compare_runs
from taskret.icl.evaluation import evaluate, read_correct
from taskret.icl.options import choose_options, option_score, predict_options
from taskret.retrieval import BM25Retriever

from ..conftest import read_jsonl_rows, write_jsonl_rows

LABELS = ("It was terrible .", "It was great .")
POOL = [
    Example("p1", "a dull , lifeless film", LABELS[0]),
    Example("p2", "a warm and funny story", LABELS[1]),
    Example("p3", "the plot is a mess", LABELS[0]),
    Example("p4", "an utterly charming cast", LABELS[1]),
]
TEST = [
    Example("t1", "a lifeless and dull plot", LABELS[0]),
    Example("t2", "a charming , funny film", LABELS[1]),
    Example("t3", "the cast is a mess", LABELS[0]),
]


def sentiment_task() -> Task:
    return Task("toy-sst", train=POOL, test=TEST, options=LABELS)


class NoGeneration:
    """Wraps an LM so that a call to generate fails the test: a task with options is scored, never generated."""

    def __init__(self, lm):
        self.lm = lm
        self.score_calls = 0

    def __getattr__(self, name):
        return getattr(self.lm, name)

    def score_shared(self, prefixes, prompts, targets, progress=None):
        self.score_calls += 1
        assert all(prompt.startswith(prefix) for prefix, prompt in zip(prefixes, prompts))
        return self.lm.score_shared(prefixes, prompts, targets, progress=progress)

    def generate(self, *args, **kwargs):
        raise AssertionError("a task with options must not be generated for")


class FixedScores:
    """An LM whose scores are given: (summed log-prob, tokens) per option text."""

    name = "fixed"

    def __init__(self, scores: dict[str, tuple[float, int]]):
        self.scores = scores

    def score_shared(self, prefixes, prompts, targets, progress=None):
        if progress:
            progress(len(targets))
        return [TargetScore(*self.scores[t]) for t in targets]


def test_the_option_of_highest_mean_log_prob_wins_and_sum_is_the_likelihood():
    # "short" has the higher total, "long" the higher mean per token: the normalisation decides.
    lm = FixedScores({"short": (-2.0, 1), "long": (-3.0, 3)})
    assert choose_options(lm, ["p"], [("short", "long")], "mean") == [(1, [-2.0, -1.0])]
    assert choose_options(lm, ["p"], [("short", "long")], "sum") == [(0, [-2.0, -3.0])]
    with pytest.raises(ValueError, match="unknown option normalisation 'max'"):
        choose_options(lm, ["p"], [("short", "long")], "max")


def test_a_tie_goes_to_the_option_listed_first_and_progress_counts_examples():
    lm = FixedScores({"a": (-1.0, 1), "b": (-1.0, 1), "c": (-5.0, 1)})
    done = []
    chosen = choose_options(lm, ["p", "q"], [("b", "a"), ("c", "a", "b")], progress=done.append)
    assert [best for best, _ in chosen] == [0, 1]
    assert sum(done) == 2
    assert option_score(TargetScore(-6.0, 3), "mean") == -2.0


def test_the_tiny_lm_picks_the_option_it_scores_highest(tiny_lm):
    task = sentiment_task()
    retriever = BM25Retriever().index(task.train)
    predictions = predict_options(task, retriever, tiny_lm, task.test, context_window=256, max_demos=2)
    for p in predictions:
        # Score the options again, one by one, after the very prompt the prediction was made with.
        again = [s.mean for s in tiny_lm.score([p.prompt.text] * len(LABELS), list(LABELS))]
        assert p.option_scores == pytest.approx(again, abs=1e-4)
        assert p.prediction == LABELS[max(range(len(LABELS)), key=lambda i: again[i])]
        assert p.prompt.text.endswith(p.example.input + "\t")
        for demo_id in p.prompt.demo_ids:  # demonstrations show their gold option as the output
            demo = next(e for e in POOL if e.id == demo_id)
            assert f"{demo.input}\t{demo.output}\n" in p.prompt.text


def test_evaluate_scores_options_and_computes_accuracy_over_them(tmp_path, tiny_lm):
    task = sentiment_task()
    lm = NoGeneration(tiny_lm)
    summary = evaluate(task, BM25Retriever().index(task.train), lm, task.test, tmp_path / "bm25",
                       retriever_name="bm25", context_window=256, max_new_tokens=4)
    assert lm.score_calls == 1  # every (prompt, option) pair in one call
    rows = read_jsonl_rows(tmp_path / "bm25" / "predictions.jsonl")
    assert [r["gold"] for r in rows] == [e.output for e in TEST]
    for row in rows:
        assert row["options"] == list(LABELS) and len(row["option_scores"]) == 2
        assert row["prediction"] == LABELS[row["option_scores"].index(max(row["option_scores"]))]
        assert row["correct"] == (row["prediction"] == row["gold"])
    assert summary["metrics"] == {"accuracy": pytest.approx(100.0 * sum(r["correct"] for r in rows) / 3)}
    assert summary["headline_metric"] == "accuracy" and summary["answered_by"] == "option likelihood"
    assert summary["option_normalisation"] == "mean" and summary["generated_tokens_per_s"] is None
    # The room left for the answer is the longest option's tokens when max_new_tokens is smaller.
    longest = max(tiny_lm.count_tokens(o) for o in LABELS)
    assert summary["max_new_tokens"] == max(4, longest)
    assert json.loads((tmp_path / "bm25" / "summary.json").read_text()) == summary


def test_accuracy_is_100_when_the_gold_is_the_option_the_lm_prefers(tmp_path, tiny_lm):
    """Gold labels set to what the LM chooses: accuracy must be 100, then 0 when every gold is the other option."""
    task = sentiment_task()
    retriever = BM25Retriever().index(task.train)
    chosen = predict_options(task, retriever, tiny_lm, task.test, context_window=256)
    preferred = [Example(e.id, e.input, p.prediction) for e, p in zip(TEST, chosen)]
    other = [Example(e.id, e.input, LABELS[1 - LABELS.index(p.prediction)]) for e, p in zip(TEST, chosen)]
    for gold, expected in ((preferred, 100.0), (other, 0.0)):
        summary = evaluate(task, retriever, tiny_lm, gold, tmp_path / str(expected), retriever_name="bm25",
                           context_window=256, max_new_tokens=4)
        assert summary["metrics"]["accuracy"] == expected


def test_multiple_choice_reads_each_examples_options_and_pairs_runs(tmp_path, tiny_lm):
    rows = [{"id": f"q{i}", "question": q, "answer": a, "choices": c} for i, (q, a, c) in enumerate([
        ("the cat sat on the", "mat", ["mat", "sky", "moon"]),
        ("water is", "wet", ["dry", "wet"]),
        ("the sun rises in the", "east", ["west", "north", "east", "south"]),
    ])]
    path = write_jsonl_rows(tmp_path / "mc.jsonl", rows)
    examples = read_examples(path, "question", "answer", "id", options_field="choices")
    assert [len(e.options) for e in examples] == [3, 2, 4]
    task = Task("toy-mc", train=examples, test=examples)
    assert task.has_options and task.answer_options(examples[2]) == ("west", "north", "east", "south")
    for name in ("bm25", "random"):
        retriever = BM25Retriever().index(task.train) if name == "bm25" else None
        retrieved = None if retriever else BM25Retriever().index(task.train).retrieve(
            [e.input for e in examples], k=1, exclude=[e.id for e in examples])
        evaluate(task, retriever, tiny_lm, examples, tmp_path / name, retriever_name=name, context_window=128,
                 max_new_tokens=2, retrieved=retrieved)
        written = read_jsonl_rows(tmp_path / name / "predictions.jsonl")
        assert [len(r["option_scores"]) for r in written] == [3, 2, 4]
        assert all(r["prediction"] in r["options"] for r in written)
    comparison = compare_runs(tmp_path / "bm25", tmp_path / "random")  # McNemar over `correct`, as for generation
    assert comparison.n == 3
    assert comparison.em_a == 100.0 * sum(read_correct(tmp_path / "bm25" / "predictions.jsonl").values()) / 3


@pytest.mark.parametrize("choices,message", [
    (["mat", "sky"], "line 2.*field 'choices'.*'wet' is not one of the options"),
    ("wet", "line 2.*field 'choices'.*list of two or more"),
    (["wet", "wet"], "line 2.*field 'choices'.*the same text"),
    (["wet", ""], "line 2.*field 'choices'.*option 1"),
])
def test_a_bad_multiple_choice_row_names_file_line_and_field(tmp_path, choices, message):
    path = write_jsonl_rows(tmp_path / "mc.jsonl", [
        {"id": "a", "question": "the cat sat on the", "answer": "mat", "choices": ["mat", "sky"]},
        {"id": "b", "question": "water is", "answer": "wet", "choices": choices},
    ])
    with pytest.raises(DataError, match=f"mc.jsonl.*{message}") as caught:
        read_examples(path, "question", "answer", "id", options_field="choices")
    assert len(str(caught.value).splitlines()) == 1


def test_a_label_outside_the_label_set_names_file_line_and_field(tmp_path):
    path = write_jsonl_rows(tmp_path / "train.jsonl", [
        {"id": "a", "input": "fine", "output": LABELS[1]},
        {"id": "b", "input": "bad", "output": "It was awful ."},
    ])
    with pytest.raises(DataError, match=r"train\.jsonl.*line 2.*field 'output'.*'It was awful \.' is not one of"):
        read_examples(path, "input", "output", "id", label_set=LABELS)


def test_an_example_without_options_in_a_task_with_options_is_refused(tmp_path, tiny_lm):
    examples = [Example("a", "water is", "wet", ("dry", "wet")), Example("b", "fire is", "hot")]
    task = Task("toy-mc", train=examples[:1], test=examples)
    with pytest.raises(ValueError, match="example 'b' has no answer options"):
        evaluate(task, BM25Retriever().index(task.train), tiny_lm, examples, tmp_path, retriever_name="bm25",
                 context_window=128, max_new_tokens=2)


def test_taskret_evaluate_and_compare_run_a_classification_task(tmp_path, tiny_model_dir):
    """`taskret evaluate --task sst2` reads the downloaded layout and answers by options; `taskret compare` pairs two
    such runs, unchanged."""
    from typer.testing import CliRunner

    from taskret.cli import app

    for split, examples in (("train", POOL), ("test", TEST)):
        write_jsonl_rows(tmp_path / "data" / "sst2" / f"{split}.jsonl",
                         [{"id": e.id, "input": e.input, "output": e.output} for e in examples])
    env = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
    for retriever in ("bm25", "random"):
        result = CliRunner().invoke(app, ["evaluate", "--task", "sst2", "--data-dir", str(tmp_path / "data"),
                                          "--retriever", retriever, "--lm", str(tiny_model_dir), "--context-window",
                                          "256", "--out", str(tmp_path / retriever)], env=env)
        assert result.exit_code == 0, result.output
        assert "sst2 / " in result.output and "accuracy" in result.output
        rows = read_jsonl_rows(tmp_path / retriever / "predictions.jsonl")
        assert [r["options"] for r in rows] == [list(LABELS)] * 3
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "bm25"), str(tmp_path / "random")], env=env)
    assert result.exit_code == 0, result.output
    assert "McNemar" in result.output
