"""Artifact files: JSON and JSONL written to a temporary name and renamed, so a crash never leaves
half a file behind under the final name."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        # mkstemp makes the file private (0600); give it the permissions a plain open() would.
        os.chmod(tmp_path, 0o666 & ~_umask())
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    from .data import DataError

    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise DataError(path, err.lineno, None, f"malformed JSON ({err.msg})") from err


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    from .data import iter_records

    return [record for _, record in iter_records(Path(path))]


def guard_config(path: str | os.PathLike, config: Any) -> None:
    """A pipeline's work folder keeps the config it was made with at ``path``: save ``config`` (a pydantic
    model) there the first time, and refuse a different one later, since finished stages are skipped
    and outputs made under another config must not be reused."""
    path = Path(path)
    if not path.exists():
        write_json(path, config.model_dump())
        return
    used = type(config).model_validate(read_json(path))
    if used != config:
        changed = sorted(k for k in type(config).model_fields if getattr(used, k) != getattr(config, k))
        raise ValueError(f"{path.parent} was made with another config (changed: {', '.join(changed)}); "
                         f"use a new work_dir or delete the old one")
