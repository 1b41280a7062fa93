"""A BM25 index built in segments on disk, its memory flat in the corpus size, scoring exactly as bm25s's one-pass
build (the same score of every term in every document, the same files).

bm25s builds its index in memory from every document's tokens at once (its issue #5: no build in chunks), and its
peak grows with the corpus: the tokens, then three arrays of every (term, document) pair, then their sort. Here the
corpus is read once and each segment of :data:`SEGMENT_DOCS` documents written to disk as term ids; then:

1. the vocabulary is stemmed once, as bm25s stems it (:class:`~taskret.retrieval.bm25._TokenStream`'s rule);
2. the corpus statistics BM25 needs, each term's document frequency and the mean document length, are summed
   over the segments;
3. each segment's scores are computed with those global statistics by bm25s's own scoring functions, document by
   document as bm25s does, and written sorted by (term, document);
4. the segments are merged into bm25s's CSC arrays (``data``, ``indices``, ``indptr``) a range of terms at a time,
   written to memory-mapped files in their final place: the result loads with ``bm25s.BM25.load``.

What is held at once: the vocabulary, one segment, one range of the merge, and the per-term counts. A stopped build
starts again from the corpus: its first pass, tokenizing, is the cheap part (minutes at 10M documents, against hours
of encoding for the dense index, whose shards resume).
"""

from __future__ import annotations

import json
import shutil
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ..allocator import release_freed_memory

__all__ = ["SEGMENT_DOCS", "MERGE_PAIRS", "TOKEN_PATTERN", "CorpusStatistics", "NoTerms", "corpus_statistics", "term_ranges",
           "build_segmented"]

#: bm25s.tokenize's split (scikit-learn's CountVectorizer pattern), what :class:`~taskret.retrieval.bm25._TokenStream`
#: and the segments apply too.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"

#: Documents per segment: what one segment's arrays hold (~50 terms a document: ~10 MB of term ids, ~30 MB of scored
#: pairs at 200K).
SEGMENT_DOCS = 200_000
#: (term, document) pairs merged at a time: the merge's working set (~16 bytes a pair with its sort).
MERGE_PAIRS = 8_000_000


def _tokens_of(texts: Iterable[str], folder: Path, segment_docs: int) -> tuple[list[str], list[int]]:
    """Tokenize the corpus as bm25s does (lower-cased, its regex, English stop words out), writing each segment's
    raw term ids (``tokens-N.npy``) and document offsets (``offsets-N.npy``); the raw vocabulary in id order and each
    segment's document count."""
    import re

    from bm25s.stopwords import STOPWORDS_EN

    split, stop = re.compile(TOKEN_PATTERN).findall, set(STOPWORDS_EN)
    terms: dict[str, int] = {}
    counts: list[int] = []
    ids, offsets = array("i"), array("q", [0])

    def flush() -> None:
        nonlocal ids, offsets
        np.save(folder / f"tokens-{len(counts)}.npy", np.frombuffer(ids, dtype=np.int32))
        np.save(folder / f"offsets-{len(counts)}.npy", np.frombuffer(offsets, dtype=np.int64))
        counts.append(len(offsets) - 1)
        # new arrays, not the old ones emptied: an array a NumPy view still exports cannot be resized (a profiler or
        # debugger holding np.save's frame holds such a view)
        ids, offsets = array("i"), array("q", [0])

    for text in texts:
        ids.extend(terms.setdefault(token, len(terms)) for token in split(text.lower()) if token not in stop)
        offsets.append(len(ids))
        if len(offsets) - 1 == segment_docs:
            flush()
    if len(offsets) > 1 or not counts:
        flush()
    return list(terms), counts


def _segment(folder: Path, number: int, stem_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A segment's stemmed term ids and its document offsets."""
    tokens = np.load(folder / f"tokens-{number}.npy")
    return stem_of[tokens], np.load(folder / f"offsets-{number}.npy")


class _NpyFile:
    """A 1-D ``.npy`` file read and written by ranges through a file handle (no memory map: nothing stays resident)."""

    def __init__(self, path: Path, mode: str = "rb"):
        self.file = open(path, mode)
        version = np.lib.format.read_magic(self.file)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, self.dtype = read_header(self.file)
        self.size = int(np.prod(shape))
        self.offset = self.file.tell()

    @classmethod
    def create(cls, path: Path, dtype: np.dtype, size: int) -> "_NpyFile":
        """A new file of ``size`` items, its header written and its data to be written by :meth:`write`."""
        with open(path, "wb") as new:
            np.lib.format.write_array_header_1_0(new, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                       "fortran_order": False, "shape": (size,)})
            new.truncate(new.tell() + size * dtype.itemsize)
        return cls(path, "r+b")

    def read(self, low: int, high: int) -> np.ndarray:
        self.file.seek(self.offset + low * self.dtype.itemsize)
        return np.fromfile(self.file, dtype=self.dtype, count=high - low)

    def write(self, low: int, values: np.ndarray) -> None:
        self.file.seek(self.offset + low * self.dtype.itemsize)
        np.ascontiguousarray(values, dtype=self.dtype).tofile(self.file)

    def close(self) -> None:
        self.file.close()

    def positions(self, bounds: np.ndarray, chunk: int = MERGE_PAIRS) -> np.ndarray:
        """Where each of ``bounds`` goes in this file's values, sorted ascending (``np.searchsorted``, left),
        found in one pass over them read ``chunk`` at a time."""
        found = np.zeros(len(bounds), dtype=np.int64)
        for low in range(0, self.size, chunk):
            found += np.searchsorted(self.read(low, min(self.size, low + chunk)), bounds)
        return found


def term_ranges(indptr: np.ndarray, pairs: int) -> list[int]:
    """Bounds of consecutive term ranges of a CSC index (``indptr``: each term's first posting) whose postings fit in
    ``pairs`` each (at least one term a range, however many postings it has): ``[0, ..., n_terms]``."""
    n_terms = len(indptr) - 1
    ranges = [0]
    while ranges[-1] < n_terms:
        stop_term = int(np.searchsorted(indptr, indptr[ranges[-1]] + pairs, side="right")) - 1
        ranges.append(min(max(stop_term, ranges[-1] + 1), n_terms))
    return ranges


class NoTerms(ValueError):
    """Texts with no terms left after stop-word removal and stemming: nothing for BM25 to index."""


@dataclass
class CorpusStatistics:
    """What BM25's scores read of the whole corpus: its document count, total length (in terms) and each stem's
    document frequency. A shard indexed with its corpus's statistics scores every document as the index of the whole
    corpus does (Elasticsearch's ``dfs_query_then_fetch``), so the shards' merged top k is the whole index's. The
    statistics of shards add up (:meth:`merge`)."""

    n_docs: int
    total_length: int
    frequencies: dict[str, int]

    @property
    def average_length(self) -> float:
        # bm25s takes the mean of the lengths, an integer array: its float64 sum is exact below 2**53 terms, so
        # this division is the same number
        return self.total_length / self.n_docs

    def merge(self, other: "CorpusStatistics") -> "CorpusStatistics":
        frequencies = dict(self.frequencies)
        for stem, count in other.frequencies.items():
            frequencies[stem] = frequencies.get(stem, 0) + count
        return CorpusStatistics(self.n_docs + other.n_docs, self.total_length + other.total_length, frequencies)

    def save(self, path: Path) -> None:
        from ..io import write_json

        write_json(Path(path), {"format": STATISTICS_FORMAT, "n_docs": self.n_docs, "total_length": self.total_length,
                                "frequencies": self.frequencies}, compact=("frequencies",))

    @classmethod
    def load(cls, path: Path) -> "CorpusStatistics":
        from ..io import read_json

        data = read_json(Path(path))
        if not isinstance(data, dict) or data.get("format") != STATISTICS_FORMAT:
            raise ValueError(f"{path}: not a {STATISTICS_FORMAT} file")
        return cls(int(data["n_docs"]), int(data["total_length"]), {str(k): int(v) for k, v in data["frequencies"].items()})


STATISTICS_FORMAT = "taskret-bm25-statistics/1"


def _read_segments(texts: Iterable[str], work: Path, segment_docs: int):
    """Steps 1 and 2 (module docstring): the vocabulary, each raw term's stem id, the segments' document counts, and
    the counts BM25 reads: each stem's document frequency and every document's length."""
    import Stemmer

    raw_terms, counts = _tokens_of(texts, work, segment_docs)
    n_docs = sum(counts)
    if n_docs == 0:
        raise ValueError("no texts to index")
    stems = Stemmer.Stemmer("english").stemWords(raw_terms)
    vocab = {stem: n for n, stem in enumerate(dict.fromkeys(stems))}
    if not vocab:
        raise NoTerms(f"the {n_docs} texts have no terms after English stop-word removal and stemming")
    stem_of = np.fromiter((vocab[stem] for stem in stems), dtype=np.int32, count=len(stems))
    del raw_terms, stems
    frequencies = np.zeros(len(vocab), dtype=np.int64)
    lengths = np.empty(n_docs, dtype=np.int64)
    at = 0
    for number in range(len(counts)):
        tokens, offsets = _segment(work, number, stem_of)
        docs = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
        pairs = np.unique(docs * len(vocab) + tokens)  # each (document, term) once
        frequencies += np.bincount(pairs % len(vocab), minlength=len(vocab))
        lengths[at:at + len(offsets) - 1] = np.diff(offsets)
        at += len(offsets) - 1
        release_freed_memory()  # glibc keeps what a segment freed; handed back, the next one starts from less
    return vocab, stem_of, counts, frequencies, lengths


def corpus_statistics(texts: Iterable[str], work: Path, segment_docs: int = SEGMENT_DOCS) -> CorpusStatistics:
    """The :class:`CorpusStatistics` of ``texts`` (a shard's, to :meth:`~CorpusStatistics.merge` with the others'),
    read once through segments in ``work`` (removed)."""
    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        vocab, _, counts, frequencies, lengths = _read_segments(texts, work, segment_docs)
        return CorpusStatistics(sum(counts), int(lengths.sum()), dict(zip(vocab, frequencies.tolist())))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_segmented(texts: Iterable[str], out: Path, work: Path, k1: float = 1.5, b: float = 0.75,
                    segment_docs: int = SEGMENT_DOCS, merge_pairs: int = MERGE_PAIRS,
                    statistics: CorpusStatistics | None = None) -> dict:
    """Index ``texts`` (read once, in corpus order) into a bm25s folder ``out``, using ``work`` for the segments
    (removed at the end). ``statistics``: those of the whole corpus when ``texts`` are one shard of it (the shard's
    scores are then the whole index's); None: the texts' own. Returns ``{"num_docs", "vocab", "pairs",
    "segments"}``; raises ``ValueError`` when the texts have no terms, or when ``statistics`` lack one of their
    stems (statistics of another corpus)."""
    import bm25s
    from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer

    work, out = Path(work), Path(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        vocab, stem_of, counts, frequencies, lengths = _read_segments(texts, work, segment_docs)
        n_docs = sum(counts)
        average = lengths.mean()  # as bm25s takes it: the mean of an integer array
        del lengths
        idf_docs, idf_frequencies = n_docs, frequencies.tolist()
        if statistics is not None:
            missing = [stem for stem in vocab if stem not in statistics.frequencies]
            if missing or statistics.n_docs < n_docs:
                raise ValueError(f"the corpus statistics do not cover these texts (e.g. the term {missing[:1]}, or "
                                 f"{statistics.n_docs} documents against {n_docs} here): statistics of another corpus")
            # a NumPy float64, as the mean bm25s takes: with a Python float NumPy computes the float32 tf arrays'
            # factors in float32 (NEP 50), and the scores differ in their last bits
            idf_docs, average = statistics.n_docs, np.float64(statistics.average_length)
            idf_frequencies = [statistics.frequencies[stem] for stem in vocab]
        model = bm25s.BM25(k1=k1, b=b)
        idf = _build_idf_array(dict(enumerate(idf_frequencies)), idf_docs, _select_idf_scorer(model.idf_method),
                               dtype=model.dtype)
        tfc = _select_tfc_scorer(model.method)
        if model.method in model.methods_requiring_nonoccurrence:
            raise ValueError(f"bm25s method '{model.method}' needs a non-occurrence array: not built in segments")

        # 3. each segment's scores, (term, document) sorted
        per_term = np.zeros(len(vocab), dtype=np.int64)
        first_doc = 0
        for number in range(len(counts)):
            tokens, offsets = _segment(work, number, stem_of)
            terms_out, docs_out, scores_out = [], [], []
            for doc in range(len(offsets) - 1):
                doc_tokens = tokens[offsets[doc]:offsets[doc + 1]].tolist()
                # bm25s's own steps for one document (_build_scores_and_indices_for_matrix), so the floats agree
                counter = Counter(doc_tokens)
                terms = np.array(list(counter.keys()), dtype=np.int32)
                frequency = np.array(list(counter.values()), dtype=model.dtype)
                scores = idf[terms] * tfc(tf_array=frequency, l_d=len(doc_tokens), l_avg=average, k1=k1, b=b,
                                          delta=model.delta)
                terms_out.append(terms)
                docs_out.append(np.full(len(terms), first_doc + doc, dtype=np.int32))
                scores_out.append(scores.astype(model.dtype))
            terms_all = np.concatenate(terms_out) if terms_out else np.zeros(0, np.int32)
            order = np.argsort(terms_all, kind="stable")  # documents stay ascending within a term
            terms_all = terms_all[order]
            np.save(work / f"terms-{number}.npy", terms_all)
            np.save(work / f"docs-{number}.npy", np.concatenate(docs_out)[order] if docs_out else np.zeros(0, np.int32))
            np.save(work / f"scores-{number}.npy",
                    np.concatenate(scores_out)[order] if scores_out else np.zeros(0, model.dtype))
            per_term += np.bincount(terms_all, minlength=len(vocab))
            (work / f"tokens-{number}.npy").unlink()
            first_doc += len(offsets) - 1
            del terms_out, docs_out, scores_out, terms_all, order
            release_freed_memory()  # ~200K small arrays a segment: freed heap glibc would keep

        # 4. the merge, a range of terms at a time, into bm25s's files. Read and written through file handles, not
        # memory maps: every page of a map that is touched counts in the process's resident memory until it is
        # unmapped, so mapped segments and outputs grew the build's RSS with the corpus (9.3 GiB at 10M documents).
        out.mkdir(parents=True, exist_ok=True)
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(per_term, out=indptr[1:])
        total = int(indptr[-1])
        ranges = term_ranges(indptr, merge_pairs)
        bounds = np.asarray(ranges)
        segments = [(_NpyFile(work / f"terms-{n}.npy"), _NpyFile(work / f"docs-{n}.npy"),
                     _NpyFile(work / f"scores-{n}.npy")) for n in range(len(counts))]
        data = _NpyFile.create(out / "data.csc.index.npy", np.dtype(model.dtype), total)
        indices = _NpyFile.create(out / "indices.csc.index.npy", np.dtype(np.int32), total)
        try:
            # Where each range starts in each segment, read in one pass over its terms. (A memory-mapped searchsorted
            # per range faulted in a few pages each time, and their neighbours with them: at 3M documents 0.5 GiB of
            # mapped pages stayed resident through the merge, ~160 bytes a document: bm25_build_memory.py.)
            starts = [terms.positions(bounds) for terms, _, _ in segments]
            for number, start_term in enumerate(ranges[:-1]):
                parts = []
                for (terms, docs, scores), at in zip(segments, starts):
                    low, high = int(at[number]), int(at[number + 1])
                    parts.append((terms.read(low, high), docs.read(low, high), scores.read(low, high)))
                order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")  # documents stay ascending
                low = int(indptr[start_term])
                indices.write(low, np.concatenate([p[1] for p in parts])[order])
                data.write(low, np.concatenate([p[2] for p in parts])[order])
        finally:
            for handle in (data, indices, *(f for segment in segments for f in segment)):
                handle.close()
        del segments
        np.save(out / "indptr.csc.index.npy", indptr)
        vocab[""] = len(vocab)  # bm25s's empty token, which a query of unknown words scores against
        (out / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        params = {"k1": k1, "b": b, "delta": model.delta, "method": model.method, "idf_method": model.idf_method,
                  "dtype": model.dtype, "int_dtype": model.int_dtype, "num_docs": n_docs,
                  "version": bm25s.__version__, "backend": model.backend}
        (out / "params.index.json").write_text(json.dumps(params, indent=4))
        return {"num_docs": n_docs, "vocab": len(vocab) - 1, "pairs": total, "segments": len(counts)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
