"""Prompts built from retrieval, and greedy predictions within the prompt token budget (tiny LM)."""

from __future__ import annotations

from taskret.data import Example, Task
from taskret.formats import BREAK_FORMAT, break_to_prompt
from taskret.icl.inference import build_prompts, predict
from taskret.icl.prompt import PromptBuilder
from taskret.retrieval import BM25Retriever

# --- prompts from retrieval -----------------------------------------------------------------------


def test_build_prompts_in_retrieval_order_and_exclude_self(pool_examples, tiny_lm):
    task = Task("pool", train=pool_examples, test=[])
    retriever = BM25Retriever().index(pool_examples)
    builder = PromptBuilder(tiny_lm.count_tokens, budget=10_000)
    queries = pool_examples[:3]
    prompts, ids, scores = build_prompts(task, retriever, queries, builder, n_candidates=4)
    for example, prompt, row, row_scores in zip(queries, prompts, ids, scores):
        assert row[0] == example.id  # without exclude_self, each training example finds itself
        assert prompt.demo_ids == row[::-1]
        assert prompt.text.endswith(f"{example.input}\t{example.output}\n{example.input}\t")
        assert len(row_scores) == len(row) == 4 and row_scores == sorted(row_scores, reverse=True)
    _, ids, _ = build_prompts(task, retriever, queries, builder, n_candidates=4, exclude_self=True)
    for example, row in zip(queries, ids):
        assert example.id not in row and len(row) == 4


def test_build_prompts_show_outputs_in_the_task_format(tiny_lm):
    train = [Example("b1", "flights from DC to Boston", "return flights ;return #1 from  DC ;return #2 to  Boston")]
    task = Task("break", train=train, test=[], output_format=BREAK_FORMAT)
    builder = PromptBuilder(tiny_lm.count_tokens, budget=1000)
    prompts, _, _ = build_prompts(task, BM25Retriever().index(train), [Example("t", "flights from DC", "x")], builder)
    assert prompts[0].text == f"flights from DC to Boston\t{break_to_prompt(train[0].output)}\nflights from DC\t"


def test_predict_respects_the_window_and_max_demos(demo_task, tiny_lm):
    retriever = BM25Retriever().index(demo_task.train)
    examples = demo_task.test[:3]
    predictions = predict(demo_task, retriever, tiny_lm, examples, context_window=200, max_new_tokens=8)
    assert [p.example for p in predictions] == examples
    for p in predictions:
        assert 0 < len(p.prompt.demo_ids) and p.prompt.n_tokens <= 200 - 8
        assert tiny_lm.count_tokens(p.prompt.text) == p.prompt.n_tokens
        assert p.prompt.demo_ids[-1] == p.retrieved_ids[0]
        assert p.prediction == p.raw_generation and "\n" not in p.prediction
    one_shot = predict(demo_task, retriever, tiny_lm, examples, context_window=200, max_new_tokens=8, max_demos=1)
    assert [p.prompt.demo_ids for p in one_shot] == [[p.retrieved_ids[0]] for p in predictions]


def test_predict_maps_break_generations_back(tiny_lm):
    train = [Example(f"b{i}", f"question number {i}", f"return thing {i} ;return #1 that is red") for i in range(3)]
    task = Task("break", train=train, test=train, output_format=BREAK_FORMAT)
    predictions = predict(task, BM25Retriever().index(train), tiny_lm, train[:2], context_window=256, max_new_tokens=6)
    for p in predictions:
        assert p.prediction == BREAK_FORMAT.from_prompt(p.raw_generation)
        assert "1#) return thing" in p.prompt.text
