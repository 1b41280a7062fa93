"""Loading a model through taskret's Python API prints no `Loading weights: 100%` bar (it leaked into the API's,
LangChain's and DSPy's output), and leaves transformers' own bar setting as it was."""

from __future__ import annotations

import pytest
from transformers.utils import logging as hf_logging


@pytest.fixture
def bars_on():
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    yield
    (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def test_loading_an_lm_an_encoder_and_a_cross_encoder_prints_no_bar(bars_on, capfd, tiny_model_dir, tiny_bert_dir):
    from taskret.backends.transformers import CausalLM
    from taskret.rerank.cross_encoder import load_cross_encoder
    from taskret.retrieval.dense import load_encoder

    CausalLM.load(str(tiny_model_dir))
    load_encoder(str(tiny_bert_dir))
    load_cross_encoder(str(tiny_bert_dir), num_labels=1)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # restored: a caller's own loads keep their bars
