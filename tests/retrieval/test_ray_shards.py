"""BM25 shards on a real three-node Ray cluster started on this machine (``ray start --head`` and two worker nodes,
each a process of its own): indexed by Ray tasks with the corpus's statistics, searched by one actor per shard on
its own node; the merged top 10 is the single index's; a killed shard is named, or marked missing."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("ray")

from taskret.retrieval.bm25 import BM25Retriever  # noqa: E402
from taskret.retrieval.sharded import ShardFailed  # noqa: E402

from .builders import sharded_corpus  # noqa: E402

RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
SPLITS = (0, 500, 1300, 2000)


def kill_and_wait(actor, timeout_s: float = 60.0) -> None:
    """``ray.kill(actor)``, then wait until a call to it fails: the kill is asynchronous, and a call sent before it
    lands is still answered (what made the strict search after a kill pass now and then on a loaded machine)."""
    import time

    import ray

    ray.kill(actor)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.where.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the actor still answered {timeout_s} s after ray.kill")


@pytest.fixture(scope="module")
def cluster(ray_temp_dir):
    import ray

    from taskret.backends.ray_pool import start_local_cluster

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        with start_local_cluster(num_cpus=1, temp_dir=ray_temp_dir, worker_nodes=2) as address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            try:
                yield address
            finally:
                ray.shutdown()


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return sharded_corpus(SPLITS, seed=3, n_words=1500)


def test_shards_indexed_and_searched_on_three_nodes_merge_into_the_single_index(cluster, corpus, tmp_path):
    import ray

    from taskret.retrieval.ray_shards import RayShards, index_bm25_shards_on_ray

    assert len([node for node in ray.nodes() if node["Alive"]]) == 3
    ids, texts = corpus
    shards = [(ids[a:b], texts[a:b]) for a, b in zip(SPLITS, SPLITS[1:])]
    folders = index_bm25_shards_on_ray(shards, tmp_path / "index", tmp_path / "work")
    assert [f.name for f in folders] == ["shard-0", "shard-1", "shard-2"]
    searched = RayShards({f.name: f for f in folders}, timeout_s=120)
    try:
        nodes = {where["node"] for where in searched.where().values()}
        assert len(nodes) == 3  # one shard a node
        rng = random.Random(4)
        queries = [" ".join(rng.sample(texts[rng.randrange(len(texts))].split(), 2)) for _ in range(100)]
        merged = searched.retrieve(queries, k=10)
        single = BM25Retriever().index_stream(ids, lambda: iter(texts)).retrieve(queries, k=11)
        assert not merged.partial
        np.testing.assert_array_equal(merged.result.scores, single.scores[:, :10])
        for q in range(len(queries)):
            scores = single.scores[q].tolist()
            for rank in range(10):
                if scores.count(scores[rank]) == 1:
                    assert merged.result.ids[q][rank] == single.ids[q][rank]

        kill_and_wait(searched.actors["shard-1"])  # its node's worker gone mid-service
        with pytest.raises(ShardFailed, match="shard 'shard-1' failed"):
            searched.retrieve(queries[:5], k=10)
        searched.allow_partial = True
        partial = searched.retrieve(queries[:5], k=10)
        assert partial.missing == ["shard-1"]
        assert not {doc for row in partial.result.ids for doc in row} & set(ids[SPLITS[1]:SPLITS[2]])
    finally:
        searched.close()


def test_a_ray_temp_dir_too_long_for_its_sockets_is_refused_before_anything_starts(tmp_path):
    import psutil

    from taskret.backends.base import BackendError
    from taskret.backends.ray_pool import MAX_RAY_TEMP_DIR, start_local_cluster

    long_dir = tmp_path / ("x" * MAX_RAY_TEMP_DIR)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(BackendError, match="at most 40"):
        with start_local_cluster(num_cpus=1, temp_dir=long_dir, worker_nodes=2):
            pass
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # no `ray start` was left behind


def test_the_service_over_ray_shards_marks_an_answer_without_a_killed_shard_as_partial(cluster, corpus, tmp_path):
    """`taskret serve --shards` with a Ray address: one actor a shard; the answer equals the single index's, and
    after a shard's actor is killed, it comes from the others and names the missing shard."""
    import json

    from fastapi.testclient import TestClient

    from taskret.corpus import Document
    from taskret.retrieval.ray_shards import index_bm25_shards_on_ray
    from taskret.serve.app import create_app

    ids, texts = corpus
    cuts = list(zip(SPLITS, SPLITS[1:]))
    index_bm25_shards_on_ray([(ids[a:b], texts[a:b]) for a, b in cuts], tmp_path / "index", tmp_path / "work",
                             documents=[[Document(i, "", t) for i, t in zip(ids[a:b], texts[a:b])] for a, b in cuts])
    config = tmp_path / "shards.json"
    config.write_text(json.dumps({"shards": {f"shard-{n}": f"index/shard-{n}" for n in range(3)}, "ray": cluster,
                                  "allow_partial": True, "timeout_s": 120}))
    app = create_app(config)
    try:
        client = TestClient(app)
        query = " ".join(texts[SPLITS[1] + 3].split()[:2])  # words of a shard-1 document
        single = BM25Retriever().index_stream(ids, lambda: iter(texts)).retrieve([query], k=10)
        whole = client.post("/retrieve", json={"query": query, "k": 10}).json()
        assert whole["scores"] == pytest.approx(single.scores[0].tolist(), rel=1e-6) and "missing_shards" not in whole
        assert set(whole["ids"]) & set(ids[SPLITS[1]:SPLITS[2]])
        kill_and_wait(app.state.index.retriever._remote.actors["shard-1"])
        partial = client.post("/retrieve", json={"query": query, "k": 10}).json()
        assert partial["missing_shards"] == ["shard-1"]
        assert not set(partial["ids"]) & set(ids[SPLITS[1]:SPLITS[2]])
    finally:
        app.state.index.retriever.close()


def test_dense_shards_served_over_ray_merge_into_the_single_dense_index(cluster, corpus, tmp_path, tiny_bert_dir):
    """Dense shards need no shared statistics: each shard a dense index of its part (the same encoder), one actor a
    shard; the merged top 10 is the single exact index's."""
    import json

    from fastapi.testclient import TestClient

    from taskret.corpus import Document
    from taskret.retrieval import DenseRetriever
    from taskret.retrieval.index import save_index
    from taskret.serve.app import create_app

    ids, texts = corpus
    ids, texts = ids[::10], texts[::10]  # 200 documents: the tiny encoder's vectors, exact search
    cuts = [(0, 50), (50, 130), (130, 200)]

    def dense() -> DenseRetriever:
        return DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32", index_type="flat")

    for n, (a, b) in enumerate(cuts):
        save_index(tmp_path / f"shard-{n}", dense().index_texts(ids[a:b], texts[a:b]),
                   [Document(i, "", t) for i, t in zip(ids[a:b], texts[a:b])], kind="documents")
    config = tmp_path / "shards.json"
    config.write_text(json.dumps({"shards": {f"shard-{n}": f"shard-{n}" for n in range(3)}, "ray": cluster,
                                  "timeout_s": 120}))
    single = dense().index_texts(ids, texts)
    app = create_app(config)
    try:
        client = TestClient(app)
        for query in [" ".join(texts[q].split()[:3]) for q in (5, 77, 150)]:
            answer = client.post("/retrieve", json={"query": query, "k": 10}).json()
            expected = single.retrieve([query], k=10)
            assert answer["scores"] == pytest.approx(expected.scores[0].tolist(), abs=1e-5)
            assert answer["ids"] == expected.ids[0]
    finally:
        app.state.index.retriever.close()


def test_corpus_parts_indexed_by_ray_tasks_serve_as_the_single_index(cluster, corpus, tmp_path):
    """`taskret tart index-shards --ray`'s work: each part a Ray task reading its own file (counted, then indexed
    with the sum); the shards' config opens as one index whose top 10 scores are the single index's."""
    import json

    from taskret.retrieval.sharded_index import index_corpus_shards, load_sharded_index
    from taskret.tart.tasks import open_corpus

    ids, texts = corpus
    parts = []
    for number, (a, b) in enumerate(zip(SPLITS, SPLITS[1:])):
        parts.append(tmp_path / f"part-{number}.jsonl")
        parts[-1].write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in zip(ids[a:b], texts[a:b])))
    config = index_corpus_shards([open_corpus(p) for p in parts], tmp_path / "shards", on_ray=True)
    rng = random.Random(6)
    queries = [" ".join(rng.sample(texts[rng.randrange(len(texts))].split(), 2)) for _ in range(50)]
    merged = load_sharded_index(config).retriever.retrieve(queries, k=10)
    single = BM25Retriever().index_stream(ids, lambda: iter(texts)).retrieve(queries, k=10)
    np.testing.assert_array_equal(merged.scores, single.scores)
