"""A retriever's ids held as one UTF-8 byte array and where each id starts, not as Python strings.

A Python string costs ~50 bytes before its characters and a list 8 more a pointer: 10M ids of ~12 characters were
~0.7 GiB in every process that built or served the index (and its meta.json, the same ids as JSON, ~0.2 GB, parsed
into a second list at load). :class:`IdList` keeps ~20 bytes an id (the characters and an int64 offset), reads an id
back when it is asked for, and is saved as two ``.npy`` files that load memory-mapped, so the processes serving an
index share its ids' pages as they share its other files.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = ["IdList", "IdListBuilder", "IdLookup", "first_duplicate", "IDS_FILE", "IDS_OFFSETS_FILE"]

#: The ids' UTF-8 bytes, one after another (uint8).
IDS_FILE = "ids.npy"
#: Where each id starts in :data:`IDS_FILE`, its size last (int64, one more than the ids).
IDS_OFFSETS_FILE = "ids.offsets.npy"

#: Ids decoded at a time when iterating: one copy of their bytes, then slices of it.
_CHUNK = 65_536


class IdListBuilder:
    """Ids appended one at a time (a corpus read in one pass), then :meth:`build` into an :class:`IdList`."""

    def __init__(self) -> None:
        self._data, self._offsets = bytearray(), array("q", [0])

    def append(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"ids must be strings, not {type(value).__name__} ({value!r})")
        self._data += value.encode("utf-8", "surrogatepass")
        self._offsets.append(len(self._data))

    def build(self) -> "IdList":
        return IdList(np.frombuffer(bytes(self._data), dtype=np.uint8), np.frombuffer(self._offsets, dtype=np.int64))


class IdList(Sequence[str]):
    """A read-only sequence of ids (strings), compared, indexed, sliced and iterated as a list of them is."""

    __slots__ = ("_data", "_offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self._data, self._offsets = data, offsets

    @classmethod
    def of(cls, ids: Iterable[str]) -> "IdList":
        """``ids`` (strings, read once) held as an :class:`IdList`; an :class:`IdList` is returned as it is."""
        if isinstance(ids, IdList):
            return ids
        builder = IdListBuilder()
        for value in ids:
            builder.append(value)
        return builder.build()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _at(self, row: int) -> str:
        start, stop = self._offsets[row], self._offsets[row + 1]
        return self._data[start:stop].tobytes().decode("utf-8", "surrogatepass")

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self._at(row) for row in range(*item.indices(len(self)))]
        row = int(item)
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError("id index out of range")
        return self._at(row)

    def __iter__(self) -> Iterator[str]:
        for first in range(0, len(self), _CHUNK):
            ends = self._offsets[first:first + _CHUNK + 1]
            base = int(ends[0])
            chunk = self._data[base:int(ends[-1])].tobytes()
            cuts = (ends - base).tolist()
            for start, stop in zip(cuts, cuts[1:]):
                yield chunk[start:stop].decode("utf-8", "surrogatepass")

    def __eq__(self, other) -> bool:
        if isinstance(other, IdList):
            return (len(self) == len(other) and np.array_equal(self._offsets, other._offsets)
                    and np.array_equal(self._data, other._data))
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # compared by value, as a list is

    def __repr__(self) -> str:
        shown = ", ".join(repr(i) for i in self[:3])
        return f"IdList([{shown}{', ...' if len(self) > 3 else ''}], {len(self)} ids)"

    def first_duplicate(self) -> str | None:
        """An id that occurs twice, or None (:func:`first_duplicate`)."""
        return first_duplicate(self)

    def save(self, directory: str | Path) -> None:
        """:data:`IDS_FILE` and :data:`IDS_OFFSETS_FILE` in ``directory``."""
        directory = Path(directory)
        for name, values in ((IDS_FILE, self._data), (IDS_OFFSETS_FILE, self._offsets)):
            with open(directory / name, "wb") as handle:
                np.save(handle, np.ascontiguousarray(values), allow_pickle=False)

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = False) -> "IdList":
        """The ids :meth:`save` wrote in ``directory`` (memory-mapped with ``mmap``); ``ValueError`` naming the file
        when they are not such ids."""
        directory = Path(directory)
        mode = "r" if mmap else None
        data = np.load(directory / IDS_FILE, mmap_mode=mode, allow_pickle=False)
        offsets = np.load(directory / IDS_OFFSETS_FILE, mmap_mode=mode, allow_pickle=False)
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError(f"{directory / IDS_FILE}: not an array of UTF-8 bytes (uint8)")
        if (offsets.dtype != np.int64 or offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0
                or offsets[-1] != len(data) or np.any(np.diff(offsets) < 0)):
            raise ValueError(f"{directory / IDS_OFFSETS_FILE}: not the offsets of {directory / IDS_FILE}'s ids")
        return cls(data, offsets)

    @staticmethod
    def saved_in(directory: str | Path) -> bool:
        return (Path(directory) / IDS_FILE).is_file()


class IdLookup:
    """Where each of ``ids`` is, found by a binary search over their hashes: 16 bytes an id (the sorted hashes and
    their places), where a dict of the strings costs ~100. Ids whose hashes collide are told apart by the ids
    themselves."""

    def __init__(self, ids: Sequence[str]):
        self.ids = ids
        hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        self._order = np.argsort(hashes, kind="stable")
        self._sorted = hashes[self._order]

    def position(self, value: object) -> int | None:
        """Where ``value`` is among the ids, or None."""
        if not isinstance(value, str):
            return None
        wanted = hash(value)
        return self._find(value, wanted, int(np.searchsorted(self._sorted, wanted)))

    def positions(self, values: Sequence[str]) -> list[int | None]:
        """:meth:`position` of each of ``values``, their hashes' places found in one search."""
        wanted = np.fromiter(map(hash, values), dtype=np.int64, count=len(values))
        found = np.searchsorted(self._sorted, wanted).tolist()
        return [self._find(value, hashed, first) for value, hashed, first in zip(values, wanted.tolist(), found)]

    def _find(self, value: str, wanted: int, found: int) -> int | None:
        while found < len(self._sorted) and self._sorted[found] == wanted:  # ids whose hashes collide
            position = int(self._order[found])
            if self.ids[position] == value:
                return position
            found += 1
        return None

    def first_duplicate(self) -> str | None:
        """An id that occurs twice, or None (:meth:`repeats`' first)."""
        for _, again in self.repeats():
            return self.ids[again]
        return None

    def repeats(self) -> Iterator[tuple[int, int]]:
        """For each id that occurs more than once, where it first occurs and where it occurs again first (positions
        among the ids): each run of equal hashes checked on the ids themselves (the same id, or ids whose hashes
        collide)."""
        starts = np.flatnonzero(np.r_[True, self._sorted[1:] != self._sorted[:-1]])
        stops = np.r_[starts[1:], len(self._sorted)]
        runs = stops - starts > 1
        for start, stop in zip(starts[runs], stops[runs]):
            first: dict[str, int] = {}
            for row in sorted(self._order[start:stop].tolist()):
                value = self.ids[row]
                if value in first:
                    yield first[value], row
                    continue
                first[value] = row


def repeated_hashes(hashes: np.ndarray) -> set[int]:
    """The values that occur more than once in ``hashes`` (an int64 array, sorted in place: no copy). A check for
    repeated ids over their hashes holds 8 bytes an id, where :class:`IdLookup` holds 16 and sorts through a third
    array: at 10M ids ~0.3 GB at the end of each pass over a corpus, on top of the pass's own memory. Equal hashes are
    a repeated id or, far more rarely, two ids whose hashes collide (~N^2 / 2^65: ~3e-6 at 10M ids), so the caller
    looks at the ids behind them."""
    hashes.sort()
    equal = hashes[1:] == hashes[:-1]
    return set(hashes[1:][equal].tolist()) if equal.any() else set()


def soonest_repeat(ids_at: Iterable[tuple[str, int]], repeated: set[int]) -> tuple[str, int, int] | None:
    """Of ``ids_at`` (each id with where it is, in order), the id whose second occurrence comes first, as ``(id, where
    it occurs again, where it first occurred)``, or None; only ids whose hash is in ``repeated``
    (:func:`repeated_hashes`) are kept to compare."""
    first: dict[str, int] = {}
    for value, at in ids_at:
        if hash(value) in repeated:
            if value in first:
                return value, at, first[value]
            first[value] = at
    return None


def first_duplicate(ids: Sequence[str]) -> str | None:
    """The id of ``ids`` whose second occurrence comes first, or None: the ids' hashes checked for repeats
    (:func:`repeated_hashes`), then only ids of a repeated hash compared, in a second pass."""
    repeated = repeated_hashes(np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids)))
    twice = soonest_repeat(zip(ids, range(len(ids))), repeated) if repeated else None
    return twice[0] if twice else None
