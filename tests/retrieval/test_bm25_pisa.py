"""BM25 on PISA (``backend="pisa"``, taskret.retrieval.bm25_pisa): the top k found by PISA's MaxScore over bm25s's own
scores is bm25s's ranking itself (ids and float scores), also where quantization leaves near-ties to search deeper;
its index is saved beside bm25s's, made for an index saved without it, and carries a shard's corpus statistics."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from taskret.retrieval import Retriever
from taskret.retrieval.bm25 import BM25Retriever

pytest.importorskip("pyterrier_pisa", reason="the pisa backend needs pyterrier-pisa (the engines extra)")

from taskret.retrieval import bm25_pisa  # noqa: E402


def _corpus(n: int = 3000, seed: int = 0) -> tuple[list[str], list[str]]:
    """Seeded texts over a Zipf-like vocabulary (common and rare words), every tenth a word-for-word copy of an
    earlier one (ties); ids d0, d1, ... in corpus order."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(words))]
    texts: list[str] = []
    for i in range(n):
        if i % 10 == 9:
            texts.append(texts[rng.randrange(len(texts))])
        else:
            texts.append(" ".join(rng.choices(words, weights, k=rng.randint(3, 25))))
    return [f"d{i}" for i in range(n)], texts


def _queries(texts: list[str], n: int = 150, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    picked = [" ".join(rng.sample(texts[rng.randrange(len(texts))].split(), 2)) for _ in range(n)]
    # a repeated word (counted twice, as bm25s counts it), a word no document has, one rare word (fewer than k
    # matching documents: bm25s fills the rest), no word at all
    return picked + ["w1 w1 w7", "zzz unknown", "w399", "w398 zzz", ""]


@pytest.fixture(scope="module")
def corpus():
    return _corpus()


def _same(got, expected) -> None:
    assert got.ids == expected.ids
    np.testing.assert_array_equal(got.scores, expected.scores)


def test_pisa_ranks_exactly_as_bm25s(corpus):
    ids, texts = corpus
    queries = _queries(texts)
    on_numpy = BM25Retriever(backend="numpy").index_texts(ids, texts)
    on_pisa = BM25Retriever(backend="pisa").index_texts(ids, texts)
    for k in (1, 10, 40):
        _same(on_pisa.retrieve(queries, k=k), on_numpy.retrieve(queries, k=k))
    assert on_pisa._pisa is not None  # PISA answered (not bm25s for every query)


def test_an_index_in_parts_ranks_as_one(corpus, monkeypatch, tmp_path):
    """Parts of a few hundred postings (every part's PISA index its own, searched and merged) give bm25s's ranking,
    also at 3 bits, where the merged candidates' lowest sum must bound every part's left-out documents."""
    ids, texts = corpus
    queries = _queries(texts)
    expected = BM25Retriever(backend="numpy").index_texts(ids, texts)
    monkeypatch.setattr(bm25_pisa, "PART_POSTINGS", 4000)
    in_parts = BM25Retriever(backend="pisa").index_texts(ids, texts)
    in_parts.save(tmp_path / "index")
    meta = json.loads((tmp_path / "index" / bm25_pisa.FOLDER / bm25_pisa.META).read_text())
    assert len(meta["parts"]) > 5
    assert [p["first_row"] for p in meta["parts"]] == sorted(p["first_row"] for p in meta["parts"])
    assert sum(p["rows"] for p in meta["parts"]) == len(ids)
    assert sum(p["postings"] for p in meta["parts"]) == len(expected._bm25.scores["data"])
    loaded = Retriever.load(tmp_path / "index", mmap=True)
    assert len(loaded._pisa_candidates().contexts) == len(meta["parts"])
    for k in (1, 10, 40):
        _same(loaded.retrieve(queries, k=k), expected.retrieve(queries, k=k))
    monkeypatch.setattr(bm25_pisa, "IMPACT_BITS", 3)
    coarse = BM25Retriever(backend="pisa").index_texts(ids, texts)
    _same(coarse.retrieve(queries, k=10), expected.retrieve(queries, k=10))


def test_part_bounds_split_rows_by_postings():
    assert bm25_pisa.part_bounds(10, 100, 1000) == [0, 10]
    assert bm25_pisa.part_bounds(10, 100, 30) == [0, 2, 5, 8, 10]  # 4 parts of about 25 postings
    assert bm25_pisa.part_bounds(3, 100, 1) == [0, 1, 2, 3]  # no more parts than documents
    assert bm25_pisa.part_bounds(0, 0, 10) == [0, 0]


def test_coarse_impacts_leave_near_ties_that_a_deeper_search_settles(corpus, monkeypatch):
    """At 3 bits a score is one of 7 levels: PISA's top 20 misses documents of the exact top 10, and the search must
    go deeper (x4) until no document left out can reach the k-th score."""
    ids, texts = corpus
    queries = _queries(texts)
    monkeypatch.setattr(bm25_pisa, "IMPACT_BITS", 3)
    on_pisa = BM25Retriever(backend="pisa").index_texts(ids, texts)
    depths = []
    search = bm25_pisa.PisaCandidates.search
    monkeypatch.setattr(bm25_pisa.PisaCandidates, "search",
                        lambda self, terms, depth: depths.append(depth) or search(self, terms, depth))
    _same(on_pisa.retrieve(queries, k=10), BM25Retriever(backend="numpy").index_texts(ids, texts).retrieve(queries, 10))
    assert max(depths) > 20


def test_a_saved_index_keeps_its_pisa_index_and_backend(corpus, tmp_path):
    ids, texts = corpus
    queries = _queries(texts)
    expected = BM25Retriever(backend="numpy").index_texts(ids, texts).retrieve(queries, k=10)
    BM25Retriever(backend="pisa").index_texts(ids, texts).save(tmp_path / "index")
    assert json.loads((tmp_path / "index" / "meta.json").read_text())["backend"] == "pisa"
    meta = json.loads((tmp_path / "index" / bm25_pisa.FOLDER / bm25_pisa.META).read_text())
    assert meta["num_docs"] == len(ids) and meta["impact_bits"] == bm25_pisa.IMPACT_BITS
    loaded = Retriever.load(tmp_path / "index", mmap=True)
    assert loaded.backend == "pisa"
    _same(loaded.retrieve(queries, k=10), expected)


def test_an_index_saved_without_pisa_gets_it_when_loaded_with_the_backend(corpus, tmp_path):
    ids, texts = corpus
    queries = _queries(texts)
    BM25Retriever().index_texts(ids, texts).save(tmp_path / "index")
    assert not (tmp_path / "index" / bm25_pisa.FOLDER).exists()
    plain = Retriever.load(tmp_path / "index")
    on_pisa = Retriever.load(tmp_path / "index", mmap=True, options={"backend": "pisa"})
    assert bm25_pisa.built(tmp_path / "index" / bm25_pisa.FOLDER) and plain.backend == "auto"
    _same(on_pisa.retrieve(queries, k=10), plain.retrieve(queries, k=10))
    with pytest.raises(ValueError, match="takes no option colour"):
        Retriever.load(tmp_path / "index", options={"colour": "red"})


def test_shards_on_pisa_keep_the_corpus_statistics(corpus, tmp_path):
    """Shards scored with the whole corpus's statistics, each searched on PISA, score each document as the single
    index does: PISA indexes their bm25s scores, which carry those statistics."""
    from taskret.retrieval.sharded import ShardedSearch, index_bm25_shards

    ids, texts = corpus
    queries = _queries(texts)
    splits = (0, 1000, 3000)
    shards = [(ids[a:b], lambda a=a, b=b: iter(texts[a:b])) for a, b in zip(splits, splits[1:])]
    folders = index_bm25_shards(shards, tmp_path / "index", tmp_path / "work")
    loaded = {f.name: Retriever.load(f, mmap=True, options={"backend": "pisa"}) for f in folders}
    merged = ShardedSearch({name: r.retrieve for name, r in loaded.items()}).retrieve(queries[:150], k=10)
    single = BM25Retriever(backend="numpy").index_texts(ids, texts).retrieve(queries[:150], k=10)
    np.testing.assert_array_equal(merged.result.scores, single.scores)
    assert merged.result.ids == single.ids  # equal scores in corpus order: the lower shard's rows first


def test_the_pisa_index_skips_empty_terms_and_refuses_unsorted_rows(tmp_path):
    data = np.array([1.0, 2.0, 0.5, 3.0], dtype=np.float32)
    indptr = np.array([0, 2, 2, 4])  # term 1 has no posting (PISA itself would abort on it)
    bm25_pisa.build(data, np.array([0, 2, 1, 2], dtype=np.int32), indptr, 3, tmp_path / "pisa")
    candidates = bm25_pisa.PisaCandidates(tmp_path / "pisa")
    assert candidates.search([0], 5).rows.tolist() == [2, 0]
    assert candidates.search([1], 5).rows.tolist() == []
    assert candidates.search([2, 0], 5).rows.tolist() == [2, 0, 1]
    found = candidates.search([2, 0], 2)
    assert found.rows.tolist() == [2, 0] and found.left_out_at_most == pytest.approx(found.sums[1])
    with pytest.raises(ValueError, match="not strictly increasing"):
        bm25_pisa.build(data, np.array([2, 0, 1, 2], dtype=np.int32), indptr, 3, tmp_path / "bad")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.tmp").exists()
    # three parts of a row each: the middle one has no postings (left out), term 0 none in the last
    bm25_pisa.build(data, np.array([0, 2, 0, 2], dtype=np.int32), indptr, 3, tmp_path / "parts", part_postings=1)
    meta = json.loads((tmp_path / "parts" / bm25_pisa.META).read_text())
    assert [(p["first_row"], p["postings"]) for p in meta["parts"]] == [(0, 2), (2, 2)]
    candidates = bm25_pisa.PisaCandidates(tmp_path / "parts")
    assert candidates.parts == 2
    found = candidates.search([2], 5)
    assert found.rows.tolist() == [0, 2] and found.left_out_at_most is None  # each part's, in part order: all in
    found = candidates.search([0, 2], 1)  # a row a part, each part full: a row left out in the last part could
    assert found.rows.tolist() == [0, 2] and found.left_out_at_most == pytest.approx(found.sums[1])  # reach row 2's


def test_auto_saves_a_large_index_with_pisa_and_searches_it_there(corpus, tmp_path, monkeypatch):
    import taskret.retrieval.bm25 as bm25

    ids, texts = corpus
    queries = _queries(texts)
    expected = BM25Retriever(backend="numpy").index_texts(ids, texts).retrieve(queries, k=10)
    BM25Retriever().index_texts(ids, texts).save(tmp_path / "small")  # below PISA_FROM: bm25s alone
    assert not (tmp_path / "small" / bm25_pisa.FOLDER).exists()
    monkeypatch.setattr(bm25, "PISA_FROM", len(ids))
    BM25Retriever().index_texts(ids, texts).save(tmp_path / "large")
    assert bm25_pisa.built(tmp_path / "large" / bm25_pisa.FOLDER)
    assert "backend" not in json.loads((tmp_path / "large" / "meta.json").read_text())
    large, small = Retriever.load(tmp_path / "large", mmap=True), Retriever.load(tmp_path / "small", mmap=True)
    assert large.uses_pisa() and not small.uses_pisa() and large.backend == small.backend == "auto"
    _same(large.retrieve(queries, k=10), expected)
    assert large._pisa is not None
    _same(small.retrieve(queries, k=10), expected)


def test_a_retriever_on_pisa_travels_to_another_process_by_pickle(corpus, tmp_path):
    import pickle

    ids, texts = corpus
    queries = _queries(texts)[:50]
    in_memory = BM25Retriever(backend="pisa").index_texts(ids, texts)
    expected = in_memory.retrieve(queries, k=10)  # its PISA index made in a temporary folder, and opened
    copy = pickle.loads(pickle.dumps(in_memory))
    assert copy._pisa is None and copy._pisa_folder is None
    _same(copy.retrieve(queries, k=10), expected)
    in_memory.save(tmp_path / "index")
    saved = Retriever.load(tmp_path / "index", mmap=True)
    saved.retrieve(queries[:1], k=10)
    moved = pickle.loads(pickle.dumps(saved))
    assert moved._pisa_folder == tmp_path / "index" / bm25_pisa.FOLDER  # the saved one, opened again
    _same(moved.retrieve(queries, k=10), expected)


def _resident_file_kib() -> int:
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(fields["RssFile"].split()[0])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc/self/status")
def test_a_pass_over_mapped_arrays_leaves_their_pages_to_the_page_cache(tmp_path):
    values = np.arange(8 << 20, dtype=np.float32)  # 32 MiB
    np.save(tmp_path / "values.npy", values)
    mapped = np.load(tmp_path / "values.npy", mmap_mode="r")
    before = _resident_file_kib()
    assert float(mapped.sum()) == float(values.sum())  # every page read, so mapped in
    read = _resident_file_kib()
    assert read - before > 24 << 10
    half = len(mapped) // 2 + 12_345  # not on a page boundary: the pages it touches go, the data stays right
    bm25_pisa._release(mapped, 0, half)
    assert read - _resident_file_kib() > 12 << 10
    bm25_pisa._release(mapped, half, len(mapped))
    assert _resident_file_kib() - before < 4 << 10
    np.testing.assert_array_equal(mapped, values)  # read again from the page cache
    in_memory = values.copy()
    bm25_pisa._release(in_memory, 0, len(in_memory))  # not mapped: untouched
    np.testing.assert_array_equal(in_memory, values)
