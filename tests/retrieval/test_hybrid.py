"""Hybrid first stages: reciprocal-rank and convex fusion, by spec, saved and loaded, on real retrievers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from taskret.formats import format_query
from taskret.ids import IdList
from taskret.retrieval import BM25Retriever, HybridRetriever, RandomRetriever, Retriever, make_retriever
from taskret.retrieval.hybrid import fuse_convex, fuse_rrf, parse_hybrid_spec, reads_instruction, strip_instructions


def test_rrf_adds_reciprocal_ranks():
    fused = fuse_rrf([[3, 1, 2], [1, 4]], rrf_k=60)
    assert fused[1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[3] == pytest.approx(1 / 61) and fused[4] == pytest.approx(1 / 62)
    assert max(fused, key=fused.get) == 1  # found by both beats first in one


def test_convex_normalises_each_component_and_weights_them():
    fused = fuse_convex([[0, 1, 2], [2, 3]], [[10.0, 5.0, 0.0], [0.9, 0.1]], [0.25, 0.75])
    # component 1: 0 -> 1, 1 -> 0.5, 2 -> 0; component 2: 2 -> 1, 3 -> 0; missing rows get 0
    assert fused == pytest.approx({0: 0.25, 1: 0.125, 2: 0.75, 3: 0.0})
    assert fuse_convex([[5], [5]], [[3.0], [np.nan]], [0.5, 0.5])[5] == pytest.approx(1.0)


def test_parse_spec_and_its_errors():
    assert parse_hybrid_spec("bm25+dense:minilm-l6?fusion=convex&weight=0.3") == (
        ["bm25", "dense:minilm-l6"], {"fusion": "convex", "weight": 0.3})
    for bad, message in [("bm25", "two or more"), ("bm25+random?speed=3", "unknown option"),
                         ("bm25+random?depth=x", "needs a int")]:
        with pytest.raises(ValueError, match=message):
            parse_hybrid_spec(bad)
    with pytest.raises(ValueError, match="unknown fusion"):
        make_retriever("hybrid:bm25+random?fusion=max")
    with pytest.raises(ValueError, match="weights must be"):
        HybridRetriever([BM25Retriever(), BM25Retriever()], weights=[0.5])
    # three components take every share in the spec, in order
    three = make_retriever("hybrid:bm25+bm25:output+random?fusion=convex&weights=0.5,0.3,0.2")
    assert three.weights == [0.5, 0.3, 0.2] and three.specs == ["bm25", "bm25:output", "random"]
    with pytest.raises(ValueError, match="comma-separated list of numbers"):
        parse_hybrid_spec("bm25+random?weights=0.5,x")
    with pytest.raises(ValueError, match="weights must be 3"):
        make_retriever("hybrid:bm25+bm25:output+random?fusion=convex&weights=0.5,0.5")
    with pytest.raises(ValueError, match="give weights= for more"):
        make_retriever("hybrid:bm25+bm25:output+random?fusion=convex&weight=0.5")


def test_hybrid_of_two_bm25_fields_finds_what_either_finds(pool_examples):
    by_input = BM25Retriever(field="input").index(pool_examples)
    by_output = BM25Retriever(field="output").index(pool_examples)
    hybrid = make_retriever("hybrid:bm25:input+bm25:output?fusion=rrf&depth=5")
    hybrid.index(pool_examples)  # components see the hybrid's field (input): one text per example
    query = pool_examples[0].input
    top = hybrid.retrieve([query], k=3).ids[0]
    assert top[0] == by_input.retrieve([query], k=1).ids[0][0]
    assert len(set(top)) == 3 and set(top) <= {e.id for e in pool_examples}
    assert by_output.ids == hybrid.ids


def test_bm25_components_read_the_query_without_its_instruction_unless_told(tmp_path, pool_examples, monkeypatch):
    query = "play some music"
    instructed = format_query("set an alarm for seven in the morning and send a text message", query)
    default = make_retriever("hybrid:bm25+bm25:output?fusion=convex&weight=1").index(pool_examples)
    assert default.read_instruction == [False, False]
    bare = default.retrieve([query], k=8)
    assert bare.ids[0][0] == "music"
    assert default.retrieve([instructed], k=8).ids == bare.ids  # the instruction's words never reach BM25
    told = make_retriever("hybrid:bm25+bm25:output?fusion=convex&weight=1&read_instruction=1,0").index(pool_examples)
    assert told.retrieve([instructed], k=8).ids[0][0] != "music"  # read, its words outweigh the query's
    assert told.retrieve([query], k=8).ids == bare.ids  # a bare query passes through unchanged
    assert strip_instructions([" spaced bare query ", instructed]) == [" spaced bare query ", query]
    assert make_retriever("hybrid:bm25+random+dense:x").read_instruction == [False, True, True]
    told.save(tmp_path / "index")
    loaded = Retriever.load(tmp_path / "index")
    assert loaded.read_instruction == [True, False] and loaded.retrieve([instructed], k=8).ids == \
        told.retrieve([instructed], k=8).ids
    with pytest.raises(ValueError, match="comma-separated list of 0 and 1"):
        parse_hybrid_spec("bm25+random?read_instruction=0,2")
    with pytest.raises(ValueError, match=r"one switch per component.*got \[False, True, True\]"):
        make_retriever("hybrid:bm25+random?read_instruction=0,1,1")
    with pytest.raises(ValueError, match="each 0 or 1"):
        HybridRetriever([BM25Retriever(), BM25Retriever()], read_instruction=["0", "1"])
    # an index saved before the option existed loads with the default; a saved BM25 folder counts as BM25
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    del meta["read_instruction"]
    (tmp_path / "index" / "meta.json").write_text(json.dumps(meta))
    assert Retriever.load(tmp_path / "index").read_instruction == [False, False]
    BM25Retriever().index(pool_examples).save(tmp_path / "bm25")
    folder = make_retriever(f"hybrid:{tmp_path / 'bm25'}+random")
    assert folder.read_instruction == [False, True]
    # tuning decides the default from the spec alone: it must agree with the built hybrid's
    assert [reads_instruction(spec) for spec in (str(tmp_path / "bm25"), "random", "bm25:output")] == \
        [False, True, False]
    assert reads_instruction(str(tmp_path / "index")) is True  # a saved hybrid is not BM25
    # a keyword wins over a folder of that name, as in make_retriever; a path no system can hold is no index
    monkeypatch.chdir(tmp_path)
    BM25Retriever().index(pool_examples).save(tmp_path / "random")
    assert reads_instruction("random") is True and make_retriever("random").name == "random"
    assert reads_instruction("dense:" + "x" * 300) is True and reads_instruction("") is True


def test_a_spec_given_twice_is_one_index_read_two_ways(tmp_path, pool_examples):
    # one encoder reading the instructed and the bare query: indexed once, saved once, shared again when loaded
    query = "play some music"
    instructed = format_query("set an alarm for seven in the morning and send a text message", query)
    spec = "hybrid:bm25+bm25?fusion=convex&weight=0.5&read_instruction=1,0"
    hybrid = make_retriever(spec).index(pool_examples)
    assert hybrid.components[0] is hybrid.components[1]
    separate = HybridRetriever([BM25Retriever(), BM25Retriever()], specs=["bm25", "bm25"], fusion="convex",
                               weight=0.5, read_instruction=[True, False]).index(pool_examples)
    fused = hybrid.retrieve([instructed], k=8)
    assert fused.ids == separate.retrieve([instructed], k=8).ids
    assert np.allclose(fused.scores, separate.retrieve([instructed], k=8).scores, equal_nan=True)
    hybrid.save(tmp_path / "index")
    assert (tmp_path / "index" / "component_0").is_dir() and not (tmp_path / "index" / "component_1").exists()
    loaded = Retriever.load(tmp_path / "index")
    assert loaded.components[0] is loaded.components[1] and loaded.retrieve([instructed], k=8).ids == fused.ids
    # two objects that share a spec (or only a name) stay two: each saved, each loaded
    separate.save(tmp_path / "separate")
    assert (tmp_path / "separate" / "component_1").is_dir()
    again = Retriever.load(tmp_path / "separate")
    assert again.components[0] is not again.components[1]
    seeded = HybridRetriever([RandomRetriever(seed=0), RandomRetriever(seed=1)]).index(pool_examples)
    assert seeded.specs == ["random", "random"]
    seeded.save(tmp_path / "seeded")
    reloaded = Retriever.load(tmp_path / "seeded")
    assert [c.seed for c in reloaded.components] == [0, 1]
    assert reloaded.retrieve([query], k=8).ids == seeded.retrieve([query], k=8).ids
    shutil.rmtree(tmp_path / "index" / "component_0")
    with pytest.raises(FileNotFoundError, match="component_0: missing"):
        Retriever.load(tmp_path / "index")


def test_a_saved_hybrid_holds_its_ids_once_and_reads_an_index_that_held_them_thrice(tmp_path, pool_examples):
    hybrid = make_retriever("hybrid:bm25+bm25:output").index(pool_examples)
    hybrid.save(tmp_path / "index")
    assert IdList.load(tmp_path / "index") == [e.id for e in pool_examples]
    for component in ("component_0", "component_1"):  # a component's ids are its hybrid's
        assert "ids" not in json.loads((tmp_path / "index" / component / "meta.json").read_text())
        assert not IdList.saved_in(tmp_path / "index" / component)
    query = pool_examples[0].input
    expected = hybrid.retrieve([query], k=5).ids
    assert Retriever.load(tmp_path / "index").retrieve([query], k=5).ids == expected
    with pytest.raises(ValueError, match="component_0/meta.json: holds no ids"):
        Retriever.load(tmp_path / "index" / "component_0")
    for component in ("component_0", "component_1"):  # an index written before: each component with its ids
        path = tmp_path / "index" / component / "meta.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "ids": list(hybrid.ids)}, indent=2))
    assert Retriever.load(tmp_path / "index").retrieve([query], k=5).ids == expected


@pytest.mark.integration
def test_bm25_plus_minilm_saved_and_loaded_gives_the_same_ranking(tmp_path, pool_examples):
    hybrid = make_retriever("hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4&depth=10").index(pool_examples)
    queries = [e.input for e in pool_examples[:4]]
    before = hybrid.retrieve(queries, k=5, exclude=[e.id for e in pool_examples[:4]])
    hybrid.save(tmp_path / "index")
    loaded = Retriever.load(tmp_path / "index")
    assert isinstance(loaded, HybridRetriever) and loaded.weights == pytest.approx([0.4, 0.6])
    after = loaded.retrieve(queries, k=5, exclude=[e.id for e in pool_examples[:4]])
    assert after.ids == before.ids and np.allclose(after.scores, before.scores, equal_nan=True)
    assert all(e.id not in ids for e, ids in zip(pool_examples[:4], after.ids))


def test_fuse_results_interpolates_a_reranking_with_its_first_stage():
    from taskret.retrieval.base import RetrievalResult
    from taskret.retrieval.hybrid import fuse_results

    first = RetrievalResult([["a", "b", "c"]], np.array([[3.0, 2.0, 1.0]], dtype=np.float32))
    reranked = RetrievalResult([["c", "a", "b"]], np.array([[9.0, 5.0, 1.0]], dtype=np.float32))
    assert fuse_results([first, reranked], [1.0, 0.0]).ids == [["a", "b", "c"]]
    assert fuse_results([first, reranked], [0.0, 1.0]).ids == [["c", "a", "b"]]
    mixed = fuse_results([first, reranked], [0.5, 0.5])  # a: (1 + .5)/2, c: (0 + 1)/2, b: (.5 + 0)/2
    assert mixed.ids == [["a", "c", "b"]] and mixed.scores[0, 0] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="2 rankings for 1 weights"):
        fuse_results([first, reranked], [1.0])


def test_fuse_results_keeps_the_union_of_rankings_that_differ():
    from taskret.retrieval.base import RetrievalResult
    from taskret.retrieval.hybrid import fuse_results

    first = RetrievalResult([["a", "b"]], np.array([[2.0, 1.0]], dtype=np.float32))
    second = RetrievalResult([["c", "d"]], np.array([[2.0, 1.0]], dtype=np.float32))
    fused = fuse_results([first, second], [0.6, 0.4])
    assert fused.ids == [["a", "c", "b", "d"]] and fused.scores.shape == (1, 4)


def test_fuse_results_by_reciprocal_rank_ignores_score_scales():
    from taskret.retrieval.base import RetrievalResult
    from taskret.retrieval.hybrid import fuse_results

    # b is second in both lists; a first in one and absent from the other: 2/62 > 1/61
    first = RetrievalResult([["a", "b", "c"]], np.array([[900.0, 2.0, 1.0]], dtype=np.float32))
    second = RetrievalResult([["c", "b", "d"]], np.array([[0.3, 0.2, 0.1]], dtype=np.float32))
    fused = fuse_results([first, second], fusion="rrf")
    assert fused.ids == [["c", "b", "a", "d"]]  # c: 1/61 + 1/63, b: 2/62, a: 1/61, d: 1/63
    assert fused.scores[0, 1] == pytest.approx(2 / 62)
    with pytest.raises(ValueError, match="no weights"):
        fuse_results([first, second], [0.5, 0.5], fusion="rrf")
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse_results([first, second], [0.5, 0.5], fusion="max")


def test_a_retriever_says_whether_it_reads_the_instruction(tmp_path, pool_examples):
    from taskret.retrieval.index import load_index, save_index
    from taskret.tart.search import instruction_read, search_index

    assert not BM25Retriever().reads_instruction and make_retriever("bm25?read_instruction=1").reads_instruction
    assert not RandomRetriever().reads_instruction
    both_bm25 = make_retriever("hybrid:bm25+bm25:output?read_instruction=0,0")
    assert not both_bm25.reads_instruction
    assert make_retriever("hybrid:bm25+bm25:output?read_instruction=0,1").reads_instruction
    save_index(tmp_path / "index", both_bm25.index(pool_examples), pool_examples, task="pool")
    index = load_index(tmp_path / "index")
    assert not instruction_read(index) and instruction_read(index, reranker="upr:tiny")  # a reranker reads it
    texts, result = search_index(index, ["play jazz"], instruction="Find a music command", top_k=2)
    assert texts == ["play jazz"]  # what was searched: the query alone
    assert result.ids == search_index(index, ["play jazz"], top_k=2)[1].ids
