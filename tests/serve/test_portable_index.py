"""An index folder holds everything it needs: moved or copied, it loads, searches and serves from any working
directory, with the reranking its setup records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import httpx
import pytest

from taskret.retrieval import DenseRetriever
from taskret.retrieval.index import load_index, save_index
from taskret.tart.search import search_index
from taskret.tart.tasks import Document

from .test_serve_process import running_server

DOCS = [Document("d1", "Alarms", "set an alarm for seven in the morning"),
        Document("d2", "Weather", "rain expected in paris tomorrow"),
        Document("d3", "Music", "play some jazz in the kitchen"),
        Document("d4", "Script", "<script>alert(1)</script> find . -exec rm {} \\;")]


def _texts():
    return [d.id for d in DOCS], [f"{d.title} {d.text}" for d in DOCS]


def test_a_dense_index_over_a_trained_encoder_keeps_working_after_the_model_and_the_index_move(tmp_path, tiny_bert_dir,
                                                                                              monkeypatch):
    model = tmp_path / "runs" / "epr" / "retriever" / "model"
    shutil.copytree(tiny_bert_dir, model)
    monkeypatch.chdir(tmp_path)
    retriever = DenseRetriever(encoder="runs/epr/retriever/model").index_texts(*_texts())  # relative, as EPR writes
    save_index("idx", retriever, DOCS, kind="documents")
    before = retriever.retrieve(["rain in paris"], k=4)
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["encoder"] == "models/encoder" and (tmp_path / "idx" / "models" / "encoder").is_dir()
    shutil.rmtree(tmp_path / "runs")  # the training output is gone
    shutil.move(str(tmp_path / "idx"), str(tmp_path / "elsewhere"))
    other = tmp_path / "other-cwd"
    other.mkdir()
    monkeypatch.chdir(other)
    loaded = load_index(tmp_path / "elsewhere")
    after = loaded.retriever.retrieve(["rain in paris"], k=4)
    assert after.ids == before.ids
    assert after.scores == pytest.approx(before.scores, abs=1e-5)


def test_an_index_reranks_as_its_setup_records_unless_told_otherwise(tmp_path, tiny_model_dir):
    from taskret.rerank import load_reranker
    from taskret.retrieval import make_retriever

    retriever = make_retriever("bm25").index_texts(*_texts())
    spec = f"upr:{tiny_model_dir}"
    save_index(tmp_path / "idx", retriever, DOCS, kind="documents",
               extra={"setup": "custom", "rerank": spec, "rerank_depth": 3, "rerank_weight": 0.5})
    index = load_index(tmp_path / "idx")
    queries = ["alarm in the morning", "jazz music"]
    _, recorded = search_index(index, queries, top_k=3)
    _, explicit = search_index(index, queries, top_k=3, reranker=load_reranker(spec), rerank_depth=3,
                               rerank_weight=0.5)
    _, plain = search_index(index, queries, top_k=3, reranker=None)
    assert recorded.ids == explicit.ids
    assert recorded.scores == pytest.approx(explicit.scores)
    assert plain.scores.tolist() != recorded.scores.tolist()  # BM25's own scores, not fused ones
    from fastapi.testclient import TestClient

    from taskret.serve.app import create_app

    client = TestClient(create_app(index))  # the service reranks as the index records, unasked
    assert client.get("/health").json()["rerank"] == spec
    served = client.post("/retrieve", json={"query": queries[0], "k": 3}).json()
    assert served["ids"] == recorded.ids[0]
    assert served["scores"] == pytest.approx(recorded.scores[0].tolist(), abs=1e-5)


@pytest.mark.integration
def test_a_bare_corpus_indexed_with_a_named_setup_moves_and_serves_from_another_folder(tmp_path):
    corpus = tmp_path / "mine" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS),
                      encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "2000"}
    cli = [sys.executable, "-m", "taskret.cli"]
    built = subprocess.run([*cli, "tart", "index", "--corpus", str(corpus), "--setup", "docs-fast", "--out", "idx"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "docs-fast = hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4&read_instruction=0,0" in built.stderr
    moved = tmp_path / "moved" / "my-index"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "idx"), str(moved))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = subprocess.run([*cli, "tart", "search", "--index", str(moved), "--json", "--k", "2",
                            "rain in paris tomorrow"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["ids"][0] == "d2"

    with running_server(moved, cwd=elsewhere) as url:
        answer = httpx.post(f"{url}/retrieve", json={"query": "play jazz", "k": 2}, timeout=30).json()
    assert answer["ids"][0] == "d3" and answer["titles"][0] == "Music"
