"""Batching for contrastive training: duplicate-free in-batch negatives (RowKeys, epoch_batches), the block
batch sampler that walks per-epoch blocks in order, and the fractional epoch of each step."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.training.batching import RowKeys, epoch_batches, fractional_epochs, make_block_sampler


def _false_negatives(batch, rows) -> int:
    """Rows of a batch that share their example with another row's query or document, or whose
    positive text is another document of the batch."""
    count = 0
    for i in batch:
        mine = set(rows[i].query)
        for j in batch:
            if j == i:
                continue
            theirs = set(rows[j].query) | set(rows[j].positive) | set(rows[j].negative)
            if mine & theirs or rows[i].positive_text in (rows[j].positive_text, rows[j].negative_text):
                count += 1
                break
    return count


def _toy_rows(n_rows: int, pool: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    keys = lambda k: (f"id:e{k}", f"x:text {k % (pool - 5)}")  # noqa: E731 - a few duplicate input texts
    rows = []
    for i in range(n_rows):
        q, p, n = i % pool, int(rng.integers(pool)), int(rng.integers(pool))
        rows.append(RowKeys(keys(q), keys(p), keys(n), keys(p)[1], keys(n)[1]))
    return rows


def test_batches_are_full_and_avoid_false_negatives():
    clean = plain = 0
    for seed in range(5):
        rows = _toy_rows(60, 400, seed)
        batches = epoch_batches(rows, 8, np.random.default_rng(seed), True)
        assert sorted(i for b in batches for i in b) == list(range(60))
        assert [len(b) for b in batches] == [8] * 7 + [4]
        clean += sum(_false_negatives(b, rows) for b in batches)
        unordered = epoch_batches(rows, 8, np.random.default_rng(seed), False)
        plain += sum(_false_negatives(b, rows) for b in unordered)
    assert clean == 0 and plain > 0, (clean, plain)


def test_batches_on_a_crowded_pool_are_still_full():
    rows = _toy_rows(64, 64, 0)  # every example is everyone's candidate: duplicates are unavoidable
    clean = epoch_batches(rows, 16, np.random.default_rng(0), True)
    assert sorted(i for b in clean for i in b) == list(range(64))
    assert [len(b) for b in clean] == [16] * 4
    plain = epoch_batches(rows, 16, np.random.default_rng(0), False)
    assert sum(_false_negatives(b, rows) for b in clean) < sum(_false_negatives(b, rows) for b in plain)


def test_without_no_duplicates_batches_are_the_shuffled_order_cut_in_pieces():
    rows = list(range(10))
    batches = epoch_batches(rows, 4, np.random.default_rng(7), False)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [i for b in batches for i in b] == np.random.default_rng(7).permutation(10).tolist()


def test_a_shared_negative_is_allowed_and_a_shared_query_is_not():
    def row(query, positive, negative):
        return RowKeys((f"id:{query}",), (f"id:{positive}",), (f"id:{negative}",), f"t{positive}", f"t{negative}")

    shared_negative = [row("a", "p", "n"), row("b", "q", "n")]
    assert [sorted(b) for b in epoch_batches(shared_negative, 2, np.random.default_rng(0), True)] == [[0, 1]]
    same_query = [row("a", "p", "n"), row("a", "q", "m"), row("b", "r", "o"), row("c", "s", "x")]
    for seed in range(5):
        batches = epoch_batches(same_query, 3, np.random.default_rng(seed), True)
        assert [len(b) for b in batches] == [3, 1] and not {0, 1} <= set(batches[0]), batches
        # without the checks, some seed puts both rows of query "a" in one batch
    assert any({0, 1} <= set(epoch_batches(same_query, 3, np.random.default_rng(seed), False)[0])
               for seed in range(5))


# -- the block sampler ---------------------------------------------------------------------------


def _dataset(n: int):
    import datasets

    return datasets.Dataset.from_dict({"anchor": [f"q{i}" for i in range(n)]})


def test_block_sampler_keeps_epochs_in_order_and_shuffles_within():
    sampler_class = make_block_sampler()
    blocks = [range(5), range(5), range(3)]
    sampler = sampler_class(_dataset(13), batch_size=2, drop_last=False, blocks=blocks, sample_seed=4,
                            no_duplicates=False)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 3 + 3 + 2
    assert sampler.block_of_batch == [0, 0, 0, 1, 1, 1, 2, 2]
    by_epoch = [sorted(i for b, e in zip(batches, sampler.block_of_batch) if e == epoch for i in b)
                for epoch in range(3)]
    assert by_epoch == [list(range(0, 5)), list(range(5, 10)), list(range(10, 13))]
    # each epoch is seeded by (sample_seed, epoch): the same seed, the same batches
    again = sampler_class(_dataset(13), batch_size=2, drop_last=False, blocks=blocks, sample_seed=4,
                          no_duplicates=False)
    assert list(again) == batches
    other = sampler_class(_dataset(13), batch_size=2, drop_last=False, blocks=blocks, sample_seed=5,
                          no_duplicates=False)
    assert list(other) != batches


def test_block_sampler_drops_short_batches_and_checks_the_blocks():
    sampler_class = make_block_sampler()
    sampler = sampler_class(_dataset(10), batch_size=4, drop_last=True, blocks=[range(5), range(5)],
                            no_duplicates=False)
    assert [len(b) for b in sampler] == [4, 4]
    with pytest.raises(ValueError, match="epoch blocks cover 6 rows but the dataset has 10"):
        sampler_class(_dataset(10), batch_size=4, drop_last=False, blocks=[range(3), range(3)])


def test_fractional_epochs():
    assert fractional_epochs([0, 0, 1, 1, 1, 2]) == [0.5, 1.0, 1 + 1 / 3, 1 + 2 / 3, 2.0, 3.0]
    assert fractional_epochs([]) == []


def test_grouped_rows_share_batches_only_with_their_group():
    rows = [r._replace(group=("ab" if i % 3 == 0 else "cd" if i % 3 == 1 else "")) for i, r in
            enumerate(_toy_rows(200, 2000, 0))]
    batches = epoch_batches(rows, 8, np.random.default_rng(0), True)
    assert sorted(i for b in batches for i in b) == list(range(200))
    assert all(len(b) == 8 for b in batches[:-1]) and len(batches[-1]) <= 8
    groups_of = [{rows[i].group for i in b} for b in batches]
    # every group fills batches of its own; only its remainder (< one batch) is mixed with the ungrouped rows
    mixed = [i for b, g in zip(batches, groups_of) if len(g) > 1 or g == {""} for i in b]
    for group, size in (("ab", 67), ("cd", 67)):
        own = sum(g == {group} for g in groups_of)
        assert own >= size // 8 - 1  # a group fills batches of its own, bar a clash of duplicates near its end
        assert own * 8 + sum(rows[i].group == group for i in mixed) == size
    ungrouped = epoch_batches([r._replace(group="") for r in rows], 8, np.random.default_rng(0), True)
    assert sum(_false_negatives(b, rows) for b in batches) <= sum(_false_negatives(b, rows) for b in ungrouped)
    # the grouped full batches come in random order, not group after group
    order = [next(iter(g)) for g in groups_of if len(g) == 1 and g != {""}]
    assert order != sorted(order) and order != sorted(order, reverse=True)


def test_rows_without_groups_batch_exactly_as_before():
    rows = _toy_rows(60, 400, 3)
    named = [r._replace(group="") for r in rows]
    assert epoch_batches(named, 8, np.random.default_rng(3), True) == epoch_batches(rows, 8, np.random.default_rng(3),
                                                                                    True)
