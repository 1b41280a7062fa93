"""The one trainer: per-epoch row sampling (seeded streams, several rows per item, keys and negative kinds)
and ``train`` on the tiny BERT of tests/conftest.py, as a bi-encoder with duplicate-free batches and as a
cross-encoder, writing the model, the step log and the summary file."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from taskret.training.batching import RowKeys
from taskret.training.config import TrainerSettings, check_training_values
from taskret.training.fit import LOG_FILE, RUN_KEYS
from taskret.training.trainer import (
    EpochRows,
    ModelRecipe,
    RowSampler,
    TrainingRow,
    negatives_used,
    sample_epoch,
    train,
)


@dataclass
class ToyConfig(TrainerSettings):
    epochs: int = 2
    batch_size: int = 4
    scale: float = 20.0
    mini_batch_size: int = 4

    def __post_init__(self) -> None:
        check_training_values(self)


TOPICS = ["weather", "music", "alarm", "timer", "news", "recipe"]
#: (query, its positives, its negatives): the items a toy sampler draws from.
ITEMS = [(f"{TOPICS[i % 6]} request {i}", [f"{TOPICS[i % 6]} answer {j}" for j in range(3)],
          [f"{TOPICS[(i + k) % 6]} answer {k}" for k in (1, 2)]) for i in range(12)]


def draw_triplet(item, rng) -> list[TrainingRow]:
    query, positives, negatives = item
    positive = positives[int(rng.integers(len(positives)))]
    negative = negatives[int(rng.integers(len(negatives)))]
    keys = RowKeys(("q:" + query,), ("d:" + positive,), ("d:" + negative,), positive, negative)
    return [TrainingRow({"anchor": query, "positive": positive, "negative": negative}, keys, "hard")]


TRIPLETS = RowSampler(("anchor", "positive", "negative"), draw_triplet)


def draw_pairs(item, rng) -> list[TrainingRow]:
    """A positive pair, then one or two negative pairs: several rows per item."""
    query, positives, negatives = item
    rows = [TrainingRow({"query": query, "document": positives[0], "label": 1.0})]
    for index in rng.permutation(len(negatives))[:1 + int(rng.integers(2))]:
        rows.append(TrainingRow({"query": query, "document": negatives[int(index)], "label": 0.0},
                                negative_kind="random" if index else "hard"))
    return rows


PAIRS = RowSampler(("query", "document", "label"), draw_pairs)


# -- sampling ------------------------------------------------------------------------------------


def test_each_epoch_has_its_own_seeded_stream():
    first = TRIPLETS.epoch(ITEMS, seed=3, epoch=0)
    assert first == TRIPLETS.epoch(ITEMS, seed=3, epoch=0)
    assert first.columns != TRIPLETS.epoch(ITEMS, seed=3, epoch=1).columns
    assert first.columns != TRIPLETS.epoch(ITEMS, seed=4, epoch=0).columns
    # the stream is np.random.default_rng([seed, epoch]), walked item by item in order
    rng = np.random.default_rng([3, 0])
    expected = [draw_triplet(item, rng)[0].values["positive"] for item in ITEMS]
    assert first.columns["positive"] == expected
    assert first.columns["anchor"] == [query for query, _, _ in ITEMS] and len(first) == len(ITEMS)
    assert len(first.keys) == len(ITEMS) and first.keys[0].query == ("q:" + ITEMS[0][0],)
    assert first.negative_kinds == ["hard"] * len(ITEMS)


def test_an_item_can_make_several_rows_and_kinds_are_counted():
    epoch = sample_epoch(ITEMS, draw_pairs, 0, 0, ("query", "document", "label"))
    assert list(epoch.columns) == ["query", "document", "label"]
    assert epoch.columns["label"].count(1.0) == len(ITEMS) and len(epoch) > len(ITEMS)
    assert len(epoch.negative_kinds) == epoch.columns["label"].count(0.0)
    assert epoch.keys == []  # these rows carry no keys
    epochs = [PAIRS.epoch(ITEMS, 0, e) for e in range(2)]
    used = negatives_used(epochs, ("random", "hard", "unfollowing"))
    assert used["unfollowing"] == 0 and used["random"] + used["hard"] == sum(len(e.negative_kinds) for e in epochs)


def test_a_row_with_other_columns_is_an_error():
    with pytest.raises(ValueError, match=r"a drawn row has columns \['anchor'\], expected"):
        sample_epoch(ITEMS, lambda item, rng: [TrainingRow({"anchor": item[0]})], 0, 0, ("anchor", "positive"))
    assert len(EpochRows({"a": [1, 2]})) == 2 and len(EpochRows({})) == 0


# -- training ------------------------------------------------------------------------------------


def bi_encoder_recipe(base) -> ModelRecipe:
    from taskret.training.encoders import build_bi_encoder
    from taskret.training.losses import dpr_training_loss

    config = ToyConfig()
    return ModelRecipe(lambda: build_bi_encoder(str(base), max_seq_length=16),
                       lambda model: dpr_training_loss(model, config))


def test_train_fits_a_bi_encoder_and_writes_the_summary_last(tmp_path, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    config = ToyConfig(learning_rate=1e-3, warmup_ratio=0.0, seed=1)
    seen: list[list[EpochRows]] = []

    def counts(epochs):
        seen.append(epochs)
        return {"n_items": len(ITEMS), "n_triplets": sum(len(e) for e in epochs)}

    folder = train(config, ITEMS, TRIPLETS, bi_encoder_recipe(tiny_bert_dir), tmp_path / "run", "toy.json", counts,
                   no_duplicates=True, progress=False)
    assert folder == tmp_path / "run" / "model"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted([LOG_FILE, "model", "toy.json"])
    # the rows trained on are the sampler's, epoch by epoch
    assert [e.columns for e in seen[0]] == [TRIPLETS.epoch(ITEMS, 1, e).columns for e in range(2)]
    summary = json.loads((tmp_path / "run" / "toy.json").read_text())
    assert ToyConfig.from_dict({k: v for k, v in summary.items() if k in config.to_dict()}) == config
    assert summary["n_items"] == 12 and summary["n_triplets"] == 24
    assert set(RUN_KEYS) - {"validation"} <= set(summary) and "validation" not in summary  # no validate function
    assert summary["steps"] == 2 * 3 and len(summary["epoch_times_s"]) == 2 and math.isfinite(summary["final_loss"])
    log = [json.loads(line) for line in (tmp_path / "run" / LOG_FILE).read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 7)) and log[-1]["epoch"] == 2.0 and log[2]["epoch"] == 1.0
    model = SentenceTransformer(str(folder))
    assert model.encode(["weather request 0"]).shape == (1, 32)


def test_duplicate_free_batches_need_keys(tmp_path, tiny_bert_dir):
    with pytest.raises(ValueError, match="no_duplicates needs a sampler whose rows carry RowKeys"):
        train(ToyConfig(), ITEMS, PAIRS, bi_encoder_recipe(tiny_bert_dir), tmp_path / "run", "toy.json",
              lambda epochs: {}, no_duplicates=True, progress=False)
    assert not (tmp_path / "run").exists()  # nothing was written


def test_train_fits_a_cross_encoder(tmp_path, tiny_bert_dir):
    from sentence_transformers.cross_encoder import CrossEncoder
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    config = ToyConfig(epochs=1, batch_size=8, learning_rate=1e-3)
    recipe = ModelRecipe(lambda: CrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=32, device="cpu"),
                         BinaryCrossEntropyLoss, cross_encoder=True)
    folder = train(config, ITEMS, PAIRS, recipe, tmp_path / "full", "full.json",
                   lambda epochs: {"negatives_used": negatives_used(epochs, ("random", "hard"))}, progress=False)
    summary = json.loads((tmp_path / "full" / "full.json").read_text())
    n_pairs = len(PAIRS.epoch(ITEMS, config.seed, 0))
    assert summary["steps"] == -(-n_pairs // 8) and sum(summary["negatives_used"].values()) == n_pairs - len(ITEMS)
    scores = CrossEncoder(str(folder), device="cpu").predict([("weather request 0", "weather answer 0")])
    assert np.isfinite(scores).all()


def test_a_router_mapping_trains_two_encoders(tmp_path, tiny_bert_dir):
    """The recipe's router_mapping reaches the trainer: anchors go to the query encoder, documents to the other."""
    import torch
    from sentence_transformers import SentenceTransformer

    from taskret.training.encoders import build_bi_encoder
    from taskret.training.losses import dpr_training_loss

    config = ToyConfig(epochs=1, learning_rate=1e-3)
    recipe = ModelRecipe(lambda: build_bi_encoder(str(tiny_bert_dir), shared_encoder=False, max_seq_length=16),
                         lambda model: dpr_training_loss(model, config),
                         router_mapping={"anchor": "query", "positive": "document", "negative": "document"})
    folder = train(config, ITEMS, TRIPLETS, recipe, tmp_path / "two", "two.json", lambda epochs: {}, progress=False)
    model = SentenceTransformer(str(folder))
    texts = ["weather request 0", "music answer 1"]
    assert not torch.allclose(model.encode_query(texts, convert_to_tensor=True),
                              model.encode_document(texts, convert_to_tensor=True), atol=1e-4)


def test_validation_keeps_the_best_steps_weights(tmp_path, tiny_bert_dir):
    import torch
    from sentence_transformers import SentenceTransformer

    # ITEMS make 12 triplets per epoch, 3 steps of 4; checked at steps 0, 2, 4 and 6 (the last).
    made_up = iter([1.0, 5.0, 2.0, 3.0])
    snapshots: list[dict] = []

    def validate(model) -> float:
        assert not model.training  # scored in eval mode
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return next(made_up)

    config = ToyConfig(learning_rate=1e-3)
    folder = train(config, ITEMS, TRIPLETS, bi_encoder_recipe(tiny_bert_dir), tmp_path / "run", "toy.json",
                   lambda epochs: {}, progress=False, validate=validate, validate_steps=2)
    summary = json.loads((tmp_path / "run" / "toy.json").read_text())
    assert summary["validation"]["best_step"] == 2 and summary["validation"]["best_dev_score"] == 5.0
    assert summary["validation"]["dev_scores"] == {"0": 1.0, "2": 5.0, "4": 2.0, "6": 3.0}
    assert summary["steps"] == 6 and summary["final_loss"] is not None
    log = [json.loads(line) for line in (tmp_path / "run" / LOG_FILE).read_text().splitlines()]
    assert [row["step"] for row in log if "dev_score" in row] == [0, 2, 4, 6]
    saved = SentenceTransformer(str(folder), device="cpu").state_dict()
    assert all(torch.equal(saved[k], snapshots[1][k]) for k in saved)  # step 2's weights, not the last
    assert any(not torch.equal(saved[k], snapshots[3][k]) for k in saved)
    with pytest.raises(ValueError, match="validate_steps"):
        train(config, ITEMS, TRIPLETS, bi_encoder_recipe(tiny_bert_dir), tmp_path / "bad", "toy.json",
              lambda epochs: {}, progress=False, validate=validate, validate_steps=0)
