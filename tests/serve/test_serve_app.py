"""The FastAPI service in-process (TestClient): answers, the prompt convention, and bad requests."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from taskret.icl.prompt import PromptBuilder, whitespace_tokens
from taskret.retrieval import BM25Retriever
from taskret.retrieval.index import ITEMS_FILE, InvalidIndex, LazyRecords, save_index
from taskret.serve.app import MAX_BODY_BYTES, create_app

from ..conftest import write_jsonl_rows


@pytest.fixture(scope="module")
def client(shared_bm25_index):
    return TestClient(create_app(shared_bm25_index))


def test_health(client, pool_examples):
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["kind"] == "examples" and body["retriever"] == "bm25"
    assert body["n"] == len(pool_examples) and body["token_counter"] == "whitespace"


def test_openapi_schema_is_served(client):
    schema = client.get("/openapi.json").json()
    assert {"/retrieve", "/prompt", "/health"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["RetrieveRequest"]
    assert request["additionalProperties"] is False
    assert request["properties"]["k"]["minimum"] == 1 and request["properties"]["k"]["maximum"] == 100


def test_retrieve_returns_ranked_ids_texts_and_scores(client):
    body = client.post("/retrieve", json={"query": "is it sunny in paris tomorrow", "k": 3}).json()
    assert body["ids"][0] == "weather" and len(body["ids"]) == len(body["scores"]) == len(body["texts"]) == 3
    assert body["texts"][0] == "what is the weather forecast in paris tomorrow"
    assert body["outputs"][0] == "GET_WEATHER paris tomorrow"
    assert body["scores"] == sorted(body["scores"], reverse=True)
    assert "titles" not in body


def test_retrieve_defaults_and_a_k_beyond_the_pool(client, pool_examples):
    assert len(client.post("/retrieve", json={"query": "alarm"}).json()["ids"]) == 5
    assert len(client.post("/retrieve", json={"query": "alarm", "k": 100}).json()["ids"]) == len(pool_examples)


def test_an_instruction_bm25_does_not_read_is_left_out_and_said(client):
    body = client.post("/retrieve", json={"query": "play miles davis", "instruction": "Find a music command",
                                          "k": 1}).json()
    plain = client.post("/retrieve", json={"query": "play miles davis", "k": 1}).json()
    assert body["query"] == "play miles davis" and body["ids"] == plain["ids"] == ["music"]
    assert "instruction is not read by this index (bm25)" in body["note"] and "note" not in plain


BAD_RETRIEVE = {
    "k=0": ({"query": "a", "k": 0}, "body.k: Input should be greater than or equal to 1"),
    "k=101": ({"query": "a", "k": 101}, "body.k: Input should be less than or equal to 100"),
    "missing query": ({"k": 3}, "body.query: Field required"),
    "unknown field": ({"query": "a", "top_k": 3}, "body.top_k: Extra inputs are not permitted"),
    "empty query": ({"query": ""}, "body.query: String should have at least 1 character"),
    "blank query": ({"query": "  \n"}, "body.query: must not be blank"),
    "empty instruction": ({"query": "a", "instruction": ""}, "body.instruction: String should have at least 1"),
    "huge query": ({"query": "x" * 10_001}, "body.query: String should have at most 10000 characters"),
    "query not a string": ({"query": 123}, "body.query: Input should be a valid string"),
    "k as a string": ({"query": "a", "k": "5"}, "body.k: Input should be a valid integer"),
    "k as a float": ({"query": "a", "k": 1.5}, "body.k: Input should be a valid integer"),
    "k as a bool": ({"query": "a", "k": True}, "body.k: Input should be a valid integer"),
    "k null": ({"query": "a", "k": None}, "body.k: Input should be a valid integer"),
    "body a list": (["a"], "body: expected a JSON object"),
}


@pytest.mark.parametrize("body, message", BAD_RETRIEVE.values(), ids=BAD_RETRIEVE.keys())
def test_bad_retrieve_requests_get_422_with_a_clear_message(client, body, message):
    response = client.post("/retrieve", json=body)
    assert response.status_code == 422
    assert message in response.json()["message"]
    assert "x" * 100 not in response.text  # the input is not echoed back


@pytest.mark.parametrize("content, headers, message", [
    (b'{"query": "a",', {"content-type": "application/json"}, "body: malformed JSON"),
    (b"", {"content-type": "application/json"}, "body: Field required"),
    (b'{"query": "a"}', {}, "Content-Type: application/json"),
])
def test_malformed_bodies_get_422(client, content, headers, message):
    response = client.post("/retrieve", content=content, headers=headers)
    assert response.status_code == 422 and message in response.json()["message"]


def test_oversized_body_gets_413(client):
    big = json.dumps({"query": "x" * (MAX_BODY_BYTES + 10)}).encode()
    response = client.post("/retrieve", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["message"] == f"request body over {MAX_BODY_BYTES} bytes"  # as 422 answers carry one


def test_prompt_follows_taskret_convention(client, pool_examples):
    body = client.post("/prompt", json={"input": "set an alarm in paris for tomorrow", "k": 3}).json()
    pool = {e.id: e for e in pool_examples}
    top = client.post("/retrieve", json={"query": "set an alarm in paris for tomorrow", "k": 3}).json()["ids"]
    assert body["ids"] == list(reversed(top))  # most similar last
    expected = PromptBuilder(whitespace_tokens, budget=1920, max_demos=3).build(
        "set an alarm in paris for tomorrow", [(i, pool[i].input, pool[i].output) for i in top])
    assert body["prompt"] == expected.text and body["n_tokens"] == expected.n_tokens
    assert body["prompt"].endswith(f"{pool[top[0]].input}\t{pool[top[0]].output}\nset an alarm in paris for tomorrow\t")
    assert body["token_counter"] == "whitespace" and body["token_budget"] == 1920


def test_prompt_fills_the_budget(client, pool_examples):
    everything = client.post("/prompt", json={"input": "call john"}).json()
    assert len(everything["ids"]) == len(pool_examples)
    tight = client.post("/prompt", json={"input": "call john", "token_budget": 12}).json()
    assert 0 < len(tight["ids"]) < len(pool_examples) and tight["n_tokens"] <= 12
    assert client.post("/prompt", json={"input": "call john", "token_budget": 2}).json()["ids"] == []


@pytest.mark.parametrize("body, message", [
    ({"input": "a", "k": 0}, "body.k"),
    ({"input": "a", "k": 101}, "body.k"),
    ({"input": "a", "token_budget": 0}, "body.token_budget"),
    ({"query": "a"}, "body.input: Field required"),
    ({"input": ""}, "body.input"),
])
def test_bad_prompt_requests_get_422(client, body, message):
    response = client.post("/prompt", json=body)
    assert response.status_code == 422 and message in response.json()["message"]


def test_prompt_counts_tokens_with_the_index_lm(tmp_path, pool_examples, tiny_model_dir, tokenizer):
    folder = save_index(tmp_path / "i", BM25Retriever().index(pool_examples), pool_examples, lm=str(tiny_model_dir))
    client = TestClient(create_app(folder))
    body = client.post("/prompt", json={"input": "call my brother", "k": 2}).json()
    assert body["token_counter"] == f"tokenizer:{tiny_model_dir}"
    assert body["n_tokens"] == len(tokenizer(body["prompt"], add_special_tokens=False).input_ids)


def test_document_index_retrieve_and_no_prompt(tmp_path):
    folder = tmp_path / "docs"
    write_jsonl_rows(folder / "docs.jsonl", [{"id": "d1", "title": "Vitamin D", "text": "deficiency and mood"},
                                             {"id": "d2", "title": "Sleep", "text": "naps help memory"}])
    BM25Retriever().index_texts(["d1", "d2"], ["Vitamin D deficiency and mood", "Sleep naps help memory"]).save(folder)
    client = TestClient(create_app(folder))
    body = client.post("/retrieve", json={"query": "vitamin deficiency", "k": 1}).json()
    assert body["ids"] == ["d1"] and body["titles"] == ["Vitamin D"] and body["texts"] == ["deficiency and mood"]
    response = client.post("/prompt", json={"input": "vitamin"})
    assert response.status_code == 400 and "/prompt needs an example index" in response.json()["detail"]
    assert response.json()["message"] == response.json()["detail"]


def test_unexpected_errors_give_json_500_and_the_service_goes_on(bm25_index):
    app = create_app(bm25_index)
    client = TestClient(app)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    app.state.index.retriever.retrieve = broken
    response = client.post("/retrieve", json={"query": "a"})
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error", "message": "internal server error",
                               "error": "RuntimeError"}
    assert client.get("/health").status_code == 200


def test_create_app_refuses_a_mismatched_index(bm25_index):
    (bm25_index / ITEMS_FILE).write_text('{"id": "weather", "input": "a", "output": "b"}\n')
    with pytest.raises(InvalidIndex, match="items.jsonl: holds 1 records"):
        create_app(bm25_index)


def test_prompt_takes_max_demos_and_k_as_its_old_name(client):
    by_new_name = client.post("/prompt", json={"input": "call john", "max_demos": 2}).json()
    by_old_name = client.post("/prompt", json={"input": "call john", "k": 2}).json()
    assert len(by_new_name["ids"]) == 2 and by_new_name == by_old_name
    response = client.post("/prompt", json={"input": "a", "max_demos": 0})
    assert response.status_code == 422 and "body.max_demos" in response.json()["message"]


def test_default_budget_is_the_context_window_minus_the_answer_capped_by_the_lm(shared_bm25_index, tiny_model_dir):
    health = TestClient(create_app(shared_bm25_index, context_window=4096, max_new_tokens=96)).get("/health").json()
    assert health["token_budget"] == 4096 - 96
    # The tiny LM's context is 2,048 tokens: a larger window is capped to it.
    health = TestClient(create_app(shared_bm25_index, lm=str(tiny_model_dir), context_window=4096)).get("/health").json()
    assert health["token_budget"] == 2048 - 128
    assert TestClient(create_app(shared_bm25_index, token_budget=300)).get("/health").json()["token_budget"] == 300
    with pytest.raises(ValueError, match="no room for a prompt"):
        create_app(shared_bm25_index, context_window=100, max_new_tokens=100)


def test_oversized_body_without_a_length_gets_413_with_a_message(client):
    chunks = iter([b'{"query": "', b"x" * (MAX_BODY_BYTES // 2), b"x" * (MAX_BODY_BYTES // 2 + 10), b'"}'])
    response = client.post("/retrieve", content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "message" in response.json()


def test_unknown_paths_answer_with_a_message(client):
    response = client.get("/nothing-here")
    assert response.status_code == 404 and response.json()["message"] == "Not Found"


# -- /prompt's account of the demonstrations -------------------------------------------------------------------


def test_prompt_gives_the_demonstrations_texts_and_what_the_budget_left_out(client, pool_examples):
    pool = {e.id: e for e in pool_examples}
    retrieved = client.post("/retrieve", json={"query": "call john", "k": 4}).json()["ids"]
    body = client.post("/prompt", json={"input": "call john", "max_demos": 4, "token_budget": 12}).json()
    assert body["texts"] == [pool[i].input for i in body["ids"]]
    assert body["outputs"] == [pool[i].output for i in body["ids"]]
    assert body["left_out"] and set(body["left_out"]).isdisjoint(body["ids"])
    # The budget keeps the most similar and leaves out the rest, in retrieval order.
    assert list(reversed(body["ids"])) + body["left_out"] == retrieved
    roomy = client.post("/prompt", json={"input": "call john", "max_demos": 4}).json()
    assert roomy["left_out"] == [] and roomy["ids"] == list(reversed(retrieved))


# -- /generate -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm_client(shared_bm25_index, tiny_model_dir):
    app = create_app(shared_bm25_index, lm=str(tiny_model_dir), generate=True, max_new_tokens=8)
    return TestClient(app)


def test_generate_answers_the_prompt_that_prompt_builds(lm_client, tiny_model_dir):
    request = {"input": "call my brother", "max_demos": 2}
    prompt = lm_client.post("/prompt", json=request).json()
    body = lm_client.post("/generate", json={**request, "max_new_tokens": 4}).json()
    assert body["prompt"] == prompt["prompt"] and body["ids"] == prompt["ids"] and body["texts"] == prompt["texts"]
    assert isinstance(body["generation"], str) and "\n" not in body["generation"]
    assert body["lm"] == str(tiny_model_dir) and body["max_new_tokens"] == 4 and body["elapsed_s"] >= 0
    assert lm_client.post("/generate", json=request).json()["max_new_tokens"] == 8  # the server's answer room
    assert lm_client.get("/health").json()["generate"] == str(tiny_model_dir)


@pytest.mark.parametrize("body, message", [
    ({"input": "a", "max_new_tokens": 0}, "body.max_new_tokens: Input should be greater than or equal to 1"),
    ({"input": "a", "max_new_tokens": 257}, "body.max_new_tokens: Input should be less than or equal to 256"),
    ({"input": "a", "max_new_tokens": "4"}, "body.max_new_tokens: Input should be a valid integer"),
    ({"input": "a", "temperature": 0.7}, "body.temperature: Extra inputs are not permitted"),
    ({"prompt": "a"}, "body.input: Field required"),
    ({"input": " "}, "body.input: must not be blank"),
])
def test_bad_generate_requests_get_422(lm_client, body, message):
    response = lm_client.post("/generate", json=body)
    assert response.status_code == 422 and message in response.json()["message"]


def test_generate_without_an_lm_says_how_to_start_one(client):
    response = client.post("/generate", json={"input": "call john"})
    assert response.status_code == 404
    assert "no LM to generate with" in response.json()["message"] and "--generate" in response.json()["message"]
    assert client.get("/health").json()["generate"] is None


def test_generate_is_bounded_in_time(shared_bm25_index, tiny_model_dir):
    import threading

    app = create_app(shared_bm25_index, lm=str(tiny_model_dir), generate=True, generate_timeout_s=0.2)
    release = threading.Event()
    app.state.generator.generate = lambda *args, **kwargs: [release.wait(5) and "late"]
    response = TestClient(app).post("/generate", json={"input": "call john"})
    release.set()
    assert response.status_code == 504 and "over 0.2 s" in response.json()["message"]


def test_create_app_refuses_generate_without_an_lm_or_examples(shared_bm25_index, tmp_path):
    with pytest.raises(ValueError, match="generate needs an LM"):
        create_app(shared_bm25_index, generate=True)
    with pytest.raises(ValueError, match="this index holds documents"):
        create_app(_document_index(tmp_path), generate=True, lm="smollm2-135m")


# -- the reranker: first-stage and final ranks -----------------------------------------------------------------


def _document_index(tmp_path, **extra):
    from taskret.tart.tasks import Document

    docs = [Document("d1", "Alarms", "set an alarm for seven in the morning"),
            Document("d2", "Weather", "rain expected in paris tomorrow, an alarm for the morning rain"),
            Document("d3", "Music", "play some jazz in the kitchen in the morning"),
            Document("d4", "Script", "<script>alert(1)</script> morning")]
    retriever = BM25Retriever().index_texts([d.id for d in docs], [f"{d.title} {d.text}" for d in docs])
    return save_index(tmp_path / "docs", retriever, docs, kind="documents", extra=extra or None)


def test_a_reranked_answer_gives_each_results_first_stage_rank_and_score(tmp_path, tiny_model_dir):
    from taskret.tart.search import search_index

    spec = f"upr:{tiny_model_dir}"
    folder = _document_index(tmp_path, setup="custom", rerank=spec, rerank_depth=4, rerank_weight=None)
    client = TestClient(create_app(folder))
    health = client.get("/health").json()
    assert health["rerank"] == spec and health["rerank_depth"] == 4 and health["rerank_weight"] is None
    body = client.post("/retrieve", json={"query": "alarm in the morning", "instruction": "Find a document",
                                          "k": 3}).json()
    _, first = search_index(folder, ["Find a document [SEP] alarm in the morning"], top_k=4, reranker=None)
    _, final = search_index(folder, ["alarm in the morning"], instruction="Find a document", top_k=3)
    assert body["ids"] == final.ids[0] and body["scores"] == pytest.approx(final.scores[0].tolist(), abs=1e-5)
    assert body["first_stage_ranks"] == [first.ids[0].index(i) + 1 for i in body["ids"]]
    assert body["first_stage_scores"] == pytest.approx([float(first.scores[0][r - 1])
                                                        for r in body["first_stage_ranks"]], abs=1e-5)
    plain = TestClient(create_app(folder, rerank=None)).post("/retrieve", json={"query": "alarm", "k": 3}).json()
    assert "first_stage_ranks" not in plain and "first_stage_scores" not in plain


def test_the_servers_rerank_settings_override_the_index(tmp_path, tiny_model_dir):
    spec = f"upr:{tiny_model_dir}"
    folder = _document_index(tmp_path)  # records no reranker
    # All weight on the first stage: the first stage's order comes back, scores fused.
    client = TestClient(create_app(folder, rerank=spec, rerank_depth=3, rerank_weight=1.0))
    health = client.get("/health").json()
    assert (health["rerank"], health["rerank_depth"], health["rerank_weight"]) == (spec, 3, 1.0)
    body = client.post("/retrieve", json={"query": "alarm in the morning", "k": 4}).json()
    assert body["first_stage_ranks"] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="need a reranker"):
        create_app(folder, rerank_depth=5)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        create_app(folder, rerank=spec, rerank_weight=1.5)


# -- the page, its static files and /docs ---------------------------------------------------------------------

STATIC_TEXT = ("index.html", "page.js", "page.css")


def test_the_page_and_its_files_are_served_with_their_types(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for path, kind in [("/static/page.js", "javascript"), ("/static/page.css", "text/css"),
                       ("/static/favicon.svg", "image/svg+xml"),
                       ("/static/swagger-ui/swagger-ui-bundle.js", "javascript"),
                       ("/static/swagger-ui/swagger-ui.css", "text/css")]:
        response = client.get(path)
        assert response.status_code == 200 and kind in response.headers["content-type"], path
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/redoc").status_code == 404  # ReDoc would load from a CDN


def test_the_page_names_no_other_host_and_builds_no_markup_from_data():
    import re

    from taskret.serve.app import STATIC_DIR

    for name in STATIC_TEXT:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://|//cdn|\bsrc=\"//", text), name
    script = (STATIC_DIR / "page.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink  # texts reach the page as textContent only


def test_docs_load_swagger_ui_from_the_service(client):
    import re

    html = client.get("/docs").text
    assert "/static/swagger-ui/swagger-ui-bundle.js" in html and "/static/swagger-ui/swagger-ui.css" in html
    assert not re.search(r"https?://", html)  # no CDN, no favicon from elsewhere, no validator
    assert '"validatorUrl": null' in html


def test_the_serve_page_states_the_servers_limits():
    from pathlib import Path

    from taskret.serve import app as served

    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "how-to" / "serve.md").read_text(
        encoding="utf-8").split())
    assert f"`k` and `max_demos` at most {served.MAX_K};" in page
    assert f"at most {served.MAX_TEXT_CHARS:,} characters" in page
    assert f"`token_budget` at most {served.MAX_TOKEN_BUDGET:,}; `max_new_tokens` at most " \
           f"{served.MAX_GENERATE_TOKENS}; a request body at most {served.MAX_BODY_BYTES >> 20} MiB" in page


def test_a_memory_mapped_index_answers_as_one_read_whole(shared_bm25_index, tmp_path):
    """As each worker of `taskret serve --workers N` loads it: the texts are read from the mapped file on demand."""
    for folder in (shared_bm25_index, _document_index(tmp_path)):
        read, mapped = TestClient(create_app(folder)), TestClient(create_app(folder, mmap=True))
        assert isinstance(mapped.app.state.index.records, LazyRecords)
        for query in ("set an alarm for the morning", "rain in paris tomorrow"):
            body = {"query": query, "k": 4}
            assert mapped.post("/retrieve", json=body).json() == read.post("/retrieve", json=body).json()
    body = {"input": "set an alarm in paris for tomorrow", "k": 3}
    assert mapped.post("/prompt", json=body).status_code == 400  # a document index has no prompts
    read, mapped = TestClient(create_app(shared_bm25_index)), TestClient(create_app(shared_bm25_index, mmap=True))
    answer = mapped.post("/prompt", json=body).json()
    assert answer == read.post("/prompt", json=body).json() and len(answer["ids"]) == 3


@pytest.mark.parametrize("telemetry", [False, True])
def test_fastapis_telemetry_is_asked_for_providers_only_when_kept(shared_bm25_index, telemetry):
    # FastAPI >= 0.165 looks the global OpenTelemetry providers up on every request; taskret turns that off unless
    # telemetry=True (`taskret serve --telemetry`).
    pytest.importorskip("fastapi.telemetry")
    from unittest import mock

    from opentelemetry import trace

    with mock.patch.object(trace, "get_tracer_provider", wraps=trace.get_tracer_provider) as lookup:
        client = TestClient(create_app(shared_bm25_index, telemetry=telemetry))
        lookup.reset_mock()
        assert client.post("/retrieve", json={"query": "alarm", "k": 1}).status_code == 200
    assert lookup.called is telemetry
