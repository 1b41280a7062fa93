"""Set-level training (CEIL: Ye et al., ICML 2023, "Compositional Exemplars for In-context Learning"): the scoring
LM rates whole demonstration *sets*, and the EPR dual encoder's query encoder is fine-tuned so that the score a
DPP gives each set ranks the sets as the LM does. At inference the trained retriever's top K is selected with the
same DPP (:mod:`taskret.icl.selection`, ``dpp`` at the weight matching ``scale_factor``).

Why: EPR learns from one candidate at a time, but the prompt is a set of 10-15; a retriever that ranks single
examples better did not make better prompts (issue 48). CEIL's kernel is the one :mod:`taskret.icl.selection` uses::

    r_i = (cos(x, e_i) + 1) / 2,   q_i = exp(r_i / (2 * theta)),   S_ij = (cos(e_i, e_j) + 1) / 2
    score(Z) = log det(diag(q) S diag(q))_Z = sum_{i in Z} r_i / theta + log det S_Z

Only the query encoder trains (CEIL's ``ctx_no_grad``): the examples' vectors, and so ``log det S_Z`` and the
index, stay those of the EPR encoder; the gradient reaches the query through the relevance term. The loss is
CEIL's margin ranking loss over each input's sets sorted by the LM's log-probability (scores min-max scaled per
input; a pair of sets ``j`` places apart needs a margin of ``j * margin``).

Stages, each a file one can read (:func:`sample_sets`, :func:`score_sets`, :func:`train_set_encoder`):

- ``sets.jsonl``: per labelled example, ``n_sets`` sets of ``set_size`` ids from the retriever's top
  ``n_candidates`` (the first set is the top ``set_size`` itself, the others uniform draws), each in prompt order
  (least relevant first, most relevant last);
- ``set_scores.jsonl``: per example and set, ``log P(y | set, x)`` from the scoring LM;
- ``retriever/model``: the fine-tuned dual encoder (``epr:DIR`` loads it), ``retriever/ceil_config.json``
  (what :func:`taskret.retrieval.set_selection.trained_selection` reads back).
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..data import Example, Task
from ..formats import demonstration, render_query
from ..io import iter_records, write_json
from ..retrieval.set_selection import TRAINED_SELECTION_FILE
from .finetune import embed, fit_epochs, held_out_ids, linear_warmup, query_route, save_model

__all__ = ["SetTrainingConfig", "sample_sets", "score_sets", "score_sets_in_shards", "train_set_encoder", "set_prompt", "ranking_loss"]


@dataclass
class SetTrainingConfig:
    """How many sets per input and how large, and the fine-tuning's settings: CEIL's (``run_ceil.sh``) by default,
    50 sets of 16 from the top 100, margin ``1 / n_sets``, 30 epochs with 10% of the inputs held out to stop early
    (patience 5), learning rate 1e-5. ``shard_size`` inputs are scored at a time, each shard kept: a stopped
    scoring resumes."""

    n_candidates: int = 100
    set_size: int = 16
    n_sets: int = 50
    scale_factor: float = 0.1
    margin: float | None = None
    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 1e-5
    warmup_ratio: float = 0.1
    held_out: float = 0.1
    patience: int = 5
    shard_size: int = 25
    seed: int = 0

    @property
    def pair_margin(self) -> float:
        """The margin per place: ``margin``, or CEIL's ``1 / n_sets``."""
        return self.margin if self.margin is not None else 1 / self.n_sets

    def __post_init__(self) -> None:
        if not 2 <= self.set_size <= self.n_candidates:
            raise ValueError(f"set_size must be in [2, n_candidates], got {self.set_size}")
        if self.n_sets < 2:
            raise ValueError(f"n_sets must be at least 2 (the loss ranks sets), got {self.n_sets}")
        for name in ("scale_factor", "learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def sample_sets(retriever, pool: Sequence[Example], queries: Sequence[Example], config: SetTrainingConfig
                ) -> list[dict]:
    """Rows ``{"id", "sets": [[ids in prompt order], ...]}`` (module docstring). ``retriever`` has indexed
    ``pool``; each query is excluded from its own candidates."""
    result = retriever.retrieve([e.input for e in queries], k=config.n_candidates, exclude=[e.id for e in queries])
    rng = np.random.default_rng(config.seed)
    rows = []
    for example, ids in zip(queries, result.ids):
        if len(ids) < config.set_size:
            raise ValueError(f"example '{example.id}': {len(ids)} candidates, fewer than set_size {config.set_size}")
        rank = {i: r for r, i in enumerate(ids)}
        chosen = [list(ids[: config.set_size])]
        seen = {frozenset(chosen[0])}
        # CEIL draws until it has n_sets distinct sets (a repeated draw is skipped); bounded, for tiny pools.
        for _ in range(100 * config.n_sets):
            if len(chosen) == config.n_sets:
                break
            picks = frozenset(ids[int(p)] for p in rng.choice(len(ids), size=config.set_size, replace=False))
            if picks not in seen:
                seen.add(picks)
                chosen.append(list(picks))
        # Prompt order: the most relevant last, as every taskret prompt.
        rows.append({"id": example.id, "sets": [sorted(s, key=lambda i: -rank[i]) for s in chosen]})
    return rows


def set_prompt(task: Task, demos: Sequence[Example], example: Example) -> tuple[str, str]:
    """(prompt, target): the set's demonstrations in order, then the input; the target is the output."""
    text = "".join(demonstration(d.input, task.prompt_output(d)) for d in demos)
    return text + render_query(example.input), task.prompt_output(example)


def score_sets(task: Task, set_rows: Sequence[dict], lm, progress: Callable[[int], None] | None = None
               ) -> list[dict]:
    """Rows ``{"id", "sets": [{"ids", "logprob", "n_tokens"}]}``: ``log P(y | set, x)`` per set."""
    pool = {e.id: e for e in task.train}
    prompts, targets = [], []
    for row in set_rows:
        example = pool[row["id"]]
        for ids in row["sets"]:
            prompt, target = set_prompt(task, [pool[i] for i in ids], example)
            prompts.append(prompt)
            targets.append(target)
    scores = iter(lm.score(prompts, targets, progress=progress))
    out = []
    for row in set_rows:
        scored = []
        for ids in row["sets"]:
            score = next(scores)
            scored.append({"ids": ids, "logprob": round(float(score.logprob), 5), "n_tokens": int(score.n_tokens)})
        out.append({"id": row["id"], "sets": scored})
    return out


def score_sets_in_shards(task: Task, set_rows: Sequence[dict], lm, shard_dir: str | os.PathLike, shard_size: int,
                         progress: Callable[[int], None] | None = None) -> list[dict]:
    """:func:`score_sets` ``shard_size`` inputs at a time, each shard written to ``shard_dir`` as it is done
    (``00000.jsonl``, ...; atomically): a stopped run resumes at the first missing shard. Returns every row."""
    from ..io import read_jsonl, write_jsonl

    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for number, start in enumerate(range(0, len(set_rows), shard_size)):
        chunk = set_rows[start: start + shard_size]
        path = shard_dir / f"{number:05d}.jsonl"
        rows = read_jsonl(path) if path.exists() else None
        if rows is None or [[s["ids"] for s in r["sets"]] for r in rows] != [r["sets"] for r in chunk]:
            rows = score_sets(task, chunk, lm, progress=progress)
            write_jsonl(path, rows)
        elif progress is not None:
            progress(sum(len(r["sets"]) for r in chunk))
        out += rows
    return out


def ranking_loss(scores, margin: float):
    """CEIL's margin ranking loss over each row's sets, already sorted best first (by the LM): scores min-max
    scaled per row (the bounds detached), and a set ``j`` places below another must score ``j * margin`` less."""
    import torch

    high = scores.max(dim=-1, keepdim=True)[0].detach()
    low = scores.min(dim=-1, keepdim=True)[0].detach()
    scaled = (scores - low) / (high - low).clamp_min(1e-6)
    total = scores.new_zeros(())
    for gap in range(1, scores.shape[1]):
        better, worse = scaled[:, :-gap], scaled[:, gap:]
        total = total + torch.relu(worse - better + margin * gap).mean()
    return total


def train_set_encoder(task: Task, encoder_dir: str | os.PathLike, set_scores: str | os.PathLike,
                      out_dir: str | os.PathLike, config: SetTrainingConfig | None = None,
                      progress: Callable[[int], None] | None = None) -> Path:
    """Fine-tune the query encoder of the dual encoder at ``encoder_dir`` on ``set_scores`` (module docstring);
    write ``out_dir/model`` (saved under a temporary name, then renamed) and ``out_dir/ceil_config.json``
    (the config, steps, loss by epoch, wall time). Returns ``out_dir / "model"``."""
    import torch
    from sentence_transformers import SentenceTransformer

    config = config or SetTrainingConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = {e.id: e for e in task.train}
    rows = [row for _, row in iter_records(Path(set_scores))]
    torch.manual_seed(config.seed)
    model = SentenceTransformer(str(encoder_dir), device="cpu")
    query_modules = query_route(model)
    # The examples' vectors, from the frozen document encoder: computed once.
    needed = sorted({i for row in rows for s in row["sets"] for i in s["ids"]})
    with torch.no_grad():
        vectors = model.encode_document([pool[i].input for i in needed], convert_to_tensor=True,
                                        normalize_embeddings=True, batch_size=64)
    position = {i: n for n, i in enumerate(needed)}
    # Per input: the sets' member indices, sorted by the LM's score (best first), and each set's log det S_Z.
    members, diversity = [], []
    for row in rows:
        ordered = sorted(row["sets"], key=lambda s: -s["logprob"])
        index = torch.tensor([[position[i] for i in s["ids"]] for s in ordered])
        sub = vectors[index]  # sets x size x dim
        similarity = (sub @ sub.transpose(1, 2) + 1) / 2
        jitter = 1e-4 * torch.eye(similarity.shape[-1])
        diversity.append(torch.linalg.slogdet(similarity + jitter).logabsdet)
        members.append(index)
    parameters = [p for m in query_modules for p in m.parameters()]
    # CEIL holds 10% of the inputs out and keeps the encoder of the best held-out loss (early stopping).
    held = set(held_out_ids(rows, config.held_out, config.seed)) if config.held_out > 0 else set()
    train_rows = [n for n, row in enumerate(rows) if row["id"] not in held]
    held_rows = [n for n, row in enumerate(rows) if row["id"] in held]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate)
    scheduler = linear_warmup(optimizer, len(train_rows), config.batch_size, config.epochs, config.warmup_ratio)

    def loss_of(indices: list[int]):
        queries = torch.nn.functional.normalize(embed(query_modules, [pool[rows[i]["id"]].input for i in indices]),
                                                dim=-1)
        scores = []
        for q, i in zip(queries, indices):
            relevance = (vectors[members[i]] @ q + 1) / 2  # sets x size
            scores.append(relevance.sum(dim=-1) / config.scale_factor + diversity[i])
        return ranking_loss(torch.stack(scores), config.pair_margin)

    best = {"loss": float("inf"), "epoch": -1, "state": None}
    held_losses: list[float] = []

    def after_epoch(epoch: int) -> bool:
        if not held_rows:
            return False
        for module in query_modules:
            module.eval()
        with torch.no_grad():
            loss = float(np.mean([float(loss_of(held_rows[s: s + config.batch_size]))
                                  for s in range(0, len(held_rows), config.batch_size)]))
        for module in query_modules:
            module.train()
        held_losses.append(round(loss, 5))
        if loss < best["loss"]:
            best.update(loss=loss, epoch=epoch, state=[copy.deepcopy(m.state_dict()) for m in query_modules])
        return epoch - best["epoch"] >= config.patience

    for module in query_modules:
        module.train()
    epoch_losses, steps = fit_epochs(len(train_rows), config.batch_size, config.epochs, config.seed, optimizer,
                                     lambda batch: loss_of([train_rows[i] for i in batch]), progress,
                                     scheduler=scheduler, after_epoch=after_epoch)
    if best["state"] is not None:
        for module, state in zip(query_modules, best["state"]):
            module.load_state_dict(state)
    for module in query_modules:
        module.eval()
    final = save_model(model, out_dir)
    write_json(out_dir / TRAINED_SELECTION_FILE, {**asdict(config), "margin": config.pair_margin,
                                              "encoder": str(encoder_dir), "n_inputs": len(train_rows),
                                              "n_held_out": len(held_rows), "steps": steps,
                                              "epoch_losses": epoch_losses, "held_out_losses": held_losses,
                                              "best_epoch": best["epoch"] + 1 if held_rows else None,
                                              "wall_time_s": round(time.perf_counter() - started, 1)})
    return final
