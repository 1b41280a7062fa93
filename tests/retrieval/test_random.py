"""RandomRetriever: seeded, per-query draws."""

from __future__ import annotations

from taskret.retrieval import RandomRetriever

from .builders import QUERIES, big_pool

# --- random ---------------------------------------------------------------------------------------


def test_random_is_deterministic_per_seed_and_query():
    pool = big_pool()
    a = RandomRetriever(seed=1).index(pool).retrieve(QUERIES, k=10)
    b = RandomRetriever(seed=1).index(pool).retrieve(QUERIES, k=10)
    c = RandomRetriever(seed=2).index(pool).retrieve(QUERIES, k=10)
    assert a.ids == b.ids
    assert all(x != y for x, y in zip(a.ids, c.ids))
    assert a.ids[0] != a.ids[1]  # different queries draw different examples
    ids = {e.id for e in pool}
    for row in a.ids:
        assert len(row) == 10 and len(set(row)) == 10 and set(row) <= ids


def test_random_draw_does_not_depend_on_the_other_queries_in_the_batch():
    retriever = RandomRetriever(seed=5).index(big_pool())
    together = retriever.retrieve(QUERIES, k=6).ids
    alone = [retriever.retrieve([q], k=6).ids[0] for q in QUERIES]
    assert together == alone
