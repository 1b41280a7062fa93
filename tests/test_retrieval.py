"""Retrievers: random, BM25 and dense (real MiniLM), exclude-self, persistence and its failure modes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taskret.data import Example
from taskret.retrieval import (
    BM25Retriever,
    DenseRetriever,
    RandomRetriever,
    Retriever,
    SBERTRetriever,
    make_retriever,
)

QUERIES = ["will it rain in paris tomorrow, what is the forecast", "play jazz by miles davis",
           "start a twenty minute timer"]


def _big_pool(n: int = 40) -> list[Example]:
    return [Example(f"e{i}", f"example number {i} about topic {i % 7}", f"OUT_{i}") for i in range(n)]


# --- random ---------------------------------------------------------------------------------------


def test_random_is_deterministic_per_seed_and_query():
    pool = _big_pool()
    a = RandomRetriever(seed=1).index(pool).retrieve(QUERIES, k=10)
    b = RandomRetriever(seed=1).index(pool).retrieve(QUERIES, k=10)
    c = RandomRetriever(seed=2).index(pool).retrieve(QUERIES, k=10)
    assert a.ids == b.ids
    assert all(x != y for x, y in zip(a.ids, c.ids))
    assert a.ids[0] != a.ids[1]  # different queries draw different examples
    ids = {e.id for e in pool}
    for row in a.ids:
        assert len(row) == 10 and len(set(row)) == 10 and set(row) <= ids


def test_random_draw_does_not_depend_on_the_other_queries_in_the_batch():
    retriever = RandomRetriever(seed=5).index(_big_pool())
    together = retriever.retrieve(QUERIES, k=6).ids
    alone = [retriever.retrieve([q], k=6).ids[0] for q in QUERIES]
    assert together == alone


# --- BM25 -----------------------------------------------------------------------------------------


def test_bm25_finds_the_obvious_match_first(pool_examples):
    result = BM25Retriever().index(pool_examples).retrieve(QUERIES, k=3)
    assert [row[0] for row in result.ids] == ["weather", "music", "timer"]
    assert result.scores.shape == (3, 3)
    assert np.all(np.diff(result.scores, axis=1) <= 0)  # best first
    assert result.scores[0, 0] > 0


def test_bm25_over_outputs_and_both(pool_examples):
    # "CREATE_REMINDER" appears only in an output; "groceries" in both the input and the output.
    query = ["create_reminder"]
    assert BM25Retriever(field="output").index(pool_examples).retrieve(query, k=1).ids[0] == ["reminder"]
    assert BM25Retriever(field="both").index(pool_examples).retrieve(query, k=1).ids[0] == ["reminder"]
    assert BM25Retriever(field="input").index(pool_examples).retrieve(query, k=1).scores[0, 0] == 0
    # Words of an input are found through "both" but not through "output".
    query = ["miles davis tune"]
    assert BM25Retriever(field="both").index(pool_examples).retrieve(query, k=1).ids[0] == ["music"]
    output_only = BM25Retriever(field="output").index(pool_examples).retrieve(query, k=2)
    assert output_only.ids[0][0] == "music" and output_only.scores[0, 0] > 0  # "davis" is in its output
    assert output_only.scores[0, 1] == 0


def test_bm25_rejects_unknown_field():
    with pytest.raises(ValueError, match="unknown field 'question'"):
        BM25Retriever(field="question")


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: RandomRetriever(seed=3)],
                         ids=["bm25", "random"])
def test_exclude_self_removes_own_id_and_keeps_k(pool_examples, make):
    retriever = make().index(pool_examples)
    queries = [e.input for e in pool_examples]
    plain = retriever.retrieve(queries, k=3)
    excluded = retriever.retrieve(queries, k=3, exclude=[e.id for e in pool_examples])
    for example, row in zip(pool_examples, excluded.ids):
        assert example.id not in row
        assert len(row) == 3 and len(set(row)) == 3
    assert not np.isnan(excluded.scores).any()
    if isinstance(retriever, BM25Retriever):
        assert [row[0] for row in plain.ids] == [e.id for e in pool_examples]  # each finds itself
        assert [row[:2] for row in excluded.ids] == [row[1:3] for row in plain.ids]


def test_exclude_none_entries_exclude_nothing(pool_examples):
    retriever = BM25Retriever().index(pool_examples)
    result = retriever.retrieve([pool_examples[0].input], k=2, exclude=[None])
    assert result.ids[0][0] == pool_examples[0].id


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: RandomRetriever()], ids=["bm25", "random"])
def test_k_larger_than_the_pool(pool_examples, make):
    retriever = make().index(pool_examples)
    result = retriever.retrieve(QUERIES[:2], k=50)
    assert all(sorted(row) == sorted(e.id for e in pool_examples) for row in result.ids)
    assert result.scores.shape == (2, 50)
    assert np.isnan(result.scores[:, len(pool_examples):]).all()
    excluded = retriever.retrieve([pool_examples[0].input], k=50, exclude=[pool_examples[0].id])
    assert len(excluded.ids[0]) == len(pool_examples) - 1 and pool_examples[0].id not in excluded.ids[0]


def test_retrieve_needs_an_index_and_positive_k(pool_examples):
    with pytest.raises(RuntimeError, match="no index"):
        BM25Retriever().retrieve(["x"], k=1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        BM25Retriever().index(pool_examples).retrieve(["x"], k=0)


# --- dense (real MiniLM) --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sbert(pool_examples):
    return SBERTRetriever(device="cpu").index(pool_examples)


def test_sbert_finds_paraphrases(sbert):
    # No content word shared with the matching example.
    queries = ["is it going to be sunny or rainy", "ring mum", "what happened in soccer today"]
    result = sbert.retrieve(queries, k=2)
    assert [row[0] for row in result.ids] == ["weather", "call", "news"]
    assert np.all(result.scores[:, 0] > result.scores[:, 1])
    assert np.all(result.scores <= 1.0001)  # cosine similarities of normalised vectors


def test_sbert_exclude_self(sbert, pool_examples):
    queries = [e.input for e in pool_examples]
    plain = sbert.retrieve(queries, k=2)
    assert [row[0] for row in plain.ids] == [e.id for e in pool_examples]
    excluded = sbert.retrieve(queries, k=2, exclude=[e.id for e in pool_examples])
    assert [row[0] for row in excluded.ids] == [row[1] for row in plain.ids]
    assert all(len(row) == 2 for row in excluded.ids)


def test_dense_encode_is_normalised(sbert):
    vectors = sbert.encode(["hello world", "set an alarm"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


# --- persistence ----------------------------------------------------------------------------------


def _assert_same(a, b):
    assert a.ids == b.ids
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: BM25Retriever(field="both", k1=1.2, b=0.5),
                                  lambda: RandomRetriever(seed=9)], ids=["bm25", "bm25-both", "random"])
def test_save_and_load_give_identical_results(tmp_path, pool_examples, make):
    retriever = make().index(pool_examples)
    retriever.save(tmp_path / "index")
    loaded = Retriever.load(tmp_path / "index")
    assert type(loaded) is type(retriever)
    assert loaded.config() == retriever.config()
    assert loaded.ids == retriever.ids
    _assert_same(retriever.retrieve(QUERIES, k=4), loaded.retrieve(QUERIES, k=4))
    exclude = [e.id for e in pool_examples[:3]]
    _assert_same(retriever.retrieve(QUERIES, k=4, exclude=exclude), loaded.retrieve(QUERIES, k=4, exclude=exclude))
    meta = json.loads((tmp_path / "index" / "meta.json").read_text(encoding="utf-8"))
    assert meta["retriever"] == retriever.name and meta["ids"] == retriever.ids


def test_sbert_save_and_load_give_identical_results(tmp_path, sbert):
    sbert.save(tmp_path / "sbert")
    loaded = Retriever.load(tmp_path / "sbert")
    assert isinstance(loaded, SBERTRetriever)
    assert loaded.encoder_name == "minilm-l6" and loaded.ids == sbert.ids
    _assert_same(sbert.retrieve(QUERIES, k=5), loaded.retrieve(QUERIES, k=5))
    assert SBERTRetriever.load(tmp_path / "sbert").ids == sbert.ids  # loading through the subclass


def test_load_without_meta_json_fails_clearly(tmp_path, pool_examples):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        Retriever.load(tmp_path / "empty")
    # An interrupted save (index written, meta.json not yet) is refused the same way.
    BM25Retriever().index(pool_examples).save(tmp_path / "partial")
    (tmp_path / "partial" / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match="meta.json"):
        Retriever.load(tmp_path / "partial")


def test_load_refuses_an_unknown_retriever_or_the_wrong_class(tmp_path, pool_examples):
    RandomRetriever().index(pool_examples).save(tmp_path / "random")
    with pytest.raises(ValueError, match="holds a 'random' index, not bm25"):
        BM25Retriever.load(tmp_path / "random")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "meta.json").write_text(json.dumps({"retriever": "colbert", "ids": ["a"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown retriever 'colbert'"):
        Retriever.load(tmp_path / "odd")


def test_dense_index_with_a_different_number_of_vectors_is_refused(tmp_path, sbert, pool_examples):
    sbert.save(tmp_path / "dense")
    meta_path = tmp_path / "dense" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["ids"] = meta["ids"][:-1]
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(ValueError, match=f"holds {len(pool_examples)} vectors but meta.json lists "
                                         f"{len(pool_examples) - 1} ids"):
        Retriever.load(tmp_path / "dense")


def test_dense_index_without_index_file_is_refused(tmp_path, sbert):
    sbert.save(tmp_path / "dense")
    (tmp_path / "dense" / "index.faiss").unlink()
    with pytest.raises(FileNotFoundError, match="index.faiss"):
        Retriever.load(tmp_path / "dense")


# --- make_retriever -------------------------------------------------------------------------------


def test_make_retriever_specs(tmp_path, pool_examples):
    assert isinstance(make_retriever("random", seed=4), RandomRetriever)
    assert make_retriever("random", seed=4).seed == 4
    assert make_retriever("bm25").field == "input"
    assert make_retriever("bm25:output").field == "output"
    assert make_retriever("bm25:both").field == "both"
    sbert = make_retriever("sbert")
    assert isinstance(sbert, SBERTRetriever) and sbert.encoder_name == "minilm-l6"
    dense = make_retriever("dense:/some/encoder")
    assert type(dense) is DenseRetriever and dense.encoder_name == "/some/encoder"
    BM25Retriever(field="output").index(pool_examples).save(tmp_path / "saved")
    loaded = make_retriever(str(tmp_path / "saved"))
    assert isinstance(loaded, BM25Retriever) and loaded.field == "output" and loaded.ids == [e.id for e in pool_examples]


@pytest.mark.parametrize("spec", ["colbert", "bm26", "BM25", "/no/such/index"])
def test_make_retriever_rejects_unknown_names(spec):
    with pytest.raises(ValueError, match="unknown retriever"):
        make_retriever(spec)


def test_make_retriever_on_a_folder_that_is_not_an_index(tmp_path):
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        make_retriever(str(tmp_path))


def test_make_retriever_rejects_unknown_bm25_field():
    with pytest.raises(ValueError, match="unknown field"):
        make_retriever("bm25:title")
