"""Rerankers: score a query against documents and reorder a first stage's ranking, in the style of the
``rerankers`` library (a small abstract base, one module per backend).

Public API::

    load_reranker(spec)                 # "cross-encoder:PATH", or a PATH / model name (the cross-encoder; a
                                        # TART-full run trained by query likelihood loads as CausalLMReranker)
    Reranker                            # abstract: score_pairs / score / rank / rerank
    CrossEncoderReranker(path)          # a TART-full run folder or any sentence-transformers CrossEncoder
    CausalLMReranker(lm)                # "upr:LM": zero-shot query likelihood with a causal LM (UPR)
    FusionReranker(spec)                # "fusion:ENCODER?weight=W": BM25 + dense encoder(s) over the pairs given
    cross_encoder_folder(spec), make_denoiser(spec)

Rankings are :class:`~taskret.retrieval.base.RetrievalResult` s (ids and scores, one row per query), as
retrievers return them. Backends import their model libraries only when a reranker is built.
"""

from __future__ import annotations

import os
from pathlib import Path

from .base import Reranker, RetrievalResult
from .causal_lm import CausalLMReranker
from .cross_encoder import CrossEncoderReranker, cross_encoder_folder, make_denoiser, query_likelihood_run
from .fusion import FusionReranker

__all__ = ["BACKENDS", "CausalLMReranker", "CrossEncoderReranker", "FusionReranker", "Reranker", "RetrievalResult", "cross_encoder_folder",
           "load_reranker", "make_denoiser"]

#: Reranker classes by the name a spec may start with (``"NAME:"``); the first is the default backend.
BACKENDS: dict[str, type[Reranker]] = {"cross-encoder": CrossEncoderReranker, "upr": CausalLMReranker,
                                       "fusion": FusionReranker}


def load_reranker(spec: str | os.PathLike | Reranker, **kwargs) -> Reranker:
    """A :class:`Reranker` as it is; else the backend that ``spec`` names: ``"NAME:ARG"`` for a backend of
    :data:`BACKENDS`, or a folder / registered model name for the default (``cross-encoder``). ``kwargs`` go
    to the backend (``batch_size``, ``device``, ...)."""
    if isinstance(spec, Reranker):
        return spec
    text = str(spec)
    name, sep, arg = text.partition(":")
    if sep and not Path(text).exists():
        if name in BACKENDS:
            return BACKENDS[name](arg, **kwargs)
        if "/" not in name and os.sep not in name:
            raise ValueError(f"unknown reranker backend '{name}' in '{text}'; expected one of "
                             f"{', '.join(BACKENDS)} (NAME:PATH), or a folder or model name")
    run = query_likelihood_run(text)
    if run is not None:  # a TART-full fine-tuned by query likelihood: a causal LM scored as UPR is
        reranker = CausalLMReranker(str(Path(text) / "model"), max_doc_tokens=int(run.get("max_doc_tokens", 200)),
                                    **kwargs)
        reranker.use_instruction = bool(run.get("use_instruction", True))  # as a distillation teacher reads queries
        return reranker
    return next(iter(BACKENDS.values()))(spec, **kwargs)
