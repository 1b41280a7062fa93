"""End to end with the real bundled SmolLM2 on the shipped MTOP demo slice."""

from __future__ import annotations

import json

import pytest

from taskret.backends.transformers import CausalLM
from taskret.icl.evaluation import evaluate
from taskret.retrieval import BM25Retriever

from .conftest import read_jsonl_rows

pytestmark = pytest.mark.integration

CONTEXT_WINDOW = 384
MAX_NEW_TOKENS = 48
FIELDS = {"id", "input", "retrieved_ids", "prompt_ids", "prompt", "prediction", "gold", "correct"}


@pytest.fixture(scope="module")
def smollm2() -> CausalLM:
    return CausalLM.load("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def bm25_demo(demo_task):
    return BM25Retriever().index(demo_task.train)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, demo_task, smollm2, bm25_demo):
    out = tmp_path_factory.mktemp("integration") / "bm25"
    examples = demo_task.test[:3]
    summary = evaluate(demo_task, bm25_demo, smollm2, examples, out, retriever_name="bm25",
                       context_window=CONTEXT_WINDOW, max_new_tokens=MAX_NEW_TOKENS)
    return out, examples, summary


def test_predictions_file(demo_run):
    out, examples, _ = demo_run
    rows = read_jsonl_rows(out / "predictions.jsonl")
    assert len(rows) == 3
    for row, example in zip(rows, examples):
        assert FIELDS <= set(row)
        assert (row["id"], row["input"], row["gold"]) == (example.id, example.input, example.output)
        assert isinstance(row["correct"], bool)
        assert "\n" not in row["prediction"]


def test_summary_file(demo_run):
    out, _, summary = demo_run
    saved = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert saved == summary
    assert saved["n"] == 3
    assert 0 <= saved["metrics"]["em"] <= 100
    rows = read_jsonl_rows(out / "predictions.jsonl")
    assert saved["metrics"]["em"] == pytest.approx(100 * sum(r["correct"] for r in rows) / 3)
    assert saved["lm"] == "smollm2-135m" and saved["context_window"] == CONTEXT_WINDOW


def test_prompts(demo_run, demo_task, smollm2):
    out, _, _ = demo_run
    pool = {e.id: e for e in demo_task.train}
    for row in read_jsonl_rows(out / "predictions.jsonl"):
        prompt, prompt_ids, retrieved = row["prompt"], row["prompt_ids"], row["retrieved_ids"]
        assert prompt.endswith(row["input"] + "\t")
        assert set(prompt_ids) <= set(retrieved)
        assert prompt_ids, "several MTOP demonstrations fit in 336 tokens"
        assert prompt_ids[-1] == retrieved[0]  # the most similar sits next to the test input
        assert prompt_ids == retrieved[: len(prompt_ids)][::-1]  # greedy in retrieval order
        expected = "".join(f"{pool[i].input}\t{pool[i].output}\n" for i in prompt_ids) + row["input"] + "\t"
        assert prompt == expected
        assert row["prompt_tokens"] == smollm2.count_tokens(prompt) <= CONTEXT_WINDOW - MAX_NEW_TOKENS
        # The next retrieved demonstration would not have fitted.
        if len(prompt_ids) < len(retrieved):
            nxt = pool[retrieved[len(prompt_ids)]]
            assert smollm2.count_tokens(f"{nxt.input}\t{nxt.output}\n" + prompt) > CONTEXT_WINDOW - MAX_NEW_TOKENS


def test_the_model_follows_the_demonstrations(demo_run):
    out, _, _ = demo_run
    rows = read_jsonl_rows(out / "predictions.jsonl")
    assert sum(r["prediction"].startswith("[IN:") for r in rows) >= 2, [r["prediction"] for r in rows]


def test_scoring_prefers_the_gold_output(demo_run, smollm2):
    """With the demonstrations in the prompt, the gold parse is likelier than another example's parse."""
    out, _, _ = demo_run
    rows = read_jsonl_rows(out / "predictions.jsonl")[:2]  # two calls with different contacts
    prompts = [r["prompt"] for r in rows]
    golds = [r["gold"] for r in rows]
    scores = smollm2.score(prompts + prompts, golds + golds[::-1])
    for gold, other in zip(scores[:2], scores[2:]):
        assert gold.logprob > other.logprob
