"""Set-level selection (DPP greedy MAP with CEIL's kernel, MMR) and its place between retrieval and the prompt."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from taskret.data import Example, Task
from taskret.icl.evaluation import evaluate
from taskret.icl.prompt import PromptBuilder, whitespace_tokens
from taskret.icl.selection import (
    DEFAULT_WEIGHTS,
    Selection,
    ceil_scale_factor,
    dpp_order,
    encoder_vectors,
    greedy_map,
    mmr_order,
    retriever_vectors,
    select_for_prompts,
    weight_for_scale_factor,
)
from taskret.retrieval import BM25Retriever, DenseRetriever, RetrievalResult


def _unit(rows) -> np.ndarray:
    v = np.asarray(rows, dtype=np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _random_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return _unit(np.random.default_rng(seed).normal(size=(n, dim)))


def _brute_force_greedy(kernel: np.ndarray, n: int) -> list[int]:
    """Greedy MAP the slow way: at each step the item that maximises the determinant of the chosen set."""
    chosen: list[int] = []
    for _ in range(n):
        rest = [j for j in range(len(kernel)) if j not in chosen]
        chosen.append(max(rest, key=lambda j: np.linalg.det(kernel[np.ix_(chosen + [j], chosen + [j])])))
    return chosen


# -- greedy MAP ---------------------------------------------------------------------------------------------


def test_greedy_map_matches_the_determinant_greedy():
    vectors = _random_vectors(12, 5, seed=1)
    quality = np.exp(np.random.default_rng(2).uniform(0, 1, 12))
    kernel = quality[:, None] * (vectors @ vectors.T) * quality[None]
    assert greedy_map(kernel, 5) == _brute_force_greedy(kernel, 5)


def test_greedy_map_stops_when_the_kernel_is_exhausted():
    # rank 2: a third item adds no volume, so the determinant stops growing after two
    vectors = _unit([[1, 0], [0, 1], [1, 1], [1, -1]])
    assert len(greedy_map(vectors @ vectors.T)) == 2


def test_dpp_order_is_greedy_map_of_ceils_kernel():
    """The fast order (relevance added in log space on S) equals Chen et al.'s greedy on CEIL's explicit
    L = diag(q) S diag(q), q = exp(r / (2 theta)), r = (cos + 1) / 2, S = (E E^T + 1) / 2 (icl-ceil get_kernel)."""
    vectors = _random_vectors(15, 6, seed=3)
    scores = np.sort(np.random.default_rng(4).uniform(-0.2, 0.9, 15))[::-1]
    for weight in (0.5, DEFAULT_WEIGHTS["dpp"], 0.95):
        theta = ceil_scale_factor(weight)
        r = (scores + 1) / 2
        q = np.exp((r - r.max()) / (2 * theta))
        kernel = q[:, None] * ((vectors @ vectors.T + 1) / 2) * q[None]
        expected = greedy_map(kernel, 7)
        assert dpp_order(scores, vectors, weight)[:7] == expected


def test_dpp_order_trades_relevance_for_diversity():
    # two near-duplicates at the top and a different example just below them
    vectors = _unit([[1, 0, 0], [1, 0.01, 0], [0, 1, 0], [0, 0, 1]])
    scores = np.array([0.90, 0.89, 0.85, 0.10])
    assert dpp_order(scores, vectors, weight=1.0) == [0, 1, 2, 3]
    diverse = dpp_order(scores, vectors, weight=0.7)
    assert diverse[:2] == [0, 2]  # the duplicate waits
    assert sorted(diverse) == [0, 1, 2, 3]  # every candidate once


def test_dpp_order_keeps_every_candidate_after_duplicates():
    vectors = _unit([[1, 0], [1, 0], [1, 0]])
    assert sorted(dpp_order(np.array([0.5, 0.4, 0.3]), vectors, 0.5)) == [0, 1, 2]


def test_dpp_order_scales_scores_that_are_not_cosines():
    vectors = _random_vectors(6, 4, seed=5)
    bm25 = np.array([14.0, 11.0, 9.5, 7.0, 3.0, 1.0])
    assert dpp_order(bm25, vectors, 0.8, cosine_scores=False) == dpp_order(
        (bm25 - 1) / 13, vectors, 0.8, cosine_scores=False)


def test_weight_and_ceil_scale_factor_are_the_same_trade_off():
    assert ceil_scale_factor(DEFAULT_WEIGHTS["dpp"]) == pytest.approx(0.1)
    assert weight_for_scale_factor(0.05) == pytest.approx(1 / 1.05)
    assert ceil_scale_factor(weight_for_scale_factor(0.3)) == pytest.approx(0.3)


# -- MMR ------------------------------------------------------------------------------------------------------


def test_mmr_order_by_hand():
    vectors = _unit([[1, 0], [0.995, 0.0998], [0, 1]])
    scores = np.array([3.0, 2.9, 1.0])  # min-max scaled: 1, 0.95, 0
    # lambda 0.7: first 0 (1.0); then 1: 0.7*0.95 - 0.3*0.995 = 0.366 vs 2: 0 - 0 = 0 -> 1 still wins
    assert mmr_order(scores, vectors, 0.7) == [0, 1, 2]
    # lambda 0.3: then 1: 0.3*0.95 - 0.7*0.995 < 0 = 2's gain -> 2 comes second
    assert mmr_order(scores, vectors, 0.3) == [0, 2, 1]
    assert mmr_order(scores, vectors, 1.0) == [0, 1, 2]


def test_selection_refuses_bad_settings():
    with pytest.raises(ValueError, match="unknown selection 'knn'"):
        Selection("knn")
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Selection("dpp", weight=1.5)
    with pytest.raises(ValueError, match="one relevance score per vector"):
        dpp_order(np.ones(3), np.ones((2, 4)))


# -- the stage: vectors, budget, order ---------------------------------------------------------------------


def test_retriever_vectors_are_the_dense_index_own(tiny_bert_dir, pool_examples):
    dense = DenseRetriever(encoder=str(tiny_bert_dir)).index(pool_examples)
    lookup = retriever_vectors(dense)
    ids = ["music", "weather"]
    by_id = {e.id: e for e in pool_examples}
    np.testing.assert_allclose(lookup(ids), dense.encode([by_id[i].input for i in ids]), atol=1e-5)
    assert retriever_vectors(BM25Retriever().index(pool_examples)) is None
    by_encoder = encoder_vectors({e.id: e for e in pool_examples}, str(tiny_bert_dir))
    np.testing.assert_allclose(by_encoder(ids), lookup(ids), atol=1e-5)


def _toy_task() -> Task:
    pool = [Example("dup1", "alarm at seven", "A7"), Example("dup2", "alarm at seven", "A7"),
            Example("other", "weather in paris", "W"), Example("far", "call mom", "C")]
    return Task("toy", train=pool, test=[Example("t", "alarm at six", "A6")])


def test_select_for_prompts_fills_the_budget_in_greedy_order_then_orders_by_relevance():
    task = _toy_task()
    vectors = {"dup1": [1, 0, 0], "dup2": [1, 0, 0], "other": [0.6, 0.8, 0], "far": [0, 0, 1]}
    lookup = lambda ids: _unit([vectors[i] for i in ids])  # noqa: E731
    ranked = RetrievalResult([["dup1", "dup2", "other", "far"]], np.array([[0.9, 0.9, 0.7, 0.1]], dtype=np.float32))
    builder = PromptBuilder(whitespace_tokens, budget=100, max_demos=2)
    plain = select_for_prompts(task, task.test, ranked, Selection("dpp", weight=1.0), lookup, builder, True)
    assert plain.ids == [["dup1", "dup2"]]
    chosen = select_for_prompts(task, task.test, ranked, Selection("dpp", weight=0.8), lookup, builder, True)
    assert chosen.ids == [["dup1", "other"]]  # the duplicate is left out; best first
    np.testing.assert_allclose(chosen.scores[0, :2], [0.9, 0.7])
    prompt = builder.build("alarm at six", [(i, i, "x") for i in chosen.ids[0]])
    assert prompt.demo_ids == ["other", "dup1"]  # most relevant last, next to the test input


def test_evaluate_with_selection_records_it(tmp_path, demo_task, tiny_lm):
    retriever = BM25Retriever().index(demo_task.train)
    examples = demo_task.test[:2]
    selection = Selection("mmr", weight=0.5, n_candidates=10, encoder="minilm-l6")
    summary = evaluate(demo_task, retriever, tiny_lm, examples, tmp_path / "run", retriever_name="bm25",
                       context_window=200, max_new_tokens=4, selection=selection)
    assert summary["selection"]["method"] == "mmr" and summary["selection"]["weight"] == 0.5
    assert summary["selection"]["vectors"] == "encoder:minilm-l6"
    assert summary["selection"]["relevance"] == "min-max"
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    top10 = retriever.retrieve([e.input for e in examples], k=10).ids
    for row, top in zip(rows, top10):
        assert set(row["prompt_ids"]) <= set(top)  # chosen among the 10 candidates
        ranks = [top.index(i) for i in row["prompt_ids"]]
        assert ranks == sorted(ranks, reverse=True)  # most relevant last


def test_mmr_equals_plain_retrieval_at_weight_one(tmp_path, demo_task, tiny_lm):
    retriever = BM25Retriever().index(demo_task.train)
    examples = demo_task.test[:2]
    runs = {}
    for name, selection in (("plain", None), ("mmr", Selection("mmr", weight=1.0, n_candidates=100))):
        evaluate(demo_task, retriever, tiny_lm, examples, tmp_path / name, retriever_name="bm25", context_window=200,
                 max_new_tokens=4, selection=selection)
        runs[name] = [json.loads(line)["prompt_ids"]
                      for line in (tmp_path / name / "predictions.jsonl").read_text().splitlines()]
    assert runs["plain"] == runs["mmr"]


def test_orders_are_permutations():
    vectors = _random_vectors(9, 3, seed=7)
    scores = np.linspace(1, 0, 9)
    for weight, method in itertools.product((0.0, 0.3, 0.9), (dpp_order, mmr_order)):
        assert sorted(method(scores, vectors, weight)) == list(range(9))
