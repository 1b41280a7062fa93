"""Language-model backends behind one interface (:class:`LMBackend`), chosen by a spec string.

    from taskret.backends import make_backend
    lm = make_backend("smollm2-135m")                                  # transformers, in process
    lm = make_backend("openai:http://127.0.0.1:8000/v1#smollm2-135m")  # any OpenAI-compatible server
    lm = make_backend("vllm:/models/llama", tensor_parallel_size=2)     # vLLM on GPUs

Each backend's module is imported only when chosen.
"""

from .base import (
           BACKENDS,
           BackendError,
           BackendNotInstalled,
           LMBackend,
           TargetScore,
           backend_options,
           load_lm,
           make_backend,
           parse_options,
           parse_spec,
)

__all__ = ["BACKENDS", "BackendError", "BackendNotInstalled", "LMBackend", "TargetScore", "backend_options",
           "load_lm", "make_backend", "parse_options", "parse_spec"]
