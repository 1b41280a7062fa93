"""The one error handler of every `taskret` command (taskret.cli.common): a user error prints exactly
`error: <message>` on stderr and exits with 2, the same in `taskret`, `taskret epr` and `taskret tart`;
a bug keeps its traceback."""

from __future__ import annotations

import warnings

import pytest
import typer
from typer.testing import CliRunner

from taskret.cli import app
from taskret.data import read_examples
from taskret.io import DataError
from taskret.models import resolve_model
from taskret.tart.tasks import load_retrieval_task
from tests.conftest import POOL_ROWS, write_jsonl_rows
from tests.tart.builders import write_beir

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]


def invoke(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env={**ENV, **(env or {})})


def message_of(call) -> str:
    """What the library says, to compare with what the command prints."""
    with pytest.raises(Exception) as info:
        call()
    return str(info.value)


def assert_reported(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"  # one line, no markup eaten, no traceback
    assert result.stdout == ""


@pytest.fixture
def bad_pool(tmp_path):
    """A training pool whose second line has no output field; the file name holds rich markup brackets."""
    return write_jsonl_rows(tmp_path / "pool[v2].jsonl", [POOL_ROWS[0], {"key": "x", "q": "no output here"}])


@pytest.fixture
def bad_beir(tmp_path):
    folder = write_beir(tmp_path / "facts[v2]")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\tyes\n", encoding="utf-8")
    return folder


def test_a_data_error_prints_the_same_in_every_cli(tmp_path, bad_pool, bad_beir):
    pool_error = message_of(lambda: read_examples(bad_pool, "q", "a", "key"))
    assert f"{bad_pool}, line 2, field 'a': missing field (fields here: key, q; name yours with --input-field / " \
        f"--output-field)" == pool_error
    assert_reported(invoke("evaluate", "--train", bad_pool, "--test", bad_pool, *FIELDS, "--out", tmp_path / "run"),
                    pool_error)
    assert_reported(invoke("epr", "candidates", "--train", bad_pool, *FIELDS, "--out", tmp_path / "c.jsonl"),
                    pool_error)
    beir_error = message_of(lambda: load_retrieval_task(str(bad_beir)))
    assert "field 'score'" in beir_error
    assert_reported(invoke("tart", "evaluate", "--tasks", bad_beir, "--out", tmp_path / "eval"), beir_error)
    assert not (tmp_path / "run").exists() and not (tmp_path / "c.jsonl").exists() and not (tmp_path / "eval").exists()


def test_a_missing_file_prints_the_same_in_every_cli(tmp_path):
    missing = tmp_path / "missing[1].jsonl"
    cannot_read = f"{missing}: cannot read file (No such file or directory)"
    assert_reported(invoke("evaluate", "--train", missing, "--test", missing), cannot_read)
    assert_reported(invoke("epr", "label", "--scores", missing, "--out", tmp_path / "labels.jsonl"), cannot_read)
    assert_reported(invoke("tart", "train-dual", "--data", missing, "--out", tmp_path / "dual"), cannot_read)
    result = invoke("tart", "search", "--index", tmp_path / "no-index", "query")
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and str(tmp_path / "no-index") in result.stderr
    assert result.stderr.count("\n") == 1


def test_an_unknown_model_prints_the_same_in_every_cli(tmp_path):
    unknown = message_of(lambda: resolve_model("no-such-model"))
    assert unknown.startswith("unknown model 'no-such-model'")
    train = write_jsonl_rows(tmp_path / "train.jsonl", POOL_ROWS)
    assert_reported(invoke("evaluate", "--train", train, "--test", train, *FIELDS, "--lm", "no-such-model",
                           "--out", tmp_path / "run"), unknown)
    cands = write_jsonl_rows(tmp_path / "cands.jsonl", [{"id": "weather", "candidates": ["alarm"]}])
    assert_reported(invoke("epr", "score", "--train", train, *FIELDS, "--candidates", cands, "--lm", "no-such-model",
                           "--out", tmp_path / "scoring"), unknown)
    folder = write_beir(tmp_path / "facts")
    assert_reported(invoke("tart", "index", "--task", folder, "--retriever", "dense:no-such-model",
                           "--out", tmp_path / "index"), unknown)
    assert not (tmp_path / "run").exists() and not (tmp_path / "index").exists()


def test_a_pool_bm25_cannot_index_is_reported_without_warnings(tmp_path, tiny_model_dir):
    stop_words = [{"key": "a", "q": "the a an", "a": "GET_WEATHER paris"}, {"key": "b", "q": "is it to be", "a": "CALL"}]
    train = write_jsonl_rows(tmp_path / "train.jsonl", stop_words)
    test = write_jsonl_rows(tmp_path / "test.jsonl", [{"key": "t", "q": "weather in paris", "a": "GET_WEATHER paris"}])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke("evaluate", "--train", train, "--test", test, *FIELDS, "--retriever", "bm25",
                        "--lm", tiny_model_dir, "--out", tmp_path / "run")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {train}: bm25: the 2 indexed texts have no terms after English "
                                    "stop-word removal and stemming (e.g. 'the a an')")
    assert "max() arg" not in result.output and "Warning" not in result.output
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not (tmp_path / "run").exists()
    # the output field has terms: indexing it works
    result = invoke("evaluate", "--train", train, "--test", test, *FIELDS, "--retriever", "bm25:output",
                    "--lm", tiny_model_dir, "--context-window", "128", "--max-new-tokens", "4", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    import taskret.epr.candidates

    def broken(*args, **kwargs):
        raise KeyError("a bug, not a user error")

    monkeypatch.setattr(taskret.epr.candidates, "mine_candidates", broken)
    train = write_jsonl_rows(tmp_path / "train.jsonl", POOL_ROWS)
    result = invoke("epr", "candidates", "--train", train, *FIELDS, "--out", tmp_path / "c.jsonl")
    assert result.exit_code == 1 and isinstance(result.exception, KeyError)
    assert "error:" not in result.stderr


def test_taskret_debug_shows_the_traceback_of_a_user_error(tmp_path, bad_pool):
    result = invoke("epr", "candidates", "--train", bad_pool, *FIELDS, "--out", tmp_path / "c.jsonl",
                    env={"TASKRET_DEBUG": "1"})
    assert result.exit_code == 1 and isinstance(result.exception, DataError)


def _commands(group: typer.Typer, path: str = "taskret"):
    for info in group.registered_commands:
        yield f"{path} {info.name or info.callback.__name__.replace('_', '-')}", info.callback
    for sub in group.registered_groups:
        yield from _commands(sub.typer_instance, f"{path} {sub.name}")


def test_every_command_of_every_cli_runs_under_the_handler():
    from taskret.cli.common import report_errors

    commands = dict(_commands(app))
    assert {"taskret evaluate", "taskret epr score", "taskret tart run", "taskret search"} <= set(commands)
    handler = report_errors(lambda: None).__code__  # every wrapped command runs this code
    assert [name for name, callback in commands.items() if callback.__code__ is not handler] == []



def test_a_config_built_in_code_is_reported_in_words_not_as_pydantic_prints_it():
    from pydantic import ValidationError

    from taskret.cli.common import _message
    from taskret.epr.pipeline import EPRConfig

    with pytest.raises(ValidationError) as info:
        EPRConfig(eval_limt=3, k=0)
    assert _message(info.value) == "EPRConfig: key 'k': Input should be greater than or equal to 1 (got 0); unknown " \
                                   "key 'eval_limt'"


def test_break_without_wordnet_says_what_to_install_in_one_line_before_any_model_loads(tmp_path, monkeypatch):
    """LF-EM needs the WordNet database: without it `taskret evaluate --task break` and `taskret epr run` end in
    one line naming the package, before an LM is loaded (the LM named here does not exist) or a stage runs."""
    import json

    from taskret.icl.lf_em import wordnet as wordnet_module

    pytest.importorskip("spacy")
    rows = "question_id,question_text,decomposition,operators,split\n" + "".join(
        f'Q{i},how many cats are there {i},"[""return cats"", ""return number of #1""]","[\'select\']",train\n'
        for i in range(4))
    (tmp_path / "data" / "break").mkdir(parents=True)
    for split in ("train", "test"):
        (tmp_path / "data" / "break" / f"{split}.csv").write_text(rows, encoding="utf-8")
    monkeypatch.setattr(wordnet_module, "_candidates", lambda: [])
    wordnet_module.wordnet.cache_clear()
    try:
        result = invoke("evaluate", "--task", "break", "--data-dir", tmp_path / "data", "--lm", tmp_path / "no-such-lm",
                        "--out", tmp_path / "run")
        assert_reported(result, wordnet_module.WORDNET_INSTALL)
        assert not (tmp_path / "run").exists()
        config = tmp_path / "epr.json"
        config.write_text(json.dumps({"task": "break", "data_dir": str(tmp_path / "data"), "work_dir": str(tmp_path / "w"),
                                      "labels": "bm25", "inference_lm": str(tmp_path / "no-such-lm")}))
        assert_reported(invoke("epr", "run", config), wordnet_module.WORDNET_INSTALL)
        assert not (tmp_path / "w" / "candidates.jsonl").exists()
    finally:
        wordnet_module.wordnet.cache_clear()
