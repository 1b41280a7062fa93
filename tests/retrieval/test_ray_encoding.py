"""A corpus encoded on Ray (`tart index --ray local`, a private instance in the test's process): two actors holding
the tiny BERT encode the shards of a tiny corpus.
The index must retrieve the same top 10 as one built here (the same ids, scores within 1e-4), and a worker killed
with SIGKILL mid-job must cost its shard a second try, not the shard."""

from __future__ import annotations

import importlib.util
import json
import os
import signal

import numpy as np
import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.ray

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed (pip install 'taskret[ray]'); the Ray encoding tests are skipped",
                allow_module_level=True)

from taskret.backends.ray_pool import RayOptions  # noqa: E402
from taskret.cli import app  # noqa: E402
from taskret.retrieval import DenseRetriever  # noqa: E402
from taskret.retrieval.index import index_documents, load_index  # noqa: E402
from taskret.retrieval.shards import SHARDS_DIR, ShardPlan, encode_in_shards  # noqa: E402
from tests.conftest import write_jsonl_rows  # noqa: E402
from tests.epr.test_ray_scoring import RAY_ENV  # noqa: E402

from .test_streaming import QUERIES, corpus_rows, dense, stream_of  # noqa: E402

#: The same top 10 as a local build: identical ids; scores within this (the same texts in the same batches, but
#: another process: float rounding may differ in the last bits).
SCORE_TOLERANCE = 1e-4


@pytest.fixture
def ray_env(monkeypatch):
    """`--ray local` starts a private Ray instance in this process, kept on loopback and without token auth."""
    for key, value in RAY_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_jsonl_rows(tmp_path_factory.mktemp("corpus") / "docs.jsonl", corpus_rows(31))


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, corpus, tiny_bert_dir):
    return load_index(index_documents(tmp_path_factory.mktemp("local") / "index", dense(tiny_bert_dir),
                                      stream_of(corpus), shard_size=4))


def assert_same_top10(index_dir, local_index) -> None:
    on_ray, here = load_index(index_dir).retriever.retrieve(QUERIES, k=10), local_index.retriever.retrieve(QUERIES, k=10)
    assert on_ray.ids == here.ids
    np.testing.assert_allclose(on_ray.scores, here.scores, atol=SCORE_TOLERANCE)


def test_two_workers_build_the_local_index_and_survive_a_killed_worker(tmp_path, ray_env, corpus, local_index,
                                                                      tiny_bert_dir):
    from taskret.retrieval.distributed import RayEncoding

    retriever = dense(tiny_bert_dir)
    texts = list(stream_of(corpus).texts())
    # one text a shard: shards are still left to send after the kill, so the dead worker is sent one whatever the
    # timing (with few shards, a loaded machine could finish the victim's shards before the kill and send it none)
    plan = ShardPlan(tmp_path / SHARDS_DIR, "fingerprint", 1)
    with RayEncoding("dense", {**retriever.config(), "device": "cpu"}, RayOptions("local", workers=2)) as runner:
        assert len(runner.actors) == 2 and runner.model_name == str(tiny_bert_dir)
        victim = runner.worker_info[0]["pid"]
        done: list[int] = []

        def advance(n: int) -> None:
            done.append(n)
            if len(done) == 2:  # two shards back: kill a worker while others are in flight
                os.kill(victim, signal.SIGKILL)

        def killing(pending, stage_advance):
            return runner(pending, lambda n: (stage_advance(n), advance(n)))

        blocks = list(encode_in_shards(texts, len(texts), plan, {"encoder": "tiny"}, killing, "encoding"))
        stats = dict(runner.stats)
    assert sum(done) == len(texts) == 31 and stats["shards"] == 31  # every shard once
    assert stats["worker_failures"] >= 1 and stats["retried_shards"] >= 1 and stats["workers_started"] >= 3
    vectors = np.concatenate(blocks)
    local = local_index.retriever._index.reconstruct_n(0, len(texts))
    np.testing.assert_allclose(vectors, local, atol=SCORE_TOLERANCE)
    assert sorted(p.name for p in plan.directory.iterdir()) == [*(f"{i:05d}.npy" for i in range(31)), "manifest.json"]


def test_tart_index_on_ray_local_retrieves_the_local_top10(tmp_path, ray_env, corpus, local_index, tiny_bert_dir):
    out = tmp_path / "index"
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(corpus), "--setup",
                                      f"dense:{tiny_bert_dir}?dtype=float32", "--shard-size", "4", "--ray", "local",
                                      "--ray-workers", "2", "--out", str(out)],
                                env={"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    assert "on Ray" in result.output and not (out / SHARDS_DIR).exists()
    assert_same_top10(out, local_index)
    assert json.loads((out / "meta.json").read_text())["dtype"] == "float32"


def test_an_encoder_that_does_not_load_is_reported(ray_env, tmp_path):
    from taskret.backends import BackendError
    from taskret.retrieval.distributed import RayEncoding

    config = DenseRetriever(encoder=str(tmp_path / "no-such-model"), dtype="float32").config()
    with pytest.raises(BackendError, match="could not load the encoder"):
        with RayEncoding("dense", config, RayOptions("local", workers=1)):
            pass


def _family(pid: int) -> list:
    import psutil

    process = psutil.Process(pid)
    return [process, *process.children(recursive=True)]


def _alive(processes) -> list[str]:
    import psutil

    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {process.name()}")
        except psutil.Error:
            pass
    return left


def test_a_killed_driver_leaves_no_ray_process_and_ray_says_nothing_on_the_terminal(tmp_path, tiny_bert_dir):
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    from .test_streaming import ENV

    rows = [{**row, "_id": f"d{i}", "text": row["text"] + " and so on" * 30} for i, row in enumerate(corpus_rows(3000))]
    corpus = write_jsonl_rows(tmp_path / "big.jsonl", rows)
    out = tmp_path / "index"
    # As a user runs it: token authentication on (Ray's default), which Ray announces in a warning.
    env = {key: value for key, value in os.environ.items() if key != "RAY_AUTH_MODE"}
    command = [sys.executable, "-m", "taskret.cli", "tart", "index", "--corpus", str(corpus), "--setup",
               f"dense:{tiny_bert_dir}?dtype=float32", "--shard-size", "100", "--ray", "local", "--ray-workers", "1",
               "--out", str(out)]
    driver = subprocess.Popen(command, env={**env, **ENV, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (out / SHARDS_DIR / "00000.npy").exists() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.poll() is None, driver.communicate()[1]
    ray_processes = _family(driver.pid)[1:]
    assert any("raylet" in p.name() for p in ray_processes), [p.name() for p in ray_processes]
    driver.kill()
    stderr = driver.communicate()[1]
    deadline = time.monotonic() + 10
    while _alive(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(ray_processes) == []  # the raylet's agents too, which outlived a killed driver for minutes
    assert "Token authentication" not in stderr and "WARNING" not in stderr, stderr
    log = Path(tempfile.gettempdir()) / "taskret" / f"ray-{driver.pid}.log"
    assert f"Ray's messages -> {log}" in stderr and "Token authentication is enabled" in log.read_text()
    log.unlink()


def test_tart_index_shards_on_ray_local_writes_shards_that_rank_as_one_index(tmp_path, ray_env, corpus):
    """`taskret tart index-shards --ray local`: a private Ray instance started for the command, each part counted and
    indexed by a task, the instance gone after; the shards' config ranks as one BM25 index over every part."""
    import ray

    from taskret.retrieval.bm25 import BM25Retriever
    from taskret.retrieval.sharded_index import load_sharded_index

    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    parts = []
    for number, (a, b) in enumerate(((0, 10), (10, 31))):
        parts.append(write_jsonl_rows(tmp_path / f"part-{number}.jsonl", rows[a:b]))
    out = tmp_path / "shards"
    result = CliRunner().invoke(app, ["tart", "index-shards", *[a for p in parts for a in ("--part", str(p))],
                                      "--ray", "local", "--out", str(out)], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    assert "on Ray" in result.output and not ray.is_initialized()
    single = BM25Retriever().index_stream([r["_id"] for r in rows],
                                          lambda: (f"{r.get('title', '')} {r['text']}".strip() for r in rows))
    found = load_sharded_index(out / "shards.json").retriever.retrieve(QUERIES, k=5)
    np.testing.assert_allclose(found.scores, single.retrieve(QUERIES, k=5).scores, rtol=1e-6)

    # a bad line read in a Ray task is said as here: one line naming file, line and field, nothing left behind
    bad = write_jsonl_rows(tmp_path / "bad.jsonl", [{"_id": "x", "title": "no text"}])
    result = CliRunner().invoke(app, ["tart", "index-shards", "--part", str(parts[0]), "--part", str(bad), "--ray",
                                      "local", "--out", str(tmp_path / "again")], env={"COLUMNS": "2000"})
    assert result.exit_code == 2 and f"{bad}, line 1, field 'text': missing field" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "again").exists()
