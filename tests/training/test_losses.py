"""DPR's objective: the trainer loss takes a config's scale and mini-batch size (0: no GradCache), and ``dpr_loss`` is the
cross-entropy of each query's own positive against every positive and negative of its batch."""

from __future__ import annotations

from types import SimpleNamespace

import datasets
import pytest
import torch

from taskret.training.encoders import build_bi_encoder
from taskret.training.losses import dpr_loss, dpr_training_loss

PAIRS = datasets.Dataset.from_dict({
    "anchor": ["set an alarm", "play jazz", "weather in paris", "call my mother"],
    "positive": ["wake me at seven", "miles davis songs", "forecast for paris", "phone mum"],
    "negative": ["jazz music", "alarm at six", "call john", "rain in london"],
})


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    return build_bi_encoder(str(tiny_bert_dir), max_seq_length=16).eval()


def test_the_training_loss_takes_the_configs_scale_and_mini_batch(model):
    loss = dpr_training_loss(model, SimpleNamespace(scale=7.0, mini_batch_size=3))
    assert type(loss).__name__ == "CachedMultipleNegativesRankingLoss"
    assert loss.scale == 7.0 and loss.mini_batch_size == 3 and loss.model is model
    whole = dpr_training_loss(model, SimpleNamespace(scale=7.0, mini_batch_size=0))  # the batch at once
    assert type(whole).__name__ == "MultipleNegativesRankingLoss" and whole.scale == 7.0


def test_dpr_loss_written_out(model):
    kwargs = dict(convert_to_tensor=True, normalize_embeddings=True)
    q = model.encode_query(PAIRS["anchor"], **kwargs)
    p = model.encode_document(PAIRS["positive"], **kwargs)
    n = model.encode_document(PAIRS["negative"], **kwargs)

    def expected(rows: slice, scale: float) -> torch.Tensor:
        logits = scale * q[rows] @ torch.cat([p[rows], n[rows]]).T
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(logits)), reduction="sum")

    whole = dpr_loss(model, PAIRS, scale=5.0, batch_size=4)
    assert whole == pytest.approx(float(expected(slice(0, 4), 5.0)) / 4, rel=1e-5)
    halves = dpr_loss(model, PAIRS, scale=5.0, batch_size=2)  # two batches: fewer in-batch negatives
    assert halves == pytest.approx(float(expected(slice(0, 2), 5.0) + expected(slice(2, 4), 5.0)) / 4, rel=1e-5)
    assert halves != pytest.approx(whole)
