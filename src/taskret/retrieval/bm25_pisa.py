"""BM25's top k found by PISA's MaxScore over bm25s's own scores, then ranked exactly as bm25s ranks them (issue 78).

At 10M documents bm25s scores every document a query touches (a float per document, ~17 ms a query on one thread),
where PISA's MaxScore skips the documents that cannot reach the top k (5.4 ms, ``benchmarks/results/engines.json``).
PISA with its own analyser and BM25 would rank otherwise (its idf differs, its stemmer and stop words too), so here
PISA indexes *bm25s's scores*: each posting of the bm25s index (term, document, score) becomes a PISA posting whose
frequency is the score quantized to :data:`IMPACT_BITS` bits, searched with PISA's ``quantized`` scorer (a query's
score is the sum of its terms' impacts, a term counted as often as the query repeats it, as bm25s sums). The terms are
bm25s's term ids (zero-padded, so PISA's sorted lexicon keeps bm25s's order) and the documents its rows: the index is
derived from the bm25s arrays in one pass over them (term by term, in chunks), then compressed by PISA
(``block_simdbp``, with MaxScore's per-block upper bounds).

**In parts.** PISA compresses from its staged postings (8 bytes each), which it maps whole: at 10M documents 3 GB
resident in the build's last step, whatever else the build holds. So the index is made in document-range parts of
about :data:`PART_POSTINGS` postings, each a PISA index of its own over rows ``first:first + rows`` (its documents
named by their row), written in the same one pass and compressed one after another: the build's memory stays flat in
the corpus. All parts' impacts share one ``unit``, so their sums are the whole index's; a query searches each part
``depth`` deep and takes every part's candidates (:class:`Candidates`).

PISA's candidates are checked, not trusted: each one's exact bm25s score is recomputed from the bm25s index (the
query's terms' postings, searched for the candidates, summed in float32 in the query's order as bm25s sums them: the
same float) and the list is ordered by (score, row) as :meth:`~taskret.retrieval.bm25.BM25Retriever._ranked` orders.
Quantizing moves a score by at most one ``unit`` per query term, so a document left out scores at most
``(the highest sum a part left out + query terms) * unit`` (a part that returned ``depth`` rows left out none above
its lowest); when the k-th exact score is above that the top k is certain, and otherwise the query is searched deeper
(x4) until it is, or until every matching document is in. The result is therefore bm25s's ranking itself, and shards
built with a corpus's statistics (whose bm25s scores carry them) keep it. Files: ``FOLDER`` beside the ``bm25s``
folder, written to a temporary name and renamed (whole or absent), its ``pisa.json`` recording the quantization and
the parts (an index written before the parts, ``format`` 1, is one PISA index in the folder itself, and is read so).
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ..allocator import release_freed_memory
from .bm25_segments import term_ranges

#: the folder, inside a BM25 index's folder, that holds its PISA index
FOLDER = "pisa"
META = "pisa.json"
#: bits of a quantized score: at 16 the quantization error (half a unit, of 1/65,535 of the largest score) reorders
#: only near-ties, which the exact re-scoring settles; fewer bits compress better but leave more near-ties to search
IMPACT_BITS = 16
ENCODING = "block_simdbp"
BLOCK_SIZE = 64
ALGORITHM = "maxscore"
#: postings read from the bm25s arrays and written at a time (~4M: ~110 MB of buffers, rows, impacts and their order
#: among the parts)
CHUNK_POSTINGS = 1 << 22
#: postings a part of the PISA index holds (about: parts are equal row ranges). PISA compresses a part from its staged
#: postings, 8 bytes each, which it maps whole (module docstring): this bounds a build's memory whatever the corpus.
#: At 10M documents (400M postings, benchmarks/results/bm25_pisa_parts.json, 2-core Xeon) one part peaked at 3.52 GiB,
#: 2^27 at 1.19, 2^26 (7 parts) at 0.84, 2^25 at 0.65; chosen on 500 queries among those within 1.5x the 1M build's
#: 0.87 GiB (the fastest), held out on 500: 1.28x one part's time a query (1.26-1.30), p50 9.5 against 7.8 ms
PART_POSTINGS = 1 << 26


def pisa_available() -> bool:
    try:
        from pyterrier_pisa import _pisathon  # noqa: F401
    except ImportError:
        return False
    return True


def _pisathon():
    try:
        from pyterrier_pisa import _pisathon
    except ImportError:
        raise ImportError("bm25 backend 'pisa' needs pyterrier-pisa: pip install 'taskret[pisa]'") from None
    if hasattr(_pisathon, "log_level"):  # quiet its per-percent progress lines where the build has the call
        _pisathon.log_level(0)
    return _pisathon


@contextmanager
def _output_to(log: Path):
    """PISA's C++ prints its progress (a line per percent) and file names to the process's stdout and stderr: sent to
    ``log`` while it builds, and its tail raised with the error if the build fails."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            yield
        except Exception as error:
            tail = Path(log).read_text(errors="replace")[-2000:] if Path(log).is_file() else ""
            raise RuntimeError(f"PISA failed ({error}); its log ends:\n{tail}") from error
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _term_name(width: int):
    return lambda term: str(term).zfill(width)


def _release(array: np.ndarray, start: int, stop: int) -> None:
    """Drop items ``start:stop`` of a read-only memory-mapped array (a ``np.memmap`` as ``np.load`` maps it) from
    this process's resident memory: a pass over a mapped index otherwise keeps every page it read (at 10M documents
    the bm25s arrays' 3.2 GB stayed resident through PISA's compression, which maps its own 3 GB: 6.5 GiB peak). The
    page cache keeps the pages; a later read maps them again. Anything else (an array in memory) is left alone."""
    mapped = getattr(array, "_mmap", None)
    if mapped is None or getattr(array, "mode", None) != "r" or stop <= start:
        return
    at = array.offset % mmap.ALLOCATIONGRANULARITY  # where the array's data begins in its mapping
    first = (at + start * array.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
    last = min(len(mapped), -(-(at + stop * array.itemsize) // mmap.PAGESIZE) * mmap.PAGESIZE)
    mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def part_bounds(num_docs: int, n_postings: int, part_postings: int) -> list[int]:
    """First rows of the document-range parts of an index of ``num_docs`` documents and ``n_postings`` postings whose
    parts hold about ``part_postings`` postings each (equal row ranges; one part at most as many as documents), and
    ``num_docs`` after the last: ``[0, ..., num_docs]``."""
    parts = max(1, min(num_docs, -(-n_postings // max(1, part_postings))))
    return [round(p * num_docs / parts) for p in range(parts + 1)]


class _PartWriter:
    """One part's staged PISA collection (rows ``first:stop`` of the index, stored as PISA documents ``0:stop-first``
    and named by their index row): its postings added a chunk of terms at a time, then compressed."""

    def __init__(self, folder: Path, first: int, stop: int, name):
        self.folder, self.first, self.stop, self.name, self.postings = folder, first, stop, name, 0
        folder.mkdir(parents=True)
        self.docs, self.freqs = open(folder / "inv.docs", "wb"), open(folder / "inv.freqs", "wb")
        self.terms = open(folder / "fwd.terms", "w")
        self.docs.write(np.array([1, stop - first], dtype=np.uint32).tobytes())

    def add(self, first_term: int, lengths: np.ndarray, rows: np.ndarray, impacts: np.ndarray) -> None:
        """The postings of terms ``first_term:first_term + len(lengths)`` in this part (``lengths`` each, ``rows``
        and ``impacts`` in term order), as PISA reads them: ``[length, values...]`` per term that has any here (PISA
        aborts on an empty list; a term without any adds nothing to a score, and its name is left out)."""
        present = lengths > 0
        spans = lengths[present].astype(np.int64) + 1
        heads = np.cumsum(spans) - spans  # where each term's [length, values...] begins
        out = np.empty(len(rows) + len(heads), dtype=np.uint32)
        keep = np.ones(len(out), dtype=bool)
        keep[heads] = False
        out[heads] = lengths[present]
        out[keep] = rows - self.first
        self.docs.write(out.tobytes())
        out[keep] = impacts
        self.freqs.write(out.tobytes())
        self.terms.write("".join(self.name(t) + "\n" for t in np.flatnonzero(present) + first_term))
        self.postings += len(rows)

    def close(self) -> None:
        for file in (self.docs, self.freqs, self.terms):
            file.close()

    def compress(self, pisathon) -> None:
        self.close()
        release_freed_memory()  # the pass's chunk buffers, kept by glibc: PISA's own buffers would come on top
        n = self.stop - self.first
        with open(self.folder / "inv.sizes", "wb") as sizes:  # document lengths: the quantized scorer reads none
            sizes.write(np.array([n], dtype=np.uint32).tobytes() + np.ones(n, dtype=np.uint32).tobytes())
        with open(self.folder / "fwd.documents", "w") as documents:
            for s in range(self.first, self.stop, CHUNK_POSTINGS):
                documents.write("".join(f"{row}\n" for row in range(s, min(self.stop, s + CHUNK_POSTINGS))))
        with _output_to(self.folder / "build.log"):
            pisathon.build_binlex(str(self.folder / "fwd.terms"), str(self.folder / "fwd.termlex"))
            pisathon.build_binlex(str(self.folder / "fwd.documents"), str(self.folder / "fwd.doclex"))
            # compresses the postings and computes the block upper bounds, once
            pisathon.prepare_index(pisathon.RetrievalContext(), str(self.folder), ENCODING, "quantized", "",
                                   block_size=BLOCK_SIZE, quantize=0)
        for staged in ("inv.docs", "inv.freqs", "inv.sizes", "fwd.terms", "fwd.documents"):
            (self.folder / staged).unlink()  # read by the compression only


def build(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int, folder: Path,
          part_postings: int | None = None) -> None:
    """Write the PISA index of a bm25s index's arrays (``data``: each posting's score, ``indices``: its row,
    ``indptr``: each term's postings; may be memory-mapped) into ``folder`` (replaced; written under a temporary
    name and renamed), in document-range parts of about ``part_postings`` postings (:data:`PART_POSTINGS` unless
    given; module docstring). Raises ValueError if a term's rows are not strictly increasing (PISA needs them so)."""
    pisathon = _pisathon()
    # what the build before freed and glibc kept (at 1M documents 0.37 of the process's 0.52 GiB of heap): the parts
    # are compressed on top of whatever stays resident
    release_freed_memory()
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    n_terms, n_postings = len(indptr) - 1, int(indptr[-1])
    top = 0.0
    for s in range(0, n_postings, CHUNK_POSTINGS):
        top = max(top, float(data[s:s + CHUNK_POSTINGS].max(initial=0.0)))
        _release(data, s, s + CHUNK_POSTINGS)
    unit = top / (2 ** IMPACT_BITS - 1) if top > 0 else 1.0
    width = len(str(max(n_terms - 1, 0)))
    bounds = part_bounds(num_docs, n_postings, PART_POSTINGS if part_postings is None else part_postings)
    parts = [_PartWriter(tmp / f"part-{p:03d}", first, stop, _term_name(width))
             for p, (first, stop) in enumerate(zip(bounds, bounds[1:]))]
    try:
        chunks = term_ranges(indptr, CHUNK_POSTINGS)  # whole terms, about CHUNK_POSTINGS postings at a time
        for first, last in zip(chunks, chunks[1:]):
            start, stop = int(indptr[first]), int(indptr[last])
            lengths = np.diff(np.asarray(indptr[first:last + 1], dtype=np.int64))
            rows = np.asarray(indices[start:stop], dtype=np.int64)
            same_term = np.repeat(np.arange(last - first, dtype=np.int32), lengths)
            if np.any((rows[1:] <= rows[:-1]) & (same_term[1:] == same_term[:-1])):
                raise ValueError("bm25 index: a term's document rows are not strictly increasing (PISA needs them so)")
            impacts = np.maximum(1, np.rint(np.asarray(data[start:stop], dtype=np.float64) / unit)).astype(np.uint32)
            _release(indices, start, stop)
            _release(data, start, stop)
            if len(parts) == 1:
                parts[0].add(first, lengths, rows, impacts)
                continue
            # each part's postings, still in (term, row) order: a stable sort by part keeps the order within it
            part_of = np.searchsorted(np.asarray(bounds[1:-1]), rows, side="right").astype(np.int16)
            order = np.argsort(part_of, kind="stable")
            cuts = np.searchsorted(part_of[order], np.arange(len(parts) + 1))
            for part, a, b in zip(parts, cuts, cuts[1:]):
                picked = order[a:b]
                part.add(first, np.bincount(same_term[picked], minlength=last - first), rows[picked], impacts[picked])
        for part in parts:
            if part.postings:  # a part whose documents have no terms at all has nothing to search
                part.compress(pisathon)
    except BaseException:
        for part in parts:
            part.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    kept = [{"folder": part.folder.name, "first_row": part.first, "rows": part.stop - part.first,
             "postings": part.postings} for part in parts if part.postings]
    for part in parts:
        if not part.postings:
            part.close()
            shutil.rmtree(part.folder)
    (tmp / META).write_text(json.dumps({"format": 2, "impact_bits": IMPACT_BITS, "unit": unit, "num_docs": num_docs,
                                        "num_terms": n_terms, "term_width": width, "encoding": ENCODING,
                                        "block_size": BLOCK_SIZE, "algorithm": ALGORITHM, "parts": kept}))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def built(folder: Path) -> bool:
    return (Path(folder) / META).is_file()


class Candidates(NamedTuple):
    """A search's candidate rows and their impact sums, and ``left_out_at_most``: the highest impact sum a matching
    row not among them can have (``None``: every matching row is among them)."""

    rows: np.ndarray
    sums: np.ndarray
    left_out_at_most: float | None


class PisaCandidates:
    """A PISA index made by :func:`build`, each of its parts searched for a query's ``depth`` best rows by quantized
    score (the parts' impacts share one unit: their sums are the index's own)."""

    def __init__(self, folder: Path):
        self.pisathon = _pisathon()
        self.folder = Path(folder)
        meta = json.loads((self.folder / META).read_text())
        self.unit = float(meta["unit"])
        self.name = _term_name(int(meta["term_width"]))
        # format 1 (one index in the folder itself) was written before the parts
        folders = [self.folder / part["folder"] for part in meta["parts"]] if "parts" in meta else [self.folder]
        self.contexts = []
        for part in folders:
            context = self.pisathon.RetrievalContext()
            self.pisathon.prepare_index(context, str(part), meta["encoding"], "quantized", "",
                                        block_size=int(meta["block_size"]), quantize=0)
            self.contexts.append(context)

    @property
    def parts(self) -> int:
        return len(self.contexts)

    def search(self, term_ids: Sequence[int], depth: int) -> Candidates:
        """Each part's ``depth`` rows of highest impact sum for a query of bm25s term ids (repeated as the query
        repeats them), with the highest sum a row left out can have."""
        counts: dict[str, float] = {}
        for term in term_ids:
            counts[self.name(term)] = counts.get(self.name(term), 0.0) + 1.0
        qidx, docnos = np.empty(depth, dtype=np.int32), np.empty(depth, dtype=object)
        ranks, sums = np.empty(depth, dtype=np.int32), np.empty(depth, dtype=np.float32)
        found_rows, found_sums, left_out = [], [], None
        for context in self.contexts:
            found = self.pisathon.retrieve(context, ALGORITHM, [(0, counts)], k=depth, threads=1, query_weighted=1,
                                           pretokenised=1, result_qidxs=qidx, result_docnos=docnos,
                                           result_ranks=ranks, result_scores=sums)
            found_rows.append(np.array([int(d) for d in docnos[:found]], dtype=np.int64))
            found_sums.append(sums[:found].copy())
            if found == depth:  # the part's rows left out have at most its lowest sum
                left_out = max(float(sums[found - 1]), left_out if left_out is not None else float("-inf"))
        if len(self.contexts) == 1:
            return Candidates(found_rows[0], found_sums[0], left_out)
        return Candidates(np.concatenate(found_rows), np.concatenate(found_sums), left_out)


def exact_scores(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, term_ids: Sequence[int],
                 rows: np.ndarray) -> np.ndarray:
    """bm25s's scores of ``rows`` for a query of ``term_ids``: each term's postings searched for the rows and its
    scores added in the query's order, in float32, as bm25s adds them (so the floats are bm25s's own)."""
    scores = np.zeros(len(rows), dtype=data.dtype)
    for term in term_ids:
        start, stop = int(indptr[term]), int(indptr[term + 1])
        column = indices[start:stop]
        at = np.searchsorted(column, rows)
        inside = at < len(column)
        hit = np.zeros(len(rows), dtype=bool)
        hit[inside] = column[at[inside]] == rows[inside]
        scores[hit] += data[start + at[hit]]
    return scores


def certain(kth_score: float, left_out_at_most: float, n_terms: int, unit: float) -> bool:
    """Whether no document outside a candidate list can reach ``kth_score`` (the list's k-th exact score): one left
    out has an impact sum of at most ``left_out_at_most`` (:class:`Candidates`), so an exact score of at most
    ``(left_out_at_most + n_terms) * unit`` (each term's impact within one unit of its score). Equality is not
    certain: a left-out document of equal score and lower row would rank first."""
    bound = (float(left_out_at_most) + n_terms) * unit
    return float(kth_score) > bound * (1 + 1e-6)
