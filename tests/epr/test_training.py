"""EPR training stage: triplet sampling, the DPR loss, and a tiny end-to-end dual-encoder run
(the shared batching, losses and trainer are tested in tests/training).

Uses a 2-layer, 32-wide BERT with random weights and the MiniLM tokenizer, built in-process, so
the whole file runs in well under a minute on a CPU.
"""

from __future__ import annotations

import json
import logging
import math
import os

import pytest

pytest.importorskip("sentence_transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from taskret.data import Example
from taskret.epr.training import (
    ROUTER_MAPPING,
    TrainingConfig,
    build_training_pairs,
    train_dual_encoder,
)
from taskret.io import DataError
from taskret.retrieval.base import example_text
from taskret.training.batching import epoch_batches
from taskret.training.encoders import build_bi_encoder
from taskret.training.losses import dpr_loss

TOPICS = ["weather", "music", "alarm", "timer", "news", "recipe"]
N = 24


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Two threads on two busy cores make tiny ops tens of times slower (spin-waiting workers).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def toy_examples() -> list[Example]:
    return [Example(f"e{i}", f"{TOPICS[i % 6]} request number {i}", f"intent {TOPICS[i % 6]} slot {i}")
            for i in range(N)]


def toy_labels() -> list[dict]:
    """Positives: the other examples of the same topic; negatives: three of other topics."""
    rows = []
    for i in range(N):
        same = [f"e{j}" for j in range(N) if j % 6 == i % 6 and j != i]
        other = [f"e{j}" for j in range(N) if j % 6 != i % 6]
        rows.append({"id": f"e{i}", "positives": same, "negatives": [other[i % len(other)], other[(i + 7) % len(other)],
                                                                      other[(i + 13) % len(other)]]})
    return rows


def write_labels(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def tiny_config(model_dir, **overrides) -> TrainingConfig:
    settings = dict(base_model=str(model_dir), epochs=2, batch_size=8, mini_batch_size=4, learning_rate=1e-3,
                    warmup_ratio=0.0, max_seq_length=32)
    settings.update(overrides)
    return TrainingConfig(**settings)


# -- config --------------------------------------------------------------------------------------


def test_config_round_trips_and_validates():
    config = TrainingConfig(shared_encoder=True, field="both", epochs=5, learning_rate=3e-5)
    assert TrainingConfig.from_dict(config.to_dict()) == config
    assert TrainingConfig.from_json(config.to_json()) == config
    assert TrainingConfig().batch_size == 120
    # an epr_config.json carries run keys too; from_dict reads it back
    assert TrainingConfig.from_dict({**config.to_dict(), "n_examples": 3, "final_loss": 0.1}) == config
    with pytest.raises(ValueError, match="unknown TrainingConfig keys: bogus"):
        TrainingConfig.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="field"):
        TrainingConfig(field="label")
    with pytest.raises(ValueError, match="epochs"):
        TrainingConfig(epochs=0)
    with pytest.raises(ValueError, match="positive must be one of"):
        TrainingConfig(positive="random")


# -- pairs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["input", "output", "both"])
def test_pairs_sample_only_from_their_lists(field):
    examples, rows = toy_examples(), toy_labels()
    by_id = {e.id: e for e in examples}
    config = TrainingConfig(field=field)
    for epoch in range(3):
        pairs = build_training_pairs(examples, rows, config, epoch)
        assert pairs.column_names == ["anchor", "positive", "negative"]
        assert len(pairs) == N
        for row, pair in zip(rows, pairs):
            assert pair["anchor"] == by_id[row["id"]].input
            assert pair["positive"] in {example_text(by_id[p], field) for p in row["positives"]}
            assert pair["negative"] in {example_text(by_id[n], field) for n in row["negatives"]}


def test_best_positive_is_always_the_lms_best_while_the_negative_still_varies():
    examples, rows = toy_examples(), toy_labels()
    by_id = {e.id: e for e in examples}
    config = TrainingConfig(positive="best")
    negatives = []
    for epoch in range(5):
        pairs = build_training_pairs(examples, rows, config, epoch)
        assert pairs["positive"] == [example_text(by_id[row["positives"][0]], config.field) for row in rows]
        negatives.append(pairs["negative"])
    assert any(len({epoch[i] for epoch in negatives}) > 1 for i in range(N))  # negatives are drawn anew each epoch


def test_pairs_are_deterministic_per_epoch_and_vary_across_epochs():
    examples, rows = toy_examples(), toy_labels()
    config = TrainingConfig(seed=3)
    first = build_training_pairs(examples, rows, config, 0).to_dict()
    assert build_training_pairs(examples, rows, config, 0).to_dict() == first
    assert build_training_pairs(examples, rows, config, 1).to_dict() != first
    assert build_training_pairs(examples, rows, TrainingConfig(seed=4), 0).to_dict() != first
    # every positive gets drawn at some point
    drawn = {p for epoch in range(20) for p in build_training_pairs(examples, rows, config, epoch)["positive"]}
    assert drawn == {example_text(e, config.field) for e in examples}  # each demonstration as input and output


def test_unknown_ids_raise_naming_the_row_and_id():
    examples, rows = toy_examples(), toy_labels()
    bad = [dict(r) for r in rows]
    bad[4] = {**bad[4], "id": "ghost-17"}
    with pytest.raises(ValueError, match=r"labels\.jsonl, line 5, field 'id': unknown example id 'ghost-17'"):
        build_training_pairs(examples, bad, TrainingConfig(), 0, source="labels.jsonl")
    bad = [dict(r) for r in rows]
    bad[2] = {**bad[2], "negatives": ["e1", "missing-9"]}
    with pytest.raises(DataError, match=r"line 3, field 'negatives': unknown example id 'missing-9'"):
        build_training_pairs(examples, bad, TrainingConfig(), 0)
    bad = [dict(r) for r in rows]
    bad[0] = {**bad[0], "positives": []}
    with pytest.raises(ValueError, match="line 1.*no positives"):
        build_training_pairs(examples, bad, TrainingConfig(), 0)


def test_rows_without_negatives_are_skipped_with_a_warning(caplog):
    examples, rows = toy_examples(), toy_labels()
    rows[0] = {**rows[0], "negatives": []}
    rows[1] = {**rows[1], "negatives": list(rows[1]["positives"])}  # all overlap the positives
    with caplog.at_level(logging.WARNING, logger="taskret.epr.training"):
        pairs = build_training_pairs(examples, rows, TrainingConfig(), 0)
    assert len(pairs) == N - 2
    assert "skipped 2 of 24 labels rows with no hard negatives" in caplog.text
    with pytest.raises(ValueError, match="no usable labels rows"):
        build_training_pairs(examples, [{**r, "negatives": []} for r in rows], TrainingConfig(), 0)


def test_unknown_id_in_labels_file_fails_before_training(tmp_path, tiny_bert_dir):
    labels = tmp_path / "labels.jsonl"
    rows = toy_labels()
    rows[7]["positives"] = ["e1", "nope-3"]
    write_labels(labels, rows)
    with pytest.raises(ValueError, match=r"labels\.jsonl, line 8, field 'positives': unknown example id 'nope-3'"):
        train_dual_encoder(toy_examples(), labels, tmp_path / "out", tiny_config(tiny_bert_dir), progress=False)
    assert not (tmp_path / "out" / "model").exists()


def test_own_example_is_never_a_document_of_its_batch(tiny_bert_dir):
    """With field="output" the query's own example is invisible to a text comparison."""
    import numpy as np

    from taskret.epr.training import _validated_rows, triplet_sampler

    examples = toy_examples()
    by_id, usable, _ = _validated_rows(examples, toy_labels(), "labels", None)
    config = TrainingConfig(field="output")
    rows = triplet_sampler(by_id, config).epoch(usable, config.seed, 0).keys
    assert len(rows) == len(usable)
    for seed in range(3):
        for batch in epoch_batches(rows, 4, np.random.default_rng(seed), True)[:-1]:
            queries = {rows[i].query[0] for i in batch}
            docs = {k for i in batch for k in rows[i].positive + rows[i].negative}
            assert not queries & docs


# -- loss ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
def test_cached_loss_is_dpr_with_2b_minus_1_negatives(tiny_bert_dir, shared):
    from sentence_transformers.sentence_transformer.data_collator import (
        SentenceTransformerDataCollator,
    )
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )

    config = tiny_config(tiny_bert_dir, shared_encoder=shared)
    model = build_bi_encoder(config.base_model, shared_encoder=config.shared_encoder, max_seq_length=config.max_seq_length)
    model.eval()  # no dropout: the three computations must see the same embeddings
    pairs = build_training_pairs(toy_examples(), toy_labels(), config, 0).select(range(6))
    collate = SentenceTransformerDataCollator(preprocess_fn=model.preprocess,
                                              router_mapping={} if shared else ROUTER_MAPPING)
    batch = collate([dict(row) for row in pairs])
    features = [{k[len(c) + 1:]: v for k, v in batch.items() if k.startswith(c + "_")}
                for c in ("anchor", "positive", "negative")]
    def loss_and_grads(loss):
        model.zero_grad()
        value = loss(features, None)
        value.backward()
        return value.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain, plain_grads = loss_and_grads(MultipleNegativesRankingLoss(model, scale=config.scale))
    cached, cached_grads = loss_and_grads(
        CachedMultipleNegativesRankingLoss(model, scale=config.scale, mini_batch_size=4))
    model.zero_grad()
    # GradCache gives the same gradients, and both encoders get some
    assert plain_grads.keys() == cached_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.allclose(grad, cached_grads[name], atol=1e-6, rtol=1e-4), name
    if not shared:
        assert any(".query." in n and g.abs().sum() > 0 for n, g in plain_grads.items())
        assert any(".document." in n and g.abs().sum() > 0 for n, g in plain_grads.items())
    # the same loss written out: each query against 6 positives + 6 negatives (1 positive, 2B - 1 = 11 negatives)
    manual = dpr_loss(model, pairs, scale=config.scale, batch_size=6)
    assert abs(plain - manual) < 1e-4
    assert abs(cached - manual) < 1e-4
    # only in-batch positives (no hard negatives) would give a different number
    q = model.encode_query(pairs["anchor"], convert_to_tensor=True, normalize_embeddings=True)
    p = model.encode_document(pairs["positive"], convert_to_tensor=True, normalize_embeddings=True)
    without_negatives = float(torch.nn.functional.cross_entropy(config.scale * q @ p.T, torch.arange(6)))
    assert abs(without_negatives - manual) > 1e-3


# -- end to end ----------------------------------------------------------------------------------


def _train(tmp_path_factory, model_dir, shared: bool):
    root = tmp_path_factory.mktemp("shared" if shared else "dual")
    labels = root / "labels.jsonl"
    write_labels(labels, toy_labels())
    config = tiny_config(model_dir, shared_encoder=shared)
    folder = train_dual_encoder(toy_examples(), labels, root / "out", config, progress=False)
    return root / "out", folder, config


@pytest.fixture(scope="module")
def dual_run(tmp_path_factory, tiny_bert_dir):
    return _train(tmp_path_factory, tiny_bert_dir, shared=False)


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory, tiny_bert_dir):
    return _train(tmp_path_factory, tiny_bert_dir, shared=True)


def test_training_writes_model_log_and_config(dual_run):
    out, folder, config = dual_run
    assert folder == out / "model"
    assert sorted(p.name for p in out.iterdir()) == ["epr_config.json", "model", "training_log.jsonl"]
    assert list(folder.rglob("*.safetensors")) and not list(folder.rglob("*.bin"))
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert log and all(math.isfinite(r["loss"]) and r["learning_rate"] >= 0 for r in log)
    assert [r["step"] for r in log] == list(range(1, len(log) + 1))
    assert log[-1]["epoch"] == pytest.approx(config.epochs)
    assert any(r["epoch"] == pytest.approx(1.0) for r in log)
    summary = json.loads((out / "epr_config.json").read_text())
    assert TrainingConfig.from_dict(summary) == config
    assert summary["n_examples"] == N and summary["n_pairs"] == N * config.epochs
    assert summary["steps"] == len(log) and len(summary["epoch_times_s"]) == config.epochs
    assert math.isfinite(summary["final_loss"]) and summary["wall_time_s"] > 0


def test_a_failed_run_leaves_no_model_and_a_rerun_replaces_it(tmp_path, tiny_bert_dir, monkeypatch):
    from sentence_transformers import SentenceTransformerTrainer

    labels = tmp_path / "labels.jsonl"
    write_labels(labels, toy_labels())
    out = tmp_path / "out"
    config = tiny_config(tiny_bert_dir, epochs=1)
    with monkeypatch.context() as patch:
        def crash(self, *args, **kwargs):
            raise RuntimeError("out of memory, say")

        patch.setattr(SentenceTransformerTrainer, "train", crash)
        with pytest.raises(RuntimeError, match="out of memory"):
            train_dual_encoder(toy_examples(), labels, out, config, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["training_log.jsonl"]  # no model, no marker, no temp folder
    first = train_dual_encoder(toy_examples(), labels, out, config, progress=False)
    (first / "stale.txt").write_text("from the first run")
    second = train_dual_encoder(toy_examples(), labels, out, tiny_config(tiny_bert_dir, epochs=1, seed=1),
                                progress=False)
    assert second == first and not (second / "stale.txt").exists()
    assert sorted(p.name for p in out.iterdir()) == ["epr_config.json", "model", "training_log.jsonl"]
    assert json.loads((out / "epr_config.json").read_text())["seed"] == 1


def test_two_encoders_reload_and_differ(dual_run):
    from sentence_transformers import SentenceTransformer

    _, folder, _ = dual_run
    model = SentenceTransformer(str(folder))
    texts = ["weather request number 3", "set an alarm"]
    q = model.encode_query(texts, convert_to_tensor=True)
    d = model.encode_document(texts, convert_to_tensor=True)
    assert q.shape == d.shape == (2, 32)
    assert not torch.allclose(q, d, atol=1e-4)


def test_shared_encoder_reloads_as_one(shared_run):
    from sentence_transformers import SentenceTransformer

    _, folder, _ = shared_run
    model = SentenceTransformer(str(folder))
    texts = ["weather request number 3", "set an alarm"]
    q = model.encode_query(texts, convert_to_tensor=True)
    d = model.encode_document(texts, convert_to_tensor=True)
    assert torch.allclose(q, d, atol=1e-6)


@pytest.mark.parametrize("run", ["dual_run", "shared_run"])
def test_training_lowers_the_dpr_loss(run, request):
    from sentence_transformers import SentenceTransformer

    _, folder, config = request.getfixturevalue(run)
    pairs = build_training_pairs(toy_examples(), toy_labels(), config, 0)
    before = dpr_loss(build_bi_encoder(config.base_model, shared_encoder=config.shared_encoder, max_seq_length=config.max_seq_length), pairs, scale=config.scale, batch_size=config.batch_size)
    after = dpr_loss(SentenceTransformer(str(folder)), pairs, scale=config.scale, batch_size=config.batch_size)
    # deterministic (eval mode, fixed seeds); seeds 0-3 gave drops of 0.10-0.17 (dual) and 0.26-0.33 (shared)
    assert after < before - 0.05, (before, after)


def test_dense_retriever_uses_the_trained_model(dual_run):
    from taskret.retrieval.dense import DenseRetriever

    _, folder, _ = dual_run
    examples = toy_examples()
    retriever = DenseRetriever(encoder=str(folder), device="cpu").index(examples)
    result = retriever.retrieve([examples[0].input], k=3, exclude=[examples[0].id])
    assert len(result.ids[0]) == 3 and examples[0].id not in result.ids[0]
