"""Model soups: the weighted average of models fine-tuned from one base, written from their saved folders."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from taskret.training.encoders import build_bi_encoder
from taskret.training.soup import SOUP_FILE, average_models

TEXTS = ["set an alarm for seven", "play jazz by miles davis"]


def _saved(tiny_bert_dir, folder, shift: float):
    """The tiny base with every float weight moved by ``shift``: a stand-in for one fine-tuned student."""
    model = build_bi_encoder(str(tiny_bert_dir), max_seq_length=24)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(shift)
    model.save(str(folder))
    return folder


def _weights(folder):
    (file,) = sorted(folder.rglob("model.safetensors"))
    return load_file(str(file))


def test_an_equal_soup_is_the_mean_of_its_models_and_encodes(tmp_path, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    a = _saved(tiny_bert_dir, tmp_path / "a", 0.0)
    b = _saved(tiny_bert_dir, tmp_path / "b", 0.3)
    out = average_models([a, b], tmp_path / "soup")
    wa, wb, soup = _weights(a), _weights(b), _weights(out)
    assert soup.keys() == wa.keys()
    for name, tensor in soup.items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, (wa[name] + wb[name]) / 2, atol=1e-6), name
        else:
            assert torch.equal(tensor, wa[name])
    record = json.loads((out / SOUP_FILE).read_text())
    assert record["weights"] == [0.5, 0.5] and record["sources"] == [str(a), str(b)]
    model = SentenceTransformer(str(out), device="cpu")  # a complete model folder: config, tokenizer, pooling
    assert model.encode(TEXTS).shape == (2, 32)


def test_weights_are_normalised_and_a_one_hot_soup_is_that_model(tmp_path, tiny_bert_dir):
    a = _saved(tiny_bert_dir, tmp_path / "a", 0.0)
    b = _saved(tiny_bert_dir, tmp_path / "b", 0.3)
    out = average_models([a, b], tmp_path / "soup", weights=[0, 5], record={"train_tasks": ["x"]})
    wb, soup = _weights(b), _weights(out)
    assert all(torch.allclose(soup[name], wb[name]) for name in soup)
    record = json.loads((out / SOUP_FILE).read_text())
    assert record["weights"] == [0.0, 1.0] and record["train_tasks"] == ["x"]


def test_a_soup_of_a_soup_does_not_keep_the_old_record(tmp_path, tiny_bert_dir):
    a = _saved(tiny_bert_dir, tmp_path / "a", 0.0)
    b = _saved(tiny_bert_dir, tmp_path / "b", 0.3)
    first = average_models([a, b], tmp_path / "first", record={"train_tasks": ["old"]})
    second = average_models([first, a], tmp_path / "second")
    assert "train_tasks" not in json.loads((second / SOUP_FILE).read_text())


def test_models_of_another_shape_are_refused_and_nothing_is_written(tmp_path, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel

    a = _saved(tiny_bert_dir, tmp_path / "a", 0.0)
    wider = tmp_path / "wider-base"
    BertModel(BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(wider)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert_dir / name).exists():
            (wider / name).write_bytes((tiny_bert_dir / name).read_bytes())
    SentenceTransformer(str(wider), device="cpu").save(str(tmp_path / "b"))
    with pytest.raises(ValueError, match="has shape"):
        average_models([a, tmp_path / "b"], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".soup")] == []


def test_bad_inputs_name_the_folder(tmp_path, tiny_bert_dir):
    a = _saved(tiny_bert_dir, tmp_path / "a", 0.0)
    with pytest.raises(ValueError, match="2 or more"):
        average_models([a], tmp_path / "soup")
    with pytest.raises(ValueError, match="not a model folder"):
        average_models([a, tmp_path / "missing"], tmp_path / "soup")
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"pickled: no \*\.safetensors weights .*pytorch_model\.bin"):
        average_models([a, tmp_path / "pickled"], tmp_path / "soup")
    with pytest.raises(ValueError, match="3 weights for 2 models"):
        average_models([a, a], tmp_path / "soup", weights=[1, 1, 1])
    with pytest.raises(ValueError, match="positive sum"):
        average_models([a, a], tmp_path / "soup", weights=[0, 0])
    assert not (tmp_path / "soup").exists()
