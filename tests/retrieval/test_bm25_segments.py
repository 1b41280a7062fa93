"""BM25 built in segments on disk (taskret.retrieval.bm25_segments): the same files as the in-memory build, whatever
the segment and merge sizes; through BM25Retriever.index_stream with a shard folder, saved and loaded as any BM25
index; texts without terms refused with the retriever's own error."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from taskret.retrieval import Retriever
from taskret.retrieval.bm25 import BM25Retriever
from taskret.retrieval.bm25_segments import build_segmented
from taskret.retrieval.shards import ShardPlan

ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(0)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words = list(dict.fromkeys("".join(rng.sample(syllables, rng.randint(1, 3))) + rng.choice(["", "s", "ing", "ed"])
                               for _ in range(3000)))
    common = words[:40] + ["running", "runs", "run"]  # one stem from three words: stemmed as bm25s stems
    out = [" ".join(rng.choice(common if rng.random() < 0.3 else words) for _ in range(rng.randint(1, 30)))
           for _ in range(3000)]
    out[5], out[6] = "", "the and of it"  # no terms: a document BM25 never finds, as in bm25s's build
    return out


@pytest.fixture(scope="module")
def in_memory(texts, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bm25") / "reference"
    retriever = BM25Retriever().index_stream([f"d{i}" for i in range(len(texts))], lambda: iter(texts))
    retriever._bm25.save(folder)
    return retriever, folder


@pytest.mark.parametrize("segment_docs,merge_pairs", [(700, 5_000), (3000, 10**9), (1, 50)])
def test_the_segmented_index_is_the_in_memory_one_file_for_file(texts, in_memory, tmp_path, segment_docs,
                                                                 merge_pairs):
    _, reference = in_memory
    if segment_docs == 1:  # a segment a document, a merge range of a few terms: the smallest pieces
        texts = texts[:300]
        reference = tmp_path / "reference"
        BM25Retriever().index_stream([f"d{i}" for i in range(300)], lambda: iter(texts))._bm25.save(reference)
    info = build_segmented(iter(texts), tmp_path / "segmented", tmp_path / "work", segment_docs=segment_docs,
                           merge_pairs=merge_pairs)
    assert info["num_docs"] == len(texts) and info["segments"] == -(-len(texts) // segment_docs)
    for name in ARRAYS:
        expected, got = np.load(reference / name), np.load(tmp_path / "segmented" / name)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), name
    for name in ("vocab.index.json", "params.index.json"):
        assert json.loads((tmp_path / "segmented" / name).read_text()) == json.loads((reference / name).read_text())
    assert not (tmp_path / "work").exists()  # the segments are gone


def test_a_streamed_build_with_a_shard_folder_runs_in_segments_and_saves_and_loads_as_any(texts, in_memory, tmp_path):
    plain, _ = in_memory
    ids = [f"d{i}" for i in range(len(texts))]
    shards = tmp_path / "out" / ".shards"
    segmented = BM25Retriever().index_stream(ids, lambda: iter(texts), ShardPlan(shards, "corpus"))
    queries = ["running bada", texts[100], "nothing known here zzzz", texts[2999]]
    expected = plain.retrieve(queries, k=10)
    found = segmented.retrieve(queries, k=10)
    assert found.ids[:2] == expected.ids[:2] and found.ids[3] == expected.ids[3]
    np.testing.assert_array_equal(found.scores, expected.scores)
    segmented.save(tmp_path / "index")
    assert sorted(p.name for p in (tmp_path / "index" / "bm25s").iterdir()) == sorted(
        [*ARRAYS, "vocab.index.json", "params.index.json"])
    assert not any((shards / "bm25" / "bm25s").iterdir())  # moved into the index, not copied
    for mmap in (False, True):
        loaded = Retriever.load(tmp_path / "index", mmap=mmap)
        np.testing.assert_array_equal(loaded.retrieve(queries, k=10).scores, expected.scores)


def test_texts_without_terms_get_the_retrievers_error(tmp_path):
    with pytest.raises(ValueError, match="bm25: the 2 indexed texts have no terms .* \\(e.g. 'the and'\\)"):
        BM25Retriever().index_stream(["a", "b"], lambda: iter(["the and", "of it"]), ShardPlan(tmp_path, "c"))
    with pytest.raises(ValueError, match="3 ids but 2 texts"):
        BM25Retriever().index_stream(["a", "b", "c"], lambda: iter(["one run", "two runs"]), ShardPlan(tmp_path, "c"))


def test_positions_read_in_chunks_are_searchsorteds(tmp_path):
    from taskret.retrieval.bm25_segments import _NpyFile

    values = np.sort(np.random.default_rng(0).integers(0, 50, 1000)).astype(np.int32)  # many repeated terms
    np.save(tmp_path / "terms.npy", values)
    bounds = np.array([0, 3, 3, 17, 49, 50, 60])
    handle = _NpyFile(tmp_path / "terms.npy")
    try:
        for chunk in (1, 7, 333, 1000, 5000):  # chunk edges inside runs of one term, and one chunk for all
            np.testing.assert_array_equal(handle.positions(bounds, chunk=chunk), np.searchsorted(values, bounds))
    finally:
        handle.close()
