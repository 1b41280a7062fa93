"""Retrievers, chosen by name: ``random``, ``bm25[:input|output|both]``, ``sbert``, ``dense:ENCODER``,
``hybrid:SPEC+SPEC``, ``epr:DIR``, a named setup (:mod:`taskret.setups`: ``docs-fast``, ``examples-bm25``, ...)
or a saved index directory."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from ..setups import resolve_setup, setup_names
from .base import REGISTRY, RetrievalResult, Retriever
from .bm25 import BM25Retriever
from .dense import DenseRetriever, SBERTRetriever
from .hybrid import HybridRetriever, parse_hybrid_spec, parse_spec_options, parse_switches
from .random import RandomRetriever

RETRIEVERS = REGISTRY  # name -> class, for loading saved indexes

__all__ = ["RETRIEVERS", "RetrievalResult", "Retriever", "BM25Retriever", "DenseRetriever", "RandomRetriever",
           "SBERTRetriever", "HybridRetriever", "make_retriever"]


def _build_hybrid(arg: str, seed: int, device: str | None) -> HybridRetriever:
    specs, options = parse_hybrid_spec(arg)
    built: dict[str, Retriever] = {}  # a spec given twice is one component (indexed once), read two ways
    for s in specs:
        if s not in built:
            built[s] = make_retriever(s, seed=seed, device=device)
    return HybridRetriever([built[s] for s in specs], specs=specs, **options)


def _build_bm25(arg: str) -> BM25Retriever:
    """``bm25[:FIELD][?read_instruction=1&backend=B]``: BM25 reads the query alone unless told otherwise; ``backend``
    (``auto``, ``numpy``, ``numba``, ``pisa``: :mod:`.bm25`)."""
    field, _, query = arg.partition("?")
    options = parse_spec_options("bm25 retriever", f"bm25:{arg}", query, {"read_instruction": _switch,
                                                                          "backend": str})
    return BM25Retriever(field=field or "input", **options)


def _switch(value: str) -> bool:
    """One ``read_instruction`` switch (:func:`.hybrid.parse_switches` of a single component)."""
    switches = parse_switches(value)
    if len(switches) != 1:
        raise ValueError(value)
    return switches[0]


_switch.__name__ = "0 or 1"


#: Spec keyword -> builder of ``(text after the colon, seed, device)``: with :data:`SPEC_PLUGINS`, one builder for each
#: of :data:`.base.SPEC_KEYWORDS` (tests/retrieval/test_base.py checks), which :func:`.hybrid.reads_instruction` reads.
SPEC_BUILDERS: dict[str, Callable[[str, int, str | None], Retriever]] = {
    "random": lambda arg, seed, device: RandomRetriever(seed=seed),
    "bm25": lambda arg, seed, device: _build_bm25(arg),
    "sbert": lambda arg, seed, device: SBERTRetriever(encoder=arg or "minilm-l6", device=device),
    "dense": lambda arg, seed, device: DenseRetriever(encoder=arg or "minilm-l6", device=device),
    "hybrid": _build_hybrid,
}
#: Spec prefixes served by another subpackage, imported only when used: ``epr:DIR`` is a trained EPR run.
SPEC_PLUGINS = {"epr": "taskret.epr.training:load_retriever"}


def make_retriever(spec: str, seed: int = 0, device: str | None = None) -> Retriever:
    """Build an un-indexed retriever from a spec string, or load one from a saved directory.

    ``random``, ``bm25`` (over inputs), ``bm25:output``, ``bm25:both``, ``sbert``, ``dense:ENCODER``,
    ``hybrid:SPEC+SPEC[?fusion=rrf|convex&weight=W]`` (fused first stages, see :mod:`.hybrid`),
    ``epr:DIR`` (an EPR work folder, its ``retriever/`` training output, or a saved index), or a named setup
    without a reranker (:mod:`taskret.setups`: ``docs-fast``, ``examples-bm25``, ``examples-epr:DIR``).
    Options follow a ``?``: ``bm25?read_instruction=1`` (BM25 reads the instruction too; by default it reads the
    query alone, as inside a hybrid), ``bm25?backend=pisa`` (its top k found by PISA, ranked as bm25s ranks).
    """
    setup = resolve_setup(spec)
    if setup is not None:
        if setup.rerank is not None:
            raise ValueError(f"setup '{setup.name}' is a first stage and a reranker ({setup.spec}): build its first "
                             f"stage with make_retriever('{setup.retriever}') and its reranker with "
                             f"load_reranker('{setup.rerank}'), or index it with `taskret tart index --setup "
                             f"{setup.name}` and search that index")
        spec = setup.retriever
    name, _, arg = spec.partition(":")
    if "?" in name:  # options without an argument: "bm25?read_instruction=1"
        name, _, options = name.partition("?")
        arg = f"?{options}"
    if name in SPEC_BUILDERS:
        return SPEC_BUILDERS[name](arg, seed, device)
    if name in SPEC_PLUGINS:
        module, _, function = SPEC_PLUGINS[name].partition(":")
        return getattr(importlib.import_module(module), function)(arg, device=device)
    if spec and Path(spec).is_dir():
        return Retriever.load(spec)
    raise ValueError(f"unknown retriever '{spec}'; expected a named setup ({', '.join(setup_names())}), random, "
                     f"bm25[:input|output|both], sbert, dense:ENCODER, hybrid:SPEC+SPEC, epr:DIR or a saved index "
                     f"directory")
