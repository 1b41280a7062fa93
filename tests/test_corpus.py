"""taskret.corpus: the readers below both taskret.data and taskret.tart (neither imports the other for them), and a
corpus read in passes (DocumentStream) with a fingerprint of its contents."""

from __future__ import annotations

import subprocess
import sys

import pytest

from taskret.corpus import DocumentStream, iter_corpus, read_corpus
from taskret.io import DataError
from taskret.tart.tasks import load_corpus, open_corpus
from tests.conftest import write_jsonl_rows

ROWS = [{"_id": "a", "title": "Aspirin", "text": "lowers the risk of heart attacks"},
        {"_id": "b", "text": "coffee and sleep"}]


def test_the_readers_import_neither_data_nor_tart():
    code = ("import sys, taskret.corpus; bad = [m for m in sys.modules if m.startswith(('taskret.data', "
            "'taskret.tart'))]; assert not bad, bad")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
    import taskret.data
    import taskret.tart.tasks

    assert taskret.tart.tasks.read_corpus is read_corpus and taskret.data.read_beir_files  # one reader, re-exported


def test_a_stream_reads_its_file_on_every_pass_and_checks_it(tmp_path):
    path = write_jsonl_rows(tmp_path / "docs.jsonl", ROWS)
    stream = open_corpus(path)
    assert isinstance(stream, DocumentStream) and stream.name == "docs" and stream.instructions == []
    ids, fingerprint = stream.scan()
    assert ids == ["a", "b"] and list(stream.texts()) == ["Aspirin lowers the risk of heart attacks",
                                                          "coffee and sleep"]
    assert load_corpus(path).documents == read_corpus(path) == {d.id: d for d in stream}
    write_jsonl_rows(path, [{**ROWS[0], "title": "Aspirin!"}, ROWS[1]])  # read again: the new contents
    new_ids, new_fingerprint = stream.scan()
    assert new_ids == ids and new_fingerprint != fingerprint
    write_jsonl_rows(path, [*ROWS, {"_id": "a", "text": "again"}])
    with pytest.raises(DataError, match=r"line 3, field '_id': duplicate id 'a' \(first seen on line 1\)"):
        stream.scan()


def test_iter_corpus_stops_at_the_first_bad_line_after_yielding_the_good_ones(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": ""}\n', encoding="utf-8")
    documents = iter_corpus(path)
    assert next(documents).id == "a"
    with pytest.raises(DataError, match=r"line 2, field 'text': empty document \(no text and no title\)"):
        next(documents)
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no documents in file"):
        list(iter_corpus(tmp_path / "empty.jsonl"))


def test_a_pass_names_the_id_read_again_soonest_when_it_ends(tmp_path):
    ids = [f"d{i}" for i in range(2_000)]
    ids[1_500] = "d7"  # read again on line 1,501
    ids[1_200] = "d900"  # read again sooner, on line 1,201
    path = write_jsonl_rows(tmp_path / "corpus.jsonl", [{"_id": i, "text": f"text {n}"} for n, i in enumerate(ids)])
    read = []
    with pytest.raises(DataError) as info:
        for doc in iter_corpus(path):
            read.append(doc.id)
    assert len(read) == 2_000  # the check is at the end of the pass: every line was read
    assert info.value.line == 1_201 and info.value.field == "_id"
    assert "duplicate id 'd900' (first seen on line 901)" in str(info.value)
    assert [doc.id for doc in iter_corpus(write_jsonl_rows(tmp_path / "fine.jsonl", [
        {"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}]))] == ["a", "b"]


def test_ids_whose_hashes_collide_are_told_apart_by_reading_the_file_again(tmp_path, monkeypatch):
    path = write_jsonl_rows(tmp_path / "corpus.jsonl", [{"_id": f"d{n}", "text": "x"} for n in range(5)])
    monkeypatch.setattr("builtins.hash", lambda value: 7)  # every id hashes alike
    assert [doc.id for doc in iter_corpus(path)] == [f"d{n}" for n in range(5)]
    write_jsonl_rows(path, [{"_id": i, "text": "x"} for i in ["a", "b", "c", "b", "a"]])
    with pytest.raises(DataError, match=r"line 4, field '_id': duplicate id 'b' \(first seen on line 2\)"):
        list(iter_corpus(path))
