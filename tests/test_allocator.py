"""taskret.allocator: the pages glibc's heap holds free are handed back after each chunk of documents."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# What the probes below print of their heap: its resident KiB.
HEAP_KIB = """
def heap_kib():
    with open("/proc/self/smaps") as smaps:
        in_heap = False
        for line in smaps:
            if not line[0].isupper():
                in_heap = line.rstrip().endswith("[heap]")
            elif in_heap and line.startswith("Rss:"):
                return int(line.split()[1])
    return 0
"""

# A fresh process fills its heap with 64 KiB blocks, frees all but the last (which keeps the heap's top in use, so
# free() alone gives nothing back), and prints its heap's resident KiB before and after release_freed_memory().
PROBE = HEAP_KIB + """
import ctypes
from taskret.allocator import release_freed_memory

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


# A fresh process mallocs a 48 MiB block (past glibc's own threshold ceiling, 32 MiB), touches it, frees it, and
# mallocs it again: it prints whether each block lay in the heap, whether the second reused the first's address, and
# the heap's resident KiB once the first was freed.
BLOCK_PROBE = HEAP_KIB + """
import ctypes, sys
from taskret.allocator import keep_freed_blocks

def heap():
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[heap]"):
                start, end = (int(part, 16) for part in line.split()[0].split("-"))
                return start, end
    return 0, 0

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 48 * 1024 * 1024
kept = keep_freed_blocks(size) if sys.argv[1] == "keep" else False
first = libc.malloc(size)
ctypes.memset(first, 1, size)
in_heap_first = heap()[0] <= first < heap()[1]
libc.free(first)
freed_kib = heap_kib()
second = libc.malloc(size)
print(kept, in_heap_first, second == first, freed_kib)
"""


def _block_probe(mode: str, env: dict) -> list[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_PROBE, mode], capture_output=True, text=True, check=True,
                          env={k: v for k, v in {**os.environ, **env}.items() if v is not None}).stdout.split()


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_a_large_freed_block_is_kept_in_the_heap_for_the_next():
    kept, in_heap, reused, freed_kib = _block_probe("keep", {"TASKRET_GLIBC_MALLOC": None})
    assert (kept, in_heap, reused) == ("True", "True", "True")
    assert int(freed_kib) >= 48 * 1024  # freed, and still resident: the next block's pages are there already


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_without_it_glibc_maps_a_large_block_on_its_own():
    for env in ({"TASKRET_GLIBC_MALLOC": None}, {"TASKRET_GLIBC_MALLOC": "1"}):
        kept, in_heap, _, freed_kib = _block_probe("plain" if "1" not in env.values() else "keep", env)
        assert (kept, in_heap) == ("False", "False") and int(freed_kib) < 48 * 1024


def test_blocks_glibc_adapts_to_by_itself_set_nothing():
    from taskret import allocator

    assert allocator.keep_freed_blocks(allocator.GLIBC_DYNAMIC_MMAP_MAX) is False
