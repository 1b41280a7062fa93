"""Mean pooling that leaves each query's instruction out of the average (INSTRUCTOR, Su et al. 2022).

A sentence-transformers encoder mean-pools every token, so a 15-token instruction in front of a 15-token claim
makes half of TART-dual's query vector. Leaving the instruction's tokens out of the mean keeps their effect
through attention (the query's tokens still read them) without letting them dominate the vector: on SciFact
this alone halved what the instruction cost a distilled TART-dual (``benchmarks/studies/tart/instruction_pooling.py``).

sentence-transformers does this with ``Pooling(include_prompt=False)``, but only for one prompt per batch (the
``prompt=`` of ``encode``). TART's queries carry their instruction inline (``"{instruction} [SEP] {query}"``,
:func:`taskret.formats.format_query`) and a training batch mixes many instructions, so
:class:`InstructionExcludedPooling` finds each row's instruction itself: the tokens up to and including the
first separator token of a row that holds two (``[CLS] instruction [SEP] query [SEP]``). A row with one
separator (a bare query, a document) is pooled whole. (A document whose text holds ``[SEP]`` itself would lose
what comes before it: the tokenizer reads that text as the separator token.) This is exactly what
``encode(query, prompt=instruction + " [SEP] ")`` excludes with the plain module, so a saved model stays a
standard sentence-transformers folder (``Pooling`` with ``include_prompt: false``, no custom code to trust) and
:func:`adopt_instruction_pooling` swaps the per-row module in when taskret loads it.

Public API::

    InstructionExcludedPooling.from_pooling(pooling, separator_id)  # the per-row module
    exclude_instruction_from_pooling(model)   # training: per-row module in, include_prompt False
    adopt_instruction_pooling(model)          # loading: a saved include_prompt=False model gets the per-row module
    standard_pooling(model)                   # saving: back to the plain Pooling(include_prompt=False)
    excludes_instruction(model)               # does this model leave instructions out of its pooling?
"""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

__all__ = ["InstructionExcludedPooling", "exclude_instruction_from_pooling", "adopt_instruction_pooling",
           "standard_pooling", "excludes_instruction"]


class InstructionExcludedPooling(Pooling):
    """``Pooling`` that masks, per row, the tokens up to and including the first ``separator_id`` when the
    row holds two separators or more (the instruction of ``"{instruction} [SEP] {query}"``)."""

    separator_id: int = -1

    @classmethod
    def from_pooling(cls, pooling: Pooling, separator_id: int) -> "InstructionExcludedPooling":
        module = cls(pooling.embedding_dimension, pooling.pooling_mode, include_prompt=False)
        module.separator_id = int(separator_id)
        return module

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        ids, mask = features.get("input_ids"), features.get("attention_mask")
        if ids is None or mask is None or mask.size(-1) != features["token_embeddings"].size(1):
            return super().forward(features, **kwargs)
        is_separator = ids == self.separator_id
        first = is_separator.to(torch.int64).argmax(dim=1)
        prompt_length = torch.where(is_separator.sum(dim=1) >= 2, first + 1, torch.zeros_like(first))
        positions = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
        # A copy: gradient-cached losses embed the same features twice and must see the same mask.
        pooled = {**features, "attention_mask": mask.masked_fill(positions < prompt_length.unsqueeze(1), 0)}
        pooled.pop("prompt_length", None)  # the per-row lengths above replace a batch-wide prompt
        features["sentence_embedding"] = super().forward(pooled, **kwargs)["sentence_embedding"]
        return features


def _pooling_slot(model: SentenceTransformer) -> tuple[str, Any] | None:
    for key, module in model._modules.items():
        if isinstance(module, Pooling):
            return key, module
    return None


def excludes_instruction(model: SentenceTransformer) -> bool:
    """True when ``model``'s pooling leaves the prompt (the instruction) out of the average."""
    slot = _pooling_slot(model)
    return slot is not None and not slot[1].include_prompt


def exclude_instruction_from_pooling(model: SentenceTransformer) -> SentenceTransformer:
    """Make ``model`` (a shared encoder: Transformer, Pooling, ...) leave each query's instruction out of its mean.
    Raises ``ValueError`` for a model without a Pooling module or a tokenizer without a separator token."""
    slot = _pooling_slot(model)
    separator_id = getattr(getattr(model, "tokenizer", None), "sep_token_id", None)
    if slot is None:
        raise ValueError("instruction pooling needs a model with a sentence-transformers Pooling module "
                         "(a shared encoder, not a query/document Router)")
    if separator_id is None:
        raise ValueError("instruction pooling needs a tokenizer with a separator token ([SEP]) between "
                         "the instruction and the query")
    key, pooling = slot
    if not isinstance(pooling, InstructionExcludedPooling):
        model._modules[key] = InstructionExcludedPooling.from_pooling(pooling, separator_id)
    return model


def adopt_instruction_pooling(model: SentenceTransformer) -> SentenceTransformer:
    """A loaded model saved with ``include_prompt: false`` pools per row (instructions inline); others unchanged."""
    if excludes_instruction(model) and getattr(getattr(model, "tokenizer", None), "sep_token_id", None) is not None:
        exclude_instruction_from_pooling(model)
    return model


def standard_pooling(model: SentenceTransformer) -> SentenceTransformer:
    """Put the plain ``Pooling(include_prompt=False)`` back before saving, so the folder needs no taskret code."""
    slot = _pooling_slot(model)
    if slot is not None and isinstance(slot[1], InstructionExcludedPooling):
        key, pooling = slot
        model._modules[key] = Pooling(pooling.embedding_dimension, pooling.pooling_mode, include_prompt=False)
    return model
