"""Every `index` command (taskret index, taskret epr index, taskret tart index) writes the one index format:
each output is served by the FastAPI app, searched by `taskret search` and read by `taskret retrieve`."""

from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from taskret.cli import app as cli_app
from taskret.retrieval.index import INDEX_FORMAT, INFO_FILE, ITEMS_FILE, load_index
from taskret.serve.app import create_app

from ..conftest import POOL_ROWS, read_jsonl_rows, write_jsonl_rows
from ..tart.builders import write_beir

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]


def invoke(*args):
    result = CliRunner().invoke(cli_app, [str(a) for a in args], env=ENV)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def pool_train(tmp_path_factory):
    return write_jsonl_rows(tmp_path_factory.mktemp("pool") / "train.jsonl", POOL_ROWS)


@pytest.fixture(scope="module")
def epr_run(tmp_path_factory, tiny_bert_dir):
    """What `taskret epr train` leaves for `taskret epr index`: a dual encoder under model/."""
    run = tmp_path_factory.mktemp("epr-run")
    shutil.copytree(tiny_bert_dir, run / "model")
    return run


def _example_index(kind, tmp_path, pool_train, epr_run):
    out = tmp_path / kind
    if kind == "taskret index":
        invoke("index", "--train", pool_train, *FIELDS, "--retriever", "bm25", "--out", out)
    else:
        invoke("epr", "index", "--model", epr_run, "--train", pool_train, *FIELDS, "--out", out)
    return out


@pytest.mark.parametrize("command", ["taskret index", "taskret epr index"])
def test_example_indexes_are_served_searched_and_retrieved(command, tmp_path, pool_train, epr_run):
    out = _example_index(command, tmp_path, pool_train, epr_run)
    info = json.loads((out / INFO_FILE).read_text())
    assert info["format"] == INDEX_FORMAT and info["kind"] == "examples" and info["task"] == "train"
    assert info["retriever"] == ("bm25" if command == "taskret index" else f"epr:{epr_run}")
    rows = read_jsonl_rows(out / ITEMS_FILE)
    assert [r["id"] for r in rows] == [r["key"] for r in POOL_ROWS] and rows[0]["output"] == POOL_ROWS[0]["a"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # written through a temporary folder

    client = TestClient(create_app(out))
    health = client.get("/health").json()
    assert health["kind"] == "examples" and health["n"] == len(POOL_ROWS)
    body = client.post("/retrieve", json={"query": "what is the weather forecast in paris tomorrow", "k": 2}).json()
    assert len(body["ids"]) == 2 and body["outputs"][0] == {r["key"]: r["a"] for r in POOL_ROWS}[body["ids"][0]]
    prompt = client.post("/prompt", json={"input": "call john", "max_demos": 2}).json()
    assert len(prompt["ids"]) == 2 and prompt["prompt"].endswith("call john\t")

    searched = json.loads(invoke("search", "--index", out, "--json", "--k", 2, "play miles davis").stdout)
    retrieved = json.loads(invoke("retrieve", "--index", out, "--json", "--k", 2, "play miles davis").stdout)
    assert searched["ids"] == retrieved["ids"] and len(searched["ids"]) == 2
    records = load_index(out).records
    assert searched["snippets"] == [f"{records[i].text} -> {records[i].output}" for i in searched["ids"]]
    if command == "taskret index":
        assert searched["ids"][0] == "music"


def test_tart_document_index_is_served_searched_and_retrieved(tmp_path):
    folder = write_beir(tmp_path / "facts")
    out = tmp_path / "index"
    invoke("tart", "index", "--task", folder, "--retriever", "bm25", "--out", out)
    info = json.loads((out / INFO_FILE).read_text())
    assert info["format"] == INDEX_FORMAT and info["kind"] == "documents" and info["task"] == "facts"
    assert info["split"] == "test" and info["n"] == 3 and info["instruction"] is None
    assert read_jsonl_rows(out / ITEMS_FILE)[0] == {"id": "d1", "title": "Aspirin and the heart",
                                                    "text": "Aspirin lowers the risk of heart attacks."}

    client = TestClient(create_app(out))
    body = client.post("/retrieve", json={"query": "aspirin heart attacks", "k": 1}).json()
    assert body["ids"] == ["d1"] and body["titles"] == ["Aspirin and the heart"] and "outputs" not in body
    assert client.post("/prompt", json={"input": "aspirin"}).status_code == 400

    searched = json.loads(invoke("search", "--index", out, "--json", "--k", 1, "aspirin heart attacks").stdout)
    assert searched["ids"] == ["d1"]
    assert searched["snippets"] == ["Aspirin and the heart | Aspirin lowers the risk of heart attacks."]
    assert json.loads(invoke("retrieve", "--index", out, "--json", "--k", 1, "aspirin heart attacks").stdout)["ids"] == ["d1"]


def test_index_commands_replace_an_index_and_refuse_other_folders(tmp_path, pool_train):
    out = tmp_path / "index"
    invoke("index", "--train", pool_train, *FIELDS, "--out", out)
    (out / "stale.txt").write_text("left by hand")
    invoke("tart", "index", "--task", write_beir(tmp_path / "facts"), "--out", out)  # an index: replaced whole
    assert load_index(out).kind == "documents" and not (out / "stale.txt").exists()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    result = CliRunner().invoke(cli_app, ["tart", "index", "--task", str(tmp_path / "facts"), "--out", str(notes)],
                                env=ENV)
    assert result.exit_code == 2 and "not a taskret index; refusing" in result.stderr
    assert (notes / "keep.txt").read_text() == "mine"


def test_retrieve_reads_a_bare_retriever_and_serve_refuses_it(tmp_path, pool_examples):
    from taskret.retrieval import BM25Retriever

    BM25Retriever().index(pool_examples).save(tmp_path / "bare")  # the EPR pipeline's index/
    assert json.loads(invoke("retrieve", "--index", tmp_path / "bare", "--json", "--k", 1, "play miles davis").stdout)["ids"] \
        == ["music"]
    result = CliRunner().invoke(cli_app, ["serve", "--index", str(tmp_path / "bare")], env=ENV)
    assert result.exit_code == 2 and "holds no texts" in result.stderr


@pytest.mark.parametrize("command", ["taskret index", "taskret epr index"])
def test_an_index_of_an_epr_run_records_its_context_window_and_serve_builds_prompts_for_it(command, tmp_path,
                                                                                         pool_train, epr_run):
    work = tmp_path / "work"
    shutil.copytree(epr_run, work / "retriever")
    (work / "pipeline_config.json").write_text(json.dumps({"context_window": 640, "max_new_tokens": 64}))
    out = tmp_path / "index"
    if command == "taskret index":
        result = invoke("index", "--train", pool_train, *FIELDS, "--setup", f"examples-epr:{work}", "--out", out)
        assert "(its run's prompts: context_window 640, max_new_tokens 64)" in result.output
    else:
        invoke("epr", "index", "--model", work / "retriever", "--train", pool_train, *FIELDS, "--out", out)
    info = json.loads((out / INFO_FILE).read_text())
    assert (info["context_window"], info["max_new_tokens"]) == (640, 64)
    health = TestClient(create_app(out, warmup=False)).get("/health").json()
    assert health["token_budget"] == 640 - 64  # not 2048 - 128
    assert TestClient(create_app(out, warmup=False, context_window=1024)).get("/health").json()["token_budget"] == \
        1024 - 64  # an option given wins
    plain = tmp_path / "plain"
    invoke("index", "--train", pool_train, *FIELDS, "--retriever", "bm25", "--out", plain)
    assert "context_window" not in json.loads((plain / INFO_FILE).read_text())
    assert TestClient(create_app(plain, warmup=False)).get("/health").json()["token_budget"] == 2048 - 128
