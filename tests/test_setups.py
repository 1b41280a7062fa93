"""Named setups: resolved wherever a retriever spec is, each naming the full spec it stands for."""

from __future__ import annotations

import pytest

from taskret.retrieval import BM25Retriever, HybridRetriever, make_retriever
from taskret.setups import SETUPS, resolve_setup, setup_names


def test_every_setup_states_its_full_spec_and_a_plain_spec_is_no_setup():
    for setup in SETUPS.values():
        assert setup.retriever in setup.spec and setup.summary
        assert setup.name in setup.describe() and setup.spec in setup.describe()
    assert resolve_setup("bm25") is None and resolve_setup("hybrid:bm25+dense:minilm-l6") is None
    rerank = SETUPS["docs-rerank"]
    assert "--rerank upr:smollm2-135m --rerank-depth 10 --rerank-weight 0.1" in rerank.spec
    assert rerank.search_settings() == {"setup": "docs-rerank", "rerank": "upr:smollm2-135m", "rerank_depth": 10,
                                        "rerank_weight": 0.1}
    assert SETUPS["docs-fast"].search_settings()["rerank"] is None


def test_a_setup_with_an_argument_takes_it_and_refuses_it_elsewhere(tmp_path):
    epr = resolve_setup(f"examples-epr:{tmp_path}")
    assert epr.retriever == f"epr:{tmp_path}" and epr.kind == "examples"
    with pytest.raises(ValueError, match="needs a folder"):
        resolve_setup("examples-epr")
    with pytest.raises(ValueError, match="takes no argument"):
        resolve_setup("docs-fast:x")
    assert "examples-epr:DIR" in setup_names()


def test_make_retriever_builds_a_first_stage_setup_and_refuses_one_with_a_reranker():
    fast = make_retriever("docs-fast")
    assert isinstance(fast, HybridRetriever)
    assert fast.weights == [0.4, 0.6] and fast.fusion == "convex"
    assert fast.read_instruction == [False, False]  # the instruction is for the reranker only
    assert isinstance(make_retriever("examples-bm25"), BM25Retriever)
    with pytest.raises(ValueError, match="first stage and a reranker.*load_reranker\\('upr:smollm2-135m'\\)"):
        make_retriever("docs-rerank")
    with pytest.raises(ValueError, match="named setup \\(docs-fast, docs-rerank"):
        make_retriever("docs-fastest")
