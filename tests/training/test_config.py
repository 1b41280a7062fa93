"""The settings every training run shares: JSON round-trip (reading a finished run's summary back) and the
range checks with their messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from taskret.training.config import ConfigMixin, TrainerSettings, check_training_values


@dataclass
class ToyConfig(TrainerSettings):
    epochs: int = 2
    batch_size: int = 8
    scale: float = 20.0
    mini_batch_size: int = 4
    kinds: tuple[str, ...] = ("a", "b")

    RESULT_KEYS: ClassVar[tuple[str, ...]] = ("steps", "final_loss")

    def __post_init__(self) -> None:
        check_training_values(self)


def test_round_trip_writes_tuples_as_lists_and_reads_a_summary_back():
    config = ToyConfig(learning_rate=1e-3, seed=7, kinds=("b",))
    data = json.loads(config.to_json())
    assert data["kinds"] == ["b"] and data["base_model"] == "minilm-l6" and data["seed"] == 7
    assert ToyConfig.from_dict({**data, "kinds": ("b",)}) == config
    assert ToyConfig.from_dict({**config.to_dict(), "steps": 12, "final_loss": 0.3}).seed == 7
    with pytest.raises(ValueError, match="unknown ToyConfig keys: bogus, lr"):
        ToyConfig.from_dict({"lr": 1, "bogus": 2})


def test_the_shared_defaults():
    settings = TrainerSettings()
    assert (settings.learning_rate, settings.warmup_ratio, settings.weight_decay, settings.seed,
            settings.logging_steps) == (2e-5, 0.1, 0.0, 0, 1)
    assert isinstance(settings, ConfigMixin)


@pytest.mark.parametrize("overrides, message", [
    ({"epochs": 0}, "epochs must be a positive integer, got 0"),
    ({"batch_size": 2.0}, "batch_size must be a positive integer, got 2.0"),
    ({"logging_steps": True}, "logging_steps must be a positive integer, got True"),
    ({"learning_rate": 0.0}, "learning_rate must be positive"),
    ({"warmup_ratio": 1.0}, r"warmup_ratio must be in \[0, 1\)"),
    ({"warmup_ratio": -0.1}, r"warmup_ratio must be in \[0, 1\)"),
    ({"weight_decay": -1.0}, "weight_decay must be non-negative"),
    ({"scale": 0.0}, "scale must be positive"),
    ({"mini_batch_size": -1}, r"mini_batch_size must be 0 \(the whole batch at once\) or a positive integer, got -1"),
])
def test_out_of_range_values_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        ToyConfig(**overrides)


def test_a_mini_batch_of_0_embeds_the_whole_batch_at_once():
    assert ToyConfig(mini_batch_size=0).mini_batch_size == 0


def test_only_the_named_fields_must_be_positive_integers():
    config = ToyConfig()
    config.epochs = 0
    check_training_values(config, positive_ints=("batch_size",))  # epochs not checked
    with pytest.raises(ValueError, match="epochs"):
        check_training_values(config)
