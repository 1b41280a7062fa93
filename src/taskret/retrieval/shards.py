"""Encoding a corpus in shards that survive a crash: what lets ``taskret tart index`` stream a corpus of any size
(and ``taskret index`` / ``taskret epr index`` an example pool) and resume a killed run where it stopped.

A dense retriever indexed through :meth:`~taskret.retrieval.base.Retriever.index_stream` with a :class:`ShardPlan`
encodes its texts ``shard_size`` at a time and writes each shard's vectors (float32, unit length) to
``DIR/00000.npy``, ``DIR/00001.npy``, ... as soon as they are encoded, each written to a temporary name and
renamed. ``DIR/manifest.json`` says what the shards hold::

    {"format": "taskret-shards/1", "corpus": FINGERPRINT, "n": N, "shard_size": S, "encoder": NAME, "dtype": "float32"}

A run that finds shards whose manifest agrees loads them instead of encoding them again, and says so in one line
(``resuming: 3 of 44 shards (3,000 of 43,016 texts) encoded before, in DIR: reused``); the progress line counts them
as done, so its rate and ETA are for what is left. A manifest that disagrees (another corpus, another encoder or
dtype) is refused with an error naming the file and the difference, so shards of two corpora or two encoders are
never mixed; shards cut at another size (an earlier version's 10,000, or another ``--shard-size``) are reused at
their size. An interrupted run (Ctrl-C) says how many shards it leaves for the next one. Vectors go into the FAISS index shard by shard, in
corpus order: nothing but the index and a few shards is held, whatever the corpus size.

Shards are encoded here, or on Ray actors (:mod:`taskret.retrieval.distributed`) with ``ShardPlan.ray``.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from ..io import DataError, atomic_path, read_json, write_json
from ..progress import note, report_resumed, stage
from .budget import MemoryBudget

logger = logging.getLogger(__name__)

__all__ = ["SHARDS_DIR", "SHARDS_FORMAT", "SHARD_SIZE", "MANIFEST", "ShardPlan", "ShardMismatch", "encode_in_shards",
           "shard_path"]

#: Where ``taskret tart index --out DIR`` (and ``taskret index``) keeps the shards while it builds (removed with the
#: old folder when the index is complete).
SHARDS_DIR = ".shards"
SHARDS_FORMAT = "taskret-shards/1"
MANIFEST = "manifest.json"
#: Texts per shard: what a killed run loses at most here (on Ray, up to two a worker), and how often Ray's progress
#: moves. At ~70 documents/s (docs-fast's MiniLM, 2 cores) 1,000 are ~15 s of work, 10,000 (the size before) ~2.5
#: minutes. The cost of more shards, measured (benchmarks/scale/shard_size.py -> benchmarks/results/shard_size.json): a
#: shard's write (fsync, rename) takes 6.3 ms at 1,000 texts and 33 ms at 10,000, so 43,016 documents cost 0.28 s of
#: writes in 44 shards against 0.16 s in 5, and 128 bytes of header per file; 1,000 real documents took 121 s of CPU
#: in 1 shard, 126 s in 5, 130 s in 10 (shards of 100 batch less well), on a shared machine. 1M documents: 1,000 files.
SHARD_SIZE = 1_000

#: ``runner(pending, advance)``: encodes each pending ``(shard number, texts)`` and yields ``(number, vectors)``, in
#: any order, calling ``advance(n)`` as texts are done.
Runner = Callable[[Iterator[tuple[int, list[str]]], Callable[[int], None]], Iterable[tuple[int, np.ndarray]]]


class ShardMismatch(ValueError):
    """Shards on disk of another corpus or encoder than the run that finds them."""


@dataclass(frozen=True)
class ShardPlan:
    """How a streamed index keeps its vectors while it is built: ``directory`` (None: no files, one shard of the
    whole corpus, as an index built in memory), ``corpus`` (a fingerprint of the corpus,
    :meth:`~taskret.corpus.DocumentStream.scan`), ``shard_size``, ``ray`` (a
    :class:`~taskret.epr.distributed.RayOptions`: encode the shards on Ray actors) and ``memory_budget`` (a
    :class:`~taskret.retrieval.budget.MemoryBudget`, 8 GiB unless given), which sets the dense index type and BM25's
    segment sizes."""

    directory: Path | None = None
    corpus: str = ""
    shard_size: int = SHARD_SIZE
    ray: object | None = None
    memory_budget: MemoryBudget = MemoryBudget()

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {self.shard_size}")

    def child(self, name: str) -> "ShardPlan":
        """The plan of one component of a hybrid: its shards in a folder of their own."""
        return replace(self, directory=self.directory / name if self.directory is not None else None)


def shard_path(directory: Path, number: int) -> Path:
    return directory / f"{number:05d}.npy"


def _size_on_disk(directory: Path, size: int) -> int:
    """The shard size of the shards already in ``directory`` (their manifest's), else ``size``: shards cut at
    another size are as good, and a resumed run goes on at theirs."""
    path = directory / MANIFEST
    try:
        found = read_json(path) if path.is_file() else None
    except DataError:
        return size  # _check_manifest says what is wrong with it
    on_disk = found.get("shard_size") if isinstance(found, dict) else None
    if isinstance(on_disk, int) and on_disk >= 1 and on_disk != size:
        logger.info("%s: the shards there are of %d texts; going on at that size, not %d", directory, on_disk, size)
        return on_disk
    return size


def _shard_texts(n: int, size: int, numbers: Iterable[int]) -> int:
    """How many of the ``n`` texts the shards ``numbers`` (of ``size`` texts, the last one shorter) hold."""
    return sum(min(size, n - number * size) for number in numbers)


def _whole_shards(directory: Path, n: int, size: int) -> list[int]:
    """The numbers of the shard files in ``directory`` (each written whole: a temporary name, then renamed)."""
    count = -(-n // size)
    return [number for number in range(count) if shard_path(directory, number).exists()]


def _check_manifest(directory: Path, manifest: dict) -> None:
    """Write the manifest of a new shard folder, or refuse one whose shards are of something else."""
    path = directory / MANIFEST
    if not path.exists():
        stray = sorted(p.name for p in directory.glob("*.npy")) if directory.is_dir() else []
        if stray:
            raise ShardMismatch(f"{directory}: holds shards ({', '.join(stray[:3])}, ...) but no {MANIFEST}, so "
                                f"what they hold is unknown; remove {directory} to encode from scratch")
        directory.mkdir(parents=True, exist_ok=True)
        write_json(path, manifest)
        return
    try:
        found = read_json(path)
    except DataError as err:
        raise ShardMismatch(f"{err}; remove {directory} to encode from scratch") from err
    if not isinstance(found, dict):
        raise ShardMismatch(f"{path}: expected a JSON object; remove {directory} to encode from scratch")
    for key, wanted in manifest.items():
        if found.get(key) != wanted:
            what = {"corpus": "a corpus whose fingerprint is", "encoder": "the encoder", "dtype": "the dtype",
                    "n": "a corpus of", "shard_size": "shards of", "format": "the format"}.get(key, key)
            raise ShardMismatch(f"{path}: these shards were encoded from {what} {found.get(key)!r}, and this run's is "
                                f"{wanted!r}; shards of two corpora or encoders are never mixed: index the corpus "
                                f"with the encoder they were made with, or remove {directory} to encode from scratch")


def _read_shard(path: Path, rows: int) -> np.ndarray | None:
    """A shard's vectors, or None (with a warning) when the file is not a float32 matrix of ``rows`` rows."""
    try:
        block = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        logger.warning("%s: unreadable (%s); encoding it again", path, err)
        return None
    if block.ndim != 2 or len(block) != rows or block.dtype != np.float32:
        logger.warning("%s: holds %s %s, not %d float32 vectors; encoding it again", path, block.shape, block.dtype,
                       rows)
        return None
    return block


def _write_shard(path: Path, block: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, np.ascontiguousarray(block, dtype=np.float32), allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())


def _numbered(texts: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    iterator = iter(texts)
    for number in itertools.count():
        chunk = list(itertools.islice(iterator, size))
        if not chunk:
            return
        yield number, chunk


def encode_in_shards(texts: Iterable[str], n: int, plan: ShardPlan, key: dict, runner: Runner, description: str,
                     enabled: bool | None = None) -> Iterator[np.ndarray]:
    """The vectors of ``n`` texts, one shard's block at a time in corpus order, each encoded by ``runner`` unless
    ``plan.directory`` already holds it; ``key`` (the encoder and its dtype) goes into the manifest that must agree.
    One progress stage (``description``, rate and ETA on stderr when ``enabled``, by default under
    :func:`~taskret.progress.reporting`)."""
    directory = plan.directory
    size = _size_on_disk(directory, plan.shard_size) if directory is not None else max(n, 1)
    if directory is not None:
        _check_manifest(directory, {"format": SHARDS_FORMAT, "corpus": plan.corpus, "n": n, "shard_size": size,
                                    **key})
        reused = _whole_shards(directory, n, size)
        if reused:
            note(f"resuming: {len(reused)} of {-(-n // size)} shards ({_shard_texts(n, size, reused):,} of {n:,} "
                 f"texts) encoded before, in {directory}: reused", enabled)
    done: dict[int, np.ndarray] = {}  # shards ready but not yet yielded (another one comes before them)
    try:
        yield from _encode(texts, n, plan, size, runner, description, enabled, done)
    except KeyboardInterrupt:
        if directory is not None:
            saved = _whole_shards(directory, n, size)
            note(f"interrupted: {len(saved)} of {-(-n // size)} shards ({_shard_texts(n, size, saved):,} of {n:,} "
                 f"texts) are saved in {directory}; the same command goes on from them", enabled)
        raise


def _encode(texts: Iterable[str], n: int, plan: ShardPlan, size: int, runner: Runner, description: str,
            enabled: bool | None, done: dict[int, np.ndarray]) -> Iterator[np.ndarray]:
    """:func:`encode_in_shards`'s work, once its shard folder is checked."""
    directory = plan.directory
    with stage(n, description, unit="texts", enabled=enabled) as advance:
        def pending() -> Iterator[tuple[int, list[str]]]:
            for number, chunk in _numbered(texts, size):
                block = _read_shard(shard_path(directory, number), len(chunk)) if (
                    directory is not None and shard_path(directory, number).exists()) else None
                if block is None:
                    yield number, chunk
                else:
                    report_resumed(advance, len(chunk))
                    done[number] = block

        state = {"following": 0, "counted": 0}

        def ready() -> Iterator[np.ndarray]:
            while state["following"] in done:
                block = done.pop(state["following"])
                state["counted"] += len(block)
                state["following"] += 1
                yield block

        for number, block in runner(pending(), advance):
            block = np.asarray(block, dtype=np.float32)
            if directory is not None:
                _write_shard(shard_path(directory, number), block)
            done[number] = block
            yield from ready()
        yield from ready()  # shards read from disk after the last one encoded
    counted = state["counted"]
    if counted != n or done:
        raise RuntimeError(f"encoded {counted} of {n} texts (shards {sorted(done)} out of order): the corpus changed "
                           f"while it was read")
