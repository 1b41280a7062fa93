"""The settings every TART training run shares (TART-dual, TART-full, distillation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..training.config import TrainerSettings, check_training_values

__all__ = ["NEGATIVE_KINDS", "TartSettings", "check_negative_kinds"]

#: random: any document of the task's corpus; hard: the first stage's top hits that are not positives
#: (optionally denoised by TART-full); unfollowing: a document of another task's corpus that matches the
#: query but not the instruction.
NEGATIVE_KINDS = ("random", "hard", "unfollowing")


def check_negative_kinds(config) -> None:
    """Make ``config.negative_kinds`` a tuple; raise unless it is a non-empty subset of the known kinds."""
    config.negative_kinds = tuple(config.negative_kinds)
    unknown = [k for k in config.negative_kinds if k not in NEGATIVE_KINDS]
    if unknown or not config.negative_kinds:
        raise ValueError(f"negative_kinds must be a non-empty subset of {NEGATIVE_KINDS}, got {config.negative_kinds}")


@dataclass
class TartSettings(TrainerSettings):
    """The hyperparameters every TART training run has (TART-dual, TART-full, distillation): the shared
    trainer settings, the epochs, whether queries carry their instruction, and the kinds of negatives drawn.
    ``POSITIVE_INTS`` names the fields that must be positive integers."""

    epochs: int = 1
    use_instruction: bool = True
    negative_kinds: tuple[str, ...] = NEGATIVE_KINDS

    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "logging_steps")

    def __post_init__(self) -> None:
        check_training_values(self, self.POSITIVE_INTS)
        check_negative_kinds(self)
