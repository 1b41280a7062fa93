"""Contrastive losses: DPR's objective (in-batch and hard negatives) for training and for checking a model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datasets
    import torch
    from sentence_transformers import SentenceTransformer

__all__ = ["dpr_training_loss", "dpr_loss"]


def dpr_training_loss(model: "SentenceTransformer", config) -> "torch.nn.Module":
    """The DPR objective as a trainer loss, with ``config.scale`` (any config with ``scale`` and
    ``mini_batch_size``; TART-dual's too): GradCache's multiple-negatives loss embedding ``mini_batch_size``
    sequences at a time (memory bounded by it), or, with ``mini_batch_size`` 0, the same loss over the whole batch
    at once (no second forward pass: less work, memory grows with the batch)."""
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )

    if config.mini_batch_size == 0:
        return MultipleNegativesRankingLoss(model, scale=config.scale)
    return CachedMultipleNegativesRankingLoss(model, scale=config.scale, mini_batch_size=config.mini_batch_size,
                                              show_progress_bar=False)


def dpr_loss(model: "SentenceTransformer", pairs: "datasets.Dataset", scale: float = 20.0,
             batch_size: int = 120) -> float:
    """The DPR objective on ``pairs`` in consecutive batches of ``batch_size``, without gradients.

    Each query is scored (cosine x ``scale``) against every positive and negative of its batch,
    i.e. its own positive and ``2B - 1`` negatives; the result is the mean negative log-likelihood
    of the own positive over all rows. For checking a trained model, not for training.
    """
    import torch

    kwargs = dict(batch_size=64, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)
    queries = model.encode_query(list(pairs["anchor"]), **kwargs).float().cpu()
    positives = model.encode_document(list(pairs["positive"]), **kwargs).float().cpu()
    negatives = model.encode_document(list(pairs["negative"]), **kwargs).float().cpu()
    total = 0.0
    for start in range(0, len(pairs), batch_size):
        q = queries[start:start + batch_size]
        docs = torch.cat([positives[start:start + batch_size], negatives[start:start + batch_size]])
        logits = scale * q @ docs.T
        targets = torch.arange(len(q))
        total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
    return total / len(pairs)
