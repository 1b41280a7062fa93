"""The sentence-transformers ``CrossEncoder`` backend: a TART-full run folder, any CrossEncoder folder, or a
registered model name, as a :class:`~taskret.rerank.base.Reranker`; and the denoiser of TART's training data.

A causal LM (``smollm2-135m``, ``gemma3-270m``, or any folder whose architecture is ``...ForCausalLM``) becomes
a pointwise *yes/no* cross-encoder, as TART-full is built on an instruction-following LM: sentence-transformers
reads the logits of ``yes`` and ``no`` after a prompt that shows the (instructed) query and the document
(:data:`RELEVANCE_PROMPT`, in the LM's own chat format), and the score is their difference. Zero-shot it is a
reranker with no training; :func:`taskret.tart.cross_encoder.train_tart_full` fine-tunes it with the same
binary cross-entropy as a MiniLM TART-full, and the saved folder keeps the prompt (its chat template).

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

__all__ = ["CrossEncoderReranker", "cross_encoder_folder", "is_causal_lm", "load_cross_encoder", "make_denoiser",
           "query_likelihood_run", "relevance_chat_template",
           "LM_MAX_LENGTH", "RELEVANCE_PROMPT", "RUN_CONFIG_FILE"]

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


#: Tokens of prompt, query and document a causal LM reads when no ``max_length`` is given (TART-full's training
#: length): its own limit (8,192 for SmolLM2) would let long documents cost many times more for little gain.
LM_MAX_LENGTH = 256

#: What a causal LM is asked before it answers ``yes`` or ``no`` (the wording of Qwen3-Reranker's system prompt).
RELEVANCE_PROMPT = 'Judge whether the Document meets the requirements of the Query. Answer only "yes" or "no".'

# sentence-transformers sends a (query, document) pair as two messages with the roles "query" and "document";
# these templates render them as one user turn in the LM's chat format and open the assistant's answer.
_PAIR = ("{%- set q = messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first -%}"
         "{%- set d = messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first -%}")
# Jinja drops a template's final newline, and the answer must start on a fresh line: an expression keeps it.
_NEWLINE = "{{ '\\n' }}"
_TURNS = {  # a token only this chat format has -> (user turn, assistant turn opened)
    "<|im_start|>": ("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n", "<|im_start|>assistant" + _NEWLINE),
    "<start_of_turn>": ("<start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n", "<start_of_turn>model" + _NEWLINE),
}


def relevance_chat_template(tokenizer) -> str:
    """The chat template that asks ``tokenizer``'s LM whether a document meets a query (:data:`RELEVANCE_PROMPT`),
    in the LM's chat format (ChatML as SmolLM2's, or Gemma's turns)."""
    vocab = tokenizer.get_vocab()
    for marker, (turn, answer) in _TURNS.items():
        if marker in vocab:
            user = turn.format(system=RELEVANCE_PROMPT, user="<Query>: {{ q }}\n<Document>: {{ d }}")
            return _PAIR + user + answer
    raise ValueError(f"{getattr(tokenizer, 'name_or_path', 'this LM')}: no known chat format ({', '.join(_TURNS)}) to ask "
                     f"for a yes/no relevance answer; pass a CrossEncoder folder with its own chat template instead")


def is_causal_lm(folder: str | os.PathLike) -> bool:
    """Whether the Hugging Face model in ``folder`` is a causal LM (its first architecture ``...ForCausalLM``)."""
    config = Path(folder) / "config.json"
    architectures = read_json(config).get("architectures") or [] if config.exists() else []
    return bool(architectures) and architectures[0].endswith("ForCausalLM")


def load_cross_encoder(spec: str | os.PathLike, max_length: int | None = None, device: str | None = None,
                       num_labels: int | None = None):
    """A sentence-transformers ``CrossEncoder`` from ``spec`` (see :func:`cross_encoder_folder`): an encoder with its
    classification head (``num_labels`` outputs; 1 starts a new relevance head on a bare encoder), or for a causal LM
    the yes/no log-odds after :data:`RELEVANCE_PROMPT` (a folder saved from such a model keeps its prompt)."""
    from ..progress import no_loading_bars

    with no_loading_bars():
        return _cross_encoder(spec, max_length, device, num_labels)


def _cross_encoder(spec: str | os.PathLike, max_length: int | None, device: str | None, num_labels: int | None):
    from sentence_transformers.cross_encoder import CrossEncoder

    from ..models import pick_device

    folder = cross_encoder_folder(spec)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder}: not a cross-encoder folder (no config.json); expected a TART-full "
                                f"run folder (written by `taskret tart train-full`) or a CrossEncoder")
    device = device or pick_device()
    if not is_causal_lm(folder):
        return CrossEncoder(str(folder), max_length=max_length, device=device,
                            **({"num_labels": num_labels} if num_labels else {}))
    template = folder / "chat_template.jinja"
    if template.exists() and RELEVANCE_PROMPT in template.read_text(encoding="utf-8"):
        return CrossEncoder(str(folder), max_length=max_length, device=device)  # a saved yes/no reranker: its own length
    from transformers import AutoTokenizer

    chat_template = relevance_chat_template(AutoTokenizer.from_pretrained(str(folder)))
    return CrossEncoder(str(folder), max_length=max_length or LM_MAX_LENGTH, device=device,
                        processor_kwargs={"chat_template": chat_template})


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` as a :class:`Reranker`: a TART-full run folder (or its
    ``model/``), any CrossEncoder folder, or a registered model name."""

    name = "cross-encoder"

    def __init__(self, spec: str | os.PathLike, batch_size: int = 32, device: str | None = None,
                 max_length: int | None = None) -> None:
        self.model = load_cross_encoder(spec, max_length=max_length, device=device)
        folder = self.path = cross_encoder_folder(spec)
        self.batch_size = batch_size
        config_path = folder.parent / RUN_CONFIG_FILE
        #: The TART-full run's summary when ``spec`` is a run folder (or its ``model/``), else None.
        self.config = read_json(config_path) if folder.name == "model" and config_path.exists() else None
        self.use_instruction = bool(self.config.get("use_instruction", True)) if self.config else True
        self.name = f"cross-encoder:{spec}"

    def _predict(self, pairs: Sequence[tuple[str, str]], **kwargs) -> np.ndarray:
        """The first output of each pair, a few batches at a time (longest pairs first, padded little), so that
        within :func:`taskret.progress.reporting` a long reranking reports its rate and ETA."""
        from ..progress import in_chunks, stage

        if not pairs:
            return np.zeros(0, dtype=np.float32)

        def predict(chunk: list[tuple[str, str]]) -> np.ndarray:
            scores = self.model.predict(chunk, batch_size=self.batch_size, show_progress_bar=False,
                                        convert_to_numpy=True, **kwargs)
            return np.asarray(scores, dtype=np.float32).reshape(len(chunk), -1)[:, 0]

        with stage(len(pairs), f"reranking with {self.name}", unit="pairs") as advance:
            return in_chunks([tuple(p) for p in pairs], predict, 4 * self.batch_size, advance,
                             size=lambda pair: len(pair[0]) + len(pair[1]))

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw logits (no activation)."""
        import torch

        return self._predict(pairs, activation_fn=torch.nn.Identity())

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The model's own activation of each pair (a probability for a TART-full model)."""
        return self._predict(pairs)


def query_likelihood_run(spec: str | os.PathLike) -> dict | None:
    """The summary of a TART-full run folder trained with ``objective="query_likelihood"`` (a causal LM scored as
    UPR is, :mod:`taskret.tart.query_likelihood`), else None."""
    path = Path(spec)
    summary = path / RUN_CONFIG_FILE
    if not (summary.is_file() and (path / "model").is_dir()):
        return None
    config = read_json(summary)
    return config if config.get("objective") == "query_likelihood" else None


def make_denoiser(spec: str | os.PathLike, batch_size: int = 64) -> tuple[Callable, bool]:
    """A denoiser for :func:`~taskret.tart.training_data.build_training_examples` from a TART-full folder
    or any CrossEncoder: (pairs -> the model's own activation, e.g. a probability; whether the pairs'
    queries should carry the instruction, True for a TART-full model trained with instructions)."""
    if query_likelihood_run(spec) is not None:
        raise ValueError(f"{spec}: a TART-full trained by query likelihood scores log-probabilities, not a relevance "
                         f"probability to threshold; denoise with a relevance TART-full (objective 'relevance')")
    reranker = CrossEncoderReranker(spec, batch_size=batch_size)
    return reranker.predict, reranker.config is not None and reranker.use_instruction
