"""``vllm``: the model runs in this process under vLLM, on GPUs (``pip install 'taskret[vllm]'``).

Scoring tokenizes prompt and target separately, exactly as the ``transformers`` backend does (prompt with
the model's special tokens, target without), sends the token ids, and sums the target tokens' entries of
vLLM's ``prompt_logprobs``; generation is greedy (``temperature=0``) with the stop strings. vLLM batches
and schedules everything it is given, so each call sends all its prompts at once.

Spec: ``vllm:NAME_OR_FOLDER`` (a registered taskret model, a local folder, or a model id vLLM can load);
options are vLLM engine arguments: ``dtype``, ``tensor_parallel_size``, ``gpu_memory_utilization``,
``max_model_len``, ``enforce_eager``, ``seed``, and ``engine_args`` (a dict of any others).

Not exercised by taskret's test suite, which runs on CPU-only machines without vLLM.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from .base import (
    DEFAULT_STOP,
    BackendNotInstalled,
    LMBackend,
    ProgressFn,
    TargetScore,
    cut_at_stop,
)

INSTALL = "pip install 'taskret[vllm]' (vLLM needs a CUDA GPU; see https://docs.vllm.ai for other platforms)"


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise BackendNotInstalled(f"the vllm LM backend needs vLLM, which is not installed: {INSTALL}. "
                                  f"Without a GPU, use the default transformers backend (--lm NAME) or an "
                                  f"OpenAI-compatible server (--lm openai:URL#MODEL).") from err
    return vllm


class VLLMBackend(LMBackend):
    """A vLLM ``LLM`` engine in this process."""

    backend = "vllm"

    def __init__(self, llm, name: str):
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.name = name

    @classmethod
    def from_spec(cls, target: str, dtype: str = "auto", tensor_parallel_size: int = 1,
                  gpu_memory_utilization: float = 0.9, max_model_len: int | None = None, enforce_eager: bool = False,
                  seed: int = 0, engine_args: dict | None = None) -> "VLLMBackend":
        vllm = _import_vllm()
        from ..models import MODELS, resolve_model

        model = str(resolve_model(target)) if target in MODELS or os.path.isdir(target) else target
        args: dict[str, Any] = {"dtype": dtype, "tensor_parallel_size": int(tensor_parallel_size),
                                "gpu_memory_utilization": float(gpu_memory_utilization), "seed": int(seed),
                                "enforce_eager": bool(enforce_eager)}
        if max_model_len:
            args["max_model_len"] = int(max_model_len)
        args.update(engine_args or {})
        # The same name as the transformers backend: the scores are meant to agree up to float rounding.
        return cls(vllm.LLM(model=model, **args), name=target)

    @property
    def context_length(self) -> int:
        return int(self.llm.llm_engine.model_config.max_model_len)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _tokens_prompt(self, ids: list[int]):
        try:
            from vllm.inputs import TokensPrompt
        except ImportError:  # older vLLM: a plain dict
            return {"prompt_token_ids": ids}
        return TokensPrompt(prompt_token_ids=ids)

    def score(self, prompts: Sequence[str], targets: Sequence[str], progress: ProgressFn | None = None
              ) -> list[TargetScore]:
        from vllm import SamplingParams

        if len(prompts) != len(targets):
            raise ValueError("prompts and targets must have the same length")
        prompt_ids = [self.tokenizer(p).input_ids for p in prompts]
        target_ids = [self.tokenizer(t, add_special_tokens=False).input_ids for t in targets]
        if any(not p and t for p, t in zip(prompt_ids, target_ids)):
            raise ValueError("an empty prompt cannot condition a target with this tokenizer (no BOS token)")
        # prompt_logprobs=1: each position's entry holds the actual token (and the top-1 alternative).
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        seqs = [p + t for p, t in zip(prompt_ids, target_ids)]
        outputs = self.llm.generate([self._tokens_prompt(s) for s in seqs], params, use_tqdm=False)
        results = []
        for out, seq, start in zip(outputs, seqs, (len(p) for p in prompt_ids)):
            entries = out.prompt_logprobs or []
            total = 0.0
            for pos in range(start, len(seq)):
                entry = entries[pos] if pos < len(entries) else None
                if entry is None or seq[pos] not in entry:
                    raise RuntimeError(f"vLLM returned no log-probability for prompt position {pos}")
                value = entry[seq[pos]]
                total += float(getattr(value, "logprob", value))
            results.append(TargetScore(total, len(seq) - start))
        if progress:
            progress(len(prompts))
        return results

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 128, stop: str | Sequence[str] | None = DEFAULT_STOP,
                 progress: ProgressFn | None = None) -> list[str]:
        from vllm import SamplingParams

        stops = None if not stop else ([stop] if isinstance(stop, str) else list(stop))
        params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0, stop=stops)
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        if progress:
            progress(len(prompts))
        return [cut_at_stop(o.outputs[0].text, stops).strip() for o in outputs]

    def close(self) -> None:
        self.llm = None
