"""``transformers``: the model runs in this process with Hugging Face transformers (the default backend).

:class:`CausalLM` has the two operations taskret needs: greedy generation that stops at the first
newline, and the log-probability of a target continuation given a prompt. Both batch by *tokens*
rather than by count (sequences sorted by length, so padding is small), and both return results in
input order, independent of batch size up to float rounding (float32: |difference| < 1e-3 nats in
the tests). Scoring projects onto the vocabulary only at target positions.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Iterator, Sequence

import torch

from ..models import pick_device, pick_dtype, resolve_model
from .base import (
    DEFAULT_STOP,
    LMBackend,
    ProgressFn,
    TargetScore,
    cut_at_stop,
    group_by_shared_prefix,
    has_newline_stop,
    newline_token_ids,
)

logger = logging.getLogger(__name__)

__all__ = ["CausalLM", "TransformersBackend", "TargetScore", "ProgressFn", "pad_for_scoring"]


def _with_cache(module: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword that hands ``cache`` (the keys and values so far) to ``module``'s forward: ``cache`` since
    transformers 5.2x renamed it (the old ``past_key_values`` warns there and goes in 5.40), else the old name."""
    return {_cache_keyword(type(module)): cache}


@functools.lru_cache(maxsize=None)
def _cache_keyword(module_class: type) -> str:
    return "cache" if "cache" in inspect.signature(module_class.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    """The keys and values a forward with ``use_cache=True`` returned, under either version's field name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _token_batches(lengths: Sequence[int], max_batch_tokens: int, max_batch_size: int) -> list[list[int]]:
    """Group indices sorted by length so that (batch size x longest) stays under the token budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and ((len(current) + 1) * longest > max_batch_tokens or len(current) >= max_batch_size):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_for_scoring(sequences: Sequence[Sequence[int]], starts: Sequence[int], pad: int
                    ) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int], list[int]]:
    """Right-padded ``input_ids`` and ``attention_mask`` for token sequences, and for every token at or after its
    sequence's start: its row, the position whose state predicts it (the one before) and the token itself, row by
    row. What scoring a target given its prompt needs (training a query-likelihood reranker included)."""
    longest = max(len(seq) for seq in sequences)
    input_ids = torch.full((len(sequences), longest), pad, dtype=torch.long)
    attention = torch.zeros((len(sequences), longest), dtype=torch.long)
    rows, positions, labels = [], [], []
    for row, (seq, start) in enumerate(zip(sequences, starts)):
        input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[row, : len(seq)] = 1
        for pos in range(start, len(seq)):
            rows.append(row)
            positions.append(pos - 1)  # the state before a token predicts it
            labels.append(seq[pos])
    return input_ids, attention, rows, positions, labels


class CausalLM(LMBackend):
    """Wraps a Hugging Face causal LM and its tokenizer: the ``transformers`` backend."""

    backend = "transformers"

    def __init__(self, model, tokenizer, name: str = "model", max_batch_tokens: int = 8192, max_batch_size: int = 64):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._newline_ids: torch.Tensor | None = None

    @classmethod
    def load(cls, name_or_path: str, device: str | None = None, dtype: str = "auto", threads: int | None = None,
             **kwargs) -> "CausalLM":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        from ..progress import no_loading_bars

        folder = resolve_model(name_or_path)
        device = pick_device(device)
        with no_loading_bars():
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=pick_dtype(dtype, device)).to(device)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return cls(model, tokenizer, name=str(name_or_path), **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def runtime(self) -> dict:
        return {"engine": "transformers", "device": str(self.device),
                "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch.")}

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _encode_prompt(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids  # with BOS where the model expects one

    # -- generation ------------------------------------------------------------------------------

    def _newline_token_ids(self) -> torch.Tensor:
        """Every vocabulary entry whose text contains a newline: any of them ends an answer."""
        if self._newline_ids is None:
            self._newline_ids = torch.tensor(newline_token_ids(self.tokenizer), dtype=torch.long)
        return self._newline_ids

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 128, stop: str | Sequence[str] | None = DEFAULT_STOP,
                 progress: ProgressFn | None = None) -> list[str]:
        """Greedy continuations, cut at the first ``stop`` (default: newline) and stripped.

        Decoding stops early at a newline token when ``"\\n"`` is a stop string, and at EOS; other stop
        strings are applied to the decoded text.
        """
        raw = self.generate_raw(prompts, max_new_tokens, stop_on_newline=has_newline_stop(stop), progress=progress)
        return [cut_at_stop(text, stop).strip() for text, _ in raw]

    @torch.inference_mode()
    def generate_raw(self, prompts: Sequence[str], max_new_tokens: int = 128, stop_on_newline: bool = True,
                     progress: ProgressFn | None = None) -> list[tuple[str, int]]:
        """Greedy continuations as decoded (nothing cut or stripped) and their token counts; decoding ends
        at EOS, after ``max_new_tokens``, or (``stop_on_newline``) after the first token holding a newline."""
        encoded = [self._encode_prompt(p) for p in prompts]
        lengths = [len(e) + max_new_tokens for e in encoded]
        outputs: list[tuple[str, int]] = [("", 0)] * len(prompts)
        newline_ids = self._newline_token_ids().to(self.device) if stop_on_newline else None
        pad = self.tokenizer.pad_token_id
        for batch in _token_batches(lengths, self.max_batch_tokens, self.max_batch_size):
            longest = max(len(encoded[i]) for i in batch)
            # Left padding keeps every prompt's last token at the same position for decoding.
            input_ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, i in enumerate(batch):
                ids = encoded[i]
                input_ids[row, longest - len(ids):] = torch.tensor(ids)
                attention[row, longest - len(ids):] = 1
            generated = self._greedy(input_ids.to(self.device), attention.to(self.device), max_new_tokens, newline_ids)
            for row, i in enumerate(batch):
                outputs[i] = (self.tokenizer.decode(generated[row], skip_special_tokens=True), len(generated[row]))
            if progress:
                progress(len(batch))
        return outputs

    def _greedy(self, input_ids, attention, max_new_tokens, newline_ids) -> list[list[int]]:
        eos = self.tokenizer.eos_token_id
        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        # logits_to_keep=1: the prefill needs the next-token distribution only at the last position.
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids, use_cache=True,
                         logits_to_keep=1)
        past = _cache_of(out)
        next_token = out.logits[:, -1, :].argmax(-1)
        done = torch.zeros(len(input_ids), dtype=torch.bool, device=input_ids.device)
        tokens: list[list[int]] = [[] for _ in range(len(input_ids))]
        positions = position_ids[:, -1]
        for _ in range(max_new_tokens):
            for row in range(len(input_ids)):
                if not done[row]:
                    tokens[row].append(int(next_token[row]))
            done |= next_token == eos
            if newline_ids is not None:
                done |= torch.isin(next_token, newline_ids)
            if bool(done.all()):
                break
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            positions = positions + 1
            out = self.model(input_ids=next_token[:, None], attention_mask=attention, position_ids=positions[:, None],
                             use_cache=True, **_with_cache(self.model, past))
            past = _cache_of(out)
            next_token = out.logits[:, -1, :].argmax(-1)
        return tokens

    # -- scoring ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def score(self, prompts: Sequence[str], targets: Sequence[str], progress: ProgressFn | None = None) -> list[TargetScore]:
        """log P(target | prompt) for each pair: only the target's tokens are scored.

        The vocabulary projection is applied only at target positions, which is most of the
        cost of a small LM's forward pass over a long prompt.
        """
        if len(prompts) != len(targets):
            raise ValueError("prompts and targets must have the same length")
        prompt_ids = [self._encode_prompt(p) for p in prompts]
        target_ids = [self.tokenizer(t, add_special_tokens=False).input_ids for t in targets]
        if any(not p and t for p, t in zip(prompt_ids, target_ids)):
            # Without a BOS token an empty prompt leaves nothing to predict the first target token from.
            raise ValueError("an empty prompt cannot condition a target with this tokenizer (no BOS token)")
        sequences = [p + t for p, t in zip(prompt_ids, target_ids)]
        results: list[TargetScore] = [TargetScore(0.0, 0)] * len(prompts)
        for batch, rows_t, token_logprobs, _ in self._logprobs_at(sequences, [len(p) for p in prompt_ids]):
            sums = torch.zeros(len(batch), dtype=torch.float64).index_add_(0, rows_t, token_logprobs.double().cpu())
            for row, i in enumerate(batch):
                results[i] = TargetScore(float(sums[row]), len(target_ids[i]))
            if progress:
                progress(len(batch))
        return results

    @torch.inference_mode()
    def score_shared(self, prefixes: Sequence[str], prompts: Sequence[str], targets: Sequence[str],
                     progress: ProgressFn | None = None) -> list[TargetScore]:
        """:meth:`score`, computing each distinct prefix once: its keys and values are cached and every pair
        that starts with it runs only the rest of its prompt and its target on top.

        The token sequences are exactly :meth:`score`'s (prompt tokenised whole): a pair whose prefix does not
        end on a token boundary of its prompt, or whose prefix is all of its prompt, is scored without sharing.
        Results equal :meth:`score`'s up to float rounding. With EPR's pairs (candidate demonstration, then the
        example) the prefix is about half the tokens, so the saving grows with how often candidates repeat.
        """
        if not (len(prefixes) == len(prompts) == len(targets)):
            raise ValueError("prefixes, prompts and targets must have the same length")
        prompt_ids = [self._encode_prompt(p) for p in prompts]
        target_ids = [self.tokenizer(t, add_special_tokens=False).input_ids for t in targets]
        prefix_cache, groups, plain = group_by_shared_prefix(prefixes, prompts, prompt_ids, self._encode_prompt)
        results: list[TargetScore] = [TargetScore(0.0, 0)] * len(prompts)
        if plain:
            for i, score in zip(plain, self.score([prompts[i] for i in plain], [targets[i] for i in plain],
                                                  progress=progress)):
                results[i] = score
        # Sequences after the shared prefix: the rest of the prompt, then the target.
        rests = {i: prompt_ids[i][len(prefix_cache[prefix]):] + target_ids[i]
                 for prefix, members in groups.items() for i in members}
        for group_batch in self._group_batches(groups, prefix_cache, rests):
            sums = self._score_group_batch(group_batch, prefix_cache, rests, prompt_ids, target_ids)
            for i, total in sums.items():
                results[i] = TargetScore(total, len(target_ids[i]))
            if progress:
                progress(len(sums))
        return results

    def _group_batches(self, groups: dict[str, list[int]], prefix_ids: dict[str, list[int]],
                       rests: dict[int, list[int]]) -> list[list[tuple[str, list[int]]]]:
        """Batches of (prefix, its pairs), groups of similar prefix length together, each batch's rows
        (prefix + rest) under the token budget; a group larger than a batch is split."""
        pieces: list[tuple[str, list[int]]] = []
        for prefix, members in groups.items():
            members = sorted(members, key=lambda i: len(rests[i]), reverse=True)
            for start in range(0, len(members), self.max_batch_size):
                pieces.append((prefix, members[start: start + self.max_batch_size]))
        pieces.sort(key=lambda piece: (len(prefix_ids[piece[0]]), len(rests[piece[1][0]])), reverse=True)
        batches: list[list[tuple[str, list[int]]]] = []
        current: list[tuple[str, list[int]]] = []
        rows = longest_prefix = longest_rest = 0
        for prefix, members in pieces:
            n_prefix, n_rest = len(prefix_ids[prefix]), max(len(rests[i]) for i in members)
            new_rows = rows + len(members)
            cost = new_rows * (max(longest_prefix, n_prefix) + max(longest_rest, n_rest))
            if current and (cost > self.max_batch_tokens or new_rows > self.max_batch_size):
                batches.append(current)
                current, rows, longest_prefix, longest_rest = [], 0, 0, 0
            current.append((prefix, members))
            rows += len(members)
            longest_prefix, longest_rest = max(longest_prefix, n_prefix), max(longest_rest, n_rest)
        if current:
            batches.append(current)
        return batches

    def _score_group_batch(self, batch: list[tuple[str, list[int]]], prefix_ids: dict[str, list[int]],
                           rests: dict[int, list[int]], prompt_ids: list[list[int]],
                           target_ids: list[list[int]]) -> dict[int, float]:
        """One prefix pass (prefixes left-padded to a common end) and one pass of the rests on top of the
        cached keys and values, each row reading its own prefix's cache."""
        pad = self.tokenizer.pad_token_id
        device = self.device
        backbone = self.model.get_decoder()
        head = self.model.get_output_embeddings()
        softcap = getattr(self.model.config, "final_logit_softcapping", None)
        n_prefix = max(len(prefix_ids[prefix]) for prefix, _ in batch)
        prefix_input = torch.full((len(batch), n_prefix), pad, dtype=torch.long)
        prefix_mask = torch.zeros((len(batch), n_prefix), dtype=torch.long)
        for g, (prefix, _) in enumerate(batch):
            ids = prefix_ids[prefix]
            prefix_input[g, n_prefix - len(ids):] = torch.tensor(ids, dtype=torch.long)
            prefix_mask[g, n_prefix - len(ids):] = 1
        prefix_positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
        cache = _cache_of(backbone(input_ids=prefix_input.to(device), attention_mask=prefix_mask.to(device),
                                   position_ids=prefix_positions.to(device), use_cache=True))
        members = [(g, i) for g, (_, group) in enumerate(batch) for i in group]
        owner = torch.tensor([g for g, _ in members], dtype=torch.long)
        cache.batch_select_indices(owner.to(device))
        n_rest = max(len(rests[i]) for _, i in members)
        rest_input = torch.full((len(members), n_rest), pad, dtype=torch.long)
        rest_mask = torch.zeros((len(members), n_rest), dtype=torch.long)
        rows, positions, labels = [], [], []
        for row, (g, i) in enumerate(members):
            seq = rests[i]
            rest_input[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            rest_mask[row, : len(seq)] = 1
            # The target starts after the rest of the prompt; the state before a token predicts it.
            start = len(prompt_ids[i]) - len(prefix_ids[batch[g][0]])
            for pos in range(start, len(seq)):
                rows.append(row)
                positions.append(pos - 1)
                labels.append(seq[pos])
        lengths = prefix_mask.sum(-1)[owner]
        rest_positions = lengths[:, None] + torch.arange(n_rest)[None, :]
        hidden = backbone(input_ids=rest_input.to(device),
                          attention_mask=torch.cat([prefix_mask[owner], rest_mask], dim=1).to(device),
                          position_ids=rest_positions.to(device), use_cache=True,
                          **_with_cache(backbone, cache)).last_hidden_state
        rows_t = torch.tensor(rows, dtype=torch.long)
        logits = head(hidden[rows_t, torch.tensor(positions, dtype=torch.long)]).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        picked_labels = torch.tensor(labels, dtype=torch.long)
        token_logprobs = torch.log_softmax(logits, dim=-1)[torch.arange(len(labels)), picked_labels]
        sums = torch.zeros(len(members), dtype=torch.float64).index_add_(0, rows_t, token_logprobs.double().cpu())
        return {i: float(sums[row]) for row, (_, i) in enumerate(members)}

    @torch.inference_mode()
    def token_logprobs(self, sequences: Sequence[Sequence[int]], top_k: int = 0
                       ) -> list[tuple[list[float], list[list[tuple[int, float]]]]]:
        """For each token sequence, log P(token_i | tokens before it) for every i >= 1 (the first token
        has nothing to condition on) and, with ``top_k``, the k most likely tokens at each of those
        positions as (id, log-probability) pairs. What an OpenAI-style ``echo`` + ``logprobs`` needs."""
        out: list[tuple[list[float], list[list[tuple[int, float]]]]] = [([], []) for _ in sequences]
        for batch, rows_t, token_logprobs, top in self._logprobs_at(sequences, [1] * len(sequences), top_k):
            rows = rows_t.tolist()
            values = token_logprobs.double().cpu().tolist()
            top_ids = top.indices.cpu().tolist() if top is not None else None
            top_values = top.values.double().cpu().tolist() if top is not None else None
            for n, row in enumerate(rows):
                logps, tops = out[batch[row]]
                logps.append(values[n])
                if top_ids is not None:
                    tops.append(list(zip(top_ids[n], top_values[n])))
        return out

    def _logprobs_at(self, sequences: Sequence[Sequence[int]], starts: Sequence[int], top_k: int = 0
                     ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor, object]]:
        """Token-batched forward passes; for each batch yields (sequence indices, the batch row of each
        scored position, log P of the token at each position >= its sequence's start, top-k or None).
        Positions are listed row by row, in order."""
        pad = self.tokenizer.pad_token_id
        backbone = self.model.get_decoder()
        head = self.model.get_output_embeddings()
        softcap = getattr(self.model.config, "final_logit_softcapping", None)
        for batch in _token_batches([len(s) for s in sequences], self.max_batch_tokens, self.max_batch_size):
            input_ids, attention, rows, positions, labels = pad_for_scoring(
                [sequences[i] for i in batch], [starts[i] for i in batch], pad)
            hidden = backbone(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device)).last_hidden_state
            # dtype=long: a batch of empty targets has no positions, and an empty tensor defaults to float.
            rows_t = torch.tensor(rows, dtype=torch.long)
            picked = hidden[rows_t, torch.tensor(positions, dtype=torch.long)]
            logits = head(picked).float()
            if softcap:
                logits = torch.tanh(logits / softcap) * softcap
            logp = torch.log_softmax(logits, dim=-1)
            token_logprobs = logp[torch.arange(len(labels)), torch.tensor(labels, dtype=torch.long)]
            top = logp.topk(min(top_k, logp.shape[-1]), dim=-1) if top_k and len(labels) else None
            yield batch, rows_t, token_logprobs, top


class TransformersBackend(CausalLM):
    """A registered model name (``smollm2-135m``) or a local Hugging Face folder, on CPU or one GPU."""

    backend = "transformers"

    @classmethod
    def from_spec(cls, target: str, device: str | None = None, dtype: str = "auto", threads: int | None = None,
                  max_batch_tokens: int = 8192, max_batch_size: int = 64) -> "TransformersBackend":
        return cls.load(target, device=device, dtype=dtype, threads=threads, max_batch_tokens=max_batch_tokens,
                        max_batch_size=max_batch_size)
