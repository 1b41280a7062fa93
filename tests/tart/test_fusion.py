"""Fusion weights chosen on dev tasks: each component ranks once, every grid weight is scored by NDCG@10."""

from __future__ import annotations

import pytest

from taskret.retrieval import BM25Retriever, RandomRetriever
from taskret.tart.fusion import choose_weight, fused_ndcg, rank_tasks
from taskret.tart.tasks import Document, RetrievalTask

TOPICS = ["aspirin heart attack risk", "vitamin colds immune", "coffee sleep caffeine", "glacier ice melting",
          "volcano lava eruption", "bread yeast baking", "chess opening gambit", "tide moon gravity"]


def _task(name: str, offset: int) -> RetrievalTask:
    corpus = {f"d{i}": Document(f"d{i}", "", f"{topic} document about {topic.split()[0]}")
              for i, topic in enumerate(TOPICS)}
    queries = {f"q{i}": f"what about {topic.split()[(i + offset) % 3]}" for i, topic in enumerate(TOPICS)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(TOPICS))}
    return RetrievalTask(name, corpus, queries, qrels, ["Find the document"])


def test_lexical_ranking_wins_the_weight_against_random():
    tasks = [_task("a", 0), _task("b", 1)]
    bm25 = rank_tasks(BM25Retriever, tasks, depth=8)
    noise = rank_tasks(lambda: RandomRetriever(seed=3), tasks, depth=8)
    choice = choose_weight(bm25, noise, tasks, grid=[0.0, 0.5, 1.0])
    assert choice.mean_ndcg[1.0] == pytest.approx(100.0)  # BM25 alone finds every document first
    assert choice.mean_ndcg[0.0] < choice.mean_ndcg[1.0]
    assert choice.weight in (0.5, 1.0) and choice.mean_ndcg[choice.weight] == max(choice.mean_ndcg.values())
    assert set(choice.per_task[1.0]) == {"a", "b"}
    # symmetric: the same fusion seen from the other side
    assert fused_ndcg(noise, bm25, tasks, 0.0) == fused_ndcg(bm25, noise, tasks, 1.0)


def test_choose_weight_refuses_bad_grids_and_no_tasks():
    tasks = [_task("a", 0)]
    bm25 = rank_tasks(BM25Retriever, tasks)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        choose_weight(bm25, bm25, tasks, grid=[1.5])
    with pytest.raises(ValueError, match="at least one dev task"):
        choose_weight(bm25, bm25, [])
