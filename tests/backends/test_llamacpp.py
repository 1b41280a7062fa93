"""The llamacpp backend on the real bundled SmolLM2 GGUF: the same scores and greedy answers as transformers in
float32, whatever the batch, and evaluations from the two engines never paired."""

from __future__ import annotations

import sys

import pytest

from taskret.backends import BackendNotInstalled, make_backend
from taskret.icl.evaluation import machine_differences
from taskret.models import gguf_file, is_installed

from .test_transformers import PROMPTS, TARGETS

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not is_installed("smollm2-135m"), reason="needs the bundled SmolLM2")]
llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (make setup builds it)")

PROMPTS, TARGETS = PROMPTS[:4] + PROMPTS[5:], TARGETS[:4] + TARGETS[5:]  # transformers' pairs but the one-letter prompt


@pytest.fixture(scope="module")
def reference():
    lm = make_backend("transformers:smollm2-135m", dtype="float32")
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def engine():
    lm = make_backend("llamacpp:smollm2-135m", max_batch_size=3, threads=1)
    yield lm
    lm.close()


def test_scores_equal_transformers_float32(engine, reference):
    mine = engine.score(PROMPTS, TARGETS)
    theirs = reference.score(PROMPTS, TARGETS)
    assert [s.n_tokens for s in mine] == [s.n_tokens for s in theirs]
    for a, b in zip(mine, theirs):
        assert abs(a.logprob - b.logprob) < 0.05, (a, b)  # nats, over the whole target
    # A ranking of candidates for one input is what EPR reads: it must not change.
    order = range(len(PROMPTS))
    assert sorted(order, key=lambda i: mine[i].mean) == sorted(order, key=lambda i: theirs[i].mean)


def test_a_prefix_shared_by_several_pairs_gives_the_scores_of_scoring_them_whole(engine):
    # EPR's pairs: one candidate demonstration, then each example that uses it
    demo = "call mom\t[IN:CREATE_CALL [SL:CONTACT mom ] ]\n"
    prompts = [demo + "ring my sister\t", demo + "phone dad\t", demo + "call the office\t", "hi\t"]
    targets = ["[IN:CREATE_CALL [SL:CONTACT sister ] ]", "[IN:CREATE_CALL [SL:CONTACT dad ] ]",
               "[IN:CREATE_CALL [SL:CONTACT the office ] ]", "hello"]
    shared = engine.score_shared([demo, demo, demo, ""], prompts, targets)
    whole = engine.score(prompts, targets)
    assert [s.n_tokens for s in shared] == [s.n_tokens for s in whole]
    for a, b in zip(shared, whole):
        assert abs(a.logprob - b.logprob) < 0.05, (a, b)  # float rounding of other batch shapes only


def test_greedy_answers_equal_transformers_float32_and_do_not_depend_on_the_batch(engine, reference):
    theirs = reference.generate(PROMPTS, max_new_tokens=24)
    assert engine.generate(PROMPTS, max_new_tokens=24) == theirs
    single = make_backend("llamacpp:smollm2-135m", max_batch_size=1, threads=1)
    try:
        assert single.generate(PROMPTS, max_new_tokens=24) == theirs
    finally:
        single.close()


def test_generation_stops_at_a_newline_or_the_token_limit_and_reports_each_answer(engine):
    seen = []
    raw = engine.generate_raw(PROMPTS, max_new_tokens=6, stop_on_newline=True, progress=seen.append)
    assert sum(seen) == len(PROMPTS)
    for text, n_tokens in raw:
        assert 1 <= n_tokens <= 6
        assert "\n" not in text.rstrip("\n")  # a newline can only be the last token
    assert [n for _, n in engine.generate_raw(PROMPTS[:2], max_new_tokens=3, stop_on_newline=False)] == [3, 3]


def test_a_gguf_file_runs_with_its_own_tokenizer_and_records_its_engine():
    lm = make_backend(f"llamacpp:{gguf_file('smollm2-135m')}", weights="original", threads=1)
    try:
        assert lm.count_tokens("call mom") > 0
        assert lm.generate(["hi\t"], max_new_tokens=4) is not None
        runtime = lm.runtime()
        assert runtime["engine"] == "llama.cpp" and runtime["weights"] == "original"
    finally:
        lm.close()


def test_an_unknown_weight_type_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown llama.cpp weight type 'q3_zz'"):
        make_backend("llamacpp:smollm2-135m", weights="q3_zz")


def test_an_evaluation_is_paired_only_with_one_from_the_same_engine(engine, reference):
    mine = {"machine": {"cpu": "x", **engine.runtime()}}
    theirs = {"machine": {"cpu": "x", **reference.runtime()}}
    assert machine_differences(mine, against=theirs["machine"]) == {"engine": ("llama.cpp", "transformers")}
    # a summary from before engines were recorded ran on transformers
    assert "engine" not in machine_differences({"machine": {"cpu": "x", "dtype": "float32"}}, against=theirs["machine"])


def test_without_llama_cpp_python_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(BackendNotInstalled, match="pip install 'taskret\\[llamacpp\\]'"):
        make_backend("llamacpp:smollm2-135m")
