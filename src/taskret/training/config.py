"""Hyperparameter configs every training run shares: JSON round-trip and the common range checks."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

__all__ = ["ConfigMixin", "TrainerSettings", "DPRSettings", "check_training_values", "check_checkpoint_minutes"]


class ConfigMixin:
    """``to_dict``/``from_dict``/``to_json``/``from_json`` for a dataclass of hyperparameters.

    ``from_dict`` also reads the summary a finished run writes (the config plus ``RESULT_KEYS``,
    which it ignores) and rejects any other unknown key. Tuples are written as JSON lists.
    """

    RESULT_KEYS: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - set(cls.RESULT_KEYS)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


@dataclass
class TrainerSettings(ConfigMixin):
    """The hyperparameters every taskret training run has (each model's config adds its own after these).

    ``checkpoint_minutes``: every this many minutes of training the run saves a checkpoint in
    ``OUT/checkpoints/`` (weights, optimiser, schedule, RNG states; one kept), and a run stopped or killed and
    started again with the same settings and data goes on from it, ending with the weights an uninterrupted run
    would have (:mod:`taskret.training.checkpoints`). 0: no checkpoints. They are removed once the model is saved.
    """

    base_model: str = "minilm-l6"
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 0
    logging_steps: int = 1
    checkpoint_minutes: float = 10.0


def check_checkpoint_minutes(value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` (a config's ``checkpoint_minutes``) is a non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"checkpoint_minutes must be 0 (no checkpoints) or a positive number of minutes, "
                         f"got {value!r}")


def check_training_values(config: Any,
                          positive_ints: Sequence[str] = ("epochs", "batch_size", "logging_steps")) -> None:
    """Raise ``ValueError`` unless the named fields are positive integers, ``mini_batch_size`` (where the config
    has one) 0 or positive, ``learning_rate`` is positive,
    ``warmup_ratio`` in [0, 1), ``weight_decay`` non-negative, (where the config has them) ``scale`` positive and
    ``checkpoint_minutes`` non-negative."""
    for name in positive_ints:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not config.learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {config.learning_rate}")
    if not 0 <= config.warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {config.warmup_ratio}")
    mini = getattr(config, "mini_batch_size", 0)
    if isinstance(mini, bool) or not isinstance(mini, int) or mini < 0:
        raise ValueError(f"mini_batch_size must be 0 (the whole batch at once) or a positive integer, got {mini!r}")
    if hasattr(config, "scale") and not config.scale > 0:
        raise ValueError(f"scale must be positive, got {config.scale}")
    if config.weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {config.weight_decay}")
    if hasattr(config, "checkpoint_minutes"):
        check_checkpoint_minutes(config.checkpoint_minutes)


@dataclass
class DPRSettings:
    """The contrastive (DPR) objective's settings, shared by EPR's dual encoder and TART-dual: ``batch_size``
    triplets are embedded ``mini_batch_size`` sequences at a time (GradCache, so memory is bounded by the
    latter; 0: all at once, without GradCache's second forward pass), similarities are cosines times ``scale``,
    and ``no_duplicates`` batches avoid in-batch false negatives."""

    mini_batch_size: int = 16
    max_seq_length: int = 128
    scale: float = 20.0
    no_duplicates: bool = True
