"""The untrained bi-encoder every dual model starts from: one shared encoder, or two copies in a Router."""

from __future__ import annotations

import torch

from taskret.training.encoders import build_bi_encoder

TEXTS = ["set an alarm for seven", "play jazz by miles davis"]


def test_a_shared_encoder_is_the_base_model(tiny_bert_dir):
    from sentence_transformers.sentence_transformer.modules import Router

    model = build_bi_encoder(str(tiny_bert_dir), max_seq_length=24)
    assert model.max_seq_length == 24 and not any(isinstance(m, Router) for m in model.children())
    q = model.encode_query(TEXTS, convert_to_tensor=True)
    d = model.encode_document(TEXTS, convert_to_tensor=True)
    assert q.shape == (2, 32) and torch.allclose(q, d)


def test_two_encoders_start_equal_and_train_apart(tiny_bert_dir):
    from sentence_transformers.sentence_transformer.modules import Router

    model = build_bi_encoder(str(tiny_bert_dir), shared_encoder=False, max_seq_length=24)
    router = next(iter(model.children()))
    assert isinstance(router, Router) and set(router.sub_modules) == {"query", "document"}
    q = model.encode_query(TEXTS, convert_to_tensor=True)
    d = model.encode_document(TEXTS, convert_to_tensor=True)
    assert torch.allclose(q, d, atol=1e-6)  # deep copies of the same weights
    query_params = list(router.sub_modules["query"].parameters())
    document_params = list(router.sub_modules["document"].parameters())
    assert query_params and len(query_params) == len(document_params)
    assert not {id(p) for p in query_params} & {id(p) for p in document_params}
    with torch.no_grad():
        query_params[0].add_(1.0)  # the copies are independent
    assert not torch.allclose(model.encode_query(TEXTS, convert_to_tensor=True),
                              model.encode_document(TEXTS, convert_to_tensor=True))
