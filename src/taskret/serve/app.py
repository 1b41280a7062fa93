"""The retrieval service: a FastAPI app over one index folder.

Endpoints (the OpenAPI schema is at ``/openapi.json``, interactive docs at ``/docs``):

- ``POST /retrieve`` ``{"query", "instruction"?, "k"?}``: the top-k ids, scores and texts. With an
  instruction the query is TART's ``"{instruction} [SEP] {query}"``. An index built from a named setup with a
  reranker (``taskret tart index --setup docs-rerank``) is reranked as it records
  (:func:`~taskret.tart.search.recorded_rerank`).
- ``POST /prompt`` ``{"input", "max_demos"?, "token_budget"?}`` (example indexes only; ``k`` is accepted
  for ``max_demos``): the in-context-learning prompt ``taskret evaluate`` would build: demonstrations
  ``"{input}\\t{output}"`` filled in retrieval order up to the token budget, most similar last, then
  ``"{input}\\t"``; and the ids it used, in prompt order. The default budget is
  :func:`~taskret.icl.prompt.prompt_token_budget` of the server's context window and answer room.
  Tokens are counted with the tokenizer of the LM the index records (``taskret index --lm``, or
  ``taskret serve --lm``); without one, whitespace-separated words are counted, which undercounts
  sub-word tokens (``token_counter`` in the answer says which was used).
- ``GET /health``: status and what is served.

Bad requests get 422 with a ``message`` naming each bad field (unknown fields, k outside 1..100, empty,
blank or over-long strings, wrong JSON types, malformed JSON); bodies over 1 MiB get 413; anything
unexpected gets a JSON 500 and the service keeps serving.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Annotated, Optional

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, StringConstraints

from .._version import __version__
from ..icl.prompt import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_NEW_TOKENS,
    PromptBuilder,
    TokenCounter,
    make_token_counter,
    prompt_token_budget,
)
from ..retrieval.index import LoadedIndex, load_index

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 10_000
MAX_K = 100
DEFAULT_K = 5
MAX_TOKEN_BUDGET = 131_072
PROMPT_DEPTH = 100  # examples retrieved per /prompt without max_demos: enough to fill any sensible budget
MAX_BODY_BYTES = 1 << 20


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
    n_tokens: int
    token_budget: int
    token_counter: str = Field(description="'tokenizer:LM' or 'whitespace' (approximate)")


class HealthResponse(BaseModel):
    status: str
    version: str
    index: str
    kind: str
    retriever: str
    query_encoder: Optional[str] = Field(None, description="the model encoding queries, where it is not the "
                                         "index's encoder (`taskret serve --query-encoder`)")
    n: int
    rerank: Optional[str] = Field(None, description="the reranker the index's setup records, if any")
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
                await _json(413, {"detail": f"request body over {MAX_BODY_BYTES} bytes"})(scope, receive, send)
                return
        started = False
        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _json(413, {"detail": f"request body over {MAX_BODY_BYTES} bytes"})(scope, receive, send)
        except Exception as err:  # noqa: BLE001 - the service must answer, whatever went wrong
            logger.exception("unexpected error serving %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _json(500, {"detail": "internal server error", "error": type(err).__name__})(scope, receive, send)


def _json(status: int, body: dict) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def create_app(index_dir: str | os.PathLike | LoadedIndex, *, lm: str | None = None, token_budget: int | None = None,
               context_window: int = DEFAULT_CONTEXT_WINDOW, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
               warmup: bool = True, query_encoder: str | None = None) -> FastAPI:
    """A FastAPI app serving one index folder, of any layout a taskret ``index`` command writes (checked
    first: a partial or mismatched one raises :class:`~taskret.retrieval.index.InvalidIndex`). ``lm``
    overrides the LM whose tokenizer counts prompt tokens; the default prompt budget is ``token_budget``,
    else :func:`~taskret.icl.prompt.prompt_token_budget` of ``context_window`` and ``max_new_tokens``
    (capped by the LM's context); ``warmup`` runs one query so that a dense retriever loads its encoder
    before the first request, not during it. ``query_encoder``: queries of a dense index are encoded by this
    model, one distilled over the index's frozen document vectors (:meth:`LoadedIndex.use_query_encoder`,
    which refuses any other)."""
    index = index_dir if isinstance(index_dir, LoadedIndex) else load_index(index_dir)
    if query_encoder is not None:
        index.use_query_encoder(query_encoder)
    from ..tart.search import recorded_rerank, search_index

    rerank = recorded_rerank(index)
    if rerank["rerank"] is not None:  # loaded now: a missing LM fails at start-up, not at the first request
        from ..rerank import load_reranker

        rerank["rerank"] = load_reranker(rerank["rerank"])
    examples = index.kind == "examples"
    counter = make_token_counter(lm or index.lm) if examples else TokenCounter(None, "none")
    count_tokens, counter_name = counter.count, counter.name
    if token_budget is None:
        token_budget = prompt_token_budget(context_window, max_new_tokens, counter.context_length)
    if not 1 <= token_budget <= MAX_TOKEN_BUDGET:
        raise ValueError(f"token_budget must be within 1..{MAX_TOKEN_BUDGET}")
    # bm25s, FAISS and tokenizers are not all safe to share between the threads FastAPI runs handlers on,
    # and with the GIL there is little to gain: one request searches at a time.
    lock = threading.Lock()
    if warmup:
        index.retriever.retrieve(["warm up"], k=1)
    started_at = time.monotonic()

    app = FastAPI(title="taskret retrieval service", version=__version__,
                  description="Task-aware retrieval (EPR prompt retrieval, TART instruction retrieval) over one "
                  f"index ({index.kind}, {index.retriever.name}, {len(index.retriever.ids)} items).")
    app.state.index = index
    app.add_middleware(_GuardMiddleware)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        # Neither the offending input (it may be megabytes) nor ctx (it may hold exception objects) is echoed.
        errors = [_clean_error(e) for e in exc.errors()]
        return _json(422, {"detail": errors, "message": _error_message(errors)})

    @app.get("/health", response_model=HealthResponse)
    def health() -> HealthResponse:
        return HealthResponse(status="ok", version=__version__, index=str(index.directory), kind=index.kind,
                              retriever=index.retriever.name, query_encoder=query_encoder,
                              n=len(index.retriever.ids), token_counter=counter_name,
                              rerank=index.info.get("rerank"),
                              token_budget=token_budget, uptime_s=round(time.monotonic() - started_at, 3))

    @app.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_none=True)
    def retrieve(request: RetrieveRequest) -> RetrieveResponse:
        with lock:
            (query,), result = search_index(index, [request.query], instruction=request.instruction, top_k=request.k,
                                            reranker=rerank["rerank"], rerank_depth=rerank["rerank_depth"],
                                            rerank_weight=rerank["rerank_weight"])
        ids = result.ids[0]
        scores = [float(s) if math.isfinite(s) else None for s in result.scores[0][: len(ids)]]
        records = [index.records[i] for i in ids]
        return RetrieveResponse(query=query, ids=ids, scores=scores, texts=[r.text for r in records],
                                outputs=[r.output or "" for r in records] if examples else None,
                                titles=None if examples else [r.title for r in records])

    @app.post("/prompt", response_model=PromptResponse)
    def prompt(request: PromptRequest) -> PromptResponse:
        if index.kind != "examples":
            raise HTTPException(400, detail=f"this index holds {index.kind} (a retrieval corpus); /prompt needs an "
                                "example index written by `taskret index` or `taskret epr index`")
        budget = request.token_budget or token_budget
        depth = min(request.max_demos or PROMPT_DEPTH, len(index.retriever.ids))
        builder = PromptBuilder(count_tokens, budget=budget, max_demos=request.max_demos)
        with lock:
            ids = index.retriever.retrieve([request.input], k=depth).ids[0]
            demos = [(i, index.records[i].text, index.prompt_output(index.records[i])) for i in ids]
            built = builder.build(request.input, demos)
        return PromptResponse(prompt=built.text, ids=built.demo_ids, n_tokens=built.n_tokens, token_budget=budget,
                              token_counter=counter_name)

    return app
