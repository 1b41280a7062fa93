"""The retrieval service: a FastAPI app over one index folder.

Endpoints (the OpenAPI schema is at ``/openapi.json``, interactive docs at ``/docs``, a page to try it at ``/``):

- ``POST /retrieve`` ``{"query", "instruction"?, "k"?}``: the top-k ids, scores and texts. With an
  instruction the query is TART's ``"{instruction} [SEP] {query}"``; the first stage reads of it what its spec
  says (the named setups: the query alone), a reranker reads it all. An index built from a named setup with a
  reranker (``taskret tart index --setup docs-rerank``) is reranked as it records
  (:func:`~taskret.tart.search.recorded_rerank`), unless ``create_app(rerank=...)`` (``taskret serve --rerank``,
  ``--no-rerank``) says otherwise; reranked answers carry each result's first-stage rank and score too.
- ``POST /prompt`` ``{"input", "max_demos"?, "token_budget"?}`` (example indexes only; ``k`` is accepted
  for ``max_demos``): the in-context-learning prompt ``taskret evaluate`` would build: demonstrations
  ``"{input}\\t{output}"`` filled in retrieval order up to the token budget, most similar last, then
  ``"{input}\\t"``; and the ids it used, in prompt order. The default budget is
  :func:`~taskret.icl.prompt.prompt_token_budget` of the server's context window and answer room.
  Tokens are counted with the tokenizer of the LM the index records (``taskret index --lm``, or
  ``taskret serve --lm``); without one, whitespace-separated words are counted, which undercounts
  sub-word tokens (``token_counter`` in the answer says which was used). The answer also holds the
  demonstrations' texts and the retrieved examples the prompt left out. An index that records a selection (one
  built from an EPR run trained for CEIL's DPP, ``set_training``) is selected with it as ``taskret evaluate`` selects
  (:mod:`taskret.icl.selection`: the set chosen from the top ``n_candidates`` that fits the budget), unless
  ``create_app(select=...)`` (``taskret serve --select``) says otherwise; ``selection`` in the answer says which.
- ``POST /generate`` ``{"input", "max_demos"?, "token_budget"?, "max_new_tokens"?}`` (a server started with an
  LM to generate with, ``taskret serve --generate``): the prompt ``/prompt`` builds, and the LM's greedy answer
  to it, cut at the first newline as ``taskret evaluate`` cuts it; at most ``MAX_GENERATE_TOKENS`` new tokens,
  and 504 past the server's time bound.
- ``GET /health``: status and what is served (the reranker that runs, the LM that generates).
- ``GET /``: a page over these (static files under ``static/``, no build step, nothing fetched from elsewhere);
  ``GET /docs``: Swagger UI, its assets served from ``static/swagger-ui/`` so that it works offline.

Bad requests get 422 with a ``message`` naming each bad field (unknown fields, k outside 1..100, empty,
blank or over-long strings, wrong JSON types, malformed JSON); bodies over 1 MiB get 413; anything
unexpected gets a JSON 500 and the service keeps serving. Every error answer carries ``detail`` and a
``message`` (one line for a person).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Annotated, Optional, Sequence

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..formats import format_query
from ..icl.prompt import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_NEW_TOKENS,
    PromptBuilder,
    TokenCounter,
    make_token_counter,
    prompt_token_budget,
)
from ..icl.selection import RECORDED as SELECT_RECORDED
from ..icl.selection import BoundSelection, prompt_fit, resolve_selection
from ..retrieval.base import RetrievalResult
from ..retrieval.index import LoadedIndex, load_index
from ..retrieval.sharded_index import load_sharded_index
from ..tart.search import RECORDED, rerank_first_stage, resolve_rerank
from .batching import BatchedSearch

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 10_000
MAX_K = 100
DEFAULT_K = 5
MAX_TOKEN_BUDGET = 131_072
PROMPT_DEPTH = 100  # examples retrieved per /prompt without max_demos: enough to fill any sensible budget
MAX_BODY_BYTES = 1 << 20
MAX_GENERATE_TOKENS = 256  # /generate's bound on new tokens: an answer, not an essay, on a CPU
DEFAULT_GENERATE_TIMEOUT_S = 60.0
STATIC_DIR = Path(__file__).parent / "static"
# The page's scripts, styles, images and requests come from this service only: a document that smuggled markup
# past the page's escaping still could not run a script or reach another host.
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS), AfterValidator(_not_blank)]


class _Request(BaseModel):
    # strict: "5" is not a k and 5 is not a query; unknown fields are mistakes, not extensions.
    model_config = ConfigDict(extra="forbid", strict=True)


class RetrieveRequest(_Request):
    query: Text = Field(description="the query text")
    instruction: Optional[Text] = Field(None, description="what to find (TART): the query becomes "
                                        "'{instruction} [SEP] {query}'")
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many results")


class RetrieveResponse(BaseModel):
    query: str = Field(description="the text searched (with the instruction, if any)")
    ids: list[str] = Field(description="ranked ids, best first")
    scores: list[Optional[float]] = Field(description="their scores, higher is closer")
    texts: list[str] = Field(description="example inputs, or document texts")
    outputs: Optional[list[str]] = Field(None, description="example outputs (example indexes)")
    titles: Optional[list[Optional[str]]] = Field(None, description="document titles (document indexes)")
    first_stage_ranks: Optional[list[int]] = Field(None, description="with a reranker: each result's rank (1 = "
                                                   "best) in the first stage, before reranking")
    first_stage_scores: Optional[list[Optional[float]]] = Field(None, description="with a reranker: each result's "
                                                                "first-stage score ('scores' are the final ones)")
    note: Optional[str] = Field(None, description="what the service did not do as asked (an instruction no stage "
                                "of this index reads is left out of the searched text)")
    missing_shards: Optional[list[str]] = Field(None, description="a sharded index's shards that did not answer "
                                                "(served with allow_partial): the results are the other shards' alone")


class PromptRequest(_Request):
    input: Text = Field(description="the test input")
    max_demos: Optional[int] = Field(None, ge=1, le=MAX_K, validation_alias=AliasChoices("max_demos", "k"),
                                     description="at most this many demonstrations (default: fill the budget); "
                                     "'k' is accepted for it")
    token_budget: Optional[int] = Field(None, ge=1, le=MAX_TOKEN_BUDGET,
                                        description="prompt tokens allowed (default: the server's)")


class PromptResponse(BaseModel):
    prompt: str
    ids: list[str] = Field(description="the demonstrations used, in prompt order (most similar last)")
    texts: list[str] = Field(description="their inputs, in prompt order")
    outputs: list[str] = Field(description="their outputs as the prompt shows them, in prompt order")
    left_out: list[str] = Field(description="the examples retrieved for the prompt that it left out (over the token "
                                "budget, or not selected), in retrieval order")
    n_tokens: int
    token_budget: int
    token_counter: str = Field(description="'tokenizer:LM' or 'whitespace' (approximate)")
    selection: Optional[dict] = Field(None, description="the set selection that chose the demonstrations among the "
                                      "top n_candidates (method, weight, n_candidates, ...); null: the ranking's top, "
                                      "in order")
    missing_shards: Optional[list[str]] = Field(None, description="a sharded index's shards that did not answer "
                                                "(served with allow_partial): the demonstrations come from the others")


class GenerateRequest(PromptRequest):
    max_new_tokens: Optional[int] = Field(None, ge=1, le=MAX_GENERATE_TOKENS,
                                          description="at most this many new tokens (default: the server's answer "
                                          f"room; at most {MAX_GENERATE_TOKENS})")


class GenerateResponse(PromptResponse):
    generation: str = Field(description="the LM's greedy continuation of the prompt, cut at the first newline and "
                            "stripped (as `taskret evaluate` reads it)")
    lm: str = Field(description="the LM that generated it")
    max_new_tokens: int
    elapsed_s: float = Field(description="seconds spent generating")


class HealthResponse(BaseModel):
    status: str
    version: str
    index: str
    kind: str
    retriever: str
    query_encoder: Optional[str] = Field(None, description="the model encoding queries, where it is not the "
                                         "index's encoder (`taskret serve --query-encoder`)")
    n: int
    instruction: Optional[str] = Field(None, description="the index's instruction, if it records one (document "
                                       "indexes; /retrieve applies only the one a request gives)")
    rerank: Optional[str] = Field(None, description="the reranker /retrieve runs: the one the index's setup records "
                                  "unless the server was told otherwise (`taskret serve --rerank/--no-rerank`)")
    rerank_depth: Optional[int] = Field(None, description="first-stage results the reranker reorders")
    rerank_weight: Optional[float] = Field(None, description="the first stage's share when fused with the "
                                           "reranker (none: the reranker's order alone)")
    generate: Optional[str] = Field(None, description="the LM /generate runs, if any (`taskret serve --generate`)")
    selection: Optional[dict] = Field(None, description="the set selection /prompt applies: the index's recorded one "
                                      "(an EPR run trained for CEIL's DPP) unless the server was told otherwise "
                                      "(`taskret serve --select`); null: the ranking's top")
    token_counter: str
    token_budget: int
    uptime_s: float


def _error_message(errors: list[dict]) -> str:
    parts = []
    for err in errors:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "invalid request: " + "; ".join(parts)


def _clean_error(err: dict) -> dict:
    loc, msg, kind = list(err.get("loc", ())), err.get("msg"), err.get("type")
    if kind == "json_invalid":
        position = loc[1] if len(loc) > 1 else None
        loc = loc[:1]
        msg = f"malformed JSON ({(err.get('ctx') or {}).get('error', 'decode error')}" + (
            f", at character {position})" if position is not None else ")")
    elif kind == "model_attributes_type" and isinstance(err.get("input"), (bytes, str)):
        msg = "expected a JSON object; send the body as JSON with 'Content-Type: application/json'"
    elif kind == "model_attributes_type":
        msg = "expected a JSON object"
    elif kind == "value_error" and isinstance(msg, str):
        msg = msg.removeprefix("Value error, ")
    return {"loc": loc, "msg": msg, "type": kind}


def _error(status: int, detail: str, **extra) -> JSONResponse:
    """An error answer: ``detail`` as FastAPI gives it, and the one-line ``message`` every error carries."""
    return _json(status, {"detail": detail, "message": detail, **extra})


_TOO_LARGE = f"request body over {MAX_BODY_BYTES} bytes"


class _BodyTooLarge(Exception):
    pass


class _GuardMiddleware:
    """Outermost safety net: bodies over ``MAX_BODY_BYTES`` get 413, and any exception that escapes the
    app becomes a JSON 500 (logged with its traceback) instead of a dropped connection."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
                await _error(413, _TOO_LARGE)(scope, receive, send)
                return
        started = False
        received = 0
        too_large = False

        async def counting_receive():
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    too_large = True
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message):
            nonlocal started
            if too_large:
                # FastAPI turns a body it could not read into its own 400: the answer is this 413 instead.
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await _error(413, _TOO_LARGE)(scope, receive, send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _error(413, _TOO_LARGE)(scope, receive, send)
        except Exception as err:  # noqa: BLE001 - the service must answer, whatever went wrong
            logger.exception("unexpected error serving %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _error(500, "internal server error", error=type(err).__name__)(scope, receive, send)


def _json(status: int, body: dict) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _first_stage_positions(first: RetrievalResult, ids: Sequence[str]) -> tuple[list[int], list[Optional[float]]]:
    """Each of ``ids``' rank (from 1) and score in the first stage's single row ``first`` (a reranker reorders
    the first stage's results, so every id is there)."""
    position = {doc_id: rank for rank, doc_id in enumerate(first.ids[0])}
    scores = first.scores[0]
    return [position[i] + 1 for i in ids], [_finite(scores[position[i]]) for i in ids]


def _finite(score) -> Optional[float]:
    """A JSON-able score: NaN and infinities (a retriever's padding) become null."""
    return float(score) if math.isfinite(score) else None


def _telemetry_option(telemetry: bool) -> dict:
    """FastAPI's keyword argument that turns its native telemetry off, where this FastAPI has one."""
    if telemetry or "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def create_app(index_dir: str | os.PathLike | LoadedIndex, *, lm: str | None = None, token_budget: int | None = None,
               context_window: int | None = None, max_new_tokens: int | None = None, warmup: bool = True,
               query_encoder: str | None = None, rerank: str | None = RECORDED,
               rerank_depth: int | None = None, rerank_weight: float | None = None, generate: bool = False,
               generate_timeout_s: float = DEFAULT_GENERATE_TIMEOUT_S, mmap: bool = False,
               select=SELECT_RECORDED, telemetry: bool = False) -> FastAPI:
    """A FastAPI app serving one index folder, of any layout a taskret ``index`` command writes (checked
    first: a partial or mismatched one raises :class:`~taskret.retrieval.index.InvalidIndex`). ``lm``
    overrides the LM whose tokenizer counts prompt tokens; the default prompt budget is ``token_budget``,
    else :func:`~taskret.icl.prompt.prompt_token_budget` of ``context_window`` and ``max_new_tokens``
    (capped by the LM's context; each by default the index's, which an index of an EPR run records, else 2048 and
    128); ``warmup`` readies the retriever (:meth:`~taskret.retrieval.base.Retriever.warm_up`: a dense one loads its
    encoder, BM25 compiles numba) before the first request, not during it. ``query_encoder``: queries of a dense
    index are encoded by this model, one distilled over the index's frozen document vectors
    (:meth:`LoadedIndex.use_query_encoder`, which refuses any other).

    ``rerank``: by default the reranker the index records, with its depth and weight; None: none; else a
    reranker spec (``upr:LM``, a TART-full or CrossEncoder folder). ``rerank_depth`` / ``rerank_weight``
    override the depth (default 100) and the first stage's share, as in
    :func:`~taskret.tart.search.search_index`. The reranker is loaded now, so a missing model fails at
    start-up. ``generate``: load the LM (``lm``, else the index's) to answer ``/generate``, each answer
    bounded by ``generate_timeout_s`` seconds. ``mmap``: load the index memory-mapped where its format allows
    (:func:`~taskret.retrieval.index.load_index`, its texts read as results need them; the workers of
    ``taskret serve --workers N`` share its pages).
    ``select``: how ``/prompt`` chooses its demonstrations (:func:`~taskret.icl.selection.resolve_selection`): by
    default the selection the index records (:attr:`LoadedIndex.selection`), None or ``"none"`` the ranking's
    top, or a :class:`~taskret.icl.selection.Selection` (or its record, JSON for the workers).
    ``telemetry``: keep FastAPI's native OpenTelemetry instrumentation (FastAPI >= 0.165; ``taskret serve
    --telemetry``), off by default: it asks for the global tracer, meter and logger providers on every request,
    ~10% of a served BM25 query in the profile, to find them unconfigured.

    These keyword arguments are the only way configuration enters (a multi-worker server passes the same to
    each worker); the first stage of ``/retrieve`` and ``/prompt`` is the one function
    ``app.state.first_stage(texts, k)``, for a batcher to take over."""
    if isinstance(index_dir, LoadedIndex):
        index = index_dir
    elif Path(index_dir).is_file():  # a shards config (`taskret serve --shards`): its shards opened as one index
        index = load_sharded_index(index_dir)
    else:
        index = load_index(index_dir, mmap=mmap)
    if query_encoder is not None:
        index.use_query_encoder(query_encoder)
    reranking = resolve_rerank(index, rerank, rerank_depth, rerank_weight)
    reranker, depth, weight = reranking["rerank"], reranking["rerank_depth"], reranking["rerank_weight"]
    if reranker is None and (rerank_depth is not None or rerank_weight is not None):
        raise ValueError("rerank_depth and rerank_weight need a reranker (--rerank SPEC, or an index that records "
                         "one)")
    if depth < 1:
        raise ValueError("rerank_depth must be at least 1")
    if weight is not None and not 0.0 <= weight <= 1.0:
        raise ValueError(f"rerank_weight (the first stage's share) must be in [0, 1], got {weight}")
    rerank_name = None if reranker is None else str(reranker)
    if reranker is not None:  # loaded now: a missing LM fails at start-up, not at the first request
        from ..rerank import load_reranker

        reranker = load_reranker(reranker)
    examples = index.kind == "examples"
    selection = resolve_selection(select, index.selection if examples else None)
    if selection is not None and not examples:
        raise ValueError(f"select: a selection chooses a prompt's demonstrations; this index holds {index.kind}")
    # the vectors it compares examples with: a dense index's own, else the selection's encoder's
    selector = BoundSelection(selection, index.retriever, {e.id: e for e in index.examples()}) if selection else None
    counter = make_token_counter(lm or index.lm) if examples else TokenCounter(None, "none")
    count_tokens, counter_name = counter.count, counter.name
    if context_window is None:
        context_window = index.context_window or DEFAULT_CONTEXT_WINDOW
    if max_new_tokens is None:
        max_new_tokens = index.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    if token_budget is None:
        token_budget = prompt_token_budget(context_window, max_new_tokens, counter.context_length)
    if not 1 <= token_budget <= MAX_TOKEN_BUDGET:
        raise ValueError(f"token_budget must be within 1..{MAX_TOKEN_BUDGET}")
    generator, generator_name = None, None
    if generate:
        generator_name = lm or index.lm
        if not examples:
            raise ValueError(f"generate: /generate answers prompts built from examples; this index holds {index.kind}")
        if generator_name is None:
            raise ValueError("generate needs an LM: --lm NAME, or an index written with `taskret index --lm`")
        if not generate_timeout_s > 0:
            raise ValueError("generate_timeout_s must be positive")
        from ..backends.base import generation_spec, load_lm

        generator = load_lm(generation_spec(generator_name))
    # One thread generates, so a second request waits for the LM instead of sharing it, and a wait counts
    # against its time bound.
    generating = ThreadPoolExecutor(max_workers=1, thread_name_prefix="taskret-generate") if generator else None
    # bm25s, FAISS and tokenizers are not all safe to share between the threads FastAPI runs handlers on,
    # and with the GIL there is little to gain: one request searches at a time, one reranks or counts at a time.
    lock, model_lock = threading.Lock(), threading.Lock()
    if warmup:
        index.retriever.warm_up()
        if selector is not None and index.retriever.ids:
            selector.vectors(index.retriever.ids[:1])  # an encoder's vectors: the model loads now
    started_at = time.monotonic()

    app = FastAPI(title="taskret retrieval service", version=__version__, docs_url=None, redoc_url=None,
                  description="Task-aware retrieval (EPR prompt retrieval, TART instruction retrieval) over one "
                  f"index ({index.kind}, {index.retriever.name}, {len(index.retriever.ids)} items).",
                  **_telemetry_option(telemetry))
    app.state.index = index
    app.state.generator = generator
    app.add_middleware(_GuardMiddleware)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def first_stage(texts: list[str], k: int) -> RetrievalResult:
        """The first-stage retrieval of /retrieve and /prompt: the index's retriever, one call at a time."""
        with lock:
            return index.retriever.retrieve(texts, k=k)

    # Concurrent requests' first stages are answered by one retriever call (taskret.serve.batching).
    app.state.first_stage = BatchedSearch(first_stage)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        # Neither the offending input (it may be megabytes) nor ctx (it may hold exception objects) is echoed.
        errors = [_clean_error(e) for e in exc.errors()]
        return _json(422, {"detail": errors, "message": _error_message(errors)})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html",
                            headers={"Content-Security-Policy": PAGE_POLICY, "Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - docs",
                                   swagger_js_url=f"{root}/static/swagger-ui/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}/static/swagger-ui/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/static/favicon.svg",
                                   swagger_ui_parameters={"validatorUrl": None})  # no call to swagger.io

    selected = selector.describe() if selector is not None else None

    @app.get("/health", response_model=HealthResponse)
    def health() -> HealthResponse:
        return HealthResponse(status="ok", version=__version__, index=str(index.directory), kind=index.kind,
                              retriever=index.retriever.name, query_encoder=query_encoder,
                              n=len(index.retriever.ids), instruction=index.instruction, token_counter=counter_name,
                              rerank=rerank_name, rerank_depth=depth if reranker else None,
                              rerank_weight=weight if reranker else None, generate=generator_name,
                              selection=selected, token_budget=token_budget,
                              uptime_s=round(time.monotonic() - started_at, 3))

    # As `tart search`: an instruction that neither the first stage nor a reranker reads is not searched with.
    reads_instruction = index.retriever.reads_instruction or reranker is not None

    def reranked(texts: list[str], first: RetrievalResult, k: int) -> RetrievalResult:
        with model_lock:
            return rerank_first_stage(index, texts, first, reranker, depth, weight).head(k)

    # A coroutine, not a def: its first stage is searched on the event loop's own thread, with every request the
    # loop read in the same turn (BatchedSearch.async_call). A def endpoint ran each request on a thread of
    # FastAPI's pool that handed it to the batcher's thread and waited: under wrk, those hand-overs (threading's
    # Condition, anyio's thread dispatch) took more of a worker's time than the search (benchmarks/serve/
    # request_path.py). A reranker's model runs on the pool, off the loop.
    @app.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_none=True)
    async def retrieve(request: RetrieveRequest) -> Response:
        unread = request.instruction is not None and not reads_instruction
        texts = [request.query if unread else format_query(request.instruction, request.query)]
        first = await app.state.first_stage.async_call(texts, max(request.k, depth) if reranker else request.k)
        first_ranks = first_scores = None
        missing = list(getattr(first, "missing", ())) or None
        if reranker is None:
            result = first.head(request.k)
        else:
            result = await run_in_threadpool(reranked, texts, first, request.k)
            first_ranks, first_scores = _first_stage_positions(first, result.ids[0])
        ids = result.ids[0]
        records = index.records_of(ids)
        answer = RetrieveResponse(query=texts[0], ids=ids, scores=[_finite(s) for s in result.scores[0][: len(ids)]],
                                  texts=[r.text for r in records],
                                  outputs=[r.output or "" for r in records] if examples else None,
                                  titles=None if examples else [r.title for r in records],
                                  first_stage_ranks=first_ranks, first_stage_scores=first_scores,
                                  note=f"the instruction is not read by this index ({index.retriever.name}): "
                                       "searched with the query alone" if unread else None,
                                  missing_shards=missing)
        # Serialised here: the model was validated as it was built, and FastAPI would validate it a second time
        # and encode it through jsonable_encoder (~9% of a request in the profile); the schema still documents it.
        return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")

    def build_prompt(request: PromptRequest, budget: int, endpoint: str) -> PromptResponse:
        """The prompt ``taskret evaluate`` would build for ``request.input`` within ``budget`` tokens."""
        if index.kind != "examples":
            raise HTTPException(400, detail=f"this index holds {index.kind} (a retrieval corpus); {endpoint} needs an "
                                "example index written by `taskret index` or `taskret epr index`")
        # with a selection, its candidates; else enough to fill the budget (or max_demos) in the ranking's order
        depth = selector.selection.n_candidates if selector else request.max_demos or PROMPT_DEPTH
        builder = PromptBuilder(count_tokens, budget=budget, max_demos=request.max_demos)
        first = app.state.first_stage([request.input], min(depth, len(index.retriever.ids)))
        retrieved = first.ids[0]
        demos = {i: (i, index.records[i].text, index.prompt_output(index.records[i])) for i in retrieved}
        with model_lock:  # the tokenizer, and a selection's encoder
            offered = retrieved
            if selector is not None:  # the set that fits, by the retriever's order: as `taskret evaluate` selects
                kept = selector.select(retrieved, first.scores[0], prompt_fit(builder, request.input, demos.get))
                offered = [retrieved[i] for i in kept]
            built = builder.build(request.input, [demos[i] for i in offered])
        used = set(built.demo_ids)
        return PromptResponse(prompt=built.text, ids=built.demo_ids, texts=[demos[i][1] for i in built.demo_ids],
                              outputs=[demos[i][2] for i in built.demo_ids],
                              left_out=[i for i in retrieved if i not in used], n_tokens=built.n_tokens,
                              token_budget=budget, token_counter=counter_name, selection=selected,
                              missing_shards=list(getattr(first, "missing", ())) or None)

    @app.post("/prompt", response_model=PromptResponse)
    def prompt(request: PromptRequest) -> PromptResponse:
        return build_prompt(request, request.token_budget or token_budget, "/prompt")

    @app.post("/generate", response_model=GenerateResponse)
    def generate_answer(request: GenerateRequest) -> GenerateResponse:
        if generator is None:
            raise HTTPException(404, detail="this server has no LM to generate with: start it with `taskret serve "
                                "--generate` (the LM: --lm NAME, or the one the index records)")
        new_tokens = request.max_new_tokens or min(max_new_tokens, MAX_GENERATE_TOKENS)
        # The prompt leaves the answer its room in the LM's context, whatever budget was asked for.
        room = generator.context_length - new_tokens
        if room < 1:
            raise HTTPException(400, detail=f"max_new_tokens={new_tokens} leaves no room for a prompt in "
                                f"{generator_name}'s {generator.context_length} tokens")
        built = build_prompt(request, min(request.token_budget or token_budget, room), "/generate")
        started = time.monotonic()
        future = generating.submit(generator.generate, [built.prompt], max_new_tokens=new_tokens)
        try:
            (generation,) = future.result(timeout=generate_timeout_s)
        except FutureTimeout:
            future.cancel()  # a generation still waiting for the LM is dropped; one under way runs out its tokens
            raise HTTPException(504, detail=f"generation took over {generate_timeout_s:g} s (the time bound of this "
                                f"server); ask for fewer tokens (max_new_tokens={new_tokens})") from None
        return GenerateResponse(**built.model_dump(), generation=generation, lm=generator_name,
                                max_new_tokens=new_tokens, elapsed_s=round(time.monotonic() - started, 3))

    return app
