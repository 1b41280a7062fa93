"""Batches for contrastive training: duplicate-free in-batch negatives, epoch by epoch, and the trainer's
batch sampler that walks per-epoch blocks in order (see :mod:`taskret.training.fit`)."""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

__all__ = ["RowKeys", "epoch_batches", "make_block_sampler", "fractional_epochs"]


class RowKeys(NamedTuple):
    """What a triplet row must not share with the other rows of its batch (see :func:`epoch_batches`)."""

    query: tuple[str, ...]  # the query: its id and its text
    positive: tuple[str, ...]  # the positive document: id and text
    negative: tuple[str, ...]  # the negative document: id and text
    positive_text: str  # the text the document encoder sees
    negative_text: str
    group: str = ""  # rows of one non-empty group share their batches (see :func:`epoch_batches`)


def epoch_batches(rows: Sequence[Any], batch_size: int, rng: np.random.Generator,
                  no_duplicates: bool) -> list[list[int]]:
    """Shuffle rows ``0..n-1`` into ``ceil(n / batch_size)`` batches, all full but the last.

    Without ``no_duplicates`` the rows can be anything (only their number counts). With it, they are
    :class:`RowKeys` and each batch is first filled greedily, in shuffled order, with rows that add no
    false negative to the batch (a document scored as an in-batch negative although it is as good
    as, or better than, the query's positive):

    * no query twice (by id or text): each one's positive would be the other's negative;
    * no query's own item among the batch's documents (by id or text): for EPR, a query's own
      example is its best possible demonstration, and with ``field="input"`` it is literally the
      query's text, which both encoders start by scoring 1.0;
    * no positive text that is also another document of the batch.

    Two rows sharing a negative are harmless and allowed. If the remaining rows cannot fill the batch
    that way (a small pool in which every example is everyone's candidate), it is topped up with the
    next rows regardless, so no tiny batches are made and duplicates stay as rare as the data allows.

    Rows whose ``group`` is set are batched with their group only (as many full batches as it fills; its
    remainder joins the rows without a group), so their in-batch negatives are the group's documents:
    TART-dual groups sibling tasks this way (``TartDualConfig.batch_groups``). Without groups the batches
    are exactly the ungrouped ones above, for the same ``rng``.
    """
    order = [int(i) for i in rng.permutation(len(rows))]
    if not no_duplicates:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    members: dict[str, list[int]] = {}
    for index in order:
        members.setdefault(rows[index].group, []).append(index)
    if set(members) <= {""}:
        return _fill_batches(rows, order, batch_size)[0]
    # Grouped: each group's rows fill batches of their own, so that a query's in-batch negatives are
    # its group's documents. What a group cannot fill (its last, partial batch) joins the ungrouped
    # rows in mixed batches; the full batches are walked in random order, the partial one last.
    full: list[list[int]] = []
    rest: list[int] = []
    for group, indices in members.items():
        if not group:
            rest.extend(indices)
            continue
        group_batches, left = _fill_batches(rows, indices, batch_size, top_up=False)
        full.extend(group_batches)
        rest.extend(left)
    position = {index: i for i, index in enumerate(order)}
    mixed = _fill_batches(rows, sorted(rest, key=position.__getitem__), batch_size)[0]
    full.extend(b for b in mixed if len(b) == batch_size)
    partial = [b for b in mixed if len(b) < batch_size]
    return [full[int(i)] for i in rng.permutation(len(full))] + partial


def _fill_batches(rows: Sequence[RowKeys], order: Sequence[int], batch_size: int,
                  top_up: bool = True) -> tuple[list[list[int]], list[int]]:
    """:func:`epoch_batches`' greedy fill of ``order`` (already shuffled) into duplicate-free batches, and the
    rows left over. With ``top_up`` none is left over: a batch that cannot be filled duplicate-free is topped up
    and the last batch may be short. Without it, the first such batch ends the fill, and its rows and all those
    after it are left over (a group's remainder, which the mixed batches then take)."""
    batches: list[list[int]] = []
    remaining = list(order)
    while remaining:
        batch: list[int] = []
        queries: set[str] = set()  # keys of the batch's queries
        doc_examples: set[str] = set()  # keys of the items shown as its documents
        positive_texts: set[str] = set()
        doc_texts: set[str] = set()
        deferred: list[int] = []
        for position, index in enumerate(remaining):
            if len(batch) == batch_size:
                deferred.extend(remaining[position:])
                break
            row = rows[index]
            row_docs = row.positive + row.negative
            if (not queries.isdisjoint(row.query) or not doc_examples.isdisjoint(row.query)
                    or not queries.isdisjoint(row_docs) or row.positive_text in doc_texts
                    or row.negative_text in positive_texts):
                deferred.append(index)
                continue
            batch.append(index)
            queries.update(row.query)
            doc_examples.update(row_docs)
            positive_texts.add(row.positive_text)
            doc_texts.update((row.positive_text, row.negative_text))
        if not top_up and len(batch) < batch_size:
            return batches, batch + deferred  # epoch_batches puts them back in shuffled order
        n_top_up = min(batch_size - len(batch), len(deferred))
        batch.extend(deferred[:n_top_up])
        batches.append(batch)
        remaining = deferred[n_top_up:]
    return batches, []


def make_block_sampler():
    """The batch sampler class, built lazily so that importing this module does not import torch."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    class EpochBlockBatchSampler(DefaultBatchSampler):
        """Batches of a dataset made of consecutive per-epoch blocks, epoch by epoch (see
        :func:`epoch_batches`). Computed up front, so ``len()`` is exact and the trainer's
        schedule matches the batches; the trainer's own generator and seed are not used.
        """

        def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                     seed: int = 0, *, blocks: Sequence[Sequence[Any]] = (), sample_seed: int = 0,
                     no_duplicates: bool = True) -> None:
            super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                             valid_label_columns=valid_label_columns, generator=generator, seed=seed)
            if sum(len(b) for b in blocks) != len(dataset):
                raise ValueError(f"epoch blocks cover {sum(len(b) for b in blocks)} rows but the dataset "
                                 f"has {len(dataset)}")
            self.batches: list[list[int]] = []
            self.block_of_batch: list[int] = []
            start = 0
            for epoch, block_keys in enumerate(blocks):
                rng = np.random.default_rng([sample_seed, epoch, 1])
                block = epoch_batches(block_keys, batch_size, rng, no_duplicates)
                if drop_last:
                    block = [b for b in block if len(b) == batch_size]
                self.batches.extend([[start + i for i in b] for b in block])
                self.block_of_batch.extend([epoch] * len(block))
                start += len(block_keys)

        def __iter__(self) -> Iterator[list[int]]:
            return iter([list(b) for b in self.batches])

        def __len__(self) -> int:
            return len(self.batches)

    return EpochBlockBatchSampler


def fractional_epochs(block_of_batch: Sequence[int]) -> list[float]:
    """Epoch reached after each batch: ``e + i / n_e`` after the ``i``-th of epoch ``e``'s ``n_e`` batches."""
    counts: dict[int, int] = {}
    for block in block_of_batch:
        counts[block] = counts.get(block, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for block in block_of_batch:
        seen[block] = seen.get(block, 0) + 1
        out.append(block + seen[block] / counts[block])
    return out
