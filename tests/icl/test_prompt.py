"""Prompt assembly, with token counts from the real SmolLM2 tokenizer; the prompt token budget; token counters."""

from __future__ import annotations

import logging

import pytest

from taskret.formats import render_demo
from taskret.icl.prompt import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_NEW_TOKENS,
    PromptBuilder,
    make_token_counter,
    prompt_token_budget,
    whitespace_tokens,
)


@pytest.fixture(scope="module")
def count(tokenizer):
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


DEMOS = [  # retrieval order: best first
    ("best", "set an alarm for 7 am", "[IN:CREATE_ALARM [SL:DATE_TIME for 7 am ] ]"),
    ("second", "set an alarm for noon", "[IN:CREATE_ALARM [SL:DATE_TIME for noon ] ]"),
    ("third", "wake me up at six tomorrow", "[IN:CREATE_ALARM [SL:DATE_TIME at six tomorrow ] ]"),
    ("fourth", "delete my alarms", "[IN:DELETE_ALARM ]"),
]
TEST_INPUT = "set an alarm for 8 am"


def _demo_cost(count, demo) -> int:
    return count(render_demo(demo[1], demo[2]) + "\n")


def test_format_and_most_similar_last(count):
    prompt = PromptBuilder(count, budget=10_000).build(TEST_INPUT, DEMOS)
    expected = "".join(f"{inp}\t{out}\n" for _, inp, out in reversed(DEMOS)) + f"{TEST_INPUT}\t"
    assert prompt.text == expected
    assert prompt.demo_ids == ["fourth", "third", "second", "best"]
    assert prompt.text.endswith(f"{DEMOS[0][1]}\t{DEMOS[0][2]}\n{TEST_INPUT}\t")
    assert prompt.n_tokens == count(prompt.text)


def test_render_demo():
    assert render_demo("in put", "out put") == "in put\tout put"


def test_fills_greedily_in_retrieval_order_up_to_the_budget(count):
    query_cost = count(f"{TEST_INPUT}\t")
    two = query_cost + _demo_cost(count, DEMOS[0]) + _demo_cost(count, DEMOS[1])
    prompt = PromptBuilder(count, budget=two).build(TEST_INPUT, DEMOS)
    assert prompt.demo_ids == ["second", "best"]
    assert prompt.n_tokens <= two
    # One token less and the second demonstration no longer fits.
    assert PromptBuilder(count, budget=two - 1).build(TEST_INPUT, DEMOS).demo_ids == ["best"]


def test_stops_at_the_first_demonstration_that_does_not_fit(count):
    # The third is long; the short fourth would fit after it, but demonstrations go in retrieval order.
    long_third = ("third", "wake me up " * 30, "[IN:CREATE_ALARM ]")
    demos = [DEMOS[0], DEMOS[1], long_third, DEMOS[3]]
    budget = count(f"{TEST_INPUT}\t") + sum(_demo_cost(count, d) for d in (DEMOS[0], DEMOS[1], DEMOS[3]))
    prompt = PromptBuilder(count, budget=budget).build(TEST_INPUT, demos)
    assert prompt.demo_ids == ["second", "best"]


def test_max_demos_one_gives_one_shot(count):
    prompt = PromptBuilder(count, budget=10_000, max_demos=1).build(TEST_INPUT, DEMOS)
    assert prompt.demo_ids == ["best"]
    assert prompt.text == f"{DEMOS[0][1]}\t{DEMOS[0][2]}\n{TEST_INPUT}\t"
    assert PromptBuilder(count, budget=10_000, max_demos=3).build(TEST_INPUT, DEMOS).demo_ids == \
        ["third", "second", "best"]


def test_test_input_too_long_gives_zero_shot_with_a_warning(count, caplog):
    long_input = "please set an alarm " * 40
    budget = count(f"{long_input}\t") + 2  # room for the query, not for any demonstration
    with caplog.at_level(logging.WARNING, logger="taskret.icl.prompt"):
        prompt = PromptBuilder(count, budget=budget).build(long_input, DEMOS)
    assert prompt.demo_ids == []
    assert prompt.text == f"{long_input}\t"
    assert any("zero-shot" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_no_candidates_is_zero_shot_without_a_warning(count, caplog):
    with caplog.at_level(logging.WARNING, logger="taskret.icl.prompt"):
        prompt = PromptBuilder(count, budget=100).build(TEST_INPUT, [])
    assert prompt.text == f"{TEST_INPUT}\t" and prompt.demo_ids == []
    assert not caplog.records


def test_demonstrations_that_fit_give_no_warning(count, caplog):
    with caplog.at_level(logging.WARNING, logger="taskret.icl.prompt"):
        PromptBuilder(count, budget=10_000).build(TEST_INPUT, DEMOS)
    assert not caplog.records


@pytest.mark.parametrize("budget", [20, 37, 64, 100, 150, 256, 400])
def test_prompt_never_exceeds_the_budget(count, demo_task, budget):
    train = demo_task.train[:60]
    demos = [(e.id, e.input, e.output) for e in train]
    builder = PromptBuilder(count, budget=budget)
    for example in demo_task.test[:5]:
        prompt = builder.build(example.input, demos)
        assert count(prompt.text) == prompt.n_tokens <= budget
        assert prompt.text.endswith(f"\n{example.input}\t") or prompt.text == f"{example.input}\t"
        # A greedy prefix of the retrieval order, reversed.
        assert prompt.demo_ids == [d[0] for d in demos[: len(prompt.demo_ids)]][::-1]


def test_budget_must_be_positive(count):
    with pytest.raises(ValueError, match="positive"):
        PromptBuilder(count, budget=0)


# --- the budget and token counters ------------------------------------------------------------------


def test_prompt_token_budget_is_the_window_minus_the_answer_capped_by_the_lm():
    assert prompt_token_budget() == DEFAULT_CONTEXT_WINDOW - DEFAULT_MAX_NEW_TOKENS == 1920
    assert prompt_token_budget(640, 96) == 544
    assert prompt_token_budget(8192, 128, lm_context_length=2048) == 1920  # the LM's context caps the window
    assert prompt_token_budget(1024, 128, lm_context_length=8192) == 896
    with pytest.raises(ValueError, match="no room for a prompt: a 2048-token context window minus 2048"):
        prompt_token_budget(4096, 2048, lm_context_length=2048)
    with pytest.raises(ValueError, match="context_window must be positive"):
        prompt_token_budget(0, 10)


def test_token_counters(tiny_model_dir, tokenizer):
    counter = make_token_counter(None)
    assert counter.name == "whitespace" and counter.context_length is None
    assert counter.count("set an  alarm\tfor 7") == whitespace_tokens("set an alarm for 7") == 5
    counter = make_token_counter(str(tiny_model_dir))
    assert counter.name == f"tokenizer:{tiny_model_dir}" and counter.context_length == 2048
    text = "[IN:CREATE_ALARM [SL:DATE_TIME for 7 am ] ]"
    assert counter.count(text) == len(tokenizer(text, add_special_tokens=False).input_ids)
