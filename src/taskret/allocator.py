"""glibc's malloc and a long encoding: hand back what each chunk of documents freed.

An encoder's batches are padded to their longest text, so nearly every batch allocates tensors of a new size. glibc
maps a block above its mmap threshold (128 KiB) on its own and unmaps it when freed, but it raises that threshold to
the size of each mapped block that is freed (up to 32 MiB): after the first batches, tensors come from the heap, which
fragments and keeps the pages they free. A streaming index build's RSS grew ~25-40 KB per document over its first
20,000 documents (the FAISS vectors and graph are ~1.8 KB of it), and still ~3.5-8 KB per document at 1M
(``benchmarks/scale/build_memory.py``: the encoder alone does it; fixed-length batches do not; Python objects grow ~0.3 KB).

Fixing the threshold (``MALLOC_MMAP_THRESHOLD_=131072``) stops the heap's growth but maps and faults in every large
tensor anew: encoding ran a third slower. ``malloc_trim(0)`` after each chunk of documents
(:func:`release_freed_memory`, called by the dense retriever's document encoding, on one longer than a chunk:
an index's shard, :meth:`~taskret.retrieval.dense.DenseRetriever.encode_documents`) hands the free pages back instead, at no measurable cost.

The opposite case is a search that allocates one large array per query and frees it: bm25s's score array, 4 bytes
a document (40 MB at 10M documents). Past 32 MiB (the most glibc's threshold rises to) every such block is mapped
anew, and the kernel zeroes and faults in each of its pages for each query: at 10M documents that was ~60% of a
query's time (``benchmarks/scale/bm25_query_cost.py``). :func:`keep_freed_blocks` raises the threshold above the
block, so that glibc serves it from its heap and keeps it when it is freed: the next query's array reuses the pages.
A thread other than the main one (a service's worker threads) allocates from an arena of its own, whose heaps glibc
caps at 64 MiB: there a block past that (an index past ~16M documents) is still mapped anew, and such a corpus is
better served as shards (:mod:`taskret.retrieval.sharded`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: Set to 1, glibc runs as it does by default: nothing trimmed (:func:`release_freed_memory`; how
#: ``benchmarks/scale/build_memory.py`` measures the default), no threshold set (:func:`keep_freed_blocks`).
KEEP_GLIBC_ENV = "TASKRET_GLIBC_MALLOC"

_trim = None  # glibc's malloc_trim, once found; False where there is none
_mallopt = None  # glibc's mallopt, likewise

#: mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: The most glibc raises its mmap threshold to by itself (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): a block above it
#: is always mapped on its own unless the threshold is set.
GLIBC_DYNAMIC_MMAP_MAX = 32 * 1024 * 1024
C_INT_MAX = 2**31 - 1
_kept_blocks = 0  # the largest block size keep_freed_blocks set the thresholds for


def _glibc_function(name: str):
    """glibc's function ``name``, or False where there is none (not Linux, no C library found, or musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return False


def _malloc_trim():
    global _trim
    if _trim is None:
        _trim = _glibc_function("malloc_trim")
    return _trim


def release_freed_memory() -> bool:
    """Hand the pages glibc's heap holds free back to the system (``malloc_trim(0)``): True where it could (glibc,
    and ``$TASKRET_GLIBC_MALLOC`` is not 1); elsewhere nothing is done."""
    if os.environ.get(KEEP_GLIBC_ENV) == "1":
        return False
    trim = _malloc_trim()
    if not trim:
        return False
    trim(0)
    return True


def keep_freed_blocks(nbytes: int) -> bool:
    """Let glibc serve blocks of up to ``nbytes`` from its heap and keep them there when they are freed
    (``mallopt``: the mmap threshold above ``nbytes``, the trim threshold above twice that), so that a block
    allocated and freed over and over (a search's per-query array) reuses the same pages instead of mapping and
    faulting in new ones each time. Process-wide, and only ever raised; below glibc's own ceiling (32 MiB) nothing is
    set, since glibc adapts by itself there. True where the thresholds are (now or already) set; False where
    ``nbytes`` needs nothing, on a C library other than glibc, or with ``$TASKRET_GLIBC_MALLOC`` 1."""
    global _mallopt, _kept_blocks
    if nbytes <= GLIBC_DYNAMIC_MMAP_MAX or os.environ.get(KEEP_GLIBC_ENV) == "1":
        return False
    if nbytes <= _kept_blocks:
        return True
    if _mallopt is None:
        _mallopt = _glibc_function("mallopt")
    if not _mallopt:
        return False
    # Headroom above the block: numba and numpy add their own headers, and the trim threshold must exceed the
    # block with whatever sits above it at the heap's top, or glibc returns it to the system when it is freed.
    mmap_threshold, trim_threshold = nbytes + nbytes // 4, min(2 * nbytes + nbytes // 2, C_INT_MAX)
    if mmap_threshold > C_INT_MAX:  # mallopt takes a C int: a block past 1.6 GiB stays mapped
        return False
    # The mmap threshold first: glibc refuses one too large for it, and then nothing has been changed.
    if not _mallopt(M_MMAP_THRESHOLD, mmap_threshold) or not _mallopt(M_TRIM_THRESHOLD, trim_threshold):
        return False
    _kept_blocks = nbytes
    return True
