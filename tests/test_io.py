"""Artifact files are written atomically: a failure leaves neither half a file nor a temporary file."""

from __future__ import annotations

import json
import os

import pytest

from taskret.io import (
    DataError,
    atomic_path,
    read_json,
    read_jsonl,
    write_json,
    write_jsonl,
)


class Boom(RuntimeError):
    pass


def test_write_json_round_trip_keeps_unicode(tmp_path):
    path = tmp_path / "nested" / "deeper" / "summary.json"  # parent folders are created
    obj = {"task": "mtop", "metrics": {"em": 12.5}, "text": "café ☕", "ids": ["a", "b"]}
    write_json(path, obj)
    assert read_json(path) == obj
    assert "café ☕" in path.read_text(encoding="utf-8")
    assert os.listdir(path.parent) == ["summary.json"]


def test_write_jsonl_round_trip(tmp_path):
    path = tmp_path / "predictions.jsonl"
    rows = [{"id": str(i), "prediction": f"p\t{i}", "correct": i % 2 == 0} for i in range(5)]
    write_jsonl(path, rows)
    assert read_jsonl(path) == rows
    assert len(path.read_text(encoding="utf-8").splitlines()) == 5
    assert os.listdir(tmp_path) == ["predictions.jsonl"]


def test_written_files_have_the_permissions_of_a_plain_open(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text("{}", encoding="utf-8")
    write_json(tmp_path / "atomic.json", {})
    write_jsonl(tmp_path / "atomic.jsonl", [{}])
    expected = plain.stat().st_mode & 0o777
    assert (tmp_path / "atomic.json").stat().st_mode & 0o777 == expected
    assert (tmp_path / "atomic.jsonl").stat().st_mode & 0o777 == expected


def test_atomic_path_exception_leaves_nothing(tmp_path):
    final = tmp_path / "out.json"
    with pytest.raises(Boom):
        with atomic_path(final) as tmp:
            assert tmp.parent == tmp_path and tmp != final
            tmp.write_text('{"half": ', encoding="utf-8")
            assert tmp.exists()
            raise Boom("crash in the middle of a write")
    assert not final.exists()
    assert os.listdir(tmp_path) == []


def test_atomic_path_exception_keeps_the_previous_file(tmp_path):
    final = tmp_path / "out.json"
    final.write_text("old", encoding="utf-8")
    with pytest.raises(Boom):
        with atomic_path(final) as tmp:
            tmp.write_text("new, but incomplete", encoding="utf-8")
            raise Boom()
    assert final.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["out.json"]


def test_atomic_path_success_replaces(tmp_path):
    final = tmp_path / "out.txt"
    final.write_text("old", encoding="utf-8")
    with atomic_path(final, suffix=".txt") as tmp:
        tmp.write_text("new", encoding="utf-8")
        assert final.read_text(encoding="utf-8") == "old"  # not visible before the block ends
    assert final.read_text(encoding="utf-8") == "new"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_jsonl_failing_generator_leaves_nothing(tmp_path):
    def rows():
        yield {"id": "1"}
        yield {"id": "2"}
        raise Boom("the run crashed after two rows")

    path = tmp_path / "predictions.jsonl"
    with pytest.raises(Boom):
        write_jsonl(path, rows())
    assert os.listdir(tmp_path) == []


def test_write_jsonl_unserialisable_row_keeps_the_previous_file(tmp_path):
    path = tmp_path / "predictions.jsonl"
    write_jsonl(path, [{"id": "old"}])
    with pytest.raises(TypeError):
        write_jsonl(path, [{"id": "new"}, {"id": object()}])
    assert read_jsonl(path) == [{"id": "old"}]
    assert os.listdir(tmp_path) == ["predictions.jsonl"]


def test_write_json_unserialisable_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "summary.json", {"bad": {1, 2}})
    assert os.listdir(tmp_path) == []


def test_read_json_errors_are_data_errors(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text('{\n  "ids": [1, 2,\n}', encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_json(path)
    assert info.value.path == str(path) and info.value.line == 3
    assert "malformed JSON" in str(info.value)
    with pytest.raises(DataError, match="cannot read file"):
        read_json(tmp_path / "missing.json")


def test_read_jsonl_reports_the_bad_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\nnot json\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_jsonl(path)
    assert info.value.line == 2


def test_a_data_error_pickles_whole():
    """As a Ray task's error reaches the driver: the same file, line, field and message."""
    import pickle

    err = pickle.loads(pickle.dumps(DataError("corpus.jsonl", 7, "text", "missing field")))
    assert (err.path, err.line, err.field, err.message) == ("corpus.jsonl", 7, "text", "missing field")
    assert str(err) == "corpus.jsonl, line 7, field 'text': missing field"
