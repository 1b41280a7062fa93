"""Metrics against numbers computed by hand, TART's query format, and closed vs pooled evaluation."""

from __future__ import annotations

import math

import pytest

from taskret.formats import format_query
from taskret.retrieval import make_retriever
from taskret.tart.evaluation import build_indexes, compute_metrics, evaluate_retriever
from taskret.tart.tasks import Document, RetrievalTask, pooled_corpus, split_pooled_id

from ..conftest import read_jsonl_rows

# --- metrics -------------------------------------------------------------------------------------------

LOG2_3 = math.log2(3)


def test_metrics_match_a_hand_computed_example():
    qrels = {
        "q1": {"d1": 1, "d2": 1},  # relevant at rank 2 only
        "q2": {"d3": 1},  # relevant at rank 1
        "q3": {"d4": 2, "d5": 1},  # graded: the less relevant one first
        "q4": {"d6": 1},  # relevant at rank 12: beyond NDCG@10 and MRR@10, within Recall@100
        "q5": {"d7": 1},  # not in the run at all
    }
    run = {
        "q1": {"d9": 3.0, "d1": 2.0, "d8": 1.0},
        "q2": {"d3": 5.0, "x": 1.0},
        "q3": {"d5": 0.9, "d4": 0.8},
        "q4": {**{f"n{i:02d}": 100.0 - i for i in range(11)}, "d6": 1.0},
    }
    # NDCG@10 with trec_eval's linear gains and log2(rank + 1) discounts:
    #   q1: DCG = 1/log2(3); IDCG = 1 + 1/log2(3)                     -> 0.386853
    #   q2: 1;  q3: DCG = 1 + 2/log2(3), IDCG = 2 + 1/log2(3)          -> 0.859719;  q4, q5: 0
    ndcg = [(1 / LOG2_3) / (1 + 1 / LOG2_3), 1.0, (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3), 0.0, 0.0]
    assert ndcg[0] == pytest.approx(0.386853, abs=1e-6) and ndcg[2] == pytest.approx(0.859719, abs=1e-6)
    recall = [0.5, 1.0, 1.0, 1.0, 0.0]
    mrr = [0.5, 1.0, 1.0, 0.0, 0.0]  # q4's first relevant is at rank 12 > 10
    metrics = compute_metrics(qrels, run, per_query=True)
    assert metrics["ndcg@10"] == pytest.approx(100 * sum(ndcg) / 5, abs=1e-6)  # 44.9314
    assert metrics["ndcg@10"] == pytest.approx(44.9314, abs=1e-4)
    assert 100 * sum(recall) / 5 == pytest.approx(70.0) and 100 * sum(mrr) / 5 == pytest.approx(50.0)
    assert metrics["recall@100"] == pytest.approx(70.0)
    assert metrics["mrr@10"] == pytest.approx(50.0)
    assert metrics["n_queries"] == 5
    assert metrics["per_query"]["q1"] == pytest.approx({"ndcg@10": 38.6853, "recall@100": 50.0, "mrr@10": 50.0},
                                                       abs=1e-4)
    assert metrics["per_query"]["q5"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_recall_counts_only_the_top_100():
    run = {"q": {**{f"n{i:03d}": 1000.0 - i for i in range(100)}, "hit": 1.0}}  # relevant at rank 101
    assert compute_metrics({"q": {"hit": 1}}, run)["recall@100"] == 0.0
    run["q"]["hit"] = 2000.0
    assert compute_metrics({"q": {"hit": 1}}, run)["recall@100"] == 100.0


def test_queries_without_a_relevant_document_are_not_averaged():
    metrics = compute_metrics({"q": {"d": 1}, "none": {"d": 0}}, {"q": {"d": 1.0}, "none": {"d": 1.0}})
    assert metrics["n_queries"] == 1 and metrics["ndcg@10"] == 100.0


def test_mrr_breaks_score_ties_as_trec_eval_does():
    # trec_eval orders equal scores by document id, descending: "b" before "a".
    assert compute_metrics({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}})["mrr@10"] == 50.0
    assert compute_metrics({"q": {"b": 1}}, {"q": {"a": 1.0, "b": 1.0}})["mrr@10"] == 100.0


def test_format_query():
    assert format_query("Retrieve evidence", "the sky is blue") == "Retrieve evidence [SEP] the sky is blue"
    assert format_query(None, "the sky is blue") == "the sky is blue"
    assert format_query("  ", "q") == "q"


# --- closed and pooled ---------------------------------------------------------------------------------


def make_task(name: str, docs: dict[str, str], queries: dict[str, tuple[str, str]], instruction: str) -> RetrievalTask:
    """``queries``: qid -> (text, relevant doc id)."""
    return RetrievalTask(name, {d: Document(d, "", t) for d, t in docs.items()},
                         {q: text for q, (text, _) in queries.items()},
                         {q: {doc: 1} for q, (_, doc) in queries.items()}, [instruction])


@pytest.fixture
def fruit_tasks() -> list[RetrievalTask]:
    """Task "recipes" asks for "apple banana"; task "lists" holds a document that repeats those words."""
    recipes = make_task("recipes", {"r1": "apple banana smoothie", "r2": "cherry pie dessert", "r3": "grape juice drink"},
                        {"qr": ("apple banana", "r1"), "qc": ("cherry pie", "r2")}, "Find a recipe")
    lists = make_task("lists", {"l1": "apple banana apple banana apple banana", "l2": "kiwi tart", "l3": "lemon cake"},
                      {"qk": ("kiwi", "l2")}, "Find a shopping list")
    return [recipes, lists]


def test_pooled_corpus_holds_every_document_once_under_unique_ids(fruit_tasks):
    ids, texts = pooled_corpus(fruit_tasks)
    assert len(ids) == len(set(ids)) == 6
    assert set(ids) == {f"{t.name}/{d}" for t in fruit_tasks for d in t.corpus}
    assert texts[ids.index("lists/l1")] == "apple banana apple banana apple banana"
    assert split_pooled_id("lists/l1") == ("lists", "l1")
    indexes = build_indexes("bm25", fruit_tasks, "pooled")
    (retriever, _), = indexes.values()
    assert sorted(retriever.ids) == sorted(ids)


def test_pooled_is_harder_or_equal_for_bm25_when_another_task_shares_words(fruit_tasks, tmp_path):
    result = evaluate_retriever("bm25", fruit_tasks, setting="both", use_instruction=False, run_dir=tmp_path)
    closed, pooled = result["settings"]["closed"], result["settings"]["pooled"]
    assert closed["recipes"]["metrics"]["ndcg@10"] == 100.0
    # For "apple banana" the other task's document outranks the right one: rank 2, NDCG = 1/log2(3);
    # "cherry pie" still finds its recipe first.
    assert pooled["recipes"]["metrics"]["ndcg@10"] == pytest.approx((100 / LOG2_3 + 100) / 2)
    for task in ("recipes", "lists"):
        for metric in ("ndcg@10", "mrr@10", "recall@100"):
            assert pooled[task]["metrics"][metric] <= closed[task]["metrics"][metric] + 1e-9
            assert result["gap"][task][metric] == pytest.approx(pooled[task]["metrics"][metric]
                                                                - closed[task]["metrics"][metric])
    assert result["gap"]["recipes"]["ndcg@10"] < 0 and result["gap_mean"]["ndcg@10"] < 0
    assert closed["recipes"]["n_docs"] == 3 and pooled["recipes"]["n_docs"] == 6
    assert pooled["recipes"]["other_task@10"] > 0
    rows = {r["qid"]: r for r in read_jsonl_rows(tmp_path / "pooled" / "recipes.jsonl")}
    assert rows["qr"]["retrieved_ids"][:2] == ["lists/l1", "recipes/r1"]
    assert rows["qr"]["relevant"] == ["recipes/r1"] and rows["qr"]["query"] == "apple banana"
    assert rows["qr"]["ndcg@10"] == pytest.approx(100 / LOG2_3) and rows["qc"]["ndcg@10"] == 100.0
    closed_rows = {r["qid"]: r for r in read_jsonl_rows(tmp_path / "closed" / "recipes.jsonl")}
    assert closed_rows["qr"]["retrieved_ids"][0] == "r1" and closed_rows["qr"]["ndcg@10"] == 100.0
    assert len(closed_rows["qr"]["scores"]) == len(closed_rows["qr"]["retrieved_ids"]) == 3  # k capped by corpus


def test_instructions_are_prepended_to_queries(fruit_tasks, tmp_path):
    result = evaluate_retriever("bm25", fruit_tasks, setting="closed", use_instruction=True, run_dir=tmp_path)
    assert result["settings"]["closed"]["recipes"]["instruction"] == "Find a recipe"
    rows = read_jsonl_rows(tmp_path / "closed" / "recipes.jsonl")
    assert rows[0]["query"] == "Find a recipe [SEP] apple banana"
    plain = evaluate_retriever("bm25", fruit_tasks, setting="closed", use_instruction=False)
    assert plain["settings"]["closed"]["recipes"]["instruction"] is None
    assert set(plain) >= {"retriever", "settings", "mean"} and "gap" not in plain


def test_indexes_are_built_once_and_shared_between_calls(fruit_tasks):
    built = []

    def counting_make(spec):
        built.append(spec)
        return make_retriever(spec)

    cache: dict = {}
    for use_instruction in (True, False):
        evaluate_retriever("bm25", fruit_tasks, setting="both", use_instruction=use_instruction, indexes=cache,
                           make=counting_make)
    assert len(built) == 3  # two closed indexes and one pooled, for both calls


def test_a_dense_retriever_evaluates_through_the_same_api(fruit_tasks, tiny_bert_dir):
    result = evaluate_retriever(f"dense:{tiny_bert_dir}", fruit_tasks, setting="both", k=10)
    for setting in ("closed", "pooled"):
        for entry in result["settings"][setting].values():
            assert all(0.0 <= v <= 100.0 for v in entry["metrics"].values())


def test_progress_reports_each_corpus_encoding_on_stderr_when_asked(fruit_tasks, tiny_bert_dir, capsys, monkeypatch):
    from transformers.utils import logging

    monkeypatch.setattr(logging, "_tqdm_active", False)  # transformers' own bar while it loads the weights
    spec = f"dense:{tiny_bert_dir}?dtype=float32"
    quiet = evaluate_retriever(spec, fruit_tasks, use_instruction=False, k=10)
    assert capsys.readouterr() == ("", "")
    shown = evaluate_retriever(spec, fruit_tasks, use_instruction=False, k=10, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and [line.split(":")[0] for line in err.splitlines()] == [
        f"encoding 3 texts with {tiny_bert_dir} (float32)"] * 2  # one line per task's corpus, none for 3 queries
    assert shown["mean"] == quiet["mean"]


@pytest.mark.parametrize("kwargs, message", [
    ({"setting": "mixed"}, "unknown setting 'mixed'"),
    ({"k": 0}, "k must be at least 1"),
])
def test_bad_arguments(fruit_tasks, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate_retriever("bm25", fruit_tasks, **kwargs)


def test_task_names_must_be_unique(fruit_tasks):
    with pytest.raises(ValueError, match="repeated: recipes"):
        evaluate_retriever("bm25", [fruit_tasks[0], fruit_tasks[0]])
