"""Compressed dense search (taskret.retrieval.ivfpq): FAISS IVF-PQ whose candidates are re-ranked exactly from the
full vectors on disk; settings by size; a build that writes its vectors to a file and trains on a sample; the index
saved, loaded memory-mapped, and searched as it was built."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from taskret.retrieval import DenseRetriever, Retriever
from taskret.retrieval.ivfpq import (
    MIN_VECTORS,
    VECTORS_FILE,
    VectorFile,
    VectorRows,
    build_ivfpq,
    exact_top,
    ivfpq_recall_at_10,
    open_vectors,
    search_reranked,
    set_nprobe,
    settings_for,
    use_hnsw_quantizer,
)
from taskret.retrieval.shards import ShardPlan


def _clustered(n: int, dim: int = 32, clusters: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim)).astype(np.float32)
    vectors = centers[rng.integers(0, clusters, n)] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory):
    vectors = _clustered(6_000)
    written = VectorFile(tmp_path_factory.mktemp("ivfpq") / VECTORS_FILE, len(vectors), vectors.shape[1])
    for start in range(0, len(vectors), 2_500):  # as shards come from the encoder
        written.write(vectors[start:start + 2_500])
    mapped = written.close()
    settings = settings_for(len(mapped), mapped.shape[1])
    return mapped, settings, build_ivfpq(mapped, settings)


def test_settings_follow_the_pool_size():
    million = settings_for(1_000_000, 384)
    assert million.nlist == 4096 and million.m == 48 and million.nprobe == 256 and million.rerank == 100
    ten_million = settings_for(10_000_000, 384)  # what the sweep chose at each size (LARGE_FROM)
    assert ten_million.nlist == 16384 and ten_million.nprobe == 128 and ten_million.rerank == 400
    small = settings_for(MIN_VECTORS, 384)
    assert small.nlist * 39 <= MIN_VECTORS and small.nprobe == 16  # every list has vectors enough to train
    assert settings_for(50_000, 768).m == 96 and settings_for(50_000, 100).m == 10  # m divides the dimension
    asked = settings_for(50_000, 384, nprobe=7, rerank=300)
    assert (asked.nprobe, asked.rerank) == (7, 300)


def test_the_vectors_file_is_whole_or_absent(tmp_path):
    vectors = _clustered(100)
    written = VectorFile(tmp_path / VECTORS_FILE, 100, vectors.shape[1])
    written.write(vectors[:60])
    maps = Path("/proc/self/maps")  # Linux: written through a handle, never mapped (a mapping keeps its pages)
    assert not maps.exists() or written.partial.name not in maps.read_text()
    with pytest.raises(ValueError, match="60 of 100 vectors written"):
        written.close()
    written.discard()
    assert list(tmp_path.iterdir()) == []
    written = VectorFile(tmp_path / VECTORS_FILE, 100, vectors.shape[1])
    with pytest.raises(ValueError, match="made for 100"):
        written.write(np.vstack([vectors, vectors[:1]]))
    written.write(vectors)
    np.testing.assert_array_equal(written.close()[:], vectors)
    assert [p.name for p in tmp_path.iterdir()] == [VECTORS_FILE]


def test_the_exact_re_ranking_buys_back_what_the_codes_lose(on_disk):
    mapped, settings, index = on_disk
    assert isinstance(index, faiss.IndexIVFPQ) and index.ntotal == len(mapped) and index.nprobe == settings.nprobe
    reranked = ivfpq_recall_at_10(index, mapped, settings.rerank)
    codes_only = ivfpq_recall_at_10(index, mapped, 11)  # the index's own top 11, by its quantized scores
    assert reranked > codes_only + 0.2
    index.nprobe = settings.nlist  # every list visited: only the codes' ranking of the candidates is approximate
    try:
        assert ivfpq_recall_at_10(index, mapped, 400) >= 0.99
    finally:
        index.nprobe = settings.nprobe


def test_re_ranked_scores_are_exact_inner_products(on_disk):
    mapped, settings, index = on_disk
    queries = _clustered(5, seed=1)
    rows, scores = search_reranked(index, mapped, queries, 10, settings.rerank)
    for query, found, got in zip(queries, rows, scores):
        np.testing.assert_allclose(got, mapped[found] @ query, rtol=1e-6)
        assert got == sorted(got, reverse=True) and len(set(found)) == 10
    exact = exact_top(mapped, queries, 10, chunk=1_000)  # chunked exact search equals a whole one
    np.testing.assert_array_equal(exact, np.argsort(-(queries @ mapped[:].T), axis=1, kind="stable")[:, :10])


def test_an_hnsw_quantizer_keeps_the_lists_and_their_recall_and_saves_with_the_index(tmp_path):
    vectors = _clustered(8_000, seed=4)
    settings = settings_for(len(vectors), vectors.shape[1])
    index = build_ivfpq(vectors, settings)
    queries = _clustered(40, seed=5)
    flat_rows, _ = search_reranked(index, vectors, queries, 10, settings.rerank)
    sizes = [index.invlists.list_size(i) for i in range(settings.nlist)]
    use_hnsw_quantizer(index)
    use_hnsw_quantizer(index)  # once is enough: a graph quantizer stays
    graph = faiss.downcast_index(index.quantizer)
    assert isinstance(graph, faiss.IndexHNSWFlat) and graph.ntotal == settings.nlist
    assert graph.hnsw.efSearch == 2 * settings.nprobe and index.nprobe == settings.nprobe
    assert [index.invlists.list_size(i) for i in range(settings.nlist)] == sizes  # every vector where it was
    hnsw_rows, _ = search_reranked(index, vectors, queries, 10, settings.rerank)
    exact = exact_top(vectors, queries, 10)
    recall = [np.mean([len(set(r) & set(e.tolist())) / 10 for r, e in zip(rows, exact)])
              for rows in (flat_rows, hnsw_rows)]
    assert recall[1] >= recall[0] - 0.02
    faiss.write_index(index, str(tmp_path / "index.faiss"))
    loaded = faiss.read_index(str(tmp_path / "index.faiss"), faiss.IO_FLAG_MMAP)
    set_nprobe(loaded, 5)  # a graph quantizer searches wider as nprobe grows
    assert loaded.nprobe == 5 and faiss.downcast_index(loaded.quantizer).hnsw.efSearch == 16
    set_nprobe(loaded, settings.nprobe)
    assert search_reranked(loaded, vectors, queries, 10, settings.rerank)[0] == hnsw_rows


def test_exact_top_settles_ties_by_row_across_chunks():
    # copies of a few vectors scattered through the rows: the tie at rank k spans chunks, and a partition alone would
    # keep whichever copies it met; the lower rows must win, as in one stable sort
    rng = np.random.default_rng(3)
    originals = rng.integers(-3, 4, (6, 8)).astype(np.float32)  # small integers: exact sums in any order
    vectors = originals[rng.integers(0, 6, 700)]
    queries = rng.integers(-3, 4, (9, 8)).astype(np.float32)
    for k in (1, 7, 40):
        expected = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(exact_top(vectors, queries, k, chunk=64), expected)
        np.testing.assert_array_equal(exact_top(vectors, queries, k, chunk=5), expected)


def test_rows_read_from_the_file_are_the_mapped_rows_and_the_process_keeps_none_mapped(tmp_path):
    import pickle

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((500, 24)).astype(np.float32)
    np.save(tmp_path / VECTORS_FILE, vectors)
    rows = open_vectors(tmp_path / VECTORS_FILE, random_reads=True)
    assert isinstance(rows, VectorRows) and len(rows) == 500 and rows.shape == (500, 24)
    np.testing.assert_array_equal(rows[[3, 499, 0, 3]], vectors[[3, 499, 0, 3]])
    np.testing.assert_array_equal(rows[np.array([7, 8])], vectors[[7, 8]])
    np.testing.assert_array_equal(rows[0], vectors[0])
    np.testing.assert_array_equal(rows[-1], vectors[-1])
    for run in (slice(10, 20), slice(None), slice(495, 900), slice(5, 3), slice(1, 9, 3)):  # a run: one read
        np.testing.assert_array_equal(rows[run], vectors[run])
    assert rows[[]].shape == (0, 24)
    with pytest.raises(IndexError):
        rows[[500]]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(rows))[[1, 2]], vectors[[1, 2]])  # reopened by path
    maps = Path("/proc/self/maps")  # Linux: the process's mappings
    assert not maps.exists() or str(tmp_path / VECTORS_FILE) not in maps.read_text()  # read, not mapped
    assert isinstance(open_vectors(tmp_path / VECTORS_FILE), np.memmap)  # in order (a build, exact search): mapped
    np.save(tmp_path / "ints.npy", np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="not a 2-D float32 array"):
        VectorRows(tmp_path / "ints.npy")


def test_too_few_vectors_are_refused_with_what_to_use():
    with pytest.raises(ValueError, match="use index_type 'flat' or 'hnsw'"):
        build_ivfpq(_clustered(100), settings_for(100, 64))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    words = ["alarm", "weather", "music", "timer", "river", "mountain", "train", "recipe", "football", "poem"]
    return [f"{words[i % 10]} note {i} about {words[(i // 10) % 10]} and {words[(i // 100) % 10]}"
            for i in range(MIN_VECTORS + 500)]


def test_a_dense_retriever_builds_saves_and_loads_an_ivfpq_index_from_its_vectors_file(tmp_path, tiny_bert_dir,
                                                                                       texts):
    ids = [f"d{i}" for i in range(len(texts))]
    shards = tmp_path / "out" / ".shards"
    built = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="ivfpq", rerank=50)
    built.index_stream(ids, lambda: iter(texts), ShardPlan(shards, "corpus", shard_size=1_000))
    assert built.index_choice == "asked for" and built.rerank == 50 and built.nlist == settings_for(len(texts), 32).nlist
    assert 0 < built.recall_at_10 <= 1  # measured as built (a random tiny encoder: its value says little)
    queries = texts[:20]
    before = built.retrieve(queries, k=5)

    built.save(tmp_path / "index")
    assert (tmp_path / "index" / VECTORS_FILE).is_file()
    assert not list((shards / "ivfpq").iterdir())  # the build's file was moved, not copied
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    assert meta["index_type"] == "ivfpq" and meta["rerank"] == 50 and meta["pq_m"] == 4 and meta["nprobe"] >= 16
    for mmap in (False, True):
        loaded = Retriever.load(tmp_path / "index", mmap=mmap)
        assert loaded.index_type == "ivfpq" and loaded.retrieve(queries, k=5).ids == before.ids
        np.testing.assert_allclose(loaded.retrieve(queries, k=5).scores, before.scores, rtol=1e-5)
    loaded.save(tmp_path / "copy")  # a loaded index saved elsewhere copies its vectors and keeps its own
    assert (tmp_path / "index" / VECTORS_FILE).is_file() and (tmp_path / "copy" / VECTORS_FILE).is_file()

    (tmp_path / "index" / VECTORS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="vectors.npy, are missing"):
        Retriever.load(tmp_path / "index")


def test_a_build_stopped_while_encoding_leaves_no_vectors_file(tmp_path, tiny_bert_dir, texts):
    ids = [f"d{i}" for i in range(len(texts))]

    def stops():
        for number, text in enumerate(texts):
            if number == 2_500:
                raise KeyboardInterrupt
            yield text

    shards = tmp_path / ".shards"
    with pytest.raises(KeyboardInterrupt):
        DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="ivfpq").index_stream(
            ids, stops, ShardPlan(shards, "corpus", shard_size=1_000))
    assert [p.name for p in (shards / "ivfpq").iterdir()] == []
    assert sorted(p.name for p in shards.glob("0*.npy")) == ["00000.npy", "00001.npy"]  # what resumes
