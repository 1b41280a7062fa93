"""A gold-free candidate reranker, fused with the retriever's score at test time (``epr+reward`` in
``benchmarks/epr/epr_beyond.py``): a ``minilm-l6`` cross-encoder trained on the scoring LM's log-probabilities of
(input, candidate) pairs.

It is *not* LLM-R's reward model (:mod:`taskret.epr.reward`): that teacher reads the input's gold output beside the
candidate, so it can only label training inputs. This one reads ``(input, "{candidate input}\t{candidate output}")``
alone, so it can rerank a test input's candidates. Its loss is ListNet's: the cross-entropy between
``softmax(LM log-probabilities / temperature)`` over an input's scored candidates and the softmax of its logits.
:func:`fuse_scores` fuses its score with the retriever's, each min-max scaled over one query's candidates.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..data import Example, Task
from ..formats import render_demo
from ..io import write_json
from .finetune import fit_epochs, save_model

__all__ = ["RerankerConfig", "candidate_text", "cross_encoder_logits", "train_candidate_reranker", "reranker_scores", "fuse_scores"]


@dataclass
class RerankerConfig:
    """The reranker's training: ``epochs`` of ListNet over the scored inputs."""

    base_model: str = "minilm-l6"
    epochs: int = 2
    batch_inputs: int = 8
    learning_rate: float = 3e-5
    temperature: float = 1.0
    max_length: int = 128
    seed: int = 0


def candidate_text(task: Task, example: Example) -> str:
    """What the reward model reads of a candidate: its demonstration as the prompt shows it."""
    return render_demo(example.input, task.prompt_output(example))


def cross_encoder_logits(model, pairs: Sequence[tuple[str, str]], batch_size: int = 64) -> np.ndarray:
    """A one-label ``CrossEncoder``'s raw logits for ``pairs``. ``predict`` passes a one-label model's output
    through a sigmoid unless told otherwise (``activation_fn=None`` means the model's default, the sigmoid):
    scores squashed into (0, 1) make a softmax over them nearly uniform, which is not what either consumer wants
    (LLM-R's distillation softmaxes the teacher's logits; fusion min-max scales them)."""
    import torch

    return np.asarray(model.predict(list(pairs), batch_size=batch_size, activation_fn=torch.nn.Identity(),
                                    show_progress_bar=False), dtype=np.float32).reshape(-1)


def train_candidate_reranker(task: Task, score_rows: Sequence[dict], out_dir: str | os.PathLike,
                       config: RerankerConfig | None = None, progress: Callable[[int], None] | None = None) -> Path:
    """Train the cross-encoder on ``score_rows`` (an EPR ``scores.jsonl``'s rows); write ``out_dir/model`` and
    ``out_dir/reranker_config.json``. Returns ``out_dir / "model"``."""
    import torch
    from sentence_transformers import CrossEncoder

    from ..models import resolve_model

    config = config or RerankerConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = {e.id: e for e in task.train}
    rows = [r for r in score_rows if len(r["candidates"]) >= 2]
    torch.manual_seed(config.seed)
    model = CrossEncoder(str(resolve_model(config.base_model)), num_labels=1, max_length=config.max_length,
                         device="cpu")
    network, tokenizer = model.model, model.tokenizer
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate)

    def batch_loss(batch: list[int]):
        queries, docs, sizes, targets = [], [], [], []
        for row in (rows[i] for i in batch):
            query = pool[row["id"]].input
            for cand in row["candidates"]:
                queries.append(query)
                docs.append(candidate_text(task, pool[cand["id"]]))
            sizes.append(len(row["candidates"]))
            targets.append(torch.tensor([c["logprob"] for c in row["candidates"]]) / config.temperature)
        features = tokenizer(queries, docs, padding=True, truncation=True, max_length=config.max_length,
                             return_tensors="pt")
        logits = network(**features).logits.squeeze(-1)
        loss = logits.new_zeros(())
        for part, target in zip(torch.split(logits, sizes), targets):
            loss = loss - (torch.softmax(target, -1) * torch.log_softmax(part, -1)).sum()
        return loss / len(batch)

    network.train()
    epoch_losses, _ = fit_epochs(len(rows), config.batch_inputs, config.epochs, config.seed, optimizer, batch_loss,
                                 progress)
    network.eval()
    final = save_model(model, out_dir)
    write_json(out_dir / "reranker_config.json", {**asdict(config), "n_inputs": len(rows),
                                                "n_pairs": sum(len(r["candidates"]) for r in rows),
                                                "epoch_losses": epoch_losses,
                                                "wall_time_s": round(time.perf_counter() - started, 1)})
    return final


def reranker_scores(model_dir: str | os.PathLike, task: Task, queries: Sequence[str],
                  candidates: Sequence[Sequence[str]], batch_size: int = 64) -> list[np.ndarray]:
    """The reranker's logits for each query's candidate ids (ids of ``task.train``)."""
    from sentence_transformers import CrossEncoder

    pool = {e.id: e for e in task.train}
    model = CrossEncoder(str(model_dir), device="cpu")
    pairs = [(q, candidate_text(task, pool[i])) for q, ids in zip(queries, candidates) for i in ids]
    flat = cross_encoder_logits(model, pairs, batch_size)
    out, start = [], 0
    for ids in candidates:
        out.append(flat[start: start + len(ids)])
        start += len(ids)
    return out


def fuse_scores(first: np.ndarray, reward: np.ndarray, weight: float) -> np.ndarray:
    """``weight * first + (1 - weight) * reward``, each min-max scaled over one query's candidates."""

    def scaled(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        span = values.max() - values.min()
        return np.ones_like(values) if span <= 0 else (values - values.min()) / span

    return weight * scaled(first) + (1 - weight) * scaled(reward)
