"""``transformers``: the model runs in this process with Hugging Face transformers (the default backend).

Scoring batches by tokens and projects onto the vocabulary only at target positions; generation is
batched greedy decoding that stops at the first newline token (see :class:`taskret.lm.CausalLM`).
"""

from __future__ import annotations

from ..lm import CausalLM


class TransformersBackend(CausalLM):
    """A registered model name (``smollm2-135m``) or a local Hugging Face folder, on CPU or one GPU."""

    backend = "transformers"

    @classmethod
    def from_spec(cls, target: str, device: str | None = None, dtype: str = "auto", threads: int | None = None,
                  max_batch_tokens: int = 8192, max_batch_size: int = 64) -> "TransformersBackend":
        return cls.load(target, device=device, dtype=dtype, threads=threads, max_batch_tokens=max_batch_tokens,
                        max_batch_size=max_batch_size)
