"""What the fine-tuning stages past the EPR paper share (:mod:`taskret.epr.reward`'s reward model and its
distillation, :mod:`taskret.epr.sets`' set training): an epoch loop over shuffled mini-batches with a plain torch
optimiser, the query route of the EPR dual encoder, and saving a model folder atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from ..training.checkpoints import LoopCheckpoints

__all__ = ["fit_epochs", "held_out_ids", "linear_warmup", "query_route", "document_route", "embed", "embed_distinct",
           "save_model"]


def held_out_ids(rows: Sequence[dict], share: float, seed: int) -> set[str]:
    """The ids of a seeded ``share`` of ``rows`` (each with an ``"id"``): the inputs a stage keeps out of training,
    to measure on (LLM-R's teacher agreement, CEIL's early stopping)."""
    ids = sorted(r["id"] for r in rows)
    n = int(round(share * len(ids)))
    return {ids[int(i)] for i in np.random.default_rng(seed).permutation(len(ids))[:n]}


def linear_warmup(optimizer, n_items: int, batch_size: int, epochs: int, warmup_ratio: float):
    """The published recipes' schedule (LLM-R, UDR, CEIL): the learning rate rises linearly over the first
    ``warmup_ratio`` of the steps, then falls linearly to zero."""
    from transformers import get_linear_schedule_with_warmup

    total = epochs * -(-n_items // batch_size)
    return get_linear_schedule_with_warmup(optimizer, int(round(warmup_ratio * total)), total)


def fit_epochs(n_items: int, batch_size: int, epochs: int, seed: int, optimizer, batch_loss: Callable[..., object],
               progress: Callable[[int], None] | None = None, scheduler=None,
               with_epoch: bool = False, after_epoch: Callable[[int], bool] | None = None,
               checkpoints: "LoopCheckpoints | None" = None) -> tuple[list[float], int]:
    """``epochs`` passes over ``n_items`` in a seeded shuffled order, ``batch_size`` at a time: one optimiser step
    on ``batch_loss(indices)`` (``batch_loss(indices, epoch)`` when ``with_epoch``: a loss that draws its groups
    anew each epoch) each, then a ``scheduler`` step if given. ``after_epoch(epoch)`` returning True stops early
    (a held-out loss that stopped improving). Returns the mean loss of each epoch (5 decimals)
    and the number of steps; ``progress`` hears how many items each step took.

    ``checkpoints`` (:class:`~taskret.training.checkpoints.LoopCheckpoints`, over the same optimiser and scheduler):
    the loop goes on from the run's last checkpoint, skipping the steps it had done (the order of every epoch is the
    seed's, so the same steps), and saves one when its interval has passed. What ``batch_loss`` draws at random
    must be restored through the checkpoints' ``extra``; ``after_epoch``'s state is not, so the two do not mix."""
    if checkpoints is not None and after_epoch is not None:
        raise ValueError("fit_epochs checkpoints a loop without after_epoch (its state is not saved)")
    rng = np.random.default_rng(seed)
    per_epoch = -(-n_items // batch_size)
    total = epochs * per_epoch
    resumed = checkpoints.resume() if checkpoints is not None else None
    done = resumed["step"] if resumed else 0
    epoch_losses: list[float] = list(resumed["epoch_losses"]) if resumed else []
    if progress is not None and done:
        from ..progress import report_resumed

        # Items of the steps done before: counted, not in the rate.
        report_resumed(progress, (done // per_epoch) * n_items + min(done % per_epoch * batch_size, n_items))
    steps = 0
    for epoch in range(epochs):
        order = rng.permutation(n_items)  # drawn for skipped epochs too: the generator goes on as it did
        if steps + per_epoch <= done:
            steps += per_epoch
            continue
        losses = list(resumed["losses"]) if resumed and steps < done else []
        for start in range(0, n_items, batch_size):
            if steps < done:
                steps += 1
                continue
            batch = [int(i) for i in order[start: start + batch_size]]
            loss = batch_loss(batch, epoch) if with_epoch else batch_loss(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.item())
            steps += 1
            if progress is not None:
                progress(len(batch))
            if checkpoints is not None and checkpoints.due(steps, total):
                end = start + batch_size >= n_items
                epoch_done = epoch_losses + [round(float(np.mean(losses)), 5)] if end else epoch_losses
                checkpoints.save(steps, total, {"epoch_losses": epoch_done, "losses": [] if end else losses})
        epoch_losses.append(round(float(np.mean(losses)), 5))
        if after_epoch is not None and after_epoch(epoch):
            break
    return epoch_losses, steps


def query_route(model) -> list:
    """The query encoder's modules of a query/document Router (the EPR dual encoder), to train on their own."""
    return _route(model, "query")


def document_route(model) -> list:
    """The example encoder's modules of a query/document Router."""
    return _route(model, "document")


def _route(model, name: str) -> list:
    from sentence_transformers.sentence_transformer.modules import Router

    router = model[0] if len(model) else None
    if not isinstance(router, Router) or name not in router.sub_modules:
        raise ValueError("this stage fine-tunes the EPR dual encoder (a query/document Router)")
    return list(router.sub_modules[name])


def embed(modules: Sequence, texts: Sequence[str]):
    """``texts`` through ``modules`` (:func:`query_route`'s) with gradients: their sentence embeddings."""
    # sentence-transformers 5 names it preprocess (tokenize is deprecated); earlier versions only tokenize.
    prepare = getattr(modules[0], "preprocess", None) or modules[0].tokenize
    features = prepare(list(texts))
    # The tokenizer's tensors are on the CPU; the model may be on an accelerator.
    device = next((param.device for module in modules for param in module.parameters()), None)
    if device is not None and device.type != "cpu":
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}
    for module in modules:
        features = module(features)
    return features["sentence_embedding"]


def embed_distinct(modules: Sequence, texts: Sequence[str], chunk_size: int = 32):
    """:func:`embed`'s embeddings of ``texts``, each distinct text encoded once, in chunks of ``chunk_size`` texts of
    similar length (each chunk padded to its own longest, not the batch's). The gradient of a repeated text sums over
    its uses, as autograd would; a repeated text shares one dropout draw. Why: a listwise batch of 32 inputs x 8
    candidates repeats ~12% of its candidates, and padding all 256 to the longest (MTOP: 67 tokens against a
    mean of 32) more than doubles the encoder's work; ``benchmarks/epr/listwise_speed.py`` measures the difference."""
    import torch

    position: dict[str, int] = {}
    for text in texts:
        position.setdefault(text, len(position))
    distinct = list(position)
    tokenizer = getattr(modules[0], "tokenizer", None)
    if tokenizer is not None:
        lengths = [len(ids) for ids in tokenizer(distinct, add_special_tokens=False)["input_ids"]]
    else:
        lengths = [len(text) for text in distinct]
    order = sorted(range(len(distinct)), key=lambda i: lengths[i])
    chunks = [embed(modules, [distinct[i] for i in order[start: start + chunk_size]])
              for start in range(0, len(order), chunk_size)]
    by_length = torch.cat(chunks)
    rank = torch.empty(len(order), dtype=torch.long)
    rank[torch.tensor(order)] = torch.arange(len(order))  # distinct text i is row rank[i] of by_length
    return by_length.index_select(0, rank[torch.tensor([position[text] for text in texts])].to(by_length.device))


def save_model(model, out_dir: str | os.PathLike) -> Path:
    """Save a sentence-transformers model (or CrossEncoder) as ``out_dir/model``: written to a temporary folder
    beside it and renamed onto it (:func:`taskret.training.fit.replace_dir`), so a failed save leaves none."""
    from ..training.fit import replace_dir

    out_dir = Path(out_dir)
    staging = Path(tempfile.mkdtemp(prefix=".model.", suffix=".tmp", dir=out_dir))
    model.save(str(staging))
    replace_dir(staging, out_dir / "model")
    return out_dir / "model"
