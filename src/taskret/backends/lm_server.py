"""``taskret serve-lm``: one machine serves an LM over the OpenAI completions API, for scoring and
inference jobs that run elsewhere (``--lm openai:http://HOST:PORT/v1#NAME``).

Routes (the subset of the OpenAI and vLLM APIs that scoring and greedy inference need):

- ``GET  /v1/models``: the served model, with ``max_model_len``;
- ``POST /v1/completions``: ``prompt`` (text, texts, token ids or lists of token ids); greedy decoding up to
  ``max_tokens`` and ``stop``; ``echo`` returns the prompt too, and ``echo`` with ``logprobs=K`` and
  ``max_tokens=0`` returns every prompt token's log-probability, its top-K alternatives and its character
  ``text_offset`` (the first token has none: nothing precedes it);
- ``POST /tokenize`` (vLLM's shape: ``{"prompt"}`` -> ``{"tokens", "count", "max_model_len"}``);
- ``GET  /health``.

Concurrent requests are batched: a single thread owns the model and, whenever it is free, takes every
queued request (up to ``max_batch_tokens`` of work is then split by the LM's own token batching), so
clients that send requests in parallel get batched forward passes. Decoding is greedy only: a request
with ``temperature > 0``, ``n > 1`` or ``stream`` is refused with a 400 that says so; log-probabilities of
generated tokens are not returned (scoring uses ``echo`` with ``max_tokens=0``).
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations (Request).
import asyncio
import logging
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from .base import BackendNotInstalled, cut_at_stop

logger = logging.getLogger(__name__)

MAX_TOP_LOGPROBS = 20


def _import_fastapi():
    try:
        import fastapi  # noqa: F401
    except ImportError as err:
        raise BackendNotInstalled("serving an LM needs FastAPI and uvicorn: pip install 'taskret[serve]'") from err


class RequestError(ValueError):
    """A request the server refuses (HTTP 400), with an OpenAI-style message."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param = param
        self.status = status


@dataclass
class _Job:
    kind: str  # "logprobs" or "generate"
    key: tuple
    payload: Any
    future: Future = field(default_factory=Future)


class ModelWorker:
    """The thread that owns the model; batches the queued jobs of concurrent requests."""

    def __init__(self, lm, max_batch_items: int = 256):
        self.lm = lm
        self.max_batch_items = max_batch_items
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="taskret-serve-lm", daemon=True)
        self.thread.start()

    def submit(self, kind: str, key: tuple, payload: Any) -> Future:
        job = _Job(kind, key, payload)
        self.jobs.put(job)
        return job.future

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            batch = [job]
            items = len(job.payload)
            while items < self.max_batch_items:
                try:
                    more = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.jobs.put(None)
                    break
                batch.append(more)
                items += len(more.payload)
            groups: dict[tuple, list[_Job]] = {}
            for j in batch:
                groups.setdefault((j.kind, j.key), []).append(j)
            for (kind, key), jobs in groups.items():
                self._run_group(kind, key, jobs)

    def _run_group(self, kind: str, key: tuple, jobs: list[_Job]) -> None:
        flat = [item for j in jobs for item in j.payload]
        try:
            if kind == "logprobs":
                results = self.lm.token_logprobs(flat, top_k=key[0])
            else:
                max_tokens, stop_on_newline = key
                results = self.lm.generate_raw(flat, max_new_tokens=max_tokens, stop_on_newline=stop_on_newline)
        except Exception as err:  # a failed batch fails its requests, never the server
            logger.exception("model call failed")
            for j in jobs:
                j.future.set_exception(err)
            return
        at = 0
        for j in jobs:
            j.future.set_result(results[at: at + len(j.payload)])
            at += len(j.payload)


def _token_spans(tokenizer, text: str, ids: list[int]) -> list[tuple[int, int]]:
    """Character spans of ``ids`` (the tokens of ``text``) that tile the text without overlaps: a
    character split over several byte-level tokens belongs to the first; special tokens are empty."""
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
    if list(enc.input_ids) != list(ids):
        return _decoded_spans(tokenizer, ids)
    spans, prev = [], 0
    for start, end in enc.offset_mapping:
        start = max(start, prev)
        end = max(end, start)
        spans.append((start, end))
        prev = end
    return spans


def _decoded_spans(tokenizer, ids: list[int]) -> list[tuple[int, int]]:
    spans, prev = [], 0
    for i in range(len(ids)):
        end = len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True).rstrip("\ufffd"))
        end = max(end, prev)
        spans.append((prev, end))
        prev = end
    return spans


def create_lm_app(lm, model_name: str | None = None, max_batch_items: int = 256):
    """The FastAPI app serving ``lm`` (a :class:`taskret.lm.CausalLM`) as ``model_name``."""
    _import_fastapi()
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    model_name = model_name or lm.name
    tokenizer = lm.tokenizer
    worker = ModelWorker(lm, max_batch_items=max_batch_items)

    @asynccontextmanager
    async def lifespan(_app):
        yield
        worker.stop()

    app = FastAPI(title="taskret serve-lm", description=__doc__, lifespan=lifespan)
    app.state.worker = worker
    app.state.model_name = model_name

    def error(message: str, status: int = 400, param: str | None = None, kind: str = "invalid_request_error"):
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}},
                            status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(_, err: RequestError):
        return error(str(err), err.status, err.param)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_, err: RequestValidationError):
        return error(f"invalid request: {err.errors()[:3]}")

    async def body_of(request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    def check_model(body: dict) -> None:
        model = body.get("model")
        if model is not None and model != model_name:
            raise RequestError(f"model '{model}' is not served here; this server serves '{model_name}'", "model",
                               status=404)

    def prompts_of(value: Any) -> tuple[list[str | None], list[list[int]]]:
        """Texts (None where given as token ids) and token ids (with BOS as the model expects)."""
        if isinstance(value, str):
            value = [value]
        elif isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            value = [value]
        if not isinstance(value, list) or not value:
            raise RequestError("'prompt' must be a string, a list of strings, or token ids", "prompt")
        texts, ids = [], []
        vocab = len(tokenizer)
        for p in value:
            if isinstance(p, str):
                texts.append(p)
                ids.append(list(lm._encode_prompt(p)))
            elif isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in p):
                texts.append(None)
                ids.append(list(p))
            else:
                raise RequestError("each prompt must be a string or a list of token ids within the vocabulary",
                                   "prompt")
        return texts, ids

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "taskret", "max_model_len": lm.context_length}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await body_of(request)
        check_model(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError("'prompt' must be a string", "prompt")
        special = body.get("add_special_tokens", True)
        ids = tokenizer(prompt, add_special_tokens=bool(special)).input_ids
        return {"tokens": ids, "count": len(ids), "max_model_len": lm.context_length}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await body_of(request)
        check_model(body)
        if body.get("stream"):
            raise RequestError("streaming is not supported", "stream")
        if body.get("n", 1) != 1 or body.get("best_of", 1) not in (1, None):
            raise RequestError("only n=1 is supported", "n")
        temperature = body.get("temperature")
        if temperature is not None and (not isinstance(temperature, (int, float)) or temperature > 0):
            raise RequestError("this server decodes greedily; send temperature=0 (or leave it out)", "temperature")
        max_tokens = body.get("max_tokens", 16)
        if max_tokens is None:
            max_tokens = 16
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise RequestError("'max_tokens' must be a non-negative integer", "max_tokens")
        echo = bool(body.get("echo", False))
        logprobs = body.get("logprobs")
        if logprobs is not None and (not isinstance(logprobs, int) or isinstance(logprobs, bool)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise RequestError(f"'logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", "logprobs")
        if logprobs is not None and max_tokens > 0:
            raise RequestError("log-probabilities of generated tokens are not supported; to score text send it "
                               "as the prompt with echo=true, logprobs=N and max_tokens=0", "logprobs")
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
            raise RequestError("'stop' must be a string or a list of strings", "stop")
        stop = [s for s in stop or [] if s]
        texts, ids = prompts_of(body.get("prompt"))
        too_long = [len(i) + max_tokens for i in ids if len(i) + max_tokens > lm.context_length]
        if too_long:
            raise RequestError(f"a prompt of {too_long[0] - max_tokens} tokens plus max_tokens={max_tokens} exceeds "
                               f"the context of {lm.context_length} tokens", "prompt")

        choices: list[dict] = []
        completion_tokens = 0
        if max_tokens == 0:
            # Nothing to generate: log-probabilities of the prompt when asked, else just the echo.
            token_data = None
            if logprobs is not None and echo:
                future = worker.submit("logprobs", (logprobs,), ids)
                token_data = await asyncio.wrap_future(future)
            for k, (text, seq) in enumerate(zip(texts, ids)):
                shown = (text if text is not None else tokenizer.decode(seq)) if echo else ""
                lp = None
                if logprobs is not None:
                    lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
                    if echo:
                        lp = _echo_logprobs(tokenizer, shown, seq, *token_data[k], top_k=logprobs)
                choices.append({"index": k, "text": shown, "logprobs": lp, "finish_reason": "length"})
        else:
            future = worker.submit("generate", (max_tokens, "\n" in stop), [
                t if t is not None else tokenizer.decode(s) for t, s in zip(texts, ids)])
            generated = await asyncio.wrap_future(future)
            for k, ((raw, n_new), text, seq) in enumerate(zip(generated, texts, ids)):
                cut = cut_at_stop(raw, stop)
                finish = "stop" if len(cut) < len(raw) or n_new < max_tokens else "length"
                completion_tokens += n_new
                prefix = (text if text is not None else tokenizer.decode(seq)) if echo else ""
                choices.append({"index": k, "text": prefix + cut, "logprobs": None, "finish_reason": finish})
        prompt_tokens = sum(len(i) for i in ids)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    return app


def _echo_logprobs(tokenizer, text: str, ids: list[int], values: list[float], tops: list, top_k: int) -> dict:
    spans = _token_spans(tokenizer, text, ids)
    tokens = [text[s:e] for s, e in spans]
    token_logprobs: list[float | None] = [None, *values] if ids else []
    top_logprobs: list[dict | None] = []
    if ids:
        top_logprobs.append(None)
        for alternatives in (tops if top_k else [[] for _ in values]):
            top_logprobs.append({tokenizer.decode([i]): v for i, v in alternatives})
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
            "text_offset": [s for s, _ in spans]}


def serve_lm(lm_spec: str, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None,
          device: str | None = None, dtype: str = "auto", max_batch_tokens: int = 8192, log_level: str = "warning",
          ready: Any = None) -> None:
    """Load ``lm_spec`` (a transformers model: name or folder) and serve it until interrupted."""
    _import_fastapi()
    import uvicorn

    from .base import load_lm, parse_spec

    kind, target = parse_spec(lm_spec)
    if kind != "transformers":
        raise ValueError(f"serve-lm serves models that run in this process (a name or a folder); '{lm_spec}' "
                         f"is a {kind} backend")
    lm = load_lm(lm_spec, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens)
    app = create_lm_app(lm, model_name or target)
    if ready is not None:
        ready(app)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
