"""``fusion:MODEL``: BM25 and a dense encoder fused over the documents given, as a reranker or a teacher.

A hybrid first stage (:mod:`taskret.retrieval.hybrid`) fuses whole-corpus rankings; this backend scores any
list of (query, document) pairs the same way, so the hybrid's judgement can rerank a list or *teach* a
student encoder (:func:`taskret.tart.distil.train_tart_distil`): on SciFact BM25 (68.6 NDCG@10) beats
MiniLM (64.5) and their fusion beats both (71.4), so a dense model that learns to rank like the fusion
learns the lexical matching it lacks (as SPAR's dense lexical model does, Chen et al. 2022).

For each query, over the documents it is scored against in one call:

- BM25 (bm25s, Okapi k1=1.5, b=0.75, English stop words, Snowball stemming) with its document statistics
  taken from the distinct documents of the call (for distillation: every candidate of every training row,
  a pool of tens of thousands of texts), and the cosine of the encoder's query and document vectors;
- each min-max normalised to [0, 1] over the query's documents (a query scored against one document, or
  a component constant over them, gets 1 there), then ``weight * bm25 + (1 - weight) * cosine`` (with several
  encoders, each cosine with its own share).

Scores are therefore relative to the other documents scored for the same query in the same call, as a
reranker's are used; they are no absolute relevance. ``weight`` (BM25's share) is the hybrid's, chosen on
berri-lite dev tasks (``taskret tart tune-weight``; 0.4 for BM25 + MiniLM). The backend reads bare
queries (``use_instruction = False``): the words of an instruction are noise to BM25.

Spec: ``fusion:minilm-l6`` or ``fusion:minilm-l6?weight=0.4`` (any ``dense:`` encoder name or folder), or
several encoders with every share, BM25's first: ``fusion:minilm-l6+e5-small?weights=0.2,0.3,0.5`` (the
three-way hybrid's shares, chosen on berri-lite dev tasks) for a teacher that knows more than one encoder.
``&max_length=N`` cuts every text each encoder reads to N tokens (say, the student's length: e5's engine
otherwise reads long documents whole, at a few passages a second on 2 cores).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import Reranker

__all__ = ["FusionReranker", "fusion_max_length", "parse_fusion_spec"]

PROGRESS_FROM = 2048  # texts in one encoding call from which a progress bar is shown
DEFAULT_WEIGHT = 0.4  # BM25's share in BM25 + MiniLM, chosen on berri-lite dev tasks (benchmarks/documents/tart_berri.py)


def _number(value: str) -> float:
    return float(value)


_number.__name__ = "number"


def _parse(spec: str) -> tuple[list[str], list[float], int | None]:
    """(encoders, every share with BM25's first, max_length) of a fusion spec; see :func:`parse_fusion_spec`."""
    from ..retrieval.hybrid import _numbers, parse_spec_options, token_count

    names, _, query = str(spec).partition("?")
    encoders = [name.strip() for name in names.split("+")]
    if not all(encoders):
        raise ValueError(f"fusion reranker '{spec}': name an encoder, e.g. fusion:minilm-l6 "
                         "(several: fusion:minilm-l6+e5-small)")
    options = parse_spec_options("fusion reranker", spec, query,
                                 {"weight": _number, "weights": _numbers, "max_length": token_count(8)})
    shares = options.get("weights")
    if shares is None:
        bm25 = options.get("weight", DEFAULT_WEIGHT)
        if not 0.0 <= bm25 <= 1.0:
            raise ValueError(f"fusion reranker '{spec}': weight (BM25's share) must be in [0, 1], got {bm25}")
        shares = [bm25] + [(1.0 - bm25) / len(encoders)] * len(encoders)
    if len(shares) != len(encoders) + 1:
        raise ValueError(f"fusion reranker '{spec}': weights needs {len(encoders) + 1} shares (BM25's, then each "
                         f"encoder's), got {len(shares)}")
    if any(w < 0 for w in shares) or abs(sum(shares) - 1.0) > 1e-6:
        raise ValueError(f"fusion reranker '{spec}': shares must be >= 0 and sum to 1, got {shares}")
    return encoders, shares, options.get("max_length")


def parse_fusion_spec(spec: str) -> tuple[list[str], list[float]]:
    """``"minilm-l6?weight=0.4"`` -> (["minilm-l6"], [0.4, 0.6]): the encoders and every component's share,
    BM25's first. ``"minilm-l6+e5-small?weights=0.2,0.3,0.5"`` names several encoders and all shares;
    ``weight=W`` gives BM25's share and splits the rest equally among the encoders (default W: 0.4).
    (``max_length=N``, the encoders' token cap, is read by :func:`fusion_max_length`.)"""
    encoders, shares, _ = _parse(spec)
    return encoders, shares


def fusion_max_length(spec: str) -> int | None:
    """The ``max_length=N`` of a fusion spec (tokens each encoder reads of a text), or None."""
    return _parse(spec)[2]


class FusionReranker(Reranker):
    """BM25 + one or more dense encoders over the pairs of one call, each min-max normalised per query and
    mixed with ``weights`` (BM25's share first). ``weight`` overrides BM25's share of a spec with one encoder.
    ``max_seq_length`` cuts the encoders' inputs (None: each encoder's own)."""

    use_instruction = False

    def __init__(self, spec: str = "minilm-l6", weight: float | None = None, batch_size: int = 64,
                 device: str | None = None, max_seq_length: int | None = None):
        self.encoder_names, self.weights, spec_length = _parse(spec)
        max_seq_length = spec_length if max_seq_length is None else max_seq_length
        if weight is not None:
            if len(self.encoder_names) > 1:
                raise ValueError(f"weight= is BM25's share beside one encoder; give '{spec}' its weights=...")
            if not 0.0 <= float(weight) <= 1.0:
                raise ValueError(f"weight (BM25's share) must be in [0, 1], got {weight}")
            self.weights = [float(weight), 1.0 - float(weight)]
        self.batch_size, self.device, self.max_seq_length = batch_size, device, max_seq_length
        if len(self.encoder_names) == 1:
            self.name = f"fusion:{self.encoder_names[0]}?weight={self.weight:g}"
        else:
            self.name = f"fusion:{'+'.join(self.encoder_names)}?weights={','.join(f'{w:g}' for w in self.weights)}"
        if max_seq_length is not None:
            self.name += f"&max_length={max_seq_length}"
        self._encoders: dict[str, object] = {}

    @property
    def weight(self) -> float:
        """BM25's share."""
        return self.weights[0]

    @property
    def encoder_name(self) -> str:
        """The first (with one encoder, the only) encoder."""
        return self.encoder_names[0]

    def _encode(self, name: str, texts: list[str], queries: bool) -> np.ndarray:
        if name not in self._encoders:
            from ..retrieval.dense import load_encoder

            encoder = load_encoder(name, self.device)
            if self.max_seq_length is not None:  # a sentence-transformers model or the e5 engine: both cut there
                encoder.max_seq_length = self.max_seq_length
            self._encoders[name] = encoder
        encoder = self._encoders[name]
        encode = encoder.encode_query if queries else encoder.encode_document
        # A distillation teacher encodes tens of thousands of texts in one call: show that it is moving.
        vectors = encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=len(texts) >= PROGRESS_FROM)
        return np.asarray(vectors, dtype=np.float32)

    def _bm25(self, queries: list[str], docs: list[str], groups: dict[int, list[int]],
              doc_of: list[int]) -> np.ndarray:
        """BM25 of each pair: ``groups`` maps a query's row to its pairs' positions, ``doc_of`` a pair to its doc."""
        import bm25s

        from ..retrieval.bm25 import _quiet_bm25s, _tokenize

        _quiet_bm25s()
        out = np.zeros(len(doc_of), dtype=np.float64)
        index = bm25s.BM25(k1=1.5, b=0.75)
        doc_tokens = _tokenize(docs)
        if not doc_tokens.vocab:  # no content word in any document: BM25 has nothing to say
            return out
        index.index(doc_tokens, show_progress=False)
        query_tokens = _tokenize(queries, return_ids=False)
        for q, positions in groups.items():
            # get_scores reads a query's tokens against the whole pool; unknown words score nothing.
            known = [t for t in query_tokens[q] if t in index.vocab_dict]
            if known:
                out[positions] = index.get_scores(known)[[doc_of[i] for i in positions]]
        return out

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        from ..retrieval.hybrid import fuse_convex

        if not pairs:
            return np.zeros(0, dtype=np.float32)
        queries = list(dict.fromkeys(q for q, _ in pairs))
        docs = list(dict.fromkeys(d for _, d in pairs))
        q_row, d_row = {q: i for i, q in enumerate(queries)}, {d: i for i, d in enumerate(docs)}
        query_of, doc_of = [q_row[q] for q, _ in pairs], [d_row[d] for _, d in pairs]
        groups: dict[int, list[int]] = {}
        for i, q in enumerate(query_of):
            groups.setdefault(q, []).append(i)
        components = [self._bm25(queries, docs, groups, doc_of) if self.weight > 0 else np.zeros(len(pairs))]
        for name, share in zip(self.encoder_names, self.weights[1:]):
            if share > 0:
                q_vec, d_vec = self._encode(name, queries, True), self._encode(name, docs, False)
                components.append(np.einsum("ij,ij->i", q_vec[query_of], d_vec[doc_of]).astype(np.float64))
            else:
                components.append(np.zeros(len(pairs)))
        fused = np.zeros(len(pairs), dtype=np.float32)
        for positions in groups.values():  # the hybrid's own per-query min-max convex combination
            by_position = fuse_convex([positions] * len(components), [c[positions] for c in components],
                                      self.weights)
            fused[positions] = [by_position[i] for i in positions]
        return fused
