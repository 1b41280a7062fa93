"""BM25's top k found by PISA's MaxScore over bm25s's own scores, then ranked exactly as bm25s ranks them (issue 78).

At 10M documents bm25s scores every document a query touches (a float per document, ~17 ms a query on one thread),
where PISA's MaxScore skips the documents that cannot reach the top k (5.4 ms, ``benchmarks/results/engines.json``).
PISA with its own analyser and BM25 would rank otherwise (its idf differs, its stemmer and stop words too), so here
PISA indexes *bm25s's scores*: each posting of the bm25s index (term, document, score) becomes a PISA posting whose
frequency is the score quantized to :data:`IMPACT_BITS` bits, searched with PISA's ``quantized`` scorer (a query's
score is the sum of its terms' impacts, a term counted as often as the query repeats it, as bm25s sums). The terms are
bm25s's term ids (zero-padded, so PISA's sorted lexicon keeps bm25s's order) and the documents its rows: the index is
derived from the bm25s arrays in one pass over them (term by term, in chunks: memory flat in the corpus), then
compressed by PISA (``block_simdbp``, with MaxScore's per-block upper bounds).

PISA's top is a candidate list: each candidate's exact bm25s score is recomputed from the bm25s index (the query's
terms' postings, searched for the candidates, summed in float32 in the query's order as bm25s sums them: the same
float) and the list is ordered by (score, row) as :meth:`~taskret.retrieval.bm25.BM25Retriever._ranked` orders.
Quantizing moves a score by at most one ``unit`` per query term, so a document PISA left out scores at most
``(lowest candidate's impact sum + query terms) * unit``; when the k-th exact score is above that the top k is
certain, and otherwise the query is searched deeper (x4) until it is, or until every matching document is in. The
result is therefore bm25s's ranking itself, and shards built with a corpus's statistics (whose bm25s scores carry
them) keep it. Files: ``FOLDER`` beside the ``bm25s`` folder, written to a temporary name and renamed (whole or
absent), its ``pisa.json`` recording the quantization.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np

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
#: postings read from the bm25s arrays and written at a time (~16M: ~128 MB of buffers)
CHUNK_POSTINGS = 1 << 24


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


def build(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int, folder: Path) -> None:
    """Write the PISA index of a bm25s index's arrays (``data``: each posting's score, ``indices``: its row,
    ``indptr``: each term's postings; may be memory-mapped) into ``folder`` (replaced; written under a temporary
    name and renamed). Raises ValueError if a term's rows are not strictly increasing (PISA needs them so)."""
    pisathon = _pisathon()
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
    name = _term_name(width)
    with open(tmp / "inv.docs", "wb") as docs, open(tmp / "inv.freqs", "wb") as freqs, \
            open(tmp / "fwd.terms", "w") as terms:
        docs.write(np.array([1, num_docs], dtype=np.uint32).tobytes())
        bounds = term_ranges(indptr, CHUNK_POSTINGS)  # whole terms, about CHUNK_POSTINGS postings at a time
        for first, last in zip(bounds, bounds[1:]):
            start, stop = int(indptr[first]), int(indptr[last])
            lengths = np.diff(np.asarray(indptr[first:last + 1], dtype=np.int64))
            rows = np.asarray(indices[start:stop], dtype=np.int64)
            same_term = np.repeat(np.arange(last - first, dtype=np.int32), lengths)
            if np.any((rows[1:] <= rows[:-1]) & (same_term[1:] == same_term[:-1])):
                shutil.rmtree(tmp, ignore_errors=True)
                raise ValueError("bm25 index: a term's document rows are not strictly increasing (PISA needs them so)")
            impacts = np.maximum(1, np.rint(np.asarray(data[start:stop], dtype=np.float64) / unit)).astype(np.uint32)
            # [length, values...] per term that has postings (PISA aborts on an empty list; a term without any adds
            # nothing to a score, and its name is left out of the lexicon): each length where the term's values begin
            present = lengths > 0
            heads = (np.asarray(indptr[first:last], dtype=np.int64)[present] - start) + np.arange(int(present.sum()))
            out = np.empty(stop - start + len(heads), dtype=np.uint32)
            keep = np.ones(len(out), dtype=bool)
            keep[heads] = False
            out[heads] = lengths[present]
            out[keep] = rows
            docs.write(out.tobytes())
            out[keep] = impacts
            freqs.write(out.tobytes())
            _release(indices, start, stop)
            _release(data, start, stop)
            terms.write("".join(name(t) + "\n" for t in np.flatnonzero(present) + first))
    with open(tmp / "inv.sizes", "wb") as sizes:  # document lengths: the quantized scorer reads none
        sizes.write(np.array([num_docs], dtype=np.uint32).tobytes())
        for s in range(0, num_docs, CHUNK_POSTINGS):
            sizes.write(np.ones(min(CHUNK_POSTINGS, num_docs - s), dtype=np.uint32).tobytes())
    with open(tmp / "fwd.documents", "w") as documents:
        for s in range(0, num_docs, CHUNK_POSTINGS):
            documents.write("".join(f"{row}\n" for row in range(s, min(num_docs, s + CHUNK_POSTINGS))))
    with _output_to(tmp / "build.log"):
        pisathon.build_binlex(str(tmp / "fwd.terms"), str(tmp / "fwd.termlex"))
        pisathon.build_binlex(str(tmp / "fwd.documents"), str(tmp / "fwd.doclex"))
        # compresses the postings and computes the block upper bounds, once
        pisathon.prepare_index(pisathon.RetrievalContext(), str(tmp), ENCODING, "quantized", "",
                               block_size=BLOCK_SIZE, quantize=0)
    for staged in ("inv.docs", "inv.freqs", "inv.sizes", "fwd.terms", "fwd.documents"):
        (tmp / staged).unlink()  # read by the compression only
    (tmp / META).write_text(json.dumps({"format": 1, "impact_bits": IMPACT_BITS, "unit": unit, "num_docs": num_docs,
                                        "num_terms": n_terms, "term_width": width, "encoding": ENCODING,
                                        "block_size": BLOCK_SIZE, "algorithm": ALGORITHM}))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def built(folder: Path) -> bool:
    return (Path(folder) / META).is_file()


class PisaCandidates:
    """A PISA index made by :func:`build`, searched for a query's ``depth`` best rows by quantized score."""

    def __init__(self, folder: Path):
        self.pisathon = _pisathon()
        self.folder = Path(folder)
        meta = json.loads((self.folder / META).read_text())
        self.unit = float(meta["unit"])
        self.name = _term_name(int(meta["term_width"]))
        self.context = self.pisathon.RetrievalContext()
        self.pisathon.prepare_index(self.context, str(self.folder), meta["encoding"], "quantized", "",
                                    block_size=int(meta["block_size"]), quantize=0)

    def search(self, term_ids: Sequence[int], depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``depth`` rows of highest impact sum for a query of bm25s term ids (repeated as the query repeats
        them), and those sums (fewer where fewer documents match)."""
        counts: dict[str, float] = {}
        for term in term_ids:
            counts[self.name(term)] = counts.get(self.name(term), 0.0) + 1.0
        qidx, docnos = np.empty(depth, dtype=np.int32), np.empty(depth, dtype=object)
        ranks, sums = np.empty(depth, dtype=np.int32), np.empty(depth, dtype=np.float32)
        found = self.pisathon.retrieve(self.context, ALGORITHM, [(0, counts)], k=depth, threads=1, query_weighted=1,
                                       pretokenised=1, result_qidxs=qidx, result_docnos=docnos, result_ranks=ranks,
                                       result_scores=sums)
        return np.array([int(d) for d in docnos[:found]], dtype=np.int64), sums[:found]


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


def certain(kth_score: float, lowest_sum: float, n_terms: int, unit: float) -> bool:
    """Whether no document outside a candidate list can reach ``kth_score`` (the list's k-th exact score): one left
    out has an impact sum of at most ``lowest_sum`` (the list's lowest), so an exact score of at most
    ``(lowest_sum + n_terms) * unit`` (each term's impact within one unit of its score). Equality is not certain: a
    left-out document of equal score and lower row would rank first."""
    bound = (float(lowest_sum) + n_terms) * unit
    return float(kth_score) > bound * (1 + 1e-6)
