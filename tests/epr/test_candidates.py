"""EPR candidates stage: BM25 neighbours of every training example, and the candidates file reader."""

from __future__ import annotations

import pytest

from taskret.data import Example
from taskret.epr.candidates import (
    mine_candidates,
    mine_candidates_for,
    read_candidates,
    unscored,
    write_candidates,
)
from taskret.io import DataError
from tests.conftest import POOL_ROWS, read_jsonl_rows, write_jsonl_rows

# Two twins: flights share (almost) their output but no input word; traffic reports share their
# input but no output word. hotel shares input words with flight_a and fewer output words.
TWIN_ROWS = [
    ("flight_a", "book a flight to boston on friday", "BOOK_FLIGHT boston friday economy"),
    ("flight_b", "i need to travel, get me a plane ticket", "BOOK_FLIGHT boston friday economy window"),
    ("hotel", "book a hotel in boston for friday", "BOOK_HOTEL boston friday"),
    ("traffic_a", "how bad is the traffic on highway ninety five", "GET_TRAFFIC interstate"),
    ("traffic_b", "how bad is the traffic on highway ninety five tonight", "CHECK_ROAD_CONDITIONS route"),
]


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return [Example(r["key"], r["q"], r["a"]) for r in POOL_ROWS] + [Example(*row) for row in TWIN_ROWS]


def _by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}


@pytest.mark.parametrize("field", ["output", "input", "both"])
def test_every_example_gets_n_other_examples_best_first(examples, field):
    rows = mine_candidates(examples, n=4, field=field)
    assert [r["id"] for r in rows] == [e.id for e in examples]
    ids = {e.id for e in examples}
    for row in rows:
        assert len(row["candidates"]) == 4 == len(row["bm25"])
        assert row["id"] not in row["candidates"]
        assert len(set(row["candidates"])) == 4 and set(row["candidates"]) <= ids
        assert row["bm25"] == sorted(row["bm25"], reverse=True)
        assert all(isinstance(s, float) and s >= 0 for s in row["bm25"])


def test_a_small_pool_gives_every_other_example(examples):
    three = examples[:3]
    rows = mine_candidates(three, n=50)
    for row in rows:
        assert sorted(row["candidates"]) == sorted(e.id for e in three if e.id != row["id"])
        assert len(row["bm25"]) == 2
    # one example alone has no candidates at all
    assert mine_candidates(examples[:1], n=5) == [{"id": examples[0].id, "candidates": [], "bm25": []}]


def test_default_is_by_output(examples):
    rows = _by_id(mine_candidates(examples, n=3))
    assert rows["flight_a"]["candidates"][0] == "flight_b"
    assert rows["flight_b"]["candidates"][0] == "flight_a"
    assert rows["flight_a"]["bm25"][0] > rows["flight_a"]["bm25"][1] > 0  # hotel shares boston friday
    assert rows["flight_a"]["candidates"][1] == "hotel"
    assert mine_candidates(examples, n=3) == mine_candidates(examples, n=3, field="output")


def test_by_input(examples):
    rows = _by_id(mine_candidates(examples, n=3, field="input"))
    assert rows["traffic_a"]["candidates"][0] == "traffic_b"
    assert rows["traffic_b"]["candidates"][0] == "traffic_a"
    # flight_a's input twin is the hotel booking; its output twin shares no input word
    assert rows["flight_a"]["candidates"][0] == "hotel"
    assert rows["flight_a"]["bm25"][0] > 0
    by_output = _by_id(mine_candidates(examples, n=3, field="output"))
    assert by_output["traffic_a"]["bm25"][0] == 0.0  # no output word in common with anyone


def test_unknown_field_is_rejected(examples):
    with pytest.raises(ValueError, match="unknown field 'label'"):
        mine_candidates(examples, n=3, field="label")


def test_write_then_read_round_trips(tmp_path, examples):
    rows = mine_candidates(examples, n=3)
    path = tmp_path / "candidates.jsonl"
    write_candidates(path, rows)
    assert read_jsonl_rows(path) == rows
    assert read_candidates(path, known_ids={e.id for e in examples}) == rows
    assert read_candidates(path) == rows


GOOD = {"id": "a", "candidates": ["b", "c"]}


@pytest.mark.parametrize(("bad", "field", "message"), [
    ({"candidates": ["b"]}, "id", "missing field"),
    ({"id": "a"}, "candidates", "missing field"),
    ({"id": "a", "candidates": "b c"}, "candidates", "expected a list of example ids"),
    ({"id": "a", "candidates": ["b", "ghost-7"]}, "candidates", "unknown example id 'ghost-7'"),
    ({"id": "ghost-3", "candidates": ["b"]}, "id", "unknown example id 'ghost-3'"),
])
def test_bad_rows_name_the_line_and_field(tmp_path, bad, field, message):
    path = write_jsonl_rows(tmp_path / "cands.jsonl", [GOOD, GOOD, bad])
    with pytest.raises(DataError) as info:
        read_candidates(path, known_ids={"a", "b", "c"})
    err = info.value
    assert (err.line, err.field, err.message) == (3, field, message)
    assert str(err) == f"{path}, line 3, field '{field}': {message}"


def test_unknown_ids_pass_without_known_ids(tmp_path):
    path = write_jsonl_rows(tmp_path / "cands.jsonl", [{"id": "x", "candidates": ["y"]}])
    assert read_candidates(path) == [{"id": "x", "candidates": ["y"]}]


def test_malformed_json_and_missing_file(tmp_path):
    path = tmp_path / "cands.jsonl"
    path.write_text('{"id": "a", "candidates": []}\n{"id": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: malformed JSON"):
        read_candidates(path)
    with pytest.raises(DataError, match="cannot read file"):
        read_candidates(tmp_path / "nope.jsonl")


@pytest.mark.parametrize("field", ["output", "input"])
def test_candidates_for_a_sample_are_the_full_rows_of_those_queries_in_pool_order(examples, field):
    queries = [examples[7], examples[2], examples[-1]]  # not in pool order
    rows = mine_candidates_for(examples, queries, n=4, field=field)
    every = {r["id"]: r for r in mine_candidates(examples, n=4, field=field)}
    assert [r["id"] for r in rows] == [e.id for e in examples if e.id in {q.id for q in queries}]
    assert rows == [every[r["id"]] for r in rows]  # neighbours still come from the whole pool
    assert mine_candidates_for(examples, None, n=4, field=field) == list(every.values())


def test_candidates_for_queries_outside_the_pool_are_refused(examples):
    with pytest.raises(ValueError, match="not in the candidate pool, e.g. 'stranger'"):
        mine_candidates_for(examples, [Example("stranger", "hello", "HELLO")], n=2)


def test_a_pair_scored_in_any_earlier_round_is_not_scored_again():
    # Round 3 sees every earlier round's score rows, concatenated: two rows for example "a".
    round1 = [{"id": "a", "candidates": [{"id": "x", "logprob": -1.0}, {"id": "y", "logprob": -2.0}]}]
    round2 = [{"id": "a", "candidates": [{"id": "z", "logprob": -1.5}]},
              {"id": "b", "candidates": [{"id": "x", "logprob": -0.5}]}]
    round3_candidates = [{"id": "a", "candidates": ["x", "z", "w"], "retriever": [0.9, 0.8, 0.7]},
                         {"id": "b", "candidates": ["x"], "retriever": [0.5]}]
    fresh = unscored(round3_candidates, round1 + round2)
    assert fresh == [{"id": "a", "candidates": ["w"]}]  # x (round 1) and z (round 2) are not rescored; b is done
