"""The sentence-transformers ``CrossEncoder`` backend: a TART-full run folder, any CrossEncoder folder, or a
registered model name, as a :class:`~taskret.rerank.base.Reranker`; and the denoiser of TART's training data.

Scores are the raw logits (a sigmoid of a confident model saturates at 1.0 in float32, which would tie the
top documents); :meth:`CrossEncoderReranker.predict` gives the model's own activation (a probability for
TART-full's ``num_labels=1``), which denoising compares with a threshold.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..io import read_json
from .base import Reranker

__all__ = ["CrossEncoderReranker", "cross_encoder_folder", "make_denoiser", "RUN_CONFIG_FILE"]

#: The summary a TART-full run folder holds beside its ``model/`` (written last by
#: :func:`taskret.tart.cross_encoder.train_tart_full`): what marks a run folder, and where
#: ``use_instruction`` is read from.
RUN_CONFIG_FILE = "tart_full_config.json"


def cross_encoder_folder(spec: str | os.PathLike) -> Path:
    """The CrossEncoder folder of ``spec``: a TART-full run folder (its ``model/``), a CrossEncoder
    folder, or a registered model name."""
    from ..models import resolve_model

    path = Path(spec)
    if (path / RUN_CONFIG_FILE).exists() and (path / "model").is_dir():
        return path / "model"
    if path.is_dir():
        return path
    return Path(resolve_model(str(spec)))


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` as a :class:`Reranker`: a TART-full run folder (or its
    ``model/``), any CrossEncoder folder, or a registered model name."""

    name = "cross-encoder"

    def __init__(self, spec: str | os.PathLike, batch_size: int = 32, device: str | None = None,
                 max_length: int | None = None) -> None:
        from sentence_transformers.cross_encoder import CrossEncoder

        from ..models import pick_device

        folder = cross_encoder_folder(spec)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a cross-encoder folder (no config.json); expected a TART-full "
                                    f"run folder (written by `taskret tart train-full`) or a CrossEncoder")
        self.path = folder
        self.batch_size = batch_size
        self.model = CrossEncoder(str(folder), device=device or pick_device(), max_length=max_length)
        config_path = folder.parent / RUN_CONFIG_FILE
        #: The TART-full run's summary when ``spec`` is a run folder (or its ``model/``), else None.
        self.config = read_json(config_path) if folder.name == "model" and config_path.exists() else None
        self.use_instruction = bool(self.config.get("use_instruction", True)) if self.config else True
        self.name = f"cross-encoder:{spec}"

    def _predict(self, pairs: Sequence[tuple[str, str]], **kwargs) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict([tuple(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False,
                                    convert_to_numpy=True, **kwargs)
        return np.asarray(scores, dtype=np.float32).reshape(len(pairs), -1)[:, 0]

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw logits (no activation)."""
        import torch

        return self._predict(pairs, activation_fn=torch.nn.Identity())

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The model's own activation of each pair (a probability for a TART-full model)."""
        return self._predict(pairs)


def make_denoiser(spec: str | os.PathLike, batch_size: int = 64) -> tuple[Callable, bool]:
    """A denoiser for :func:`~taskret.tart.training_data.build_training_examples` from a TART-full folder
    or any CrossEncoder: (pairs -> the model's own activation, e.g. a probability; whether the pairs'
    queries should carry the instruction, True for a TART-full model trained with instructions)."""
    reranker = CrossEncoderReranker(spec, batch_size=batch_size)
    return reranker.predict, reranker.config is not None and reranker.use_instruction
