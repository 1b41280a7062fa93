"""The one interface every language-model backend implements, and ``make_backend(spec)``.

taskret needs two things from a language model: ``score`` (the log-probability of a target
continuation given a prompt: EPR's scoring LM, the oracles) and ``generate`` (greedy decoding up to a
stop string: in-context learning), plus the tokenizer's length to fill prompts to a budget. Each
backend lives in its own module and is imported only when it is chosen, so the HTTP backend needs no
GPU stack and the vLLM backend is never imported on a laptop:

=================  ===================================================  ===========================
spec               what                                                 needs
=================  ===================================================  ===========================
``NAME|PATH``      transformers in this process (the default)           (core dependencies)
``transformers:X`` the same, explicitly
``openai:URL#M``   an OpenAI-compatible completions server, model ``M``  ``pip install taskret[http]``
``openai:M``       the same at ``$OPENAI_BASE_URL``
``vllm:NAME|PATH`` vLLM in this process, on a GPU                        ``pip install taskret[vllm]``
``llamacpp:NAME``  llama.cpp on a bundled model's GGUF, or a .gguf      ``pip install taskret[llamacpp]``
=================  ===================================================  ===========================

Generation picks its engine by :func:`generation_spec`: a bundled model named bare runs on llama.cpp on CPUs
without native bfloat16, where it measured faster at the same answers.

Options (``make_backend(spec, concurrency=8)``, ``--lm-option concurrency=8`` on the command line) go
to the backend's ``from_spec``; an unknown option is an error that lists the known ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

ProgressFn = Callable[[int], None]

DEFAULT_STOP = "\n"


@dataclass(frozen=True)
class TargetScore:
    """Sum of the target's token log-probabilities (nats) and how many tokens it has."""

    logprob: float
    n_tokens: int

    @property
    def mean(self) -> float:
        return self.logprob / max(self.n_tokens, 1)


class BackendError(RuntimeError):
    """A backend that cannot do what was asked (server errors, missing features); the message says why."""


class BackendNotInstalled(BackendError):
    """A backend whose optional dependencies are missing; the message says what to install."""


class LMBackend(ABC):
    """A causal language model seen through the two operations taskret needs.

    ``score`` and ``generate`` return results in input order, whatever the backend batches or sends
    in parallel. ``name`` identifies the model in output files (``scoring_meta.json``, ``summary.json``):
    two backends with the same name are expected to give the same scores up to float rounding.
    """

    backend: ClassVar[str] = "base"
    name: str = "model"

    @abstractmethod
    def score(self, prompts: Sequence[str], targets: Sequence[str], progress: ProgressFn | None = None
              ) -> list[TargetScore]:
        """log P(target | prompt) for each pair, summed over the target's tokens only."""

    def score_shared(self, prefixes: Sequence[str], prompts: Sequence[str], targets: Sequence[str],
                     progress: ProgressFn | None = None) -> list[TargetScore]:
        """As :meth:`score`, told that ``prefixes[i]`` starts ``prompts[i]`` and that many pairs share it (EPR:
        one candidate demonstration scored for many examples). A backend that can compute a shared prefix once
        overrides this; the default scores the prompts as they are (servers such as vLLM cache prefixes
        themselves)."""
        return self.score(prompts, targets, progress=progress)

    def runtime(self) -> dict:
        """Where and in what precision this LM computes (``device``, ``dtype``), for a result's record; a
        backend that calls a server knows neither and says nothing."""
        return {}

    @abstractmethod
    def generate(self, prompts: Sequence[str], max_new_tokens: int = 128, stop: str | None = DEFAULT_STOP,
                 progress: ProgressFn | None = None) -> list[str]:
        """Greedy continuations, cut at the first ``stop`` (not included) and stripped."""

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """The model tokenizer's length of ``text`` (no special tokens): prompts are filled by it."""

    @property
    def context_length(self) -> int:
        return 2048

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing to release
        """Release connections, threads or GPU memory; the backend is unusable afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cut_at_stop(text: str, stop: str | Sequence[str] | None) -> str:
    """``text`` up to the earliest of the stop strings."""
    if not stop:
        return text
    stops = [stop] if isinstance(stop, str) else list(stop)
    cut = len(text)
    for s in stops:
        if s:
            at = text.find(s)
            if at != -1:
                cut = min(cut, at)
    return text[:cut]


def has_newline_stop(stop: str | Sequence[str] | None) -> bool:
    """Whether ``"\n"`` is one of the stop strings: a backend can then end decoding at a newline token."""
    if not stop:
        return False
    return "\n" in ([stop] if isinstance(stop, str) else list(stop))


def newline_token_ids(tokenizer) -> list[int]:
    """Every vocabulary entry of ``tokenizer`` whose text contains a newline: any of them ends an answer."""
    return sorted({i for i in tokenizer.get_vocab().values() if "\n" in tokenizer.decode([i])})


def group_by_shared_prefix(prefixes: Sequence[str], prompts: Sequence[str], prompt_ids: Sequence[list[int]],
                           encode: Callable[[str], list[int]]
                           ) -> tuple[dict[str, list[int]], dict[str, list[int]], list[int]]:
    """For :meth:`LMBackend.score_shared`: each prefix's token ids (``encode``, as prompts are encoded), the pairs
    that can run on top of each prefix, and the pairs that run whole. A pair shares its prefix only where the
    prefix's tokens start its prompt's tokens (a token boundary) and leave some of the prompt after them."""
    heads: dict[str, list[int]] = {}
    groups: dict[str, list[int]] = {}
    whole: list[int] = []
    for i, (prefix, prompt, ids) in enumerate(zip(prefixes, prompts, prompt_ids)):
        if prefix not in heads:
            heads[prefix] = encode(prefix) if prefix else []
        head = heads[prefix]
        if head and len(head) < len(ids) and ids[: len(head)] == head and prompt.startswith(prefix):
            groups.setdefault(prefix, []).append(i)
        else:
            whole.append(i)
    return heads, groups, whole


# -- choosing a backend by name --------------------------------------------------------------------

# kind -> (module, class): imported only when chosen (the style of the `rerankers` library).
BACKENDS: dict[str, tuple[str, str]] = {
    "transformers": ("taskret.backends.transformers", "TransformersBackend"),
    "openai": ("taskret.backends.openai", "OpenAIBackend"),
    "vllm": ("taskret.backends.vllm", "VLLMBackend"),
    "llamacpp": ("taskret.backends.llamacpp", "LlamaCppBackend"),
}
DEFAULT_BACKEND = "transformers"


def parse_spec(spec: str) -> tuple[str, str]:
    """``"openai:http://h:8000/v1#m"`` -> ``("openai", "http://h:8000/v1#m")``; a bare name or path is
    ``("transformers", spec)``. Only a known backend name counts as a prefix, so paths with colons work."""
    spec = str(spec)
    kind, sep, target = spec.partition(":")
    if sep and kind in BACKENDS:
        if not target:
            raise ValueError(f"LM spec '{spec}' names the {kind} backend but no model")
        return kind, target
    return DEFAULT_BACKEND, spec


def backend_class(kind: str) -> type[LMBackend]:
    if kind not in BACKENDS:
        raise ValueError(f"unknown LM backend '{kind}'; known: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[kind]
    return getattr(importlib.import_module(module), cls)


def backend_options(kind: str) -> dict[str, Any]:
    """The options a backend's ``from_spec`` accepts, with their defaults."""
    params = inspect.signature(backend_class(kind).from_spec).parameters
    return {name: p.default for name, p in params.items()
            if name not in ("target", "cls") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def make_backend(spec: str, **options: Any) -> LMBackend:
    """Load the LM named by ``spec`` (see the module docstring). Options a backend does not know
    are an error; ``None`` values are dropped, so callers can pass optional CLI values straight on."""
    kind, target = parse_spec(spec)
    cls = backend_class(kind)
    known = backend_options(kind)
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for the {kind} LM backend; "
                         f"known: {', '.join(sorted(known))}")
    return cls.from_spec(target, **options)


def load_lm(spec: str, options: Mapping[str, Any] | None = None, **common: Any) -> LMBackend:
    """``make_backend`` for command lines: ``common`` (e.g. ``device``, ``dtype``) are passed only to the
    backends that take them, while ``options`` (``--lm-option``) must all be known to the backend."""
    kind, _ = parse_spec(spec)
    known = backend_options(kind)
    merged = {k: v for k, v in common.items() if k in known and v is not None}
    merged.update(options or {})
    return make_backend(spec, **merged)


#: what each backend's ``runtime()["engine"]`` calls itself (a summary's ``machine.engine``)
ENGINE_NAMES = {"transformers": "transformers", "llamacpp": "llama.cpp", "vllm": "vllm", "openai": "openai"}


def generation_spec(spec: str, options: Mapping[str, Any] | None = None, device: str | None = None,
                    dtype: str | None = None) -> str:
    """The spec that generates with ``spec`` fastest here at the same answers. A bundled model named bare
    (``smollm2-135m``, ``gemma3-270m``), with no backend options, on a CPU without native bfloat16 where float32 is
    the precision, runs on llama.cpp (``llamacpp:NAME``, float32 weights: ``benchmarks/speed/lm_engines.py``
    measured it faster there with answers in agreement). Any other spec stays as given: a backend named
    (``transformers:NAME`` keeps transformers), options for the default backend, a GPU, or a CPU with native
    bfloat16 (transformers' bf16, not measured against it). Without the ``llamacpp`` extra it says so once and keeps
    transformers. Scoring is not switched: transformers' scoring was as fast there."""
    from ..models import GGUF_MODELS, dtype_name, pick_device

    kind, target = parse_spec(spec)
    if kind != DEFAULT_BACKEND or str(spec).startswith(f"{kind}:") or options or target not in GGUF_MODELS:
        return spec
    if pick_device(None if device == "auto" else device) != "cpu" or dtype_name(dtype or "auto", "cpu") != "float32":
        return spec
    if importlib.util.find_spec("llama_cpp") is None:
        _say_once("llama.cpp is not installed (pip install 'taskret[llamacpp]'), so generation runs on "
                  "transformers, the slower engine on this CPU")
        return spec
    return f"llamacpp:{target}"


def engine_of(spec: str) -> str:
    """The engine a spec runs on, as its backend's ``runtime()`` records it (``transformers``, ``llama.cpp``)."""
    kind, _ = parse_spec(spec)
    return ENGINE_NAMES.get(kind, kind)


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    import sys

    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def parse_options(pairs: Sequence[str] | None) -> dict[str, Any]:
    """``["concurrency=8", "api_key_env=MY_KEY"]`` -> ``{"concurrency": 8, "api_key_env": "MY_KEY"}``;
    values are read as JSON when they parse (numbers, booleans, null), else kept as strings."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"LM option '{pair}' is not KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options
