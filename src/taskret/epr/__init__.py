"""EPR: learn a prompt retriever from language-model scores (Rubin et al., 2022).

Stages, each reading and writing files: ``candidates`` (BM25 neighbours) -> ``scoring`` (the
scoring LM's log P(y | candidate, x)) -> ``labels`` (top-k positives, bottom-k hard negatives) ->
``training`` (dual encoder, DPR loss) -> index/retrieval (``taskret.retrieval.DenseRetriever``).
"""
