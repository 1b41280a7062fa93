"""TaskretExampleSelector in langchain-core's FewShotPromptTemplate."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.prompts import FewShotPromptTemplate, PromptTemplate

from taskret.data import Example
from taskret.icl.prompt import PromptBuilder
from taskret.integrations.langchain import TaskretExampleSelector
from taskret.retrieval import BM25Retriever
from taskret.retrieval.index import save_index

from ..conftest import POOL_ROWS


@pytest.fixture
def pool_dicts():
    return [{"input": r["q"], "output": r["a"], "key": r["key"]} for r in POOL_ROWS]


@pytest.fixture
def selector(pool_dicts):
    return TaskretExampleSelector.from_examples(pool_dicts, "bm25", k=3, id_key="key")


def _few_shot(selector) -> FewShotPromptTemplate:
    return FewShotPromptTemplate(example_selector=selector, example_prompt=PromptTemplate.from_template("{input}\t{output}"),
                                 suffix="{input}\t", example_separator="\n", input_variables=["input"])


def test_select_examples_puts_the_most_similar_last(selector):
    chosen = selector.select_examples({"input": "what is the weather in paris"})
    assert len(chosen) == 3 and chosen[-1] == {"input": "what is the weather forecast in paris tomorrow",
                                               "output": "GET_WEATHER paris tomorrow"}


def test_few_shot_prompt_matches_taskrets_own_prompt(selector, pool_examples):
    query = "set an alarm in paris for tomorrow"
    rendered = _few_shot(selector).format(input=query)
    ids = selector.retriever.retrieve([query], k=3).ids[0]
    pool = {e.id: e for e in pool_examples}
    expected = PromptBuilder(lambda t: 0, budget=10_000, max_demos=3).build(
        query, [(i, pool[i].input, pool[i].output) for i in ids])
    assert rendered == expected.text


def test_from_index_is_read_only_and_shows_outputs_as_prompts_do(tmp_path):
    examples = [Example("a", "how many dogs are there", "return dogs ;return number of #1"),
                Example("b", "what color is the sky", "return sky ;return color of #1")]
    folder = save_index(tmp_path / "idx", BM25Retriever().index(examples), examples, output_format="break")
    selector = TaskretExampleSelector.from_index(folder, k=1)
    assert selector.select_examples({"input": "count the dogs"}) == [
        {"input": "how many dogs are there", "output": "1#) return dogs 2#) return number of #1"}]
    with pytest.raises(NotImplementedError, match="immutable"):
        selector.add_example({"input": "x", "output": "y"})


def test_add_example_reindexes_an_owned_pool(selector):
    new_id = selector.add_example({"input": "order a large pepperoni pizza", "output": "ORDER_FOOD pizza"})
    assert new_id == "example-8"
    chosen = selector.select_examples({"input": "pepperoni pizza please"})
    assert chosen[-1] == {"input": "order a large pepperoni pizza", "output": "ORDER_FOOD pizza"}
    with pytest.raises(ValueError, match="'output' must be a non-empty string"):
        selector.add_example({"input": "no output"})


def test_query_variable_resolution(pool_dicts):
    rows = [{"question": d["input"], "answer": d["output"]} for d in pool_dicts]
    custom = TaskretExampleSelector.from_examples(rows, k=1, input_key="question", output_key="answer")
    assert custom.select_examples({"question": "play jazz"})[0]["answer"] == "PLAY_MUSIC jazz davis"
    assert custom.select_examples({"text": "play jazz"})[0]["answer"] == "PLAY_MUSIC jazz davis"  # the only variable
    with pytest.raises(KeyError, match="input variable 'question' not given"):
        custom.select_examples({"a": "play jazz", "b": "x"})
    keyed = TaskretExampleSelector.from_examples(rows, k=1, input_key="question", output_key="answer", query_key="q")
    assert keyed.select_examples({"q": "call my mother", "other": "x"})[0]["answer"] == "CREATE_CALL mother whatsapp"


def test_async_selection_and_bad_construction(selector, pool_dicts):
    chosen = asyncio.run(selector.aselect_examples({"input": "start a timer"}))
    assert chosen[-1]["output"] == "CREATE_TIMER twenty minutes"
    with pytest.raises(ValueError, match="no examples"):
        TaskretExampleSelector.from_examples([])
    with pytest.raises(ValueError, match="k must be at least 1"):
        TaskretExampleSelector.from_examples(pool_dicts, k=0)
    with pytest.raises(ValueError, match="'input' must be a non-empty string"):
        TaskretExampleSelector.from_examples([{"input": "", "output": "x"}])


def test_instruction_prefixes_the_query(pool_dicts):
    selector = TaskretExampleSelector.from_examples(pool_dicts, k=1, instruction="Find a command")
    assert selector._query({"input": "play jazz"}) == "Find a command [SEP] play jazz"


BRACED = [{"input": "remove every file under the folder", "output": "find . -type f -exec rm {} \\;"},
          {"input": "print the variable x", "output": "echo {x} {{y}} {% z %} {#"},
          {"input": "list the folder", "output": "ls -la"}]


def test_braces_in_the_examples_render_literally_with_the_documented_template():
    selector = TaskretExampleSelector.from_examples(BRACED, k=3)
    rendered = _few_shot(selector).format(input="delete {every} file")
    assert "find . -type f -exec rm {} \\;" in rendered and "echo {x} {{y}} {% z %} {#" in rendered
    assert rendered.endswith("\ndelete {every} file\t")
    assert "ls -la" in rendered
    raw = TaskretExampleSelector.from_examples(BRACED, k=3, template_format=None)
    chosen = reversed(raw.select_examples({"input": "delete {every} file"}))  # most similar first, as retrieved
    assert rendered == PromptBuilder(lambda t: 0, budget=10_000, max_demos=3).build(
        "delete {every} file", [(e["input"], e["input"], e["output"]) for e in chosen]).text


def test_braces_render_literally_in_jinja2_and_chat_templates():
    from langchain_core.prompts import ChatPromptTemplate, FewShotChatMessagePromptTemplate

    jinja = TaskretExampleSelector.from_examples(BRACED, k=3, template_format="jinja2")
    prompt = FewShotPromptTemplate(example_selector=jinja, template_format="jinja2",
                                   example_prompt=PromptTemplate.from_template("{{ input }}\t{{ output }}",
                                                                               template_format="jinja2"),
                                   suffix="{{ input }}\t", example_separator="\n", input_variables=["input"])
    rendered = prompt.format(input="delete every file")
    assert "find . -type f -exec rm {} \\;" in rendered and "echo {x} {{y}} {% z %} {#" in rendered
    chat = TaskretExampleSelector.from_examples(BRACED, k=3, template_format=None)
    messages = FewShotChatMessagePromptTemplate(
        example_selector=chat, input_variables=["input"],
        example_prompt=ChatPromptTemplate.from_messages([("human", "{input}"), ("ai", "{output}")]),
    ).format_messages(input="delete every file")
    assert "echo {x} {{y}} {% z %} {#" in [m.content for m in messages]
    with pytest.raises(ValueError, match="template_format must be"):
        TaskretExampleSelector.from_examples(BRACED, template_format="mustache")
