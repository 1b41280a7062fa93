"""A corpus indexed as BM25 shards with the whole corpus's statistics, opened as one index from a shards config
(taskret.retrieval.sharded_index) and served (`taskret serve --shards`): the merged top 10 is the single index's, the
texts come from the shard that holds each document, and a config that is wrong says where."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from taskret.corpus import Document, doc_text
from taskret.io import DataError
from taskret.retrieval.bm25 import BM25Retriever
from taskret.retrieval.index import InvalidIndex
from taskret.retrieval.sharded import index_bm25_shards
from taskret.retrieval.sharded_index import load_sharded_index

from .builders import sharded_corpus

SPLITS = (0, 400, 1000, 1500)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """(config path, ids, texts, the single index over all of them)."""
    folder = tmp_path_factory.mktemp("sharded")
    ids, texts = sharded_corpus(SPLITS, seed=5, n_words=1200)
    documents = [Document(i, f"title {i}", t) for i, t in zip(ids, texts)]
    indexed = [doc_text(d) for d in documents]  # what a retriever reads of a document: title and text
    parts = [(ids[a:b], (lambda a=a, b=b: iter(indexed[a:b]))) for a, b in zip(SPLITS, SPLITS[1:])]
    index_bm25_shards(parts, folder / "index", folder / "work",
                      documents=[documents[a:b] for a, b in zip(SPLITS, SPLITS[1:])])
    config = folder / "shards.json"
    config.write_text(json.dumps({"shards": {f"shard-{n}": f"index/shard-{n}" for n in range(3)}}))
    single = BM25Retriever().index_stream(ids, lambda: iter(indexed))
    return config, ids, texts, single


def _queries(texts: list[str], n: int = 60) -> list[str]:
    rng = random.Random(9)
    return [" ".join(rng.sample(texts[rng.randrange(len(texts))].split(), 2)) for _ in range(n)]


def test_the_shards_opened_as_one_index_rank_as_the_single_index_and_find_each_text(shards):
    config, ids, texts, single = shards
    index = load_sharded_index(config)
    assert index.kind == "documents" and len(index.retriever.ids) == len(ids)
    assert list(index.retriever.ids) == ids and index.retriever.ids[-1] == ids[-1]
    queries = _queries(texts)
    merged = index.retriever.retrieve(queries, k=10)
    expected = single.retrieve(queries, k=11)
    assert not getattr(merged, "missing", ())
    np.testing.assert_allclose(merged.scores, expected.scores[:, :10], rtol=1e-6)
    for q in range(len(queries)):
        scores = expected.scores[q].tolist()
        for rank in range(10):
            if scores.count(scores[rank]) == 1:
                assert merged.ids[q][rank] == expected.ids[q][rank]
    found = index.records_of(merged.ids[0])
    assert [r.text for r in found] == [texts[ids.index(i)] for i in merged.ids[0]]


def test_the_service_answers_from_the_shards(shards):
    from fastapi.testclient import TestClient

    from taskret.serve.app import create_app

    config, ids, texts, single = shards
    client = TestClient(create_app(config))
    assert client.get("/health").json()["n"] == len(ids)
    query = _queries(texts, 1)[0]
    answer = client.post("/retrieve", json={"query": query, "k": 5}).json()
    expected = single.retrieve([query], k=5)
    assert answer["scores"] == pytest.approx(expected.scores[0].tolist(), rel=1e-6)
    assert answer["texts"] == [texts[ids.index(i)] for i in answer["ids"]]
    assert answer["titles"] == [f"title {i}" for i in answer["ids"]]
    assert "missing_shards" not in answer


def test_a_shards_config_that_is_wrong_is_refused_naming_the_file(shards, tmp_path):
    config, *_ = shards
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"shards": {"a": str(config.parent / "index/shard-0")}, "allow_partal": True}))
    with pytest.raises(DataError, match="typo.json.*allow_partal"):
        load_sharded_index(typo)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"shards": {"a": str(config.parent / "index/shard-0"),
                                            "b": str(config.parent / "index/shard-0")}}))
    with pytest.raises(InvalidIndex, match="in shard 'b' and in an earlier shard"):
        load_sharded_index(twice)
    absent = tmp_path / "absent.json"
    absent.write_text(json.dumps({"shards": {"a": "nowhere"}}))
    with pytest.raises(InvalidIndex, match="nowhere: no such folder"):
        load_sharded_index(absent)


def test_taskret_serve_shards_serves_them_from_the_command_line(shards):
    import httpx

    from tests.serve.test_serve_process import running_server

    config, ids, texts, single = shards
    query = _queries(texts, 1)[0]
    with running_server(config, flag="--shards", args=("--workers", "1")) as url:
        answer = httpx.post(f"{url}/retrieve", json={"query": query, "k": 3}, timeout=30).json()
    assert answer["ids"] == single.retrieve([query], k=3).ids[0]


def _write_parts(folder, ids: list[str], texts: list[str], splits: tuple[int, ...]) -> list:
    """The corpus as one JSONL file per part, as a user holding shards has it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, (a, b) in enumerate(zip(splits, splits[1:])):
        path = folder / f"part-{number}.jsonl"
        path.write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                                for i, t in zip(ids[a:b], texts[a:b])))
        paths.append(path)
    return paths


def test_corpus_parts_indexed_as_shards_serve_as_the_single_index_and_resume(tmp_path):
    from taskret.retrieval.sharded_index import index_corpus_shards
    from taskret.tart.tasks import open_corpus

    ids, texts = sharded_corpus(SPLITS, seed=5, n_words=1200)
    parts = _write_parts(tmp_path / "parts", ids, texts, SPLITS)
    out = tmp_path / "shards"
    config = index_corpus_shards([open_corpus(p) for p in parts], out)
    assert config == out.resolve() / "shards.json" and (out / "statistics.json").is_file()
    assert not (out / ".work").exists()
    queries = _queries(texts)
    single = BM25Retriever().index_stream(ids, lambda: iter(texts)).retrieve(queries, k=10)
    index = load_sharded_index(config)
    np.testing.assert_allclose(index.retriever.retrieve(queries, k=10).scores, single.scores, rtol=1e-6)
    assert index.records["d1499"].text == texts[1499]  # the texts come with the shards

    # stopped part-way: the shards already there are kept, the missing one is indexed again, alike
    kept = (out / "shard-0" / "meta.json").stat().st_mtime_ns
    import shutil

    shutil.rmtree(out / "shard-1")
    index_corpus_shards([open_corpus(p) for p in parts], out)
    assert (out / "shard-0" / "meta.json").stat().st_mtime_ns == kept
    np.testing.assert_allclose(load_sharded_index(config).retriever.retrieve(queries, k=10).scores, single.scores,
                               rtol=1e-6)

    # a part changed since: the finished shards' scores would be another corpus's
    parts[2].write_text(parts[2].read_text().replace(texts[1400], "a wholly new document text", 1))
    shutil.rmtree(out / "shard-2")
    with pytest.raises(ValueError, match="indexed with other BM25 counts"):
        index_corpus_shards([open_corpus(p) for p in parts], out)
    with pytest.raises(ValueError, match="bm25 or a dense retriever"):
        index_corpus_shards([open_corpus(p) for p in parts], tmp_path / "hybrid", "docs-fast")


def test_corpus_parts_indexed_as_dense_shards_merge_into_the_single_dense_index(tmp_path, tiny_bert_dir):
    from taskret.retrieval import DenseRetriever
    from taskret.retrieval.sharded_index import index_corpus_shards
    from taskret.tart.tasks import open_corpus

    ids, texts = sharded_corpus((0, 40, 100, 150), seed=6, n_words=400)
    parts = _write_parts(tmp_path / "parts", ids, texts, (0, 40, 100, 150))
    spec = f"dense:{tiny_bert_dir}?dtype=float32&index_type=flat"
    config = index_corpus_shards([open_corpus(p) for p in parts], tmp_path / "shards", spec)
    single = DenseRetriever(encoder=str(tiny_bert_dir), dtype="float32", index_type="flat").index_texts(ids, texts)
    queries = _queries(texts, 10)
    merged, expected = load_sharded_index(config).retriever.retrieve(queries, k=10), single.retrieve(queries, k=10)
    assert merged.ids == expected.ids
    np.testing.assert_allclose(merged.scores, expected.scores, rtol=1e-5, atol=1e-5)
