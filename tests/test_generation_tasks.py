"""Generation tasks for in-context learning built from BEIR folders (berri-lite's nl2bash, conala, asset)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskret.data import GENERATION_TASKS, DataError, default_data_dir, load_beir_task, load_task

from .conftest import write_jsonl_rows


def _beir_folder(root: Path) -> Path:
    folder = root / "toy_bash"
    write_jsonl_rows(folder / "queries.jsonl", [
        {"_id": "q1", "text": "list files"}, {"_id": "q2", "text": "show disk usage"},
        {"_id": "q3", "text": "count lines"}, {"_id": "q4", "text": "never judged"}])
    write_jsonl_rows(folder / "corpus.jsonl", [
        {"_id": "d1", "title": "", "text": "ls"}, {"_id": "d2", "title": "", "text": "du -sh ."},
        {"_id": "d2b", "title": "", "text": "df -h"}, {"_id": "d3", "title": "", "text": "wc -l file"}])
    (folder / "qrels").mkdir()
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq2\td2b\t1\n")
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td3\t1\n")
    return folder


def test_a_beir_folder_becomes_input_output_pairs(tmp_path):
    task = load_beir_task(_beir_folder(tmp_path))
    assert task.name == "toy_bash"
    assert [(e.id, e.input, e.output) for e in task.train] == [("q1", "list files", "ls"),
                                                               ("q2", "show disk usage", "du -sh .")]  # first listed
    assert [(e.id, e.input, e.output) for e in task.test] == [("q3", "count lines", "wc -l file")]


def test_a_bad_qrels_line_is_named(tmp_path):
    folder = _beir_folder(tmp_path)
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq3\tnope\t1\n")
    with pytest.raises(DataError, match=r"dev.tsv, line 2, field 'corpus-id': unknown document id 'nope'"):
        load_beir_task(folder)


def test_berri_lite_generation_tasks_load_by_name(tmp_path):
    collection = tmp_path / "berri-lite"
    _beir_folder(collection).rename(collection / "nl2bash")
    task = load_task("berri-lite/nl2bash", data_dir=tmp_path)
    assert task.name == "berri-lite/nl2bash" and len(task.train) == 2 and len(task.test) == 1
    with pytest.raises(FileNotFoundError, match="berri-lite/conala: the 'berri-lite/conala' task is read from"):
        load_task("berri-lite/conala", data_dir=tmp_path)
    assert set(GENERATION_TASKS) == {"berri-lite/nl2bash", "berri-lite/conala", "berri-lite/asset_simplification"}


@pytest.mark.parametrize("name", sorted(GENERATION_TASKS))
def test_the_shared_berri_lite_tasks(name):
    if not (default_data_dir() / name).is_dir():
        pytest.skip(f"{name} is not in the data folder")
    task = load_task(name)
    assert len(task.train) > 1000 and 150 <= len(task.test) <= 250
    assert not {e.id for e in task.train} & {e.id for e in task.test}
    assert all(e.input.strip() and e.output.strip() for e in task.train + task.test)
