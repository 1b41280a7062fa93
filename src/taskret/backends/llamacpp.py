"""``llamacpp``: the model's GGUF file in llama.cpp (through ``llama-cpp-python``), the engine made for CPU inference.

Why a second engine: on a CPU, a decoding step of a small LM is bound by reading its weights from memory, and a
prompt's prefill by matrix products. transformers' loop prefills a left-padded batch through a mask and grows its
key/value cache by concatenation at every step (``benchmarks/speed/lm_profile.py``); llama.cpp prefills each
prompt alone, preallocates the cache and runs each step in C (``benchmarks/speed/lm_engines.py`` measures both
on one machine).

What stays the same as the ``transformers`` backend, so that the numbers agree:

- **Tokens**: prompts and targets are tokenised by the model's Hugging Face tokenizer (the one transformers
  uses), so both engines see the same ids; llama.cpp only computes.
- **Weights**: ``weights="f32"`` (the default) de-quantises the bundled GGUF once into a float32 GGUF: the same
  numbers transformers loads. ``weights="original"`` runs the bundled quantisation as it is, and any llama.cpp
  type name (``q8_0``, ``f16``, ...) re-quantises to it once; both change the numbers.
- **Decoding**: greedy, ending at EOS, at ``max_new_tokens``, or after the first token that holds a newline.

Generation keeps up to ``max_batch_size`` sequences in flight, each in its own stream of the cache: a prompt is
prefilled alone (no padding), the sequences decode together (one read of the weights per step), and a finished
sequence's stream takes the next prompt at once. Scoring packs many short sequences into one call, asks for the
vocabulary projection only at target positions, and decodes a demonstration shared by several pairs once.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..models import GGUF_MODELS, cache_dir, cpu_matrix_flags, gguf_file, resolve_model
from .base import (
    DEFAULT_STOP,
    BackendError,
    BackendNotInstalled,
    LMBackend,
    ProgressFn,
    TargetScore,
    cut_at_stop,
    group_by_shared_prefix,
    has_newline_stop,
    newline_token_ids,
)

logger = logging.getLogger(__name__)

__all__ = ["LlamaCppBackend", "INSTALL"]

INSTALL = "pip install 'taskret[llamacpp]' (llama-cpp-python, built from source with cmake and a C++ compiler)"
WEIGHTS_DEFAULT = "f32"


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError as err:
        raise BackendNotInstalled(f"the llamacpp LM backend needs llama-cpp-python: {INSTALL}") from err
    return llama_cpp


_QUIET = None  # the no-op log callback, kept referenced for as long as llama.cpp may call it


def _silence(llama_cpp) -> None:
    """llama.cpp logs every tensor it loads to stderr; taskret shows its own progress instead."""
    global _QUIET
    if _QUIET is None:
        _QUIET = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_QUIET, ctypes.c_void_p())


def converted_gguf(source: Path, weights: str, name: str) -> Path:
    """``source`` re-quantised to ``weights`` (``f32``, ``f16``, ``q8_0``, ...) once, cached beside the other
    models (written to a temporary file and renamed, so an interrupted conversion leaves nothing behind)."""
    if weights == "original":
        return source
    llama_cpp = _llama_cpp()
    kind = "ALL_F32" if weights.lower() == "f32" else f"MOSTLY_{weights.upper()}"
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{kind}", None)
    if ftype is None:
        raise ValueError(f"unknown llama.cpp weight type '{weights}'; use original, f32, f16, q8_0, q4_0, ...")
    target = cache_dir() / "gguf" / f"{name}-{weights.lower()}.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    _silence(llama_cpp)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    try:
        logger.warning("converting %s into %s weights for llama.cpp (once): %s", name, weights, target)
        if llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
            raise BackendError(f"llama.cpp could not convert {source} into {weights}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class LlamaCppBackend(LMBackend):
    """A registered model (its bundled GGUF) or a local ``.gguf`` file, run by llama.cpp on the CPU."""

    backend = "llamacpp"

    def __init__(self, model_path: Path, tokenizer, name: str, weights: str, threads: int | None = None,
                 max_batch_size: int = 8, max_batch_tokens: int = 4096, context_length: int | None = None):
        llama_cpp = _llama_cpp()
        _silence(llama_cpp)
        llama_cpp.llama_backend_init()
        self._lib = llama_cpp
        self.name = name
        self.weights = weights
        self.model_path = Path(model_path)
        self.tokenizer = tokenizer
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        params = llama_cpp.llama_model_default_params()
        # llama.cpp's extra weight buffers (AMX tiles, repacked layouts) crashed llama_decode with a segfault on a
        # 2-core Xeon with AMX (llama-cpp-python 0.3.36 built for that CPU, several sequences in a batch); without
        # them the same model decodes. Off where the CPU has AMX only: elsewhere they are llama.cpp's fast path.
        params.use_extra_bufts = "amx_tile" not in cpu_matrix_flags()
        self._model = llama_cpp.llama_model_load_from_file(str(self.model_path).encode(), params)
        if not self._model:
            raise BackendError(f"llama.cpp could not load {self.model_path}")
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self._model))
        self._context_length = context_length or int(llama_cpp.llama_model_n_ctx_train(self._model))
        self._ctx = None
        self._ctx_shape = (0, 0)  # (sequences, tokens per sequence) of the current context
        self._n_batch = 0  # the most tokens one llama_decode call of the current context takes
        self._batch = None
        self._batch_shape = (0, 0)
        self._newline_ids: frozenset[int] | None = None

    @classmethod
    def from_spec(cls, target: str, weights: str = WEIGHTS_DEFAULT, threads: int | None = None,
                  max_batch_size: int = 8, max_batch_tokens: int = 4096) -> "LlamaCppBackend":
        """``target``: a registered model name (``smollm2-135m``, ``gemma3-270m``) or a ``.gguf`` file (its
        tokenizer read from the file by transformers)."""
        from transformers import AutoTokenizer

        from ..progress import no_loading_bars

        _llama_cpp()  # a clear error before any conversion when llama-cpp-python is missing
        path = Path(target).expanduser()
        with no_loading_bars():
            if target in GGUF_MODELS:
                tokenizer = AutoTokenizer.from_pretrained(resolve_model(target))
                source = gguf_file(target)
                model_path = converted_gguf(source, weights, target)
            elif path.suffix == ".gguf" and path.is_file():
                tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
                model_path = converted_gguf(path, weights, path.stem) if weights != "original" else path
            else:
                raise ValueError(f"the llamacpp backend runs a registered GGUF model ({', '.join(GGUF_MODELS)}) or a "
                                 f".gguf file; got '{target}'")
        return cls(model_path, tokenizer, name=target, weights=weights, threads=threads,
                   max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)

    # -- what a result records ---------------------------------------------------------------------

    def runtime(self) -> dict:
        return {"engine": "llama.cpp", "engine_version": self._lib.__version__, "device": "cpu",
                "dtype": "float32" if self.weights == "f32" else self.weights, "weights": self.weights}

    @property
    def context_length(self) -> int:
        return self._context_length

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _encode_prompt(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids  # with BOS where the model expects one, as transformers does

    # -- the llama.cpp context: one stream of the cache per sequence --------------------------------

    def _context(self, n_seq: int, n_tokens: int):
        """A context with ``n_seq`` separate cache streams of at least ``n_tokens`` each, made again only when a
        call needs more than the current one holds (its cache is allocated once)."""
        have_seq, have_tokens = self._ctx_shape
        if self._ctx is not None and n_seq <= have_seq and n_tokens <= have_tokens:
            self._lib.llama_memory_clear(self._lib.llama_get_memory(self._ctx), True)
            return self._ctx
        self._free_context()
        per_seq = max(256, -(-n_tokens // 256) * 256)
        params = self._lib.llama_context_default_params()
        params.n_ctx = per_seq * n_seq
        params.n_batch = self._n_batch = max(per_seq, self.max_batch_tokens)
        params.n_ubatch = 512
        params.n_seq_max = n_seq
        # A stream per sequence: a prompt's prefill attends over its own tokens only. One unified cache made
        # prefill and decoding 1.7-2x slower (every sequence's cells are in every attention's mask).
        params.kv_unified = False
        params.n_threads = params.n_threads_batch = self.threads
        # Flash attention on the float16 cache: prefill 1.4x faster than without; a float32 cache was 2-4x slower.
        params.flash_attn_type = self._lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.no_perf = True
        self._ctx = self._lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise BackendError(f"llama.cpp could not make a context of {n_seq} x {per_seq} tokens")
        self._ctx_shape = (n_seq, per_seq)
        return self._ctx

    def _batch_for(self, n_tokens: int, n_seq: int):
        if self._batch is None or self._batch_shape[0] < n_tokens or self._batch_shape[1] < n_seq:
            if self._batch is not None:
                self._lib.llama_batch_free(self._batch)
            self._batch = self._lib.llama_batch_init(n_tokens, 0, n_seq)
            self._batch_shape = (n_tokens, n_seq)
        return self._batch

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """``llama_decode`` of (token, position, sequence, wants logits) entries, in calls of at most the context's
        batch size; the logits of the entries that asked, in their order, as a (n, vocab) float32 array (a copy:
        the next call reuses llama.cpp's buffer)."""
        outputs = [self._decode_call(entries[k: k + self._n_batch]) for k in range(0, len(entries), self._n_batch)]
        if not outputs:
            return np.empty((0, self._n_vocab), dtype=np.float32)
        return outputs[0] if len(outputs) == 1 else np.concatenate(outputs)

    def _decode_call(self, entries: list[tuple[int, int, int, bool]]) -> np.ndarray:
        batch = self._batch_for(len(entries), self._ctx_shape[0])
        batch.n_tokens = len(entries)
        n_out = 0
        for j, (token, pos, seq, wants) in enumerate(entries):
            batch.token[j] = token
            batch.pos[j] = pos
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = seq
            batch.logits[j] = wants
            n_out += wants
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise BackendError(f"llama.cpp could not decode a batch of {len(entries)} tokens (status {status})")
        if not n_out:
            return np.empty((0, self._n_vocab), dtype=np.float32)
        logits = self._lib.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(logits, shape=(n_out, self._n_vocab)).copy()

    # -- generation ---------------------------------------------------------------------------------

    def _newline_token_ids(self) -> frozenset[int]:
        if self._newline_ids is None:
            self._newline_ids = frozenset(newline_token_ids(self.tokenizer))
        return self._newline_ids

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 128, stop: str | Sequence[str] | None = DEFAULT_STOP,
                 progress: ProgressFn | None = None) -> list[str]:
        """Greedy continuations, cut at the first ``stop`` (default: newline) and stripped."""
        raw = self.generate_raw(prompts, max_new_tokens, stop_on_newline=has_newline_stop(stop), progress=progress)
        return [cut_at_stop(text, stop).strip() for text, _ in raw]

    def generate_raw(self, prompts: Sequence[str], max_new_tokens: int = 128, stop_on_newline: bool = True,
                     progress: ProgressFn | None = None) -> list[tuple[str, int]]:
        """Greedy continuations as decoded and their token counts (as :meth:`CausalLM.generate_raw`)."""
        if not prompts:
            return []
        encoded = [self._encode_prompt(p) for p in prompts]
        longest = max(len(e) for e in encoded) + max_new_tokens
        n_seq = min(self.max_batch_size, len(prompts))
        self._context(n_seq, longest)
        eos = self.tokenizer.eos_token_id
        ends = set(self._newline_token_ids()) if stop_on_newline else set()
        if eos is not None:
            ends.add(eos)
        outputs: list[tuple[str, int]] = [("", 0)] * len(prompts)
        # Longest first: the slow prompts start early, and the short ones fill the streams that free up.
        queue = sorted(range(len(prompts)), key=lambda i: len(encoded[i]), reverse=True)
        slots: dict[int, dict] = {}  # stream -> {"i": prompt index, "pos": next position, "next": token, "out": []}
        memory = self._lib.llama_get_memory(self._ctx)

        def finish(slot: int) -> None:
            state = slots.pop(slot)
            outputs[state["i"]] = (self.tokenizer.decode(state["out"], skip_special_tokens=True), len(state["out"]))
            self._lib.llama_memory_seq_rm(memory, slot, -1, -1)
            if progress:
                progress(1)

        def take(slot: int, token: int) -> bool:
            """Append ``token`` to the slot's answer; whether the answer goes on."""
            state = slots[slot]
            state["out"].append(token)
            state["next"] = token
            return token not in ends and len(state["out"]) < max_new_tokens

        while queue or slots:
            for slot in range(n_seq):
                if slot in slots or not queue:
                    continue
                i = queue.pop(0)
                ids = encoded[i]
                logits = self._decode([(t, p, slot, p == len(ids) - 1) for p, t in enumerate(ids)])
                slots[slot] = {"i": i, "pos": len(ids), "out": []}
                if max_new_tokens <= 0 or not take(slot, int(np.argmax(logits[0]))):
                    finish(slot)
            if not slots:
                continue
            active = sorted(slots)
            logits = self._decode([(slots[s]["next"], slots[s]["pos"], s, True) for s in active])
            chosen = logits.argmax(axis=1)
            for row, slot in enumerate(active):
                slots[slot]["pos"] += 1
                if not take(slot, int(chosen[row])):
                    finish(slot)
        return outputs

    # -- scoring ------------------------------------------------------------------------------------

    def score(self, prompts: Sequence[str], targets: Sequence[str], progress: ProgressFn | None = None) -> list[TargetScore]:
        """log P(target | prompt) for each pair, the target's tokens only (as the transformers backend)."""
        return self.score_shared([""] * len(prompts), prompts, targets, progress=progress)

    def score_shared(self, prefixes: Sequence[str], prompts: Sequence[str], targets: Sequence[str],
                     progress: ProgressFn | None = None) -> list[TargetScore]:
        """:meth:`score`, each distinct prefix computed once per batch: decoded into one pair's stream and copied
        into the streams of the other pairs that start with it, which then run only the rest of their prompt and
        their target. The token sequences are :meth:`score`'s (prompt tokenised whole); a pair whose prefix is not
        a token boundary of its prompt, or is all of it, runs whole."""
        if not (len(prefixes) == len(prompts) == len(targets)):
            raise ValueError("prefixes, prompts and targets must have the same length")
        prompt_ids = [self._encode_prompt(p) for p in prompts]
        target_ids = [self.tokenizer(t, add_special_tokens=False).input_ids for t in targets]
        if any(not p and t for p, t in zip(prompt_ids, target_ids)):
            raise ValueError("an empty prompt cannot condition a target with this tokenizer (no BOS token)")
        heads, groups, whole = group_by_shared_prefix(prefixes, prompts, prompt_ids, self._encode_prompt)
        if whole:
            groups = {**groups, "": whole}  # "": no prefix to share, each pair a piece of its own
        # Pieces of at most one batch's streams, the longest first; a batch holds pieces up to the token budget.
        pieces: list[tuple[str, list[int]]] = []
        n_streams = 4 * self.max_batch_size
        for prefix, members in groups.items():
            members = sorted(members, key=lambda i: len(prompt_ids[i]) + len(target_ids[i]), reverse=True)
            step = 1 if not prefix else n_streams
            pieces += [(prefix, members[k: k + step]) for k in range(0, len(members), step)]
        pieces.sort(key=lambda piece: len(prompt_ids[piece[1][0]]) + len(target_ids[piece[1][0]]), reverse=True)
        results: list[TargetScore] = [TargetScore(0.0, len(t)) for t in target_ids]
        batch: list[tuple[str, list[int]]] = []
        tokens = 0
        for prefix, members in pieces:
            cost = len(heads.get(prefix, [])) + sum(len(prompt_ids[i]) + len(target_ids[i]) - len(heads.get(prefix, []))
                                                    for i in members)
            streams = sum(len(m) for _, m in batch) + len(members)
            if batch and (tokens + cost > self.max_batch_tokens or streams > n_streams):
                self._score_batch(batch, heads, prompt_ids, target_ids, results, progress)
                batch, tokens = [], 0
            batch.append((prefix, members))
            tokens += cost
        if batch:
            self._score_batch(batch, heads, prompt_ids, target_ids, results, progress)
        return results

    def _score_batch(self, batch: list[tuple[str, list[int]]], heads: dict[str, list[int]], prompt_ids: list[list[int]],
                     target_ids: list[list[int]], results: list[TargetScore], progress: ProgressFn | None) -> None:
        members = [(prefix, i) for prefix, group in batch for i in group]
        longest = max(len(prompt_ids[i]) + len(target_ids[i]) for _, i in members)
        self._context(len(members), longest)
        stream = {i: s for s, (_, i) in enumerate(members)}
        shared = [(prefix, group) for prefix, group in batch if prefix]
        if shared:  # each prefix into its first pair's stream, then copied into the others'
            self._decode([(t, p, stream[group[0]], False) for prefix, group in shared
                          for p, t in enumerate(heads[prefix])])
            memory = self._lib.llama_get_memory(self._ctx)
            for _, group in shared:
                for i in group[1:]:
                    # the whole stream (it holds the prefix only): llama.cpp copies between streams only whole
                    self._lib.llama_memory_seq_cp(memory, stream[group[0]], stream[i], -1, -1)
        entries, labels, owners = [], [], []
        for prefix, i in members:
            seq = prompt_ids[i] + target_ids[i]
            done, start = len(heads[prefix]) if prefix else 0, len(prompt_ids[i])
            for pos in range(done, len(seq)):
                # The state at a position predicts the next token: the target starts at ``start``.
                wants = start - 1 <= pos < len(seq) - 1
                entries.append((seq[pos], pos, stream[i], wants))
                if wants:
                    labels.append(seq[pos + 1])
                    owners.append(i)
        logits = self._decode(entries)
        if labels:
            peak = logits.max(axis=1, keepdims=True)
            log_norm = np.log(np.exp(logits - peak).sum(axis=1)) + peak[:, 0]
            picked = logits[np.arange(len(labels)), labels].astype(np.float64) - log_norm
            sums: dict[int, float] = {}
            for owner, value in zip(owners, picked.tolist()):
                sums[owner] = sums.get(owner, 0.0) + value
            for i, total in sums.items():
                results[i] = TargetScore(total, len(target_ids[i]))
        if progress:
            progress(len(members))

    # -- lifetime -----------------------------------------------------------------------------------

    def _free_context(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch, self._batch_shape = None, (0, 0)
        if self._ctx is not None:
            self._lib.llama_free(self._ctx)
            self._ctx, self._ctx_shape = None, (0, 0)

    def close(self) -> None:
        self._free_context()
        if getattr(self, "_model", None):
            self._lib.llama_model_free(self._model)
            self._model = None

    def __del__(self):  # noqa: D105 - frees the C memory when a backend is dropped without close()
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the library may already be gone
            pass
