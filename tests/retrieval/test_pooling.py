"""Instruction-excluded pooling: per-row masks equal sentence-transformers' own prompt exclusion, a saved model
is a plain sentence-transformers folder, and taskret's loader gives it the per-row module back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taskret.formats import format_query
from taskret.retrieval.dense import load_encoder
from taskret.retrieval.pooling import (
    InstructionExcludedPooling,
    adopt_instruction_pooling,
    exclude_instruction_from_pooling,
    excludes_instruction,
    standard_pooling,
)

INSTRUCTIONS = ["Retrieve a scientific paper abstract to verify this claim", "Find a duplicate question"]
QUERIES = ["vitamin d lowers the risk of depression", "how do I sort a list in python"]


def _model(folder):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def test_each_rows_instruction_is_left_out_as_a_batch_wide_prompt_would_be(tiny_bert_dir):
    plain = _model(tiny_bert_dir)
    ours = exclude_instruction_from_pooling(_model(tiny_bert_dir))
    assert excludes_instruction(ours) and not excludes_instruction(plain)
    # One batch mixing two instructions and a bare query: each row is masked by its own instruction.
    texts = [format_query(i, q) for i, q in zip(INSTRUCTIONS, QUERIES)] + [QUERIES[0]]
    got = ours.encode(texts, convert_to_numpy=True)
    plain[1].include_prompt = False
    for row, (instruction, query) in enumerate(zip(INSTRUCTIONS, QUERIES)):
        expected = plain.encode([query], prompt=format_query(instruction, ""), convert_to_numpy=True)[0]
        np.testing.assert_allclose(got[row], expected, atol=1e-5)
    plain[1].include_prompt = True
    np.testing.assert_allclose(got[2], plain.encode([QUERIES[0]], convert_to_numpy=True)[0], atol=1e-5)
    # and it matters: the all-token mean of an instructed query is another vector
    all_tokens = plain.encode(texts[:1], convert_to_numpy=True)[0]
    assert np.abs(all_tokens - got[0]).max() > 1e-3


def test_saved_model_is_plain_sentence_transformers_and_loads_back_per_row(tmp_path, tiny_bert_dir):
    model = exclude_instruction_from_pooling(_model(tiny_bert_dir))
    text = format_query(INSTRUCTIONS[0], QUERIES[0])
    before = model.encode([text], convert_to_numpy=True)
    standard_pooling(model).save(str(tmp_path / "m"))
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    assert {m["type"].split(".")[0] for m in modules} == {"sentence_transformers"}
    pooling = next(m for m in modules if m["type"].endswith(".Pooling"))
    assert json.loads((tmp_path / "m" / pooling["path"] / "config.json").read_text())["include_prompt"] is False
    loaded = load_encoder(str(tmp_path / "m"))
    assert isinstance(loaded[1], InstructionExcludedPooling)
    np.testing.assert_allclose(loaded.encode([text], convert_to_numpy=True), before, atol=1e-5)
    # a model that pools every token is left as it is
    assert not isinstance(adopt_instruction_pooling(_model(tiny_bert_dir))[1], InstructionExcludedPooling)
    # a query/document Router built from the saved model keeps the plain module, so it saves without taskret code
    from taskret.training.encoders import build_bi_encoder

    router = build_bi_encoder(str(tmp_path / "m"), shared_encoder=False)
    assert not any(isinstance(m, InstructionExcludedPooling) for m in router.modules())
    assert isinstance(build_bi_encoder(str(tmp_path / "m"))[1], InstructionExcludedPooling)


def test_a_router_dual_encoder_is_refused(tiny_bert_dir):
    from taskret.training.encoders import build_bi_encoder

    with pytest.raises(ValueError, match="shared encoder"):
        exclude_instruction_from_pooling(build_bi_encoder(str(tiny_bert_dir), shared_encoder=False))
