"""TaskretExampleSelector with a set selection (taskret.icl.selection): the k a DPP or MMR chooses from the top
n_candidates, as `taskret evaluate` and the service's /prompt choose them; the index's recorded selection by default."""

from __future__ import annotations

import pytest

from taskret.data import Example, Task
from taskret.icl.prompt import PromptBuilder
from taskret.icl.selection import Selection, select_demonstrations
from taskret.integrations.langchain import TaskretExampleSelector
from taskret.retrieval import BM25Retriever, DenseRetriever
from taskret.retrieval.index import save_index

from ..conftest import POOL_ROWS

QUERIES = ["what is the weather in paris", "set an alarm for six", "call my brother", "play some jazz music",
           "remind me to buy milk", "how hot is it in london"]
K = 2


def _selected(pool, retriever, selection, query: str) -> list[str]:
    """The k `taskret evaluate` selects for ``query`` with no token budget, best first."""
    builder = PromptBuilder(lambda text: 0, budget=1, max_demos=K)
    selected, _ = select_demonstrations(Task("pool", pool, []), retriever, [Example("q", query, "")], selection,
                                        builder)
    return selected.ids[0]


def _inputs(pool, ids) -> list[str]:
    by_id = {e.id: e for e in pool}
    return [by_id[i].input for i in ids]


def test_a_selector_over_an_index_selects_with_the_recorded_selection(tmp_path, pool_examples, tiny_bert_dir):
    retriever = DenseRetriever(encoder=str(tiny_bert_dir)).index(pool_examples)
    folder = save_index(tmp_path / "idx", retriever, pool_examples,
                        extra={"selection": Selection("dpp", 0.5, 6).record()})
    chooser = TaskretExampleSelector.from_index(folder, k=K, template_format=None)
    plain = TaskretExampleSelector.from_index(folder, k=K, template_format=None, select=None)
    assert chooser.selection == Selection("dpp", 0.5, 6) and plain.selection is None
    differ = False
    for query in QUERIES:
        chosen = [e["input"] for e in chooser.select_examples({"input": query})]
        expected = _selected(pool_examples, retriever, chooser.selection, query)
        assert chosen == list(reversed(_inputs(pool_examples, expected)))  # most similar last
        top = [e["input"] for e in plain.select_examples({"input": query})]
        assert top == list(reversed(_inputs(pool_examples, retriever.retrieve([query], k=K).ids[0])))
        differ = differ or chosen != top
    assert differ  # the DPP chose another pair than the ranking's top for some query


def test_a_selector_of_its_own_examples_selects_as_told_and_after_adding_one(tiny_bert_dir):
    rows = [{"input": r["q"], "output": r["a"], "key": r["key"]} for r in POOL_ROWS]
    assert TaskretExampleSelector.from_examples(rows, "bm25", k=K).selection is None  # nothing was trained
    selection = Selection("mmr", 0.3, 5, encoder=str(tiny_bert_dir))
    chooser = TaskretExampleSelector.from_examples(rows, "bm25", k=K, id_key="key", select=selection,
                                                   template_format=None)
    pool = [Example(r["key"], r["input"], r["output"]) for r in rows]
    for query in QUERIES[:3]:
        expected = _selected(pool, BM25Retriever().index(pool), selection, query)
        assert [e["input"] for e in chooser.select_examples({"input": query})] == \
            list(reversed(_inputs(pool, expected)))
    chooser.add_example({"input": "set an alarm for six thirty", "output": "CREATE_ALARM six thirty"})
    assert "set an alarm for six thirty" in [e["input"] for e in chooser.select_examples({"input": QUERIES[1]})]


def test_select_must_be_a_selection_its_record_or_none():
    with pytest.raises(ValueError, match="select: 'recorded', 'none', a Selection or its record"):
        TaskretExampleSelector.from_examples([{"input": "a", "output": "b"}], "bm25", select="dpp")
