"""Fixtures of the TART tests: the three tiny hand-made tasks (facts, parses, steps) and their training rows.

``make_tasks`` is a plain function too, for tests that need fresh tasks outside a fixture
(``from .conftest import make_tasks``).
"""

from __future__ import annotations

import pytest

from taskret.tart.tasks import Document, RetrievalTask
from taskret.tart.training_data import build_training_examples

from .builders import write_task


def _task(name, docs, queries, qrels, instructions):
    corpus = {d: Document(d, "", text) for d, text in docs.items()}
    return RetrievalTask(name, corpus, queries, qrels, instructions)


def make_tasks() -> list[RetrievalTask]:
    facts = _task("facts", {
        "f1": "aspirin lowers the risk of heart attacks in adults",
        "f2": "vitamin c does not prevent the common cold",
        "f3": "coffee consumption reduces sleep quality in adults",
        "f4": "regular exercise improves heart health and sleep",
        "f5": "smoking increases the risk of lung cancer",
        "f6": "sugar intake is linked to tooth decay in children",
    }, {"qa": "aspirin prevents heart attacks", "qb": "coffee harms sleep", "qc": "smoking causes cancer",
        "qd": "an unjudged query about the weather"},
        {"qa": {"f1": 1, "f4": 0}, "qb": {"f3": 1}, "qc": {"f5": 1, "f1": 1}},
        ["Retrieve a scientific abstract that supports or refutes this claim", "Find evidence for this claim"])
    parses = _task("parses", {
        "p1": "[IN:CREATE_ALARM set an alarm for seven ]",
        "p2": "[IN:GET_WEATHER weather in paris tomorrow ]",
        "p3": "[IN:PLAY_MUSIC play jazz by miles davis ]",
        "p4": "[IN:CREATE_CALL call my mother about heart attacks ]",
        "p5": "[IN:SEND_MESSAGE text john about coffee ]",
        "p6": "[IN:GET_NEWS latest news about smoking and cancer ]",
    }, {"m1": "set an alarm for seven", "m2": "weather in paris tomorrow", "m3": "call mother about heart attacks",
        "m4": "wake me at seven with an alarm"},
        {"m1": {"p1": 1}, "m2": {"p2": 1}, "m3": {"p4": 1}, "m4": {"p1": 1}},
        ["Retrieve the semantic parse of this command", "Map this request to its logical form"])
    steps = _task("steps", {
        "s1": "return aspirin ; return heart attacks prevented by #1",
        "s2": "return coffee ; return effect of #1 on sleep",
        "s3": "return alarms ; return alarms at seven",
        "s4": "return songs ; return songs by miles davis",
        "s5": "return cities ; return weather of #1",
        "s6": "return smokers ; return cancer rate of #1",
    }, {"b1": "what does coffee do to sleep", "b2": "which songs are by miles davis", "b3": "does aspirin prevent heart attacks"},
        {"b1": {"s2": 1}, "b2": {"s4": 1}, "b3": {"s1": 1}},
        ["Retrieve the step-by-step decomposition of this question"])
    return [facts, parses, steps]


@pytest.fixture(scope="module")
def tasks():
    return make_tasks()


@pytest.fixture(scope="module")
def rows(tasks):
    """Two hard, one random and two instruction-unfollowing negatives per query (fewer where a corpus is small)."""
    return build_training_examples(tasks, n_hard=2, n_random=1, n_unfollowing=2, seed=0)


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    """Three tiny tasks as BEIR folders (facts: test; parses, steps: train) and their instructions."""
    root = tmp_path_factory.mktemp("beir")
    facts, parses, steps = make_tasks()
    return {"facts": write_task(root, facts, "test"), "parses": write_task(root, parses, "train"),
            "steps": write_task(root, steps, "train"), "instructions": {t.name: t.instructions for t in make_tasks()}}
