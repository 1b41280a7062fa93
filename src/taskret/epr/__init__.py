"""EPR: learn a prompt retriever from language-model scores (Rubin et al., 2022).

Stages, each reading and writing files: ``candidates`` (BM25 neighbours) -> ``scoring`` (the
scoring LM's log P(y | candidate, x)) -> ``labels`` (top-k positives, bottom-k hard negatives) ->
``training`` (dual encoder, DPR loss) -> index/retrieval (``taskret.retrieval.DenseRetriever``).

Past the paper, each one key of the pipeline's config (:class:`~taskret.epr.pipeline.EPRConfig`): mining rounds
with the trained retriever (UDR, ``rounds``), a reward model distilled into the retriever (LLM-R, ``reward_model``:
:mod:`taskret.epr.reward`), set-level training for a DPP (CEIL, ``set_training``: :mod:`taskret.epr.sets`); and one
retriever for many tasks with task instructions (UDR, :mod:`taskret.epr.multitask`, ``taskret epr multitask``).
"""
