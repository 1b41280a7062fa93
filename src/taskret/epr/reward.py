"""LLM-R (Wang et al., EACL 2024, "Learning to Retrieve In-Context Examples for Large Language Models"): a reward
model that reads a training input *with its gold output* beside a candidate learns the scoring LM's preferences,
and a dense retriever is distilled from it.

Why the gold output: the teacher then knows which demonstration leads to that very output, so it can judge every
candidate of a training input better than any retriever can from the input alone; the retriever, which must work
without the output, learns from those judgements (knowledge distillation). A teacher that reads only the input
knows no more than its student (issue 52).

Settings follow LLM-R's code (``microsoft/LMOps``, ``llm_retriever/``); ``docs/how-to/train-epr.md`` lists each
one beside ours and says why ours differ where they do (the models that exist offline, and 2 CPU cores).

- :func:`train_reward_model`: a cross-encoder (one logit) reads ``("{input}\\t{gold output}", "{candidate input}
  \\t{candidate output}")``, both as the prompt shows a demonstration. Per input and epoch, a group of
  ``group_size`` candidates: one positive among the LM's top ``top_k_positive``, the others from its bottom
  ``bottom_k_negative`` (drawn anew each epoch); cross-entropy with the positive as the label. The LM's score is
  its mean log-probability per output token (LLM-R's). A seeded ``held_out`` share of the scored inputs is kept
  out of training, for :func:`ranking_agreement`.
- :func:`reward_scores`: the teacher's logits for any training input's candidates.
- :func:`distill_reward`: a retriever with one shared encoder (``student_model``), starting from a general
  sentence encoder as LLM-R starts from E5, reads queries as the input alone and candidates as ``"{input}\\t
  {output}"`` (the index's field ``both``). Per input and epoch, a group of ``distill_group_size``: one positive
  among the teacher's top ``top_k_positive``, the rest from its bottom ``bottom_k_negative``. The loss is LLM-R's:
  ``KL(teacher || student)`` over the group, the teacher's softmax over its raw logits and the student's over
  ``cos / student_temperature``, plus ``contrastive_weight`` x a cross-entropy over every query, positive and
  candidate in the batch (LLM-R's full contrastive loss: q·passages, positive·q, q·q, positive·positive, the own
  pair masked), the query's positive as the label.
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
from .candidate_reranker import candidate_text, cross_encoder_logits
from .finetune import embed, fit_epochs, held_out_ids, linear_warmup, save_model
from .labels import mean_logprob

__all__ = ["RewardConfig", "teacher_query", "held_out_ids", "train_reward_model", "reward_scores", "ranking_agreement",
           "encoder_scores", "distill_reward", "STUDENT_FIELD"]

#: What the distilled retriever encodes of an example (LLM-R's passage: the query and its answer).
STUDENT_FIELD = "both"


@dataclass
class RewardConfig:
    """LLM-R's reward model (``base_model`` ... ``held_out``) and its distillation (``student_model`` ...).
    Defaults: LLM-R's values, except the models (``minilm-l6`` for ELECTRA-base and E5-base, which do not exist
    offline), the number of steps (epochs over our pool instead of 3,000 / 6,000 steps of 16 / 32 inputs) and
    the learning rates that go with a smaller model trained for fewer steps."""

    base_model: str = "minilm-l6"
    group_size: int = 8
    top_k_positive: int = 3
    bottom_k_negative: int = 16
    epochs: int = 2
    batch_inputs: int = 16
    learning_rate: float = 3e-5
    warmup_ratio: float = 400 / 3000
    max_length: int = 384
    held_out: float = 0.1
    student_model: str = "minilm-l6"
    distill_group_size: int = 4
    distill_epochs: int = 4
    distill_batch_inputs: int = 32
    distill_learning_rate: float = 3e-5
    distill_warmup_ratio: float = 400 / 6000
    student_temperature: float = 0.01
    contrastive_weight: float = 0.2
    distill_max_length: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("group_size", "distill_group_size"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be at least 2 (a positive and a negative), got {getattr(self, name)}")
        if not 0 <= self.held_out < 1:
            raise ValueError(f"held_out must be in [0, 1), got {self.held_out}")


def teacher_query(task: Task, example: Example) -> str:
    """What the reward model reads of a training input: the input and its gold output, as a demonstration."""
    return render_demo(example.input, task.prompt_output(example))


def _group(positives: Sequence[str], negatives: Sequence[str], size: int, turn: int) -> list[str]:
    """One positive and ``size - 1`` negatives, taken in turn (LLM-R's rotating slices): epoch ``turn`` starts
    where the previous left off, so the negatives cycle through the bottom list."""
    offset = turn * (size - 1)
    return [positives[turn % len(positives)]] + [negatives[(offset + j) % len(negatives)] for j in range(size - 1)]


def _positives_and_negatives(rows: Sequence[dict], score: Callable[[dict], float], config: RewardConfig
                             ) -> list[tuple[str, list[str], list[str]]]:
    """Per row with more candidates than ``top_k_positive``: (its id, the top ``top_k_positive`` candidate ids by
    ``score``, the bottom ``bottom_k_negative`` ones), each list shuffled once, as LLM-R's loader does."""
    rng = np.random.default_rng(config.seed)
    groups = []
    for row in rows:
        if len(row["candidates"]) <= config.top_k_positive:
            continue
        ranked = [c["id"] for c in sorted(row["candidates"], key=lambda c: -score(c))]
        positives = ranked[: config.top_k_positive]
        negatives = [i for i in ranked[-config.bottom_k_negative:] if i not in positives]
        if negatives:
            groups.append((row["id"], [positives[int(i)] for i in rng.permutation(len(positives))],
                           [negatives[int(i)] for i in rng.permutation(len(negatives))]))
    return groups


def train_reward_model(task: Task, score_rows: Sequence[dict], out_dir: str | os.PathLike,
                       config: RewardConfig | None = None, progress: Callable[[int], None] | None = None) -> Path:
    """Train the reward model on ``score_rows`` (``scores.jsonl`` rows) but the held-out share; write
    ``out_dir/model`` and ``out_dir/reward_config.json`` (the settings, the held-out ids, loss by epoch).
    Returns ``out_dir / "model"``."""
    import torch
    from sentence_transformers import CrossEncoder

    from ..models import resolve_model

    config = config or RewardConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = {e.id: e for e in task.train}
    held = held_out_ids(score_rows, config.held_out, config.seed)
    groups = _positives_and_negatives([r for r in score_rows if r["id"] not in held], mean_logprob, config)
    if not groups:
        raise ValueError("no scored input has more candidates than top_k_positive to train the reward model on")
    torch.manual_seed(config.seed)
    model = CrossEncoder(str(resolve_model(config.base_model)), num_labels=1, max_length=config.max_length,
                         device="cpu")
    network, tokenizer = model.model, model.tokenizer
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate)
    scheduler = linear_warmup(optimizer, len(groups), config.batch_inputs, config.epochs, config.warmup_ratio)

    def batch_loss(batch: list[int], epoch: int):
        queries, docs = [], []
        for query_id, positives, negatives in (groups[i] for i in batch):
            query = teacher_query(task, pool[query_id])
            for candidate in _group(positives, negatives, config.group_size, epoch + config.seed):
                queries.append(query)
                docs.append(candidate_text(task, pool[candidate]))
        features = tokenizer(queries, docs, padding=True, truncation=True, max_length=config.max_length,
                             return_tensors="pt")
        logits = network(**features).logits.view(len(batch), config.group_size)
        return torch.nn.functional.cross_entropy(logits, logits.new_zeros(len(batch), dtype=torch.long))

    network.train()
    epoch_losses, steps = fit_epochs(len(groups), config.batch_inputs, config.epochs, config.seed, optimizer,
                                     batch_loss, progress, scheduler=scheduler, with_epoch=True)
    network.eval()
    final = save_model(model, out_dir)
    write_json(out_dir / "reward_config.json", {**asdict(config), "n_inputs": len(groups), "steps": steps,
                                                "held_out_ids": sorted(held), "epoch_losses": epoch_losses,
                                                "wall_time_s": round(time.perf_counter() - started, 1)})
    return final


def reward_scores(model_dir: str | os.PathLike, task: Task, examples: Sequence[Example],
                  candidates: Sequence[Sequence[str]], batch_size: int = 64,
                  progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """The reward model's logits for each training example's candidate ids (ids of ``task.train``); it reads
    each example's gold output, so it labels training inputs, not test inputs."""
    import contextlib

    import torch
    from sentence_transformers import CrossEncoder

    from ..models import pick_dtype

    pool = {e.id: e for e in task.train}
    model = CrossEncoder(str(model_dir), device="cpu")
    # Scoring every candidate of every input is the stage's bulk: in bfloat16 where the CPU has it natively.
    fast = pick_dtype("auto", "cpu") == torch.bfloat16
    out = []
    with torch.autocast("cpu", dtype=torch.bfloat16) if fast else contextlib.nullcontext():
        for example, ids in zip(examples, candidates):
            query = teacher_query(task, example)
            pairs = [(query, candidate_text(task, pool[i])) for i in ids]
            out.append(cross_encoder_logits(model, pairs, batch_size))
            if progress is not None:
                progress(1)
    return out


def encoder_scores(retriever, rows: Sequence[dict], pool: dict) -> dict[str, list[float]]:
    """A dense retriever's score of each row's candidates (ids of ``pool``), in the row's order, by row id: the
    query is the row's input, each candidate the text of ``retriever.field`` (what :func:`ranking_agreement` ranks)."""
    from ..retrieval.base import example_text

    if not rows:
        return {}
    queries = retriever.encode([pool[r["id"]].input for r in rows], queries=True)
    # each candidate encoded once: the rows share the pool's examples (1,237 texts for MTOP's 61,850 pairs)
    ids = list(dict.fromkeys(c["id"] for row in rows for c in row["candidates"]))
    vectors, at = retriever.encode([example_text(pool[i], retriever.field) for i in ids]), {i: n for n, i in enumerate(ids)}
    return {row["id"]: (vectors[[at[c["id"]] for c in row["candidates"]]] @ query).tolist()
            for row, query in zip(rows, queries)}


def ranking_agreement(lm_rows: Sequence[dict], scorers: dict[str, dict[str, Sequence[float]]],
                      top: int = 5) -> dict[str, dict]:
    """How well each scorer ranks every input's candidates as the LM does: the mean Spearman correlation with
    the LM's mean log-probability per token over each input's candidates, and the mean share of the LM's top
    ``top`` among the scorer's top ``top``. ``scorers``: name -> {input id: a score per candidate, in the
    row's candidate order}; only inputs every scorer scored are counted."""
    from scipy.stats import spearmanr

    shared = [r for r in lm_rows if all(r["id"] in s for s in scorers.values())]
    result = {}
    for name, scores in scorers.items():
        rhos, overlaps = [], []
        for row in shared:
            lm = np.array([mean_logprob(c) for c in row["candidates"]])
            mine = np.asarray(scores[row["id"]], dtype=np.float64)
            if np.ptp(lm) > 0 and np.ptp(mine) > 0:
                rhos.append(float(spearmanr(lm, mine).statistic))
            best = set(np.argsort(-lm, kind="stable")[:top].tolist())
            overlaps.append(len(best & set(np.argsort(-mine, kind="stable")[:top].tolist())) / min(top, len(lm)))
        result[name] = {"spearman": round(float(np.mean(rhos)), 4) if rhos else None,
                        f"top{top}_overlap": round(float(np.mean(overlaps)), 4), "n_inputs": len(shared)}
    return result


def _contrastive_scores(queries, passages, group_size: int):
    """LLM-R's full contrastive logits and labels: each query against every passage of the batch, each positive
    against every query, each query against the other queries and each positive against the other positives
    (the own pair masked in the last three)."""
    import torch

    labels = torch.arange(len(queries)) * group_size
    positives = passages[labels]
    mask = torch.eye(len(queries), dtype=torch.bool)
    kq = (positives @ queries.T).masked_fill(mask, float("-inf"))
    qq = (queries @ queries.T).masked_fill(mask, float("-inf"))
    kk = (positives @ positives.T).masked_fill(mask, float("-inf"))
    return torch.cat([queries @ passages.T, kq, qq, kk], dim=-1), labels


def distill_reward(task: Task, teacher_rows: Sequence[dict], out_dir: str | os.PathLike,
                   config: RewardConfig | None = None, progress: Callable[[int], None] | None = None) -> Path:
    """Train the retriever on the teacher's scores (module docstring). ``teacher_rows``: ``{"id", "candidates":
    [{"id", "reward"}]}`` per training input. Writes ``out_dir/model`` (one shared sentence encoder: index its
    examples with field ``both``) and ``out_dir/epr_config.json`` (the settings, ``field``, loss by epoch).
    Returns ``out_dir / "model"``."""
    import torch

    from ..retrieval.base import example_text
    from ..training.encoders import build_bi_encoder

    config = config or RewardConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = {e.id: e for e in task.train}
    groups = _positives_and_negatives(teacher_rows, lambda c: c["reward"], config)
    rewards = {row["id"]: {c["id"]: float(c["reward"]) for c in row["candidates"]} for row in teacher_rows}
    if not groups:
        raise ValueError("no training input has more teacher-scored candidates than top_k_positive")
    torch.manual_seed(config.seed)
    model = build_bi_encoder(config.student_model, shared_encoder=True, max_seq_length=config.distill_max_length)
    modules = list(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.distill_learning_rate)
    scheduler = linear_warmup(optimizer, len(groups), config.distill_batch_inputs, config.distill_epochs,
                              config.distill_warmup_ratio)
    size, t = config.distill_group_size, config.student_temperature

    def batch_loss(batch: list[int], epoch: int):
        queries, passages, teacher = [], [], []
        for query_id, positives, negatives in (groups[i] for i in batch):
            members, reward = _group(positives, negatives, size, epoch + config.seed), rewards[query_id]
            queries.append(pool[query_id].input)
            passages += [example_text(pool[i], STUDENT_FIELD) for i in members]
            teacher.append([reward[i] for i in members])
        q = torch.nn.functional.normalize(embed(modules, queries), dim=-1)
        p = torch.nn.functional.normalize(embed(modules, passages), dim=-1)
        student = torch.log_softmax((q.unsqueeze(1) * p.view(len(batch), size, -1)).sum(-1) / t, dim=-1)
        target = torch.log_softmax(torch.tensor(teacher), dim=-1)
        kd = torch.nn.functional.kl_div(student, target, reduction="batchmean", log_target=True)
        logits, labels = _contrastive_scores(q, p, size)
        return kd + config.contrastive_weight * torch.nn.functional.cross_entropy(logits / t, labels)

    model.train()
    epoch_losses, steps = fit_epochs(len(groups), config.distill_batch_inputs, config.distill_epochs, config.seed,
                                     optimizer, batch_loss, progress, scheduler=scheduler, with_epoch=True)
    model.eval()
    final = save_model(model, out_dir)
    write_json(out_dir / "epr_config.json", {**asdict(config), "method": "llm-r distillation", "field": STUDENT_FIELD,
                                             "n_inputs": len(groups), "steps": steps, "epoch_losses": epoch_losses,
                                             "wall_time_s": round(time.perf_counter() - started, 1)})
    return final
