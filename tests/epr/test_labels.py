"""EPR labels stage: positives and hard negatives from LM scores, BM25 scores or CBR's token-set F1."""

from __future__ import annotations

import pytest

from taskret.data import Example
from taskret.epr.candidates import mine_candidates
from taskret.epr.labels import (
    STOP_WORDS,
    bm25_labels,
    cbr_labels,
    lm_labels,
    token_f1,
    top_bottom,
)

# -- top_bottom ----------------------------------------------------------------------------------


def test_top_bottom_best_first_and_disjoint():
    scored = [("a", 1.0), ("b", 5.0), ("c", 3.0), ("d", -2.0), ("e", 0.0)]
    assert top_bottom(scored, 2) == (["b", "c"], ["e", "d"])
    assert top_bottom(scored, 1) == (["b"], ["d"])


@pytest.mark.parametrize(("n", "k"), [(5, 3), (3, 2), (4, 5), (2, 1), (1, 2), (0, 3)])
def test_top_bottom_with_fewer_than_2k_candidates(n, k):
    scored = [(f"c{i}", float(i)) for i in range(n)]
    positives, negatives = top_bottom(scored, k)
    assert positives == [f"c{i}" for i in range(n - 1, -1, -1)][:k]
    assert not set(positives) & set(negatives)
    if n <= 2 * k:
        assert set(positives) | set(negatives) == {c for c, _ in scored}
    assert len(negatives) == max(0, min(k, n - k))
    if negatives:
        assert negatives[-1] == "c0"  # the worst candidate is always a negative once there is any


def test_top_bottom_ties_keep_candidate_order():
    scored = [("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]
    assert top_bottom(scored, 1) == (["a"], ["d"])


# -- lm_labels -----------------------------------------------------------------------------------


SCORE_ROWS = [
    {"id": "x", "candidates": [
        {"id": "A", "logprob": -6.0, "n_tokens": 6},  # sum -6, mean -1
        {"id": "B", "logprob": -4.0, "n_tokens": 2},  # sum -4, mean -2
        {"id": "C", "logprob": -9.0, "n_tokens": 3},  # sum -9, mean -3
    ]},
    {"id": "y", "candidates": [
        {"id": "A", "logprob": -1.5, "n_tokens": 0},  # no target tokens: no division by zero
        {"id": "C", "logprob": -0.5, "n_tokens": 4},
    ]},
]


def test_lm_labels_by_sum_and_by_mean():
    assert lm_labels(SCORE_ROWS, k=1) == [{"id": "x", "positives": ["B"], "negatives": ["C"]},
                                          {"id": "y", "positives": ["C"], "negatives": ["A"]}]
    assert lm_labels(SCORE_ROWS, k=1, normalize=True) == [{"id": "x", "positives": ["A"], "negatives": ["C"]},
                                                          {"id": "y", "positives": ["C"], "negatives": ["A"]}]
    assert lm_labels(SCORE_ROWS, k=2)[0] == {"id": "x", "positives": ["B", "A"], "negatives": ["C"]}


# -- bm25_labels ---------------------------------------------------------------------------------


def test_bm25_labels_follow_the_scores_not_the_order():
    rows = [{"id": "x", "candidates": ["a", "b", "c", "d"], "bm25": [1.0, 5.0, 3.0, 0.0]}]
    assert bm25_labels(rows, k=1) == [{"id": "x", "positives": ["b"], "negatives": ["d"]}]
    assert bm25_labels(rows, k=2) == [{"id": "x", "positives": ["b", "c"], "negatives": ["a", "d"]}]


def test_bm25_labels_of_mined_candidates(pool_examples):
    rows = mine_candidates(pool_examples, n=6, field="input")
    for row, label in zip(rows, bm25_labels(rows, k=2)):
        assert label["id"] == row["id"]
        assert label["positives"] == row["candidates"][:2]
        assert set(label["negatives"]) <= set(row["candidates"][2:])
        assert len(label["negatives"]) == 2


# -- token F1 and CBR ----------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("the cat sat on the mat", "a cat on a hat", 0.4),  # {cat, sat, mat} vs {cat, hat}: P 1/3, R 1/2
    ("cat cat cat dog", "cat dog dog", 1.0),  # sets, not counts
    ("Paris Tomorrow", "paris", 2 / 3),  # lower-cased
    ("what is the weather", "the weather is what", 1.0),  # stop words removed, order ignored
    ("GET_WEATHER paris", "GET_WEATHER london", 0.5),  # an underscore joins a token
    ("[IN:GET_WEATHER [SL:LOCATION paris ] ]", "[IN:GET_WEATHER ]", 0.4),  # {get_weather, sl, location, paris}
    ("the of and", "the of and", 0.0),  # nothing left after stop words
    ("alpha beta", "gamma delta", 0.0),
    ("", "alpha", 0.0),
])
def test_token_f1(a, b, expected):
    assert token_f1(a, b) == pytest.approx(expected)
    assert token_f1(b, a) == pytest.approx(expected)


def test_stop_words_are_the_usual_ones():
    assert {"the", "a", "of", "is", "what"} <= STOP_WORDS
    assert not {"weather", "paris", "alarm"} & STOP_WORDS


def test_cbr_ranks_the_most_shared_output_first():
    examples = {e.id: e for e in [
        Example("x", "weather in paris tomorrow morning", "GET_WEATHER paris tomorrow morning"),
        Example("c1", "alarm in the morning", "CREATE_ALARM morning"),
        Example("c2", "paris weather tomorrow", "GET_WEATHER paris tomorrow"),
        Example("c3", "play jazz", "PLAY_MUSIC jazz"),
        Example("c4", "london weather", "GET_WEATHER london"),
    ]}
    rows = [{"id": "x", "candidates": ["c1", "c3", "c4", "c2"], "bm25": [4.0, 3.0, 2.0, 1.0]}]
    assert cbr_labels(rows, examples, k=1) == [{"id": "x", "positives": ["c2"], "negatives": ["c3"]}]
    # c1 and c4 tie (one of two tokens shared with four: F1 1/3): candidate order breaks the tie
    assert cbr_labels(rows, examples, k=2) == [{"id": "x", "positives": ["c2", "c1"], "negatives": ["c4", "c3"]}]
    # inputs play no part
    swapped = {k: Example(e.id, "unrelated words", e.output) for k, e in examples.items()}
    assert cbr_labels(rows, swapped, k=1) == cbr_labels(rows, examples, k=1)
