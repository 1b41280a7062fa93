"""taskret.allocator: the pages glibc's heap holds free are handed back after each chunk of documents."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A fresh process fills its heap with 64 KiB blocks, frees all but the last (which keeps the heap's top in use, so
# free() alone gives nothing back), and prints its heap's resident KiB before and after release_freed_memory().
PROBE = """
import ctypes
from taskret.allocator import release_freed_memory

def heap_kib():
    with open("/proc/self/smaps") as smaps:
        in_heap = False
        for line in smaps:
            if not line[0].isupper():
                in_heap = line.rstrip().endswith("[heap]")
            elif in_heap and line.startswith("Rss:"):
                return int(line.split()[1])
    return 0

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(64 * 1024) for _ in range(2000)]
for block in blocks:
    ctypes.memset(block, 1, 64 * 1024)
for block in blocks[:-1]:
    libc.free(block)
before = heap_kib()
print(release_freed_memory(), before, heap_kib())
"""


def _probe(env: dict) -> tuple[str, int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env={k: v for k, v in {**os.environ, **env}.items() if v is not None}).stdout.split()
    return out[0], int(out[1]), int(out[2])


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_release_hands_the_free_heap_back():
    done, before, after = _probe({"TASKRET_GLIBC_MALLOC": None})
    assert done == "True" and before > 100_000 and after < before / 10  # ~125 MiB freed, nearly all handed back


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_glibc_keeps_its_own_behaviour_when_asked():
    done, before, after = _probe({"TASKRET_GLIBC_MALLOC": "1"})
    assert done == "False" and after == before
