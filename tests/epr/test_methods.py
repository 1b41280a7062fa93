"""The paper's oracle and test-time methods on the shared machinery, with a tiny real LM."""

from __future__ import annotations

import math

import numpy as np
import pytest

from taskret.data import Example, Task
from taskret.epr.methods import (
    TEST_TIME_METHODS,
    any_correct_oracle,
    bm25_oracle,
    brute_force,
    fill_ranking,
    lm_oracle,
    lm_rank,
    rank_test_examples,
)
from taskret.epr.scoring import scoring_pair
from taskret.formats import render_demo
from taskret.icl.evaluation import evaluate


@pytest.fixture
def task(pool_examples) -> Task:
    test = [Example("t1", "what will the weather be in paris", "GET_WEATHER paris tomorrow"),
            Example("t2", "please set an alarm for six", "CREATE_ALARM seven morning")]
    return Task("pool", list(pool_examples), test)


def test_bm25_oracle_queries_with_the_gold_output(task):
    result = bm25_oracle(task, task.test, k=3)
    # The gold outputs equal the outputs of 'weather' and 'alarm' exactly, although t2's input
    # shares no content word with the alarm example's input beyond "alarm".
    assert result.ids[0][0] == "weather"
    assert result.ids[1][0] == "alarm"
    assert len(result.ids[0]) == 3


def test_lm_oracle_scores_match_direct_scoring(task, tiny_lm):
    result = lm_oracle(task, task.test, tiny_lm, n_candidates=4)
    pool = {e.id: e for e in task.train}
    for example, ids, scores in zip(task.test, result.ids, result.scores):
        assert len(ids) == 4
        assert list(scores[:4]) == sorted(scores[:4], reverse=True)  # ranked best first
        prompt, target = scoring_pair(pool[ids[0]], example)
        direct = tiny_lm.score([prompt], [target])[0].logprob
        assert math.isclose(float(scores[0]), direct, abs_tol=1e-3)


def test_lm_oracle_fills_past_its_lm_ranked_head_in_bm25_oracle_order(task, tiny_lm):
    oracle = bm25_oracle(task, task.test, k=5)
    result = lm_oracle(task, task.test, tiny_lm, n_candidates=2, fill_to=5)
    for ids, scores, oracle_ids in zip(result.ids, result.scores, oracle.ids):
        assert sorted(ids[:2]) == sorted(oracle_ids[:2])  # the head is the oracle's top 2, in the LM's order
        assert ids[2:] == oracle_ids[2:5]  # the tail keeps BM25-Oracle's order
        assert not np.isnan(scores[:2]).any() and np.isnan(scores[2:]).all()


def test_bruteforce_ranks_random_draws_by_log_p_of_the_input(task, tiny_lm):
    result = brute_force(task, task.test, tiny_lm, n_random=5, seed=3)
    again = brute_force(task, task.test, tiny_lm, n_random=5, seed=3)
    assert result.ids == again.ids
    pool = {e.id: e for e in task.train}
    best = pool[result.ids[0][0]]
    prompt = render_demo(best.input, best.output) + "\n"
    direct = tiny_lm.score([prompt], [task.test[0].input])[0].logprob
    assert math.isclose(float(result.scores[0][0]), direct, abs_tol=1e-3)
    assert all(len(ids) == 5 and len(set(ids)) == 5 for ids in result.ids)


def test_any_correct_oracle_counts_examples_solved_by_some_candidate(task, tiny_lm):
    candidates = bm25_oracle(task, task.test, k=2)
    report = any_correct_oracle(task, task.test, tiny_lm, candidates, max_new_tokens=4)
    assert 0.0 <= report["any_correct"] <= 100.0
    assert [r["id"] for r in report["rows"]] == ["t1", "t2"]
    solved = sum(bool(r["solved_by"]) for r in report["rows"])
    assert report["any_correct"] == pytest.approx(100.0 * solved / 2)


def test_evaluate_accepts_precomputed_rankings(task, tiny_lm, tmp_path):
    ranked = rank_test_examples("bm25-oracle", task, task.test)
    summary = evaluate(task, None, tiny_lm, task.test, tmp_path, retriever_name="bm25-oracle",
                       context_window=256, max_new_tokens=4, retrieved=ranked)
    assert summary["n"] == 2
    assert (tmp_path / "predictions.jsonl").exists()


def test_unknown_or_unscored_methods_are_refused(task):
    assert "lm-oracle" in TEST_TIME_METHODS
    with pytest.raises(ValueError, match="scoring LM"):
        rank_test_examples("lm-oracle", task, task.test)
    with pytest.raises(ValueError, match="unknown method"):
        rank_test_examples("nope", task, task.test, scoring_lm=object())


def test_lm_rank_without_gold_differs_from_with_gold(task, tiny_lm):
    candidates = bm25_oracle(task, task.test, k=3)
    with_gold = lm_rank(task, task.test, candidates, tiny_lm, gold_output=True)
    without = lm_rank(task, task.test, candidates, tiny_lm, gold_output=False)
    assert not (with_gold.scores[:, :3] == without.scores[:, :3]).all()


def test_fill_ranking_appends_the_rest_that_the_head_lacks_in_its_order():
    from taskret.retrieval import RetrievalResult

    head = RetrievalResult([["c", "a"], ["x"]], np.array([[-1.0, -2.0], [-0.5, np.nan]], dtype=np.float32))
    rest = RetrievalResult([["a", "b", "c", "d"], ["y", "x", "z"]], np.zeros((2, 4), dtype=np.float32))
    filled = fill_ranking(head, rest)
    assert filled.ids == [["c", "a", "b", "d"], ["x", "y", "z"]]
    assert filled.scores.shape == (2, 4)
    assert list(filled.scores[0, :2]) == [-1.0, -2.0] and np.isnan(filled.scores[0, 2:]).all()
    assert filled.scores[1, 0] == np.float32(-0.5) and np.isnan(filled.scores[1, 1:]).all()
    with pytest.raises(ValueError, match="1 head rankings for 2 queries"):
        fill_ranking(RetrievalResult([["c"]], np.zeros((1, 1), dtype=np.float32)), rest)
