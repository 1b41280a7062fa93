"""TaskretFewShot / TaskretDemos: per-input DSPy demonstrations from a saved index, with DSPy's own DummyLM."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

dspy = pytest.importorskip("dspy")
from dspy.utils import DummyLM  # noqa: E402

from taskret.formats import BREAK_FORMAT  # noqa: E402
from taskret.integrations.dspy import STATE_KEY, TaskretDemos, TaskretFewShot  # noqa: E402
from taskret.retrieval import BM25Retriever  # noqa: E402
from taskret.retrieval.index import save_index  # noqa: E402

from ..conftest import POOL_ROWS  # noqa: E402


@pytest.fixture
def index_dir(tmp_path, pool_examples):
    return save_index(tmp_path / "work" / "index", BM25Retriever().index(pool_examples), pool_examples, task="pool",
                      retriever_spec="bm25")


def _user_messages(lm) -> list[str]:
    return [m["content"] for m in lm.history[-1]["messages"] if m["role"] == "user"]


def test_demonstrations_are_the_index_top_k_most_similar_last(index_dir):
    compiled = TaskretFewShot(index_dir, k=3).compile(dspy.Predict("question -> answer"))
    demos = compiled.demos_for("what is the weather in paris")
    assert len(demos) == 3
    assert demos[-1].question == "what is the weather forecast in paris tomorrow"
    assert demos[-1].answer == "GET_WEATHER paris tomorrow"
    assert list(demos[-1].inputs().keys()) == ["question"]


def test_a_call_shows_the_retrieved_demonstrations_to_the_lm(index_dir):
    lm = DummyLM([{"answer": "unused"}], follow_examples=True)
    program = TaskretFewShot(index_dir, k=2).compile(dspy.Predict("question -> answer"))
    with dspy.context(lm=lm):
        # the input is an indexed example's: DummyLM answers with that demonstration's output when it is shown
        result = program(question="call my mother on whatsapp")
    assert result.answer == "CREATE_CALL mother whatsapp"
    shown = _user_messages(lm)
    assert len(shown) == 3  # two demonstrations, then the input
    assert "call my mother on whatsapp" in shown[1]  # the most similar last, next to the input
    assert program.program.predictors()[0].demos == []  # the student itself is left as it was


def test_each_input_gets_its_own_demonstrations(index_dir):
    lm = DummyLM([{"answer": "a"}, {"answer": "b"}])
    program = TaskretFewShot(index_dir, k=1).compile(dspy.Predict("question -> answer"))
    with dspy.context(lm=lm):
        program(question="play jazz by miles davis")
        first = _user_messages(lm)[0]
        program(question="start a timer for ten minutes")
        second = _user_messages(lm)[0]
    assert "miles davis" in first and "timer" in second


def test_save_and_load_with_the_index_relative_to_the_program(tmp_path, index_dir):
    program = TaskretFewShot(index_dir, k=2).compile(dspy.Predict("question -> answer"))
    program.program.signature = program.program.signature.with_instructions("Parse the request.")
    program.save(tmp_path / "work" / "program.json")
    state = json.loads((tmp_path / "work" / "program.json").read_text())
    assert state[STATE_KEY]["index"] == "index" and state[STATE_KEY]["k"] == 2
    assert state[STATE_KEY]["input_field"] == "question" and state[STATE_KEY]["output_field"] == "answer"
    # move the program and its index together: the relative path still finds it
    shutil.move(tmp_path / "work", tmp_path / "moved")
    loaded = TaskretFewShot(_saved_other(tmp_path), k=5).compile(dspy.Predict("question -> answer"))
    loaded.load(tmp_path / "moved" / "program.json")
    assert loaded.index.directory == tmp_path / "moved" / "index" and loaded.k == 2
    assert loaded.program.signature.instructions == "Parse the request."
    lm = DummyLM([{"answer": "x"}])
    with dspy.context(lm=lm):
        loaded(question="set an alarm for seven in the morning")
    assert len(_user_messages(lm)) == 3


def _other_pool():
    from taskret.data import Example

    return [Example("o1", "something else", "OTHER"), Example("o2", "another thing", "OTHER2")]


def test_loading_names_a_missing_index(tmp_path, index_dir):
    program = TaskretFewShot(index_dir, k=2).compile(dspy.Predict("question -> answer"))
    program.save(tmp_path / "program.json")
    shutil.rmtree(index_dir)
    with pytest.raises(FileNotFoundError, match="the program's taskret index is not at"):
        TaskretDemos(dspy.Predict("question -> answer"), _saved_other(tmp_path)).load(tmp_path / "program.json")


def _saved_other(tmp_path):
    return save_index(tmp_path / "other", BM25Retriever().index(_other_pool()), _other_pool(), task="other",
                      retriever_spec="bm25")


def test_no_pickles(tmp_path, index_dir):
    program = TaskretFewShot(index_dir).compile(dspy.Predict("question -> answer"))
    for bad in (dict(path=tmp_path / "p.pkl"), dict(path=tmp_path / "dir", save_program=True)):
        with pytest.raises(ValueError, match="saved as JSON state only"):
            program.save(**bad)
    plain = tmp_path / "plain.json"
    dspy.Predict("question -> answer").save(plain)
    with pytest.raises(ValueError, match="not the state of a TaskretDemos program"):
        program.load(plain)


def test_chain_of_thought_and_field_names(index_dir):
    cot = TaskretFewShot(index_dir, k=1).compile(dspy.ChainOfThought("question -> answer"))
    assert (cot.input_field, cot.output_field) == ("question", "answer")
    with pytest.raises(ValueError, match="2 input fields"):
        TaskretFewShot(index_dir).compile(dspy.Predict("context, question -> answer"))
    named = TaskretFewShot(index_dir, input_field="question").compile(dspy.Predict("context, question -> answer"))
    assert set(named.demos_for("call mom")[0].keys()) == {"question", "answer"}
    with pytest.raises(ValueError, match="no predictor of the program has input field 'q'"):
        TaskretFewShot(index_dir, input_field="q").compile(dspy.Predict("question -> answer"))


def test_copies_share_the_index_and_calls_in_threads_stay_apart(index_dir):
    program = TaskretFewShot(index_dir, k=1).compile(dspy.Predict("question -> answer"))
    assert program.deepcopy().index is program.index
    queries = [r["q"] for r in POOL_ROWS]
    lm = DummyLM({q: {"answer": q.split()[0]} for q in queries})
    answers: dict[str, str] = {}

    def run(query: str) -> None:
        with dspy.context(lm=lm):
            answers[query] = program(question=query).answer

    threads = [threading.Thread(target=run, args=(q,)) for q in queries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {q: q.split()[0] for q in queries}


def test_break_outputs_are_shown_as_its_prompts_show_them(tmp_path):
    from taskret.data import Example

    pool = [Example("b1", "flights from DC?", "return flights ;return #1 from DC")]
    folder = save_index(tmp_path / "break", BM25Retriever().index(pool), pool, task="break", retriever_spec="bm25",
                        output_format="break")
    demos = TaskretFewShot(folder, k=1).compile(dspy.Predict("question -> decomposition")).demos_for("flights?")
    assert demos[0].decomposition == BREAK_FORMAT.to_prompt("return flights ;return #1 from DC")
