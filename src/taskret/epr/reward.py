"""A reward model for demonstrations (LLM-R: Wang et al., EACL 2024, "Learning to Retrieve In-Context Examples for
Large Language Models"): a cross-encoder trained on the scoring LM's log-probabilities of (input, candidate)
pairs, then used as a *teacher* whose judgement is distilled into the EPR dual encoder.

Why: the LM is the expensive judge (one forward pass per pair); a cross-encoder that learned to imitate it labels
many more pairs (every training input's top K, not only the scored sample's BM25 candidates) at a fraction of the
cost, and the dual encoder learns from those labels. Alone, as a reranker, such a model hurt (issue 48); LLM-R
uses it to train the retriever, and (:func:`fuse_scores`) fused with the retriever's own score.

- :func:`train_reward_model`: a ``minilm-l6`` cross-encoder (``sentence_transformers.CrossEncoder``, one
  logit) reads ``(input, "{candidate input}\\t{candidate output}")``; per input, ListNet's listwise loss: the
  cross-entropy between ``softmax(LM log-probabilities / temperature)`` over the input's scored candidates and
  the softmax of the model's logits. Unlike LLM-R's teacher it does not read the gold output: the same model can
  rerank at test time.
- :func:`distill_reward`: the teacher scores each training input's top ``n_candidates`` by the EPR retriever;
  the query encoder is fine-tuned (the document encoder and the index stay the EPR encoder's, as in
  :mod:`taskret.epr.sets`) with LLM-R's two terms: the KL divergence from the teacher's distribution over the
  candidates to the retriever's (cosine / ``student_temperature``), plus InfoNCE with the teacher's best
  candidate as the positive and the rest as negatives.
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
from .finetune import embed, fit_epochs, query_route, save_model

DISTILL_BATCH = 32  # training inputs per distillation step, each with all its candidates

__all__ = ["RewardConfig", "candidate_text", "train_reward_model", "reward_scores", "distill_reward", "fuse_scores"]


@dataclass
class RewardConfig:
    """The reward model's training (``epochs`` over the scored inputs) and the distillation's
    (``distill_epochs`` over every training input's top ``n_candidates``)."""

    base_model: str = "minilm-l6"
    epochs: int = 2
    batch_inputs: int = 8
    learning_rate: float = 3e-5
    temperature: float = 1.0
    max_length: int = 128
    n_candidates: int = 30
    distill_epochs: int = 2
    distill_learning_rate: float = 2e-5
    student_temperature: float = 0.05
    seed: int = 0


def candidate_text(task: Task, example: Example) -> str:
    """What the reward model reads of a candidate: its demonstration as the prompt shows it."""
    return render_demo(example.input, task.prompt_output(example))


def train_reward_model(task: Task, score_rows: Sequence[dict], out_dir: str | os.PathLike,
                       config: RewardConfig | None = None, progress: Callable[[int], None] | None = None) -> Path:
    """Train the cross-encoder on ``score_rows`` (an EPR ``scores.jsonl``'s rows); write ``out_dir/model`` and
    ``out_dir/reward_config.json``. Returns ``out_dir / "model"``."""
    import torch
    from sentence_transformers import CrossEncoder

    from ..models import resolve_model

    config = config or RewardConfig()
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
    write_json(out_dir / "reward_config.json", {**asdict(config), "n_inputs": len(rows),
                                                "n_pairs": sum(len(r["candidates"]) for r in rows),
                                                "epoch_losses": epoch_losses,
                                                "wall_time_s": round(time.perf_counter() - started, 1)})
    return final


def reward_scores(model_dir: str | os.PathLike, task: Task, queries: Sequence[str],
                  candidates: Sequence[Sequence[str]], batch_size: int = 64) -> list[np.ndarray]:
    """The reward model's logits for each query's candidate ids (ids of ``task.train``)."""
    from sentence_transformers import CrossEncoder

    pool = {e.id: e for e in task.train}
    model = CrossEncoder(str(model_dir), device="cpu")
    pairs = [(q, candidate_text(task, pool[i])) for q, ids in zip(queries, candidates) for i in ids]
    flat = np.asarray(model.predict(pairs, batch_size=batch_size, activation_fn=None, show_progress_bar=False),
                      dtype=np.float32).reshape(-1)
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


def distill_reward(task: Task, encoder_dir: str | os.PathLike, reward_dir: str | os.PathLike,
                   out_dir: str | os.PathLike, config: RewardConfig | None = None,
                   progress: Callable[[int], None] | None = None) -> Path:
    """Fine-tune the query encoder of the EPR dual encoder at ``encoder_dir`` on the reward model's scores of every
    training input's top ``n_candidates`` (module docstring); write ``out_dir/model`` and
    ``out_dir/distill_config.json``. Returns ``out_dir / "model"``."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ..retrieval import DenseRetriever

    config = config or RewardConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    examples = list(task.train)
    retriever = DenseRetriever(encoder=str(encoder_dir)).index(examples)
    result = retriever.retrieve([e.input for e in examples], k=config.n_candidates, exclude=[e.id for e in examples])
    teacher = reward_scores(reward_dir, task, [e.input for e in examples], result.ids)
    torch.manual_seed(config.seed)
    model = SentenceTransformer(str(encoder_dir), device="cpu")
    query_modules = query_route(model)
    position = {e.id: n for n, e in enumerate(examples)}
    with torch.no_grad():
        vectors = model.encode_document([e.input for e in examples], convert_to_tensor=True,
                                        normalize_embeddings=True, batch_size=64)
    usable = [n for n, ids in enumerate(result.ids) if len(ids) >= 2]
    parameters = [p for m in query_modules for p in m.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=config.distill_learning_rate)

    def batch_loss(batch: list[int]):
        rows = [usable[i] for i in batch]
        queries = torch.nn.functional.normalize(embed(query_modules, [examples[n].input for n in rows]), dim=-1)
        loss = queries.new_zeros(())
        for q, n in zip(queries, rows):
            index = torch.tensor([position[i] for i in result.ids[n]])
            student = torch.log_softmax((vectors[index] @ q) / config.student_temperature, -1)
            target = torch.softmax(torch.as_tensor(teacher[n]) / config.temperature, -1)
            kl = (target * (torch.log(target.clamp_min(1e-12)) - student)).sum()
            info_nce = -student[int(torch.argmax(target))]
            loss = loss + kl + info_nce
        return loss / len(rows)

    for module in query_modules:
        module.train()
    epoch_losses, _ = fit_epochs(len(usable), DISTILL_BATCH, config.distill_epochs, config.seed, optimizer, batch_loss,
                                 progress)
    for module in query_modules:
        module.eval()
    final = save_model(model, out_dir)
    write_json(out_dir / "distill_config.json", {**asdict(config), "encoder": str(encoder_dir),
                                                 "reward_model": str(reward_dir), "n_inputs": len(usable),
                                                 "teacher_pairs": int(sum(len(ids) for ids in result.ids)),
                                                 "epoch_losses": epoch_losses,
                                                 "wall_time_s": round(time.perf_counter() - started, 1)})
    return final
