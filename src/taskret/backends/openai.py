"""``openai``: any server that speaks the OpenAI *completions* API (``POST /v1/completions``).

Scoring sends ``prompt + target`` with ``echo=true, logprobs=1, max_tokens=0`` and sums the returned
prompt log-probabilities of the tokens that start inside the target, found by their character
``text_offset``. That is the legacy completions API; servers that implement it for open models include
vLLM (``vllm serve``), llama.cpp's ``llama-cpp-python`` server, and ``taskret serve-lm``. Chat-only
endpoints cannot score, and the backend says so when a server returns no prompt log-probabilities.

Spec: ``openai:URL#MODEL`` (``openai:http://127.0.0.1:8000/v1#smollm2-135m``), ``openai:URL`` when the
server serves a single model, or ``openai:MODEL`` with the URL from ``base_url`` or ``$OPENAI_BASE_URL``.
Servers that read ``max_tokens=0`` as "no limit" (llama-cpp-python) need ``score_max_tokens=1``: the
generated token is then ignored. The API key comes from ``$OPENAI_API_KEY`` (or the variable named by ``api_key_env``); none is sent when
it is unset.

Requests run ``concurrency`` at a time; connection errors, timeouts, 408, 429 and 5xx answers are
retried ``max_retries`` times with exponential backoff (``backoff`` seconds, doubled each time, with
jitter, at most 60 s; a ``Retry-After`` header wins), other errors fail at once with the server's message.

Differences from the in-process backend: the server tokenizes ``prompt + target`` as one text, so a token
that spans the join counts toward the target, and scores agree with ``transformers`` up to such
boundary effects and float rounding (``tests/backends`` checks the rankings agree).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from .base import (
    DEFAULT_STOP,
    BackendError,
    BackendNotInstalled,
    LMBackend,
    ProgressFn,
    TargetScore,
    cut_at_stop,
)

logger = logging.getLogger(__name__)

RETRY_STATUS = {408, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 60.0


def _import_httpx():
    try:
        import httpx
    except ImportError as err:  # pragma: no cover - httpx comes with the [http] extra
        raise BackendNotInstalled("the openai LM backend needs httpx: pip install 'taskret[http]'") from err
    return httpx


def split_target(target: str, base_url: str | None = None) -> tuple[str, str | None]:
    """``"http://h/v1#m"`` -> (``"http://h/v1"``, ``"m"``); ``"m"`` -> (base URL from the option or
    ``$OPENAI_BASE_URL``, ``"m"``)."""
    if "://" in target:
        url, _, model = target.partition("#")
        return url.rstrip("/"), (model or None)
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not url:
        raise ValueError(f"openai:{target}: no server URL; write openai:URL#{target}, or set base_url or "
                         f"$OPENAI_BASE_URL")
    return url.rstrip("/"), target


class OpenAIBackend(LMBackend):
    """A model behind an OpenAI-compatible completions endpoint."""

    backend = "openai"

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None,
                 concurrency: int = 8, timeout: float = 120.0, max_retries: int = 5, backoff: float = 0.5,
                 batch_size: int = 1, tokenizer: str | None = None, context_length: int | None = None,
                 score_max_tokens: int = 0, client: Any = None, sleep: Callable[[float], None] = time.sleep):
        if concurrency < 1 or batch_size < 1 or max_retries < 0 or timeout <= 0:
            raise ValueError("concurrency and batch_size must be >= 1, max_retries >= 0 and timeout > 0")
        httpx = _import_httpx()
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.batch_size = batch_size
        self.score_max_tokens = score_max_tokens
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # One pooled client shared by the worker threads (httpx.Client is thread-safe); ``client`` lets
        # tests pass an in-process transport.
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client(
            timeout=httpx.Timeout(timeout), headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
        if client is not None and headers:
            self.client.headers.update(headers)
        self._models: list[dict] | None = None
        self.model = model or self._only_model()
        self.name = f"openai:{self.model}"
        self._tokenizer_spec = tokenizer
        self._tokenizer = None
        self._tokenize_route: str | None = None
        self._token_counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._context_length = context_length

    @classmethod
    def from_spec(cls, target: str, base_url: str | None = None, api_key: str | None = None,
                  api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, timeout: float = 120.0,
                  max_retries: int = 5, backoff: float = 0.5, batch_size: int = 1, tokenizer: str | None = None,
                  context_length: int | None = None, score_max_tokens: int = 0) -> "OpenAIBackend":
        url, model = split_target(target, base_url)
        key = api_key or os.environ.get(api_key_env) or None
        return cls(url, model, api_key=key, concurrency=int(concurrency), timeout=float(timeout),
                   max_retries=int(max_retries), backoff=float(backoff), batch_size=int(batch_size),
                   tokenizer=tokenizer, context_length=context_length, score_max_tokens=int(score_max_tokens))

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    # -- HTTP ----------------------------------------------------------------------------------------

    def _url(self, route: str) -> str:
        return f"{self.base_url}/{route.lstrip('/')}"

    def _delay(self, attempt: int, response=None) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after")
            try:
                if retry_after is not None:
                    return min(max(float(retry_after), 0.0), MAX_BACKOFF_S)
            except ValueError:
                pass
        base = min(self.backoff * (2 ** attempt), MAX_BACKOFF_S)
        return base * (0.5 + random.random() / 2)  # jitter: clients retrying together spread out

    def request(self, method: str, route: str, payload: dict | None = None, root: bool = False) -> dict:
        """One API call with retries; returns the JSON body or raises :class:`BackendError`. ``root``:
        ``route`` is under the server's root rather than the API base (``/tokenize`` beside ``/v1``)."""
        httpx = _import_httpx()
        url = f"{self._server_root()}/{route.lstrip('/')}" if root else self._url(route)
        last = ""
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = self.client.request(method, url, json=payload)
            except httpx.TimeoutException as err:
                last = f"no answer within {self.timeout:g} s ({type(err).__name__})"
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as err:
                        raise BackendError(f"{method} {url}: the server's answer is not JSON: "
                                           f"{response.text[:200]!r}") from err
                last = f"HTTP {response.status_code}: {_error_message(response)}"
                if response.status_code not in RETRY_STATUS:
                    raise BackendError(f"{method} {url} failed: {last}")
            if attempt < self.max_retries:
                delay = self._delay(attempt, response)
                logger.warning("%s %s: %s; retry %d/%d in %.1f s", method, url, last, attempt + 1,
                               self.max_retries, delay)
                self._sleep(delay)
        raise BackendError(f"{method} {url} failed after {self.max_retries + 1} attempts: {last}")

    def _only_model(self) -> str:
        models = [m.get("id") for m in self._model_cards()]
        if len(models) != 1:
            raise BackendError(f"{self.base_url} serves {len(models)} models ({', '.join(map(str, models))}); "
                               f"name one: openai:{self.base_url}#MODEL")
        return str(models[0])

    def _model_cards(self) -> list[dict]:
        if self._models is None:
            body = self.request("GET", "models")
            data = body.get("data") if isinstance(body, dict) else None
            self._models = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        return self._models

    def _parallel(self, jobs: Sequence[Callable[[], Any]], progress: Callable[[Any], None] | None = None) -> list:
        """Run ``jobs`` at most ``concurrency`` at a time; results in input order."""
        results: list = [None] * len(jobs)
        if self.concurrency == 1 or len(jobs) <= 1:
            for i, job in enumerate(jobs):
                results[i] = job()
                if progress:
                    progress(i)
            return results
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="taskret-openai") as pool:
            futures = {pool.submit(job): i for i, job in enumerate(jobs)}
            try:
                for future in as_completed(futures):
                    i = futures[future]
                    results[i] = future.result()
                    if progress:
                        progress(i)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        return results

    def _chunks(self, n: int) -> list[range]:
        return [range(i, min(i + self.batch_size, n)) for i in range(0, n, self.batch_size)]

    def _completions(self, payload: dict, n: int) -> list[dict]:
        """POST /completions; the choices in prompt order (by their ``index``)."""
        body = self.request("POST", "completions", payload)
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != n:
            raise BackendError(f"POST {self._url('completions')}: expected {n} choice(s), got "
                               f"{len(choices) if isinstance(choices, list) else repr(body)[:200]}")
        if all(isinstance(c, dict) and isinstance(c.get("index"), int) for c in choices):
            choices = sorted(choices, key=lambda c: c["index"])
        return choices

    # -- scoring -------------------------------------------------------------------------------------

    def score(self, prompts: Sequence[str], targets: Sequence[str], progress: ProgressFn | None = None
              ) -> list[TargetScore]:
        if len(prompts) != len(targets):
            raise ValueError("prompts and targets must have the same length")
        chunks = self._chunks(len(prompts))

        def job(chunk: range) -> Callable[[], list[TargetScore]]:
            def run() -> list[TargetScore]:
                texts = [prompts[i] + targets[i] for i in chunk]
                payload = {"model": self.model, "prompt": texts[0] if len(texts) == 1 else texts,
                           "max_tokens": self.score_max_tokens, "echo": True, "logprobs": 1, "temperature": 0}
                choices = self._completions(payload, len(texts))
                return [self._target_score(choice, len(prompts[i]), len(texts[k]))
                        for k, (i, choice) in enumerate(zip(chunk, choices))]
            return run

        done = (lambda i: progress(len(chunks[i]))) if progress else None
        return [s for part in self._parallel([job(c) for c in chunks], done) for s in part]

    def _target_score(self, choice: dict, prompt_chars: int, total_chars: int) -> TargetScore:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values) or not tokens:
            raise BackendError(
                f"{self.base_url} returned no prompt log-probabilities for model '{self.model}' (asked for "
                f"echo=true, logprobs=1, max_tokens=0). Scoring needs a completions endpoint that echoes the "
                f"prompt's log-probabilities, e.g. vLLM, llama-cpp-python's server or `taskret serve-lm`; "
                f"chat-only APIs cannot score.")
        offsets = logprobs.get("text_offset")
        if not isinstance(offsets, list) or len(offsets) != len(tokens):
            # Without offsets, rebuild them from the token texts (exact unless a server escapes bytes).
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token) if isinstance(token, str) else 0
        # The echoed prompt is prompt + target; a generated token (if a server insists on max_tokens >= 1)
        # starts at or after its end and is ignored. A token that spans the join counts as the target's.
        total, n = 0.0, 0
        for k, (token, value, offset) in enumerate(zip(tokens, values, offsets)):
            end = offset + (len(token) if isinstance(token, str) else 0)
            if end <= prompt_chars or offset >= total_chars:
                continue
            if value is None:
                raise BackendError(f"{self.base_url}: no log-probability for target token {k} ({token!r}): the "
                                   f"prompt must not be empty")
            total += float(value)
            n += 1
        return TargetScore(total, n)

    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 128, stop: str | Sequence[str] | None = DEFAULT_STOP,
                 progress: ProgressFn | None = None) -> list[str]:
        stops = None if not stop else ([stop] if isinstance(stop, str) else list(stop))
        chunks = self._chunks(len(prompts))

        def job(chunk: range) -> Callable[[], list[str]]:
            def run() -> list[str]:
                texts = [prompts[i] for i in chunk]
                payload: dict = {"model": self.model, "prompt": texts[0] if len(texts) == 1 else texts,
                                 "max_tokens": max_new_tokens, "temperature": 0}
                if stops:
                    payload["stop"] = stops
                choices = self._completions(payload, len(texts))
                out = []
                for choice in choices:
                    text = choice.get("text") if isinstance(choice, dict) else None
                    if not isinstance(text, str):
                        raise BackendError(f"{self.base_url}: a completion without text: {repr(choice)[:200]}")
                    out.append(cut_at_stop(text, stops).strip())
                return out
            return run

        done = (lambda i: progress(len(chunks[i]))) if progress else None
        return [s for part in self._parallel([job(c) for c in chunks], done) for s in part]

    # -- tokens --------------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """By the local tokenizer when there is one (option ``tokenizer``, or the model name when it is
        a registered taskret model or a local folder); else by the server's ``/tokenize`` route
        (vLLM and ``taskret serve-lm``) or ``/extras/tokenize/count`` (llama-cpp-python). Cached."""
        cached = self._token_counts.get(text)
        if cached is not None:
            return cached
        tokenizer = self._local_tokenizer()
        n = len(tokenizer(text, add_special_tokens=False).input_ids) if tokenizer is not None else self._server_count(text)
        with self._lock:
            if len(self._token_counts) > 200_000:
                self._token_counts.clear()
            self._token_counts[text] = n
        return n

    def _local_tokenizer(self):
        if self._tokenizer is None:
            from ..models import MODELS, resolve_model

            spec = self._tokenizer_spec
            if spec is None and (self.model in MODELS or os.path.isdir(self.model)):
                spec = self.model
            if spec is None or spec == "server":
                self._tokenizer = False
            else:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(spec)))
        return self._tokenizer or None

    def _server_root(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _server_count(self, text: str) -> int:
        routes = [self._tokenize_route] if self._tokenize_route else ["vllm", "llama-cpp"]
        for route in routes:
            try:
                if route == "vllm":
                    body = self._post_root("tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
                    n = body.get("count", len(body.get("tokens") or []))
                else:
                    body = self._post_root("extras/tokenize/count", {"input": text})
                    n = body["count"]
            except (BackendError, KeyError, TypeError, AttributeError):
                continue
            self._tokenize_route = route
            return int(n)
        raise BackendError(f"{self.base_url} has no tokenize route (/tokenize, /extras/tokenize/count), and "
                           f"prompts are filled by token counts: pass the model's tokenizer, e.g. "
                           f"--lm-option tokenizer=NAME_OR_FOLDER")

    def _post_root(self, route: str, payload: dict) -> dict:
        return self.request("POST", route, payload, root=True)

    @property
    def context_length(self) -> int:
        if self._context_length is None:
            card = next((m for m in self._model_cards() if m.get("id") == self.model), {})
            value = card.get("max_model_len") or card.get("context_length") or card.get("n_ctx")
            self._context_length = int(value) if isinstance(value, (int, float)) and value > 0 else 2048
        return self._context_length


def _error_message(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body))
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:300]
        return str(err)[:300]
    return str(body)[:300]
