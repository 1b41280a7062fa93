"""LM backends behind one interface: spec parsing, the transformers backend, and the openai backend
against taskret's own completions server (in process, tiny Llama) and against scripted HTTP failures."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from taskret.backends import (
    BackendError,
    LMBackend,
    TargetScore,
    make_backend,
    parse_options,
    parse_spec,
)
from taskret.backends.base import backend_options, cut_at_stop, load_lm
from taskret.backends.openai import OpenAIBackend

PROMPTS = ["set an alarm for six\tCREATE_ALARM six\nwake me up at seven\t",
           "play some jazz\tPLAY_MUSIC jazz\nplay rock music\t",
           "call my mother\tCREATE_CALL mother\ncall john on whatsapp please\t",
           "what is the weather in paris\tGET_WEATHER paris\nweather in rome tomorrow\t",
           "héllo wörld 日本語\tGREET 🙂\nbonjour\t"]
TARGETS = ["CREATE_ALARM seven", "PLAY_MUSIC rock", "CREATE_CALL john whatsapp", "GET_WEATHER rome tomorrow",
           "GREET 日本 ok"]


# -- specs -----------------------------------------------------------------------------------------


def test_parse_spec():
    assert parse_spec("smollm2-135m") == ("transformers", "smollm2-135m")
    assert parse_spec("/models/a:b") == ("transformers", "/models/a:b")  # a colon in a path is not a backend
    assert parse_spec("transformers:smollm2-135m") == ("transformers", "smollm2-135m")
    assert parse_spec("openai:http://127.0.0.1:8000/v1#m") == ("openai", "http://127.0.0.1:8000/v1#m")
    assert parse_spec("vllm:meta-llama/Llama-3.2-1B") == ("vllm", "meta-llama/Llama-3.2-1B")
    with pytest.raises(ValueError, match="no model"):
        parse_spec("openai:")


def test_parse_options_reads_json_values():
    assert parse_options(["concurrency=8", "timeout=2.5", "api-key-env=MY_KEY", "enforce_eager=true", "x=null"]) == {
        "concurrency": 8, "timeout": 2.5, "api_key_env": "MY_KEY", "enforce_eager": True, "x": None}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options(["concurrency"])


def test_unknown_options_are_named(tiny_model_dir):
    with pytest.raises(ValueError, match=r"unknown option\(s\) concurrency for the transformers LM backend; known: "):
        make_backend(str(tiny_model_dir), concurrency=4)
    assert {"concurrency", "timeout", "max_retries", "backoff", "batch_size"} <= set(backend_options("openai"))


def test_vllm_backend_says_what_to_install():
    pytest.importorskip("taskret.backends.vllm")
    try:
        import vllm  # noqa: F401
    except ImportError:
        from taskret.backends import BackendNotInstalled

        with pytest.raises(BackendNotInstalled, match=r"pip install 'taskret\[vllm\]'"):
            make_backend("vllm:smollm2-135m")
    else:  # pragma: no cover - GPU machines only
        pytest.skip("vllm is installed; its behaviour is not tested here")


def test_cut_at_stop():
    assert cut_at_stop("a\nb###c", "\n") == "a"
    assert cut_at_stop("ab###c\nd", ["\n", "###"]) == "ab"
    assert cut_at_stop("abc", None) == "abc"


def test_transformers_backend_is_the_default_and_matches_causal_lm(tiny_model_dir, tiny_lm):
    lm = load_lm(str(tiny_model_dir), {}, device="cpu", dtype="float32")
    assert isinstance(lm, LMBackend) and lm.backend == "transformers" and lm.name == str(tiny_model_dir)
    explicit = make_backend(f"transformers:{tiny_model_dir}", max_batch_tokens=64)
    assert explicit.name == str(tiny_model_dir) and explicit.max_batch_tokens == 64
    for a, b in zip(lm.score(PROMPTS, TARGETS), tiny_lm.score(PROMPTS, TARGETS)):
        assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert lm.generate(PROMPTS[:2], max_new_tokens=4) == tiny_lm.generate(PROMPTS[:2], max_new_tokens=4)


# -- the openai backend against taskret's completions server, in process ------------------------------


@pytest.fixture(scope="module")
def server_client(tiny_lm):
    from fastapi.testclient import TestClient

    from taskret.backends.lm_server import create_lm_app

    with TestClient(create_lm_app(tiny_lm, "tiny"), base_url="http://testserver") as client:
        yield client


@pytest.fixture
def http_lm(server_client):
    return OpenAIBackend("http://testserver/v1", client=server_client, concurrency=4)


def test_openai_backend_scores_like_the_model_in_process(http_lm, tiny_lm):
    assert http_lm.name == "openai:tiny"  # the only served model, found through /v1/models
    done: list[int] = []
    remote = http_lm.score(PROMPTS, TARGETS, progress=done.append)
    local = tiny_lm.score(PROMPTS, TARGETS)
    assert sum(done) == len(PROMPTS)
    for r, loc in zip(remote, local):
        # The server tokenizes prompt + target as one text; on these pairs the tokens are the same.
        assert r.n_tokens == loc.n_tokens
        assert r.logprob == pytest.approx(loc.logprob, abs=1e-3)


def test_openai_backend_batches_prompts_per_request(server_client, tiny_lm):
    lm = OpenAIBackend("http://testserver/v1", "tiny", client=server_client, batch_size=2, concurrency=2)
    for r, loc in zip(lm.score(PROMPTS, TARGETS), tiny_lm.score(PROMPTS, TARGETS)):
        assert r.n_tokens == loc.n_tokens and r.logprob == pytest.approx(loc.logprob, abs=1e-3)


def test_openai_backend_generates_like_the_model_in_process(http_lm, tiny_lm):
    assert http_lm.generate(PROMPTS, max_new_tokens=6, stop=None) == tiny_lm.generate(PROMPTS, max_new_tokens=6, stop=None)
    assert http_lm.generate(PROMPTS, max_new_tokens=6) == tiny_lm.generate(PROMPTS, max_new_tokens=6)


def test_openai_backend_counts_tokens_and_context(http_lm, tiny_lm, server_client):
    # "tiny" is not a registered model, so counts come from the server's /tokenize
    for text in PROMPTS:
        assert http_lm.count_tokens(text) == tiny_lm.count_tokens(text)
    assert http_lm._tokenize_route == "vllm"
    assert http_lm.context_length == tiny_lm.context_length


def test_server_echo_logprobs_layout(server_client, tokenizer):
    text = "héllo wörld 日本語\tX"
    body = server_client.post("/v1/completions", json={"model": "tiny", "prompt": text, "max_tokens": 0,
                                                        "echo": True, "logprobs": 2}).json()
    lp = body["choices"][0]["logprobs"]
    ids = tokenizer(text).input_ids
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["text_offset"])
    assert "".join(lp["tokens"]) == text  # the tokens tile the text, multi-byte characters included
    assert lp["token_logprobs"][0] is None and all(v <= 0 for v in lp["token_logprobs"][1:])
    assert lp["top_logprobs"][0] is None and all(len(t) <= 2 for t in lp["top_logprobs"][1:])
    assert [lp["text_offset"][i] for i in range(len(ids))] == [sum(map(len, lp["tokens"][:i])) for i in range(len(ids))]
    assert body["usage"]["prompt_tokens"] == len(ids)


@pytest.mark.parametrize("payload, status, message", [
    ({"model": "other", "prompt": "x"}, 404, "is not served here"),
    ({"prompt": "x", "temperature": 0.7}, 400, "greedily"),
    ({"prompt": "x", "max_tokens": 3, "logprobs": 1}, 400, "log-probabilities of generated tokens"),
    ({"prompt": "x", "stream": True}, 400, "streaming"),
    ({"prompt": 3}, 400, "'prompt' must be"),
    ({"prompt": [[10, 99999999]]}, 400, "within the vocabulary"),
    ({"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "x " * 3000, "max_tokens": 1}, 400, "exceeds the context"),
])
def test_server_refuses_what_it_cannot_do(server_client, payload, status, message):
    response = server_client.post("/v1/completions", json=payload)
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_server_takes_token_id_prompts(server_client, tokenizer):
    ids = tokenizer("set an alarm").input_ids
    body = server_client.post("/v1/completions", json={"prompt": [ids, ids], "max_tokens": 0, "echo": True,
                                                        "logprobs": 0}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["choices"][0]["text"] == "set an alarm"
    assert body["choices"][0]["logprobs"]["token_logprobs"] == body["choices"][1]["logprobs"]["token_logprobs"]


def test_server_batches_concurrent_requests(server_client, tiny_lm):
    """Requests sent in parallel are answered correctly whatever the model thread batches together."""
    lm = OpenAIBackend("http://testserver/v1", "tiny", client=server_client, concurrency=8)
    many_prompts, many_targets = PROMPTS * 4, TARGETS * 4
    remote = lm.score(many_prompts, many_targets)
    local = tiny_lm.score(many_prompts, many_targets)
    assert [r.n_tokens for r in remote] == [loc.n_tokens for loc in local]
    assert [r.logprob for r in remote] == pytest.approx([loc.logprob for loc in local], abs=1e-3)


# -- the openai backend against scripted failures -----------------------------------------------------


def echo_choice(text: str, prompt_len: int, index: int = 0) -> dict:
    """A completions choice whose tokens are the text's characters, each with log-probability -1."""
    return {"index": index, "text": text, "finish_reason": "length",
            "logprobs": {"tokens": list(text), "token_logprobs": [None] + [-1.0] * (len(text) - 1),
                         "text_offset": list(range(len(text)))}}


def scripted(handler, **kwargs) -> OpenAIBackend:
    sleeps: list[float] = []
    lm = OpenAIBackend("http://mock/v1", "m", client=httpx.Client(transport=httpx.MockTransport(handler)),
                       sleep=sleeps.append, **kwargs)
    lm.sleeps = sleeps
    return lm


def completions_handler(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    return httpx.Response(200, json={"choices": [echo_choice(p, 0, i) for i, p in enumerate(prompts)]})


def test_scores_sum_only_the_target_characters_tokens():
    lm = scripted(completions_handler)
    assert lm.score(["abc\t", "x"], ["de", "yz"]) == [TargetScore(-2.0, 2), TargetScore(-2.0, 2)]


def test_retries_with_exponential_backoff_then_succeeds():
    calls = []

    def handler(request):
        calls.append(request)
        if len(calls) <= 3:
            return [httpx.Response(503, json={"error": {"message": "overloaded"}}),
                    httpx.Response(429, json={"error": {"message": "slow down"}}),
                    httpx.Response(502, text="bad gateway")][len(calls) - 1]
        return completions_handler(request)

    lm = scripted(handler, max_retries=5, backoff=1.0)
    assert lm.score(["ab"], ["c"]) == [TargetScore(-1.0, 1)]
    assert len(calls) == 4
    # doubled each time, with jitter in [0.5, 1] x
    assert 0.5 <= lm.sleeps[0] <= 1 and 1 <= lm.sleeps[1] <= 2 and 2 <= lm.sleeps[2] <= 4


def test_retry_after_header_is_honoured():
    calls = []

    def handler(request):
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"message": "quota"}})
        return completions_handler(request)

    lm = scripted(handler)
    lm.score(["ab"], ["c"])
    assert lm.sleeps == [7.0]


def test_gives_up_after_max_retries_with_the_last_error():
    lm = scripted(lambda r: httpx.Response(500, json={"error": {"message": "boom"}}), max_retries=2)
    with pytest.raises(BackendError, match=r"failed after 3 attempts: HTTP 500: boom"):
        lm.score(["ab"], ["c"])
    assert len(lm.sleeps) == 2


def test_client_errors_are_not_retried():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, json={"error": {"message": "echo is not supported with logprobs"}})

    lm = scripted(handler)
    with pytest.raises(BackendError, match="HTTP 400: echo is not supported with logprobs"):
        lm.score(["ab"], ["c"])
    assert len(calls) == 1 and lm.sleeps == []


def test_timeouts_are_retried_and_reported():
    def handler(request):
        raise httpx.ReadTimeout("slow", request=request)

    lm = scripted(handler, max_retries=1, timeout=0.5)
    with pytest.raises(BackendError, match=r"failed after 2 attempts: no answer within 0.5 s \(ReadTimeout\)"):
        lm.generate(["x"])


def test_a_real_request_timeout_fires():
    """The timeout is the client's: a server that never answers is abandoned after `timeout` seconds."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self):
            release.wait(5)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        lm = OpenAIBackend(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", timeout=0.3, max_retries=0)
        start = time.monotonic()
        with pytest.raises(BackendError, match="no answer within 0.3 s"):
            lm.score(["ab"], ["c"])
        assert time.monotonic() - start < 3
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_missing_prompt_logprobs_is_a_clear_error():
    def handler(request):
        return httpx.Response(200, json={"choices": [{"index": 0, "text": "abc", "logprobs": None}]})

    with pytest.raises(BackendError, match="returned no prompt log-probabilities.*chat-only APIs cannot score"):
        scripted(handler).score(["ab"], ["c"])


def test_concurrency_is_limited():
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def handler(request):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.03)
        with lock:
            state["now"] -= 1
        return completions_handler(request)

    lm = scripted(handler, concurrency=3)
    scores = lm.score([f"p{i}" for i in range(15)], ["t"] * 15)
    assert scores == [TargetScore(-1.0, 1)] * 15
    assert 2 <= state["peak"] <= 3


def test_several_served_models_must_be_named():
    def handler(request):
        return httpx.Response(200, json={"data": [{"id": "a"}, {"id": "b"}]})

    with pytest.raises(BackendError, match=r"serves 2 models \(a, b\); name one"):
        OpenAIBackend("http://mock/v1", client=httpx.Client(transport=httpx.MockTransport(handler)))


def test_api_key_and_base_url_come_from_the_environment(monkeypatch):
    from taskret.backends.openai import split_target

    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-host:9/v1/")
    assert split_target("m") == ("http://env-host:9/v1", "m")
    assert split_target("http://h:1/v1#x") == ("http://h:1/v1", "x")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValueError, match="no server URL"):
        split_target("m")
    seen = {}

    def handler(request):
        seen["auth"] = request.headers.get("authorization")
        return completions_handler(request)

    lm = OpenAIBackend("http://mock/v1", "m", api_key="sk-test",
                       client=httpx.Client(transport=httpx.MockTransport(handler)))
    lm.generate(["x"])
    assert seen["auth"] == "Bearer sk-test"


# -- the generation engine -----------------------------------------------------------------------


def test_a_bundled_model_named_bare_generates_on_llamacpp_only_on_a_cpu_without_bf16(monkeypatch, capsys):
    """llama.cpp was measured faster at the same answers on CPUs without native bfloat16; everywhere else, and
    whenever the user names a backend or gives its options, the spec is kept as given."""
    import importlib.util

    from taskret import models
    from taskret.backends import base
    from taskret.backends.base import engine_of, generation_spec

    monkeypatch.setattr(base, "_SAID", set())
    monkeypatch.setattr(models, "_cpu_has_fast_bf16", lambda: False)
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "llama_cpp" else found(name, *a))
    assert generation_spec("smollm2-135m", device="cpu") == "llamacpp:smollm2-135m"
    assert generation_spec("gemma3-270m", device="auto", dtype="auto") == "llamacpp:gemma3-270m"
    assert engine_of(generation_spec("smollm2-135m", device="cpu")) == "llama.cpp"
    for kept, kwargs in (("transformers:smollm2-135m", {}), ("smollm2-135m", {"options": {"max_batch_size": 4}}),
                         ("smollm2-135m", {"device": "cuda"}), ("smollm2-135m", {"dtype": "bfloat16"}),
                         ("/models/my-llama", {}), ("openai:http://h:8000/v1#m", {})):
        assert generation_spec(kept, device=kwargs.pop("device", "cpu"), **kwargs) == kept, kept
    assert engine_of("smollm2-135m") == "transformers"
    monkeypatch.setattr(models, "_cpu_has_fast_bf16", lambda: True)  # bf16 here: transformers' bf16 path
    assert generation_spec("smollm2-135m", device="cpu") == "smollm2-135m"
    monkeypatch.setattr(models, "_cpu_has_fast_bf16", lambda: False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else found(name, *a))
    assert generation_spec("smollm2-135m", device="cpu") == "smollm2-135m"  # no extra: transformers, said once
    assert generation_spec("smollm2-135m", device="cpu") == "smollm2-135m"
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["llama.cpp is not installed (pip install 'taskret[llamacpp]'), so generation runs on "
                    "transformers, the slower engine on this CPU"]
