"""library_logs: the libraries' records go to the file, and a block that fails before any record leaves no file."""

import logging

import pytest

from taskret.training.logs import library_log, library_logs


def test_records_go_to_the_file_and_the_loggers_are_restored(tmp_path):
    from transformers.utils import logging as hf_logging

    hf_logging.get_verbosity()  # transformers sets its logger up on first use: before we look at it
    path = tmp_path / "out" / "logs" / "train.log"
    before = list(logging.getLogger("transformers").handlers)
    with library_logs(path) as log:
        assert library_log() == log == path
        logging.getLogger("transformers").warning("a library's warning")
    assert "a library's warning" in path.read_text()
    assert library_log() is None
    assert logging.getLogger("transformers").handlers == before


def test_a_block_that_ends_well_without_records_still_leaves_the_file_it_names(tmp_path):
    path = tmp_path / "logs" / "run.log"
    with library_logs(path):
        pass
    assert path.is_file()


def test_a_block_that_fails_before_any_record_leaves_neither_file_nor_folder(tmp_path):
    path = tmp_path / "retriever" / "logs" / "train.log"
    with pytest.raises(ValueError), library_logs(path):
        raise ValueError("bad labels")
    assert not (tmp_path / "retriever").exists()


def test_a_block_that_fails_after_a_record_keeps_it(tmp_path):
    path = tmp_path / "logs" / "train.log"
    with pytest.raises(RuntimeError), library_logs(path):
        logging.getLogger("transformers").warning("what happened before the failure")
        raise RuntimeError("out of memory")
    assert "what happened before the failure" in path.read_text()
