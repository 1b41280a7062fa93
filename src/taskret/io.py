"""Files on disk: records read from JSONL/CSV with errors that name the file, line and field
(:class:`DataError`), and artifacts written to a temporary name and renamed, so a crash never leaves
half a file behind under the final name."""

from __future__ import annotations

import csv
import json
import os
import tempfile
from array import array
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence


class DataError(ValueError):
    """A bad input file: says which file, which line and which field."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        # pickled with its own four arguments (the default passes args, the one joined message): a Ray task's
        # DataError reaches the driver whole, and the command says it in one line
        return type(self), (self.path, self.line, self.field, self.message)


def iter_records(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) from a .jsonl or .csv file."""
    suffix = path.suffix.lower()
    try:
        # utf-8-sig: a byte-order mark (as Excel writes) is not part of the first field name.
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    with handle:
        try:
            if suffix in (".jsonl", ".json"):
                for line_no, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise DataError(path, line_no, None, f"malformed JSON ({err.msg})") from err
                    if not isinstance(record, dict):
                        raise DataError(path, line_no, None, "expected a JSON object")
                    yield line_no, record
            elif suffix in (".csv", ".tsv"):
                reader = csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ",")
                for record in reader:
                    # line_num is where the record ends; a multi-line quoted field spans lines.
                    yield reader.line_num, record
            else:
                raise DataError(path, None, None, f"unknown file type '{suffix}' (expected .jsonl, .csv or .tsv)")
        except UnicodeDecodeError as err:
            # err.start counts from the decoder's current chunk, not the file: find the real place.
            line, offset, reason = _locate_bad_utf8(path, err)
            raise DataError(path, line, None, f"not valid UTF-8 ({reason} at byte {offset})") from err


def _locate_bad_utf8(path: Path, err: UnicodeDecodeError) -> tuple[int | None, int, str]:
    """(line number, byte offset in the file, reason) of the first invalid UTF-8 sequence."""
    offset = 0
    with open(path, "rb") as raw:
        for line_no, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                return line_no, offset + bad.start, bad.reason
            offset += len(line)
    return None, err.start, err.reason


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


def write_json(path: str | os.PathLike, obj: Any, compact: Sequence[str] = ()) -> None:
    """``obj`` as indented JSON, atomically. ``compact``: keys of a dict ``obj`` whose values are written last, each
    on one line (a list of a million ids indented one per line is twice its size, and no easier to read)."""
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    if compact and isinstance(obj, dict) and any(key in obj for key in compact):
        head = json.dumps({k: v for k, v in obj.items() if k not in compact}, indent=2, ensure_ascii=False)
        tail = ",\n".join(f"  {json.dumps(key)}: {json.dumps(obj[key], ensure_ascii=False, separators=(',', ':'))}"
                          for key in compact if key in obj)
        text = head[:-1].rstrip() + ("," if head != "{}" else "") + "\n" + tail + "\n}"
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> array:
    """Write ``rows`` as JSONL (atomically), one at a time; returns where each line starts, in bytes, and the file's
    size last (int64: what a reader that seeks to a row needs, counted as written rather than scanned after)."""
    starts = array("q", [0])
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for row in rows:
            line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
            f.write(line)
            starts.append(starts[-1] + len(line))
    return starts


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DataError(path, None, None, f"cannot read file ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise DataError(path, err.lineno, None, f"malformed JSON ({err.msg})") from err


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    return [record for _, record in iter_records(Path(path))]

