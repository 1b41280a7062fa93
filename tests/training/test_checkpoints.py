"""Resumable training (taskret.training.checkpoints) on the tiny BERT of tests/conftest.py: a run stopped after K
steps and started again goes on from step K and ends with the weights of an uninterrupted run of the same seed, on
the Trainer path (EPR's two encoders with GradCache; a run keeping its best dev step) and on UDR's listwise loop. A
checkpoint of other settings or a half-written one is not used; none is left once the model is saved.

The tiny BERT keeps its dropout (0.1), so equality needs the RNG states restored too: the Trainer does it (after
skipping the batches done), :class:`~taskret.training.checkpoints.LoopCheckpoints` does it for the loop. The
weights are compared with ``torch.equal``: a resumed run computes the same operations in the same order."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass

import pytest
import torch

from taskret.pipeline import earlier_sessions
from taskret.training.checkpoints import CHECKPOINTS, MARKER, NOT_FINGERPRINTED, fingerprint
from taskret.training.config import DPRSettings, TrainerSettings, check_training_values
from taskret.training.fit import LOG_FILE
from taskret.training.trainer import ModelRecipe, train

from .test_trainer import ITEMS, PAIRS, TRIPLETS, ToyConfig

EVERY_STEP = 1e-9  # checkpoint_minutes: a checkpoint after every step


class Stop(Exception):
    """The run is killed."""


@dataclass
class DualConfig(DPRSettings, TrainerSettings):
    epochs: int = 2
    batch_size: int = 4
    mini_batch_size: int = 2  # GradCache: two mini-batches per step
    max_seq_length: int = 16

    def __post_init__(self) -> None:
        check_training_values(self)


def stopping(loss, stop_after: int | None):
    """``loss(model)``, whose objective raises :class:`Stop` on the step after ``stop_after`` steps, before it changes
    anything."""
    def build(model):
        objective = loss(model)
        if stop_after is not None:
            forward, calls = objective.forward, []

            def forward_or_stop(*args, **kwargs):
                calls.append(1)
                if len(calls) > stop_after:
                    raise Stop
                return forward(*args, **kwargs)

            objective.forward = forward_or_stop
        return objective

    return build


def dual_recipe(base, config, stop_after: int | None = None) -> ModelRecipe:
    """EPR's model (a query/document Router) and loss (GradCache's DPR)."""
    from taskret.training.encoders import build_bi_encoder
    from taskret.training.losses import dpr_training_loss

    return ModelRecipe(lambda: build_bi_encoder(str(base), shared_encoder=False, max_seq_length=config.max_seq_length),
                       stopping(lambda model: dpr_training_loss(model, config), stop_after),
                       router_mapping={"anchor": "query", "positive": "document", "negative": "document"})


def run_dual(config, base, out, stop_after=None, **options):
    return train(config, ITEMS, TRIPLETS, dual_recipe(base, config, stop_after), out, "run.json",
                 lambda epochs: {"n_triplets": sum(len(e) for e in epochs)}, no_duplicates=True, progress=False,
                 **options)


def weights(folder) -> dict:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").state_dict()


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[0]}"


def read_log(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / LOG_FILE).read_text().splitlines()]


def test_a_stopped_trainer_run_resumes_at_its_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path, tiny_bert_dir,
                                                                                          caplog):
    # ITEMS: 12 triplets an epoch, 3 steps of 4; 6 in all. The run is stopped in step 5 (epoch 2's second).
    reference = run_dual(DualConfig(checkpoint_minutes=0), tiny_bert_dir, tmp_path / "reference")
    config = DualConfig(checkpoint_minutes=EVERY_STEP)
    out = tmp_path / "run"
    with pytest.raises(Stop):
        run_dual(config, tiny_bert_dir, out, stop_after=4)
    saved = sorted(p.name for p in (out / CHECKPOINTS).iterdir())
    assert saved == ["checkpoint-4"] and (out / CHECKPOINTS / "checkpoint-4" / MARKER).exists()  # one kept
    assert not (out / "model").exists() and not (out / "run.json").exists()
    # A checkpoint the process died writing (no marker): never resumed from, removed.
    half = out / CHECKPOINTS / "checkpoint-5"
    shutil.copytree(out / CHECKPOINTS / "checkpoint-4", half)
    (half / MARKER).unlink()
    (half / "model.safetensors").write_bytes(b"cut short")

    trained_s = json.loads((out / CHECKPOINTS / "checkpoint-4" / MARKER).read_text())["trained_s"]
    assert trained_s > 0  # the training seconds up to the checkpoint, for the stage that resumes it
    with caplog.at_level(logging.INFO, logger="taskret.training"), earlier_sessions() as earlier:
        folder = run_dual(config, tiny_bert_dir, out)
    assert earlier == [trained_s]
    assert "resumed from step 4 of 6" in caplog.text and "not a complete checkpoint" in caplog.text
    assert_same_weights(weights(folder), weights(reference))
    assert not (out / CHECKPOINTS).exists()  # removed once the model is in place
    summary = json.loads((out / "run.json").read_text())
    expected = json.loads((tmp_path / "reference" / "run.json").read_text())
    assert summary["resumed_from_step"] == 4 and expected["resumed_from_step"] is None
    assert summary["steps"] == 6 and summary["final_loss"] == expected["final_loss"]
    assert summary["mean_loss"] == pytest.approx(expected["mean_loss"], rel=1e-6)
    assert len(summary["epoch_times_s"]) == 2
    # The log holds every step once, as the uninterrupted run's.
    assert read_log(out) == read_log(tmp_path / "reference")


def test_a_trainer_run_keeping_its_best_dev_step_resumes_with_its_scores_and_best_weights(tmp_path, tiny_bert_dir):
    """TART's validation: the dev scores before the checkpoint and the best step's weights come back from it."""
    def validate(model) -> float:  # a score that follows the weights: the same in both runs if they are
        return float(next(model.parameters()).detach().sum())

    options = {"validate": validate, "validate_steps": 1}
    reference = run_dual(DualConfig(checkpoint_minutes=0), tiny_bert_dir, tmp_path / "reference", **options)
    config = DualConfig(checkpoint_minutes=EVERY_STEP)
    with pytest.raises(Stop):
        run_dual(config, tiny_bert_dir, tmp_path / "run", stop_after=3, **options)
    folder = run_dual(config, tiny_bert_dir, tmp_path / "run", **options)
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    expected = json.loads((tmp_path / "reference" / "run.json").read_text())
    assert summary["resumed_from_step"] == 3 and summary["validation"] == expected["validation"]
    assert expected["validation"]["best_step"] != 6  # the saved weights are an earlier step's
    assert_same_weights(weights(folder), weights(reference))


def test_a_stopped_cross_encoder_run_resumes_too(tmp_path, tiny_bert_dir):
    """TART-full's path: a CrossEncoder under sentence-transformers' CrossEncoderTrainer."""
    from sentence_transformers.cross_encoder import CrossEncoder
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    def run(config, out, stop_after=None):
        recipe = ModelRecipe(lambda: CrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=32, device="cpu"),
                             stopping(BinaryCrossEntropyLoss, stop_after), cross_encoder=True)
        return train(config, ITEMS, PAIRS, recipe, out, "full.json", lambda epochs: {}, progress=False)

    settings = {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3}
    reference = run(ToyConfig(**settings, checkpoint_minutes=0), tmp_path / "reference")
    config = ToyConfig(**settings, checkpoint_minutes=EVERY_STEP)
    with pytest.raises(Stop):
        run(config, tmp_path / "run", stop_after=2)
    folder = run(config, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "full.json").read_text())
    assert summary["resumed_from_step"] == 2 and summary["steps"] > 3
    assert_same_weights(CrossEncoder(str(folder), device="cpu").state_dict(),
                        CrossEncoder(str(reference), device="cpu").state_dict())


def test_a_checkpoint_of_other_settings_is_not_resumed_from(tmp_path, tiny_bert_dir, caplog):
    out = tmp_path / "run"
    with pytest.raises(Stop):
        run_dual(DualConfig(checkpoint_minutes=EVERY_STEP), tiny_bert_dir, out, stop_after=2)
    assert (out / CHECKPOINTS / "checkpoint-2" / MARKER).exists()
    with caplog.at_level(logging.INFO, logger="taskret.training"):
        run_dual(DualConfig(checkpoint_minutes=0, learning_rate=1e-3), tiny_bert_dir, out)
    assert "ignoring the checkpoint" in caplog.text and "learning_rate 2e-05 there, 0.001 here" in caplog.text
    assert "resumed" not in caplog.text
    assert json.loads((out / "run.json").read_text())["resumed_from_step"] is None
    assert [row["step"] for row in read_log(out)] == list(range(1, 7))  # trained from step 0
    assert not (out / CHECKPOINTS).exists()


def test_a_fingerprint_leaves_out_the_intervals_and_hashes_the_data():
    base = {"learning_rate": 1e-3, "checkpoint_minutes": 10, "logging_steps": 1}
    assert set(NOT_FINGERPRINTED) == {"checkpoint_minutes", "logging_steps"}
    same = fingerprint({**base, "checkpoint_minutes": 0, "logging_steps": 5}, [["a", "b"]])
    assert fingerprint(base, [["a", "b"]]) == same and "checkpoint_minutes" not in same
    assert fingerprint(base, [["a", "c"]])["data_sha256"] != same["data_sha256"]
    with pytest.raises(ValueError, match="checkpoint_minutes"):
        DualConfig(checkpoint_minutes=-1)
    assert TrainerSettings().checkpoint_minutes == 10.0  # on by default


# -- UDR's listwise loop ----------------------------------------------------------------------------


def listwise_data():
    from taskret.data import Example

    examples = [Example(f"e{i}", f"request number {i} about {['weather', 'music', 'alarms'][i % 3]}",
                        f"ANSWER_{i % 3} {i}") for i in range(12)]
    rows = [{"id": f"e{i}", "candidates": [{"id": f"e{j}", "logprob": -float((i * 7 + j * 3) % 11), "n_tokens": 2}
                                           for j in range(12) if j != i]} for i in range(8)]
    return examples, rows


def test_a_stopped_listwise_run_resumes_at_its_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path, tiny_bert_dir,
                                                                                          caplog):
    from taskret.epr.listwise import ListwiseConfig, train_listwise

    examples, rows = listwise_data()
    # 8 inputs, 3 a step: 3 steps an epoch, 6 in all.
    settings = {"base_model": str(tiny_bert_dir), "list_size": 4, "top_k": 2, "epochs": 2, "batch_inputs": 3,
                "max_seq_length": 16, "learning_rate": 1e-3, "encode_chunk": 4}
    reference = train_listwise(examples, rows, tmp_path / "reference", ListwiseConfig(**settings, checkpoint_minutes=0))
    config = ListwiseConfig(**settings, checkpoint_minutes=EVERY_STEP)
    out = tmp_path / "run"

    def stop_after(k):
        calls = []

        def progress(n):
            calls.append(n)
            if len(calls) > k:
                raise Stop  # after step k + 1, before its checkpoint: the run loses it
        return progress

    with pytest.raises(Stop):
        train_listwise(examples, rows, out, config, progress=stop_after(4))
    assert sorted(p.name for p in (out / CHECKPOINTS).iterdir()) == ["checkpoint-4"]
    (out / CHECKPOINTS / ".checkpoint-5.x.tmp").mkdir()  # a save the process died in, before its rename
    trained_s = json.loads((out / CHECKPOINTS / "checkpoint-4" / MARKER).read_text())["trained_s"]
    counted = []
    with caplog.at_level(logging.INFO, logger="taskret.training"), earlier_sessions() as earlier:
        folder = train_listwise(examples, rows, out, config, progress=counted.append)
    assert trained_s > 0 and earlier == [trained_s]  # the seconds that reached step 4, counted for the stage
    assert "resumed from step 4 of 6" in caplog.text
    assert counted == [11, 3, 2]  # the inputs of the 4 steps done (3 + 3 + 2, then 3), then the last two steps
    assert_same_weights(weights(folder), weights(reference))
    assert not (out / CHECKPOINTS).exists()
    summary = json.loads((out / "epr_config.json").read_text())
    expected = json.loads((tmp_path / "reference" / "epr_config.json").read_text())
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 6
    assert summary["epoch_losses"] == expected["epoch_losses"]

    # A checkpoint of other settings is not resumed from.
    with pytest.raises(Stop):
        train_listwise(examples, rows, out, config, progress=stop_after(2))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="taskret.training"):
        train_listwise(examples, rows, out, ListwiseConfig(**{**settings, "rank_loss_weight": 1.0}))
    assert "ignoring the checkpoint" in caplog.text and "rank_loss_weight 4.0 there, 1.0 here" in caplog.text
    assert json.loads((out / "epr_config.json").read_text())["resumed_from_step"] is None
