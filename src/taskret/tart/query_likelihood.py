"""TART-full as a query-likelihood LM: the zero-shot UPR reranker (:mod:`taskret.rerank.causal_lm`) fine-tuned on
the training tasks, with their instructions.

Why a second TART-full objective: on SciFact, SmolLM2's zero-shot query likelihood is the strongest reranker we
have, while the same LM fine-tuned as a yes/no relevance classifier on berri-lite (40,475 pairs on a GPU) reads
SciFact far worse (``docs/benchmarks.md``). Training the LM on the objective it is scored by keeps what it knows
and teaches it what each instruction asks for: for a training row (instruction, query, positive, negatives),
with ``s(d) = log P(query | prompt(instruction, d))`` summed over the query's tokens (exactly the reranker's score,
the prompt of :meth:`CausalLMReranker.prompt_and_target`)::

    loss = -s(positive) / len(query)                                   # the LM's objective on the positive
           + ranking_weight * -log softmax([s(positive), s(n_1), ...])[0]   # over the positive and n_negatives

``n_negatives=0`` (or ``ranking_weight=0``) is plain query-likelihood fine-tuning. ``instruction_dropout`` rows
read UPR's own instruction-free prompt with the bare query, so one model serves queries with and without an
instruction (the reranker picks the prompt by whether the query carries one).

Public API::

    ranking_sampler(config)                      # rows -> {"query", "documents"} (positive first)
    train_tart_full_lm(rows, out_dir, config)    # -> out_dir / "model" (a transformers causal-LM folder)

A finished folder reloads with ``load_reranker(out_dir)`` as a :class:`~taskret.rerank.CausalLMReranker`; its
``tart_full_config.json`` says ``"objective": "query_likelihood"``. The loop is a plain PyTorch one (AdamW, linear
warm-up and decay, bf16 autocast on a GPU), as sentence-transformers' trainers have no sequence-likelihood model;
it shares the validation (best step kept), the streamed ``training_log.jsonl``, the atomic model folder and the
summary with the other TART trainers.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..io import write_json
from ..training.fit import LOG_FILE, Validation, replace_dir
from ..training.trainer import RowSampler, TrainingRow
from .config import NEGATIVE_KINDS
from .training_data import draw_anchor_and_negatives, draw_negatives, usable_rows, validate_training_row

__all__ = ["ranking_sampler", "train_tart_full_lm", "QUERY_LIKELIHOOD"]

#: The ``objective`` of a TART-full config (and run summary) trained here.
QUERY_LIKELIHOOD = "query_likelihood"


def ranking_sampler(config) -> RowSampler[tuple[dict, list[dict]]]:
    """Draws, per usable row, one group: the (instructed, or bare for ``instruction_dropout`` rows) query and its
    documents, the positive first and then ``config.n_negatives`` distinct negatives (all of them if fewer); with
    ``config.unfollowing_needs_instruction`` a bare query's are never instruction-unfollowing ones
    (:func:`~taskret.tart.training_data.negatives_for_anchor`)."""

    def draw(usable_row: tuple[dict, list[dict]], rng) -> list[TrainingRow]:
        row, negatives = usable_row
        query, drawn = draw_anchor_and_negatives(
            row, negatives, config, rng,
            lambda pool: draw_negatives(rng, pool, config.n_negatives) if config.n_negatives else [])
        documents = [row["positive_text"], *(n["text"] for n in drawn)]
        return [TrainingRow({"query": query, "documents": documents},
                            negative_kind=",".join(n["kind"] for n in drawn) or None)]

    return RowSampler(("query", "documents"), draw)


class _Scorer:
    """``log P(target | prompt)`` summed per sequence, with gradients: the reranker's score, for training."""

    def __init__(self, model, tokenizer, max_length: int, device):
        self.model, self.tokenizer, self.max_length, self.device = model, tokenizer, max_length, device

    def __call__(self, prompts: Sequence[str], targets: Sequence[str]):
        import torch

        from ..backends.transformers import pad_for_scoring

        prompt_ids = [self.tokenizer(p).input_ids for p in prompts]
        target_ids = [self.tokenizer(t, add_special_tokens=False).input_ids for t in targets]
        sequences, starts = [], []
        for p, t in zip(prompt_ids, target_ids):
            t = t[: max(1, self.max_length - len(p))]  # the document was already cut: keep some of a long query
            sequences.append(p + t)
            starts.append(len(p))
        input_ids, attention, rows, positions, labels = pad_for_scoring(sequences, starts,
                                                                          self.tokenizer.pad_token_id)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            hidden = self.model.get_decoder()(input_ids=input_ids.to(self.device),
                                              attention_mask=attention.to(self.device)).last_hidden_state
            rows_t = torch.tensor(rows, dtype=torch.long, device=self.device)
            # the vocabulary projection only where a query token is predicted: most of the cost otherwise
            logits = self.model.get_output_embeddings()(hidden[rows_t, torch.tensor(positions, device=self.device)])
        logp = torch.log_softmax(logits.float(), dim=-1)
        token_logprobs = logp.gather(1, torch.tensor(labels, device=self.device)[:, None])[:, 0]
        sums = torch.zeros(len(sequences), device=self.device).index_add(0, rows_t, token_logprobs)
        lengths = torch.tensor([len(s) - st for s, st in zip(sequences, starts)], device=self.device)
        return sums, lengths


class _Predictor:
    """The model being trained as the validator sees a reranker (``predict(pairs, ...)``), with no gradients."""

    def __init__(self, reranker):
        self.reranker = reranker

    def predict(self, pairs, batch_size: int | None = None, show_progress_bar: bool = False):
        import torch

        with torch.inference_mode():
            return self.reranker.score_pairs(pairs)


def train_tart_full_lm(rows: Sequence[dict], out_dir: str | os.PathLike, config, progress: bool = True,
                       source: str = "rows", validate: Callable[[Any], float] | None = None,
                       validate_steps: int = 0, marker: str = "tart_full_config.json") -> Path:
    """Fine-tune ``config.base_model`` (a causal LM) on ``rows`` by query likelihood (see the module), on the
    accelerator if there is one; ``config.batch_size`` rows (groups) per step. Return ``out_dir / "model"``.

    ``validate(predictor)`` (:func:`~taskret.tart.validation.full_validator`) every ``validate_steps`` steps keeps
    the best step's weights. The summary ``out_dir / marker`` is written last."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup, set_seed

    from ..backends.transformers import CausalLM
    from ..models import pick_device, resolve_model
    from ..progress import progress_bar
    from ..rerank.causal_lm import CausalLMReranker
    from ..rerank.cross_encoder import is_causal_lm

    started = time.perf_counter()
    if config.n_negatives:
        usable, n_skipped = usable_rows(rows, config.negative_kinds, source)
    else:  # plain query likelihood: every row's positive, negatives or not
        for index, row in enumerate(rows):
            validate_training_row(row, source, index + 1)
        usable, n_skipped = [(row, []) for row in rows], 0
    if not usable:
        raise ValueError(f"{source}: no training row has negatives of the kinds {list(config.negative_kinds)}")
    sampler = ranking_sampler(config)
    epochs = [sampler.epoch(usable, config.seed, epoch) for epoch in range(config.epochs)]

    folder = resolve_model(config.base_model)
    if not is_causal_lm(folder):
        raise ValueError(f"objective '{QUERY_LIKELIHOOD}' needs a causal LM as base_model (smollm2-135m, gemma3-270m, "
                         f"or a ...ForCausalLM folder); {config.base_model} is not one")
    set_seed(config.seed)
    device = torch.device(pick_device())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lm = CausalLM(model, tokenizer, name=str(config.base_model))  # sets a pad token where the tokenizer has none
    reranker = CausalLMReranker(lm, max_doc_tokens=config.max_doc_tokens)
    scorer = _Scorer(model, tokenizer, config.max_length, device)

    # batches: each epoch's groups shuffled (seeded by seed and epoch), cut into batch_size groups
    batches = []
    for number, epoch in enumerate(epochs):
        order = np.random.default_rng([config.seed, number, 1]).permutation(len(epoch))
        batches += [(number, order[i:i + config.batch_size]) for i in range(0, len(order), config.batch_size)]
    per_epoch = [sum(1 for n, _ in batches if n == number) for number in range(len(epochs))]
    fractions = [n + (k + 1) / per_epoch[n] for n in range(len(epochs)) for k in range(per_epoch[n])]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * len(batches)), len(batches))

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / marker).unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".train-", dir=out_dir))
    log_rows: list[dict] = []
    losses: list[float] = []
    epoch_times: list[float] = []
    try:
        with open(out_dir / LOG_FILE, "w", encoding="utf-8") as log_file, \
                progress_bar(len(batches), "train-full (query likelihood)", unit="step", enabled=progress) as advance:
            checks = Validation(lambda m: validate(_Predictor(reranker)), validate_steps, log_file, log_rows) \
                if validate is not None else None
            if checks is not None:
                checks.check(model, 0)
            model.train()
            epoch_start = time.perf_counter()
            for step, (number, indices) in enumerate(batches, start=1):
                columns = epochs[number].columns
                prompts, targets, groups = [], [], []
                for i in indices:
                    query = columns["query"][i]
                    start = len(prompts)
                    for document in columns["documents"][i]:
                        prompt, target = reranker.prompt_and_target(query, document)
                        prompts.append(prompt)
                        targets.append(target)
                    groups.append((start, len(prompts)))
                sums, lengths = scorer(prompts, targets)
                parts = []
                for start, end in groups:
                    part = -sums[start] / lengths[start]
                    if end - start > 1 and config.ranking_weight:
                        part = part - config.ranking_weight * torch.log_softmax(sums[start:end], dim=0)[0]
                    parts.append(part)
                loss = torch.stack(parts).mean()
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
                if step % config.logging_steps == 0 or step == 1:
                    row = {"step": step, "epoch": round(fractions[step - 1], 4), "loss": losses[-1], "learning_rate": schedule.get_last_lr()[0],
                           "grad_norm": float(grad_norm)}
                    log_rows.append(row)
                    log_file.write(json.dumps(row) + "\n")
                    log_file.flush()
                if checks is not None and (step % checks.every == 0 or step == len(batches)):
                    checks.check(model, step)
                    model.train()
                if step == len(batches) or batches[step][0] != number:
                    epoch_times.append(round(time.perf_counter() - epoch_start, 3))
                    epoch_start = time.perf_counter()
                advance(1)
            model.eval()
        if checks is not None:
            checks.restore_best(model)
        model_tmp = work / "model"
        model.save_pretrained(model_tmp, safe_serialization=True)
        tokenizer.save_pretrained(model_tmp)
        replace_dir(model_tmp, out_dir / "model")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tasks: dict[str, int] = {}
    for row, _ in usable:
        tasks[row["task"]] = tasks.get(row["task"], 0) + 1
    kinds = [kind for epoch in epochs for joined in epoch.negative_kinds for kind in joined.split(",")]
    write_json(out_dir / marker, {
        **config.to_dict(), "n_rows": len(rows), "n_used": len(usable), "n_skipped": n_skipped,
        "train_tasks": dict(sorted(tasks.items())), "n_pairs": sum(len(d) for e in epochs for d in e.columns["documents"]),
        "n_positive_pairs": sum(len(e) for e in epochs),
        "negatives_used": {kind: kinds.count(kind) for kind in NEGATIVE_KINDS},
        "steps": len(batches), "wall_time_s": round(time.perf_counter() - started, 3), "epoch_times_s": epoch_times,
        "final_loss": losses[-1] if losses else None, "mean_loss": float(np.mean(losses)) if losses else None,
        "device": str(device), **({"validation": checks.summary()} if checks is not None else {}),
    })
    return out_dir / "model"
