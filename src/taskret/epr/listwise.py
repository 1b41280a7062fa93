"""UDR's training objective (Li et al., ACL 2023, "Unified Demonstration Retriever for In-Context Learning"): the
dual encoder learns the scoring LM's *order* over a list of candidates, not only its best and worst.

Why: EPR's contrastive loss sees one positive and one hard negative per input; the LM scored 50 candidates, and
the order of the middle ones says which of two fair demonstrations helps more. UDR samples a list from the
scored candidates and trains the retriever to rank it as the LM did (a LambdaRank-style loss weighted by the
change in reciprocal rank), beside the in-batch contrastive loss.

Settings follow UDR's code (``KaiLv69/UDR``); ``docs/how-to/train-epr.md`` lists each one beside ours and says
why ours differ where they do.

- :func:`sample_list`: per input and epoch, ``list_size`` of its scored candidates, best first by the LM's
  mean log-probability per token: ``from_top`` from the top ``top_k``, one from the bottom ``top_k``, the rest
  from the middle, then sorted by the LM's order.
- :func:`lambda_mrr_loss`: for each pair the LM orders ``i`` above ``j``, ``log(1 + exp(-(s_i - s_j)))`` weighted
  by ``|1/rank_i - 1/rank_j|`` (ranks in the model's own order), averaged over the pairs.
- :func:`train_listwise`: two encoders (query and example, UDR's two BERTs), trained from the base model with
  ``rank_loss_weight`` x the ranking loss plus the cross-entropy of each query's LM-best candidate against every
  candidate in the batch. Candidates are encoded as ``"{input}\\t{output}"`` (UDR's demonstration text), queries
  as the input (or ``query_text``, e.g. with a task instruction in front).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..data import Example
from ..io import write_json
from ..training.config import check_checkpoint_minutes
from .finetune import embed, embed_distinct, fit_epochs, linear_warmup, save_model
from .labels import mean_logprob

__all__ = ["ListwiseConfig", "sample_list", "lambda_mrr_loss", "train_listwise", "LISTWISE_FIELD"]

#: What UDR's example encoder reads: the demonstration with its output.
LISTWISE_FIELD = "both"


@dataclass
class ListwiseConfig:
    """UDR's list sampling and loss; its training settings but for the model (``minilm-l6`` for BERT-base), the
    batch (32 inputs x 8 candidates for 128 x 8 with 4 accumulation steps) and a similarity scale (our encoders
    end in a normalisation, UDR's raw dot product has none). ``from_top``: UDR takes 2 for MTOP, Break and
    SMCalFlow, 1 for the other tasks. ``encode_chunk``: candidates are encoded once each, in chunks of this many
    texts of similar length (:func:`~taskret.epr.finetune.embed_distinct`: the same loss, a fraction of the work);
    0 pads the batch's 256 candidate texts to its longest and encodes them together, as UDR's code does.
    ``checkpoint_minutes``: every this many minutes of training a checkpoint goes to ``OUT/checkpoints/`` (weights,
    optimiser, schedule, RNG states), and a run started again with the same settings and scores goes on from it to
    the weights an uninterrupted run would have (:mod:`taskret.training.checkpoints`); 0: none. They are removed
    once the model is saved."""

    base_model: str = "minilm-l6"
    list_size: int = 8
    top_k: int = 5
    from_top: int = 1
    rank_loss_weight: float = 4.0
    scale: float = 20.0
    epochs: int = 10
    batch_inputs: int = 32
    learning_rate: float = 1.3e-4
    warmup_ratio: float = 0.1
    max_seq_length: int = 128
    seed: int = 0
    encode_chunk: int = 32
    checkpoint_minutes: float = 10.0

    def __post_init__(self) -> None:
        check_checkpoint_minutes(self.checkpoint_minutes)
        if self.encode_chunk < 0:
            raise ValueError(f"encode_chunk must be 0 (one padded batch) or a positive chunk size, got {self.encode_chunk}")
        if self.list_size < self.from_top + 2:
            raise ValueError(f"list_size {self.list_size} leaves no room for {self.from_top} from the top, one from "
                             "the bottom and the middle")


def sample_list(ranked: Sequence[str], rng: np.random.Generator, config: ListwiseConfig) -> list[str]:
    """``config.list_size`` of ``ranked`` (best first), in that order (module docstring). A list too short to
    split into top, middle and bottom is sampled uniformly."""
    k, size = config.top_k, config.list_size
    if len(ranked) < size:
        raise ValueError(f"{len(ranked)} scored candidates, fewer than list_size {size}")
    middle = list(range(k, len(ranked) - k))
    if len(middle) < size - 1 - config.from_top:
        chosen = rng.choice(len(ranked), size=size, replace=False).tolist()
    else:
        chosen = (rng.choice(k, size=config.from_top, replace=False).tolist()
                  + [len(ranked) - k + int(rng.integers(k))]
                  + rng.choice(middle, size=size - 1 - config.from_top, replace=False).tolist())
    return [ranked[i] for i in sorted(chosen)]


def lambda_mrr_loss(scores, relevance):
    """UDR's ranking loss over rows of scores and their true relevance (higher better; UDR's ``1 / LM rank``)."""
    import torch

    predicted, order = scores.sort(descending=True, dim=-1)
    true = relevance.gather(1, order)
    pairs = (true[:, :, None] - true[:, None, :]) > 0
    inverse_rank = 1.0 / torch.arange(1, scores.shape[1] + 1, dtype=scores.dtype, device=scores.device)
    weights = (inverse_rank[:, None] - inverse_rank[None, :]).abs()
    differences = (predicted[:, :, None] - predicted[:, None, :]).clamp(-50, 50)
    losses = torch.nn.functional.softplus(-differences) * weights
    return losses[pairs].mean()


def train_listwise(examples: Sequence[Example], score_rows: Sequence[dict], out_dir: str | os.PathLike,
                   config: ListwiseConfig | None = None, progress: Callable[[int], None] | None = None,
                   query_text: Callable[[Example], str] | None = None) -> Path:
    """Train a dual encoder with UDR's objective on ``score_rows`` (``scores.jsonl`` rows, every round's merged);
    write ``out_dir/model`` and ``out_dir/epr_config.json`` (the settings, ``field``, loss by epoch). Returns
    ``out_dir / "model"``. A run stopped after a checkpoint (``config.checkpoint_minutes``) goes on from it when
    started again with the same settings and rows (``resumed_from_step`` in the summary)."""
    import torch

    from ..models import pick_device
    from ..retrieval.base import example_text
    from ..training.checkpoints import CHECKPOINTS, LoopCheckpoints, fingerprint
    from ..training.encoders import build_bi_encoder
    from .finetune import document_route, query_route

    config = config or ListwiseConfig()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = {e.id: e for e in examples}
    lists = [(row["id"], [c["id"] for c in sorted(row["candidates"], key=lambda c: -mean_logprob(c))])
             for row in score_rows if len(row["candidates"]) >= config.list_size]
    if not lists:
        raise ValueError(f"no input has list_size {config.list_size} scored candidates")
    torch.manual_seed(config.seed)
    device = pick_device()  # an accelerator where there is one: each step encodes 9 texts per input, twice
    model = build_bi_encoder(config.base_model, shared_encoder=False, max_seq_length=config.max_seq_length,
                             device=device)
    queries_route, documents_route = query_route(model), document_route(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    scheduler = linear_warmup(optimizer, len(lists), config.batch_inputs, config.epochs, config.warmup_ratio)
    relevance = 1.0 / torch.arange(1, config.list_size + 1, dtype=torch.float32, device=device)
    rngs = {}

    def batch_loss(batch: list[int], epoch: int):
        rng = rngs.setdefault(epoch, np.random.default_rng([config.seed, epoch]))
        texts, docs = [], []
        for query_id, ranked in (lists[i] for i in batch):
            query = pool[query_id]
            texts.append(query.input if query_text is None else query_text(query))
            docs += [example_text(pool[i], LISTWISE_FIELD) for i in sample_list(ranked, rng, config)]
        q = torch.nn.functional.normalize(embed(queries_route, texts), dim=-1)
        d = torch.nn.functional.normalize(embed_distinct(documents_route, docs, config.encode_chunk)
                                          if config.encode_chunk else embed(documents_route, docs), dim=-1)
        scores = config.scale * q @ d.T  # every query against every candidate of the batch
        own = scores.view(len(batch), len(batch), config.list_size)[torch.arange(len(batch)), torch.arange(len(batch))]
        rank = lambda_mrr_loss(own, relevance.expand(len(batch), -1))
        in_batch = torch.nn.functional.cross_entropy(scores, torch.arange(len(batch), device=device) * config.list_size)
        return config.rank_loss_weight * rank + in_batch

    def restore_rngs(states: dict) -> None:
        for epoch, state in states.items():
            rngs[int(epoch)] = np.random.default_rng()
            rngs[int(epoch)].bit_generator.state = state

    # The run's identity: its settings, the lists and every text they show (the queries', the candidates').
    queries = [(i, pool[i].input if query_text is None else query_text(pool[i])) for i in sorted({q for q, _ in lists})]
    candidates = [(i, example_text(pool[i], LISTWISE_FIELD)) for i in sorted({c for _, ranked in lists for c in ranked})]
    checkpoints = LoopCheckpoints(out_dir / CHECKPOINTS, fingerprint(asdict(config), [lists, queries, candidates]),
                                  config.checkpoint_minutes, model, optimizer, scheduler,
                                  extra=lambda: {"rngs": {str(e): r.bit_generator.state for e, r in rngs.items()}},
                                  restore_extra=lambda extra: restore_rngs(extra["rngs"]),
                                  shown=hasattr(progress, "resume"))  # a taskret bar, not a disabled one
    model.train()
    epoch_losses, steps = fit_epochs(len(lists), config.batch_inputs, config.epochs, config.seed, optimizer,
                                     batch_loss, progress, scheduler=scheduler, with_epoch=True,
                                     checkpoints=checkpoints)
    model.eval()
    final = save_model(model, out_dir)
    checkpoints.discard()
    write_json(out_dir / "epr_config.json", {**asdict(config), "method": "udr listwise", "field": LISTWISE_FIELD,
                                             "n_inputs": len(lists), "steps": steps, "epoch_losses": epoch_losses,
                                             "device": device, "resumed_from_step": checkpoints.resumed_from,
                                             "wall_time_s": round(time.perf_counter() - started, 1)})
    return final
