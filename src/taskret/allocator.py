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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: Set to 1, glibc keeps what it frees, as it does by default (``benchmarks/scale/build_memory.py`` measures it so).
KEEP_GLIBC_ENV = "TASKRET_GLIBC_MALLOC"

_trim = None  # glibc's malloc_trim, once found; False where there is none


def _malloc_trim():
    global _trim
    if _trim is None:
        _trim = False
        if sys.platform.startswith("linux"):
            try:
                _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            except (OSError, AttributeError):  # no C library found, or one without malloc_trim (musl)
                pass
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
