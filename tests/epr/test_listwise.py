"""UDR's objective (taskret.epr.listwise): its list sampling and its ranking loss (a pipeline run with it:
tests/epr/test_pipeline.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")

from taskret.epr.listwise import ListwiseConfig, lambda_mrr_loss, sample_list  # noqa: E402


def test_a_list_takes_from_the_top_the_bottom_and_the_middle_in_the_lms_order():
    ranked = [f"c{i}" for i in range(50)]
    config = ListwiseConfig(from_top=2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        chosen = sample_list(ranked, rng, config)
        ranks = [ranked.index(c) for c in chosen]
        assert len(chosen) == 8 and ranks == sorted(ranks) and len(set(ranks)) == 8
        assert sum(r < 5 for r in ranks) == 2 and sum(r >= 45 for r in ranks) == 1
    with pytest.raises(ValueError, match="fewer than list_size"):
        sample_list(ranked[:5], rng, config)


def test_the_ranking_loss_is_low_when_the_scores_follow_the_lm_and_high_when_reversed():
    import torch

    relevance = (1.0 / torch.arange(1, 9)).expand(2, -1)
    agreeing = torch.linspace(20, 0, 8).expand(2, -1).clone()
    assert float(lambda_mrr_loss(agreeing, relevance)) < 0.01
    assert float(lambda_mrr_loss(agreeing.flip(-1), relevance)) > 1.0
    scores = torch.zeros(1, 8, requires_grad=True)
    lambda_mrr_loss(scores, relevance[:1]).backward()
    assert scores.grad[0, 0] < 0 < scores.grad[0, -1]  # the LM's best is pushed up, its worst down


def test_distinct_length_bucketed_encoding_gives_the_same_embeddings_and_gradients(tiny_bert_dir):
    import torch

    from taskret.epr.finetune import document_route, embed, embed_distinct
    from taskret.training.encoders import build_bi_encoder

    model = build_bi_encoder(str(tiny_bert_dir), shared_encoder=False, max_seq_length=64, device="cpu")
    model.eval()  # no dropout: both ways must then agree exactly up to float rounding
    route = document_route(model)
    texts = ["set an alarm\t[IN:CREATE_ALARM ]", "what is the weather in paris tomorrow morning\t[IN:GET_WEATHER "
             "[SL:LOCATION paris ] [SL:DATE_TIME tomorrow morning ] ]", "hi", "set an alarm\t[IN:CREATE_ALARM ]",
             "call mom\t[IN:CREATE_CALL [SL:CONTACT mom ] ]", "hi"]
    weights = torch.randn(len(texts), 32, generator=torch.Generator().manual_seed(0))

    def embeddings_and_gradient(encode):
        model.zero_grad()
        out = encode(route, texts)
        (out * weights).sum().backward()
        grad = next(p for p in route[0].parameters() if p.requires_grad).grad.clone()
        return out.detach(), grad

    plain, plain_grad = embeddings_and_gradient(embed)
    distinct, distinct_grad = embeddings_and_gradient(lambda r, t: embed_distinct(r, t, chunk_size=2))
    assert distinct.shape == plain.shape
    assert torch.allclose(distinct, plain, atol=1e-5)  # each row is its own text's, repeats included
    assert torch.allclose(distinct_grad, plain_grad, atol=1e-5)
    with pytest.raises(ValueError, match="encode_chunk"):
        ListwiseConfig(encode_chunk=-1)
