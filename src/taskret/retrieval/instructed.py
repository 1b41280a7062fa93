"""A retriever whose every query carries a task instruction: ``"{instruction} [SEP] {query}"``
(:func:`taskret.formats.format_query`), the form a multi-task EPR retriever (:mod:`taskret.epr.multitask`) was
trained on. ``taskret evaluate --instruction`` wraps its retriever in it; the LangChain and DSPy integrations
take ``instruction=`` to the same effect."""

from __future__ import annotations

from typing import Sequence

from ..formats import format_query
from .base import RetrievalResult, Retriever

__all__ = ["InstructedRetriever"]


class InstructedRetriever:
    """``retrieve`` writes each query with ``instruction`` in front; everything else (``ids``, ``index``,
    ``save``...) is the ``wrapped`` retriever's."""

    def __init__(self, wrapped: Retriever, instruction: str):
        if not instruction.strip():
            raise ValueError("the instruction is empty")
        self.wrapped = wrapped
        self.instruction = instruction

    def retrieve(self, queries: Sequence[str], k: int, exclude: Sequence[str | None] | None = None) -> RetrievalResult:
        return self.wrapped.retrieve([format_query(self.instruction, q) for q in queries], k, exclude=exclude)

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)
