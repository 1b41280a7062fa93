"""Retrievers, chosen by name: ``random``, ``bm25[:input|output|both]``, ``sbert``, ``dense:ENCODER``,
or a saved index directory."""

from __future__ import annotations

from pathlib import Path

from .base import RetrievalResult, Retriever
from .bm25 import BM25Retriever
from .dense import DenseRetriever, SBERTRetriever
from .random import RandomRetriever

RETRIEVERS: dict[str, type[Retriever]] = {
    cls.name: cls for cls in (RandomRetriever, BM25Retriever, DenseRetriever, SBERTRetriever)
}

__all__ = ["RETRIEVERS", "RetrievalResult", "Retriever", "BM25Retriever", "DenseRetriever", "RandomRetriever",
           "SBERTRetriever", "make_retriever"]


def make_retriever(spec: str, seed: int = 0, device: str | None = None) -> Retriever:
    """Build an un-indexed retriever from a spec string, or load one from a saved directory.

    ``random``, ``bm25`` (over inputs), ``bm25:output``, ``bm25:both``, ``sbert``, ``dense:ENCODER``,
    ``epr:DIR`` (an EPR work folder, its ``retriever/`` training output, or a saved index).
    """
    name, _, arg = spec.partition(":")
    if name == "random":
        return RandomRetriever(seed=seed)
    if name == "bm25":
        return BM25Retriever(field=arg or "input")
    if name == "sbert":
        return SBERTRetriever(encoder=arg or "minilm-l6", device=device)
    if name == "dense":
        return DenseRetriever(encoder=arg or "minilm-l6", device=device)
    if name == "epr":
        return _epr_retriever(Path(arg), device)
    if spec and Path(spec).is_dir():
        return Retriever.load(spec)
    raise ValueError(f"unknown retriever '{spec}'; expected random, bm25[:input|output|both], sbert, "
                     f"dense:ENCODER, epr:DIR or a saved index directory")


def _epr_retriever(directory: Path, device: str | None) -> Retriever:
    """A saved index if there is one, else the trained dual encoder (indexed by the caller)."""
    from ..io import read_json

    for index_dir in (directory / "index", directory):
        if (index_dir / "meta.json").exists():
            return Retriever.load(index_dir)
    for train_dir in (directory / "retriever", directory):
        if (train_dir / "model").is_dir():
            config = read_json(train_dir / "epr_config.json") if (train_dir / "epr_config.json").exists() else {}
            return DenseRetriever(encoder=str(train_dir / "model"), field=config.get("field", "input"), device=device)
    raise FileNotFoundError(f"{directory}: no EPR index (meta.json) or trained model (model/) found")
