"""/prompt selects a prompt's demonstrations as `taskret evaluate` does (taskret.icl.selection): with the selection
the index records (an EPR run trained for CEIL's DPP), or the one the server is told (`taskret serve --select`)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from taskret.cli import app as cli_app
from taskret.data import Example, Task
from taskret.icl.prompt import PromptBuilder, whitespace_tokens
from taskret.icl.selection import Selection, select_demonstrations
from taskret.retrieval import BM25Retriever, DenseRetriever
from taskret.retrieval.index import INFO_FILE, InvalidIndex, load_index, save_index
from taskret.serve.app import create_app
from taskret.tart.tasks import Document

QUERIES = ["what is the weather in paris", "set an alarm for six", "call my brother", "play some jazz music",
           "remind me to buy milk", "how hot is it in london"]
BUDGET = 1920  # the server's default: 2048 - 128, counted in words
MAX_DEMOS = 2


def _expected(pool, retriever, selection, query: str) -> list[str]:
    """The demonstrations `taskret evaluate` puts in the prompt for ``query``, in prompt order."""
    builder = PromptBuilder(whitespace_tokens, budget=BUDGET, max_demos=MAX_DEMOS)
    task = Task("pool", train=pool, test=[])
    selected, _ = select_demonstrations(task, retriever, [Example("q", query, "")], selection, builder)
    by_id = {e.id: e for e in pool}
    return builder.build(query, [(i, by_id[i].input, by_id[i].output) for i in selected.ids[0]]).demo_ids


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory, pool_examples, tiny_bert_dir):
    """A dense index that records a DPP selection, as one built from a CEIL run does."""
    retriever = DenseRetriever(encoder=str(tiny_bert_dir)).index(pool_examples)
    recorded = Selection("dpp", 0.5, 6).record()
    return save_index(tmp_path_factory.mktemp("dense") / "index", retriever, pool_examples,
                      extra={"selection": recorded})


def test_prompt_selects_with_the_selection_the_index_records(dense_index, pool_examples):
    index = load_index(dense_index)
    assert index.selection == Selection("dpp", 0.5, 6)
    client = TestClient(create_app(index))
    plain = TestClient(create_app(dense_index, select=None))
    health = client.get("/health").json()
    assert health["selection"]["method"] == "dpp" and health["selection"]["weight"] == 0.5
    assert health["selection"]["vectors"] == "retriever" and health["selection"]["relevance"] == "cosine"
    assert plain.get("/health").json()["selection"] is None
    differ = False
    for query in QUERIES:
        body = client.post("/prompt", json={"input": query, "max_demos": MAX_DEMOS}).json()
        assert body["ids"] == _expected(pool_examples, index.retriever, index.selection, query)
        assert body["selection"] == health["selection"]
        assert sorted(body["ids"] + body["left_out"]) == sorted(
            client.post("/retrieve", json={"query": query, "k": 6}).json()["ids"])  # the 6 candidates
        top = plain.post("/prompt", json={"input": query, "max_demos": MAX_DEMOS}).json()
        assert top["selection"] is None
        assert top["ids"] == list(reversed(plain.post("/retrieve", json={"query": query, "k": MAX_DEMOS}).json()["ids"]))
        differ = differ or top["ids"] != body["ids"]
    assert differ  # the selection chose another set than the ranking's top for some query


def test_the_server_selects_as_told_with_an_encoders_vectors(shared_bm25_index, pool_examples, tiny_bert_dir):
    selection = Selection("mmr", 0.3, 5, encoder=str(tiny_bert_dir))
    client = TestClient(create_app(shared_bm25_index, select=selection.record()))  # JSON, as a worker gets it
    health = client.get("/health").json()["selection"]
    assert health["method"] == "mmr" and health["vectors"] == f"encoder:{tiny_bert_dir}"
    assert health["relevance"] == "min-max"
    retriever = BM25Retriever().index(pool_examples)
    for query in QUERIES:
        body = client.post("/prompt", json={"input": query, "max_demos": MAX_DEMOS}).json()
        assert body["ids"] == _expected(pool_examples, retriever, selection, query)


def test_an_index_with_a_bad_selection_is_refused(tmp_path, pool_examples):
    folder = save_index(tmp_path / "bad", BM25Retriever().index(pool_examples), pool_examples,
                        extra={"selection": {"method": "greedy", "weight": 0.5}})
    with pytest.raises(InvalidIndex, match=f"{INFO_FILE}: 'selection': unknown selection 'greedy'"):
        load_index(folder)
    docs = [Document("d1", "Alarms", "set an alarm"), Document("d2", "Weather", "rain in paris")]
    retriever = BM25Retriever().index_texts([d.id for d in docs], [f"{d.title} {d.text}" for d in docs])
    documents = save_index(tmp_path / "docs", retriever, docs, kind="documents")
    with pytest.raises(ValueError, match="chooses a prompt's demonstrations"):
        create_app(documents, select=Selection("dpp"))
    info = json.loads((documents / INFO_FILE).read_text())
    (documents / INFO_FILE).write_text(json.dumps({**info, "selection": Selection("dpp").record()}))
    with pytest.raises(InvalidIndex, match="a documents index has none"):
        load_index(documents)


def test_taskret_serve_passes_its_selection_to_every_worker(shared_bm25_index):
    env = {"COLUMNS": "2000"}
    with mock.patch("taskret.serve.app.create_app") as made, mock.patch("uvicorn.run"):
        result = CliRunner().invoke(cli_app, ["serve", "--index", str(shared_bm25_index), "--workers", "1",
                                              "--select", "mmr", "--select-weight", "0.4"], env=env)
        assert result.exit_code == 0, result.output
        assert made.call_args.kwargs["select"] == Selection("mmr", 0.4).record()
        result = CliRunner().invoke(cli_app, ["serve", "--index", str(shared_bm25_index), "--workers", "1"], env=env)
        assert result.exit_code == 0 and made.call_args.kwargs["select"] == "recorded"
        result = CliRunner().invoke(cli_app, ["serve", "--index", str(shared_bm25_index), "--workers", "1",
                                              "--select", "none"], env=env)
        assert result.exit_code == 0 and made.call_args.kwargs["select"] == "none"
    result = CliRunner().invoke(cli_app, ["serve", "--index", str(shared_bm25_index), "--select-weight", "0.4"],
                                env=env)
    assert result.exit_code != 0 and "--select-weight needs --select dpp or --select mmr" in result.output


PAGE_SCRIPT = r"""
const fs = require("fs"), vm = require("vm");
function node(tag) {
  return { tag, textContent: "", hidden: false, disabled: false, value: "", children: [],
           classList: { toggle() {} }, setAttribute() {}, addEventListener() {},
           append(...c) { this.children.push(...c); }, replaceChildren() { this.children = []; } };
}
const nodes = {};
const document = { getElementById: (id) => (nodes[id] = nodes[id] || node(id)), createElement: node,
                   createTextNode: (text) => ({ textContent: text }), addEventListener() {} };
const context = vm.createContext({ document });
vm.runInContext(fs.readFileSync(process.argv[2], "utf8"), context);
const answer = JSON.parse(process.argv[3]);
vm.runInContext(`renderPrompt(${JSON.stringify(answer)});
  about = describe(${JSON.stringify({ kind: "examples", retriever: "epr:run", n: 16, token_budget: 10,
                                      token_counter: "whitespace", selection: answer.selection })});`, context);
console.log(JSON.stringify({ note: nodes["selection-note"].textContent, about: context.about,
                             left: nodes["left-out"].textContent }));
"""


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="no node here to run the page's script")
def test_the_page_says_which_selection_chose_the_demonstrations_as_text(tmp_path):
    import subprocess

    from taskret.serve.app import STATIC_DIR

    script = tmp_path / "page_test.js"
    script.write_text(PAGE_SCRIPT)
    hostile = "<img src=x onerror=alert(1)>"
    answer = {"prompt": "p", "ids": ["a"], "texts": ["x"], "outputs": ["y"], "left_out": ["b"], "n_tokens": 3,
              "token_budget": 10, "token_counter": "whitespace",
              "selection": {"method": hostile, "weight": 0.9091, "n_candidates": 6, "ceil_scale_factor": 0.1}}

    def shown(body: dict) -> dict:
        run = subprocess.run(["node", str(script), str(STATIC_DIR / "page.js"), json.dumps(body)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    page = shown(answer)
    expected = f"{hostile} at weight 0.9091, CEIL scale factor 0.1, chosen from the top 6"
    assert page["note"] == f"selection: {expected}"  # the markup as text (textContent), never parsed
    assert f"selects with {expected}" in page["about"]
    assert page["left"].startswith("left out by the selection or the token budget")
    page = shown({**answer, "selection": None})
    assert page["note"] == "selection: none: the ranking's top, in order" and "selects with" not in page["about"]
    assert page["left"].startswith("left out by the token budget")
