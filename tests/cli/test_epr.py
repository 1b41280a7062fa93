"""`taskret epr ...` run in-process with typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.ids import IdList
from tests.conftest import POOL_ROWS, read_jsonl_rows, write_jsonl_rows

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}  # wide: rich must not wrap paths in messages
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]


def invoke(*args):
    return CliRunner().invoke(app, ["epr", *[str(a) for a in args]], env=ENV)


@pytest.fixture
def train(tmp_path):
    return write_jsonl_rows(tmp_path / "train.jsonl", POOL_ROWS)


def test_epr_help_lists_the_stages():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("candidates", "score", "label", "train", "index", "run"):
        assert command in result.output


def test_candidates(tmp_path, train):
    from taskret.data import Example
    from taskret.epr.candidates import mine_candidates

    out = tmp_path / "cands.jsonl"
    result = invoke("candidates", "--train", train, *FIELDS, "--n", 3, "--field", "input", "--out", out)
    assert result.exit_code == 0, result.output
    assert f"8 examples x 3 candidates -> {out}" in result.stderr
    rows = read_jsonl_rows(out)
    examples = [Example(r["key"], r["q"], r["a"]) for r in POOL_ROWS]
    assert rows == mine_candidates(examples, n=3, field="input")
    assert all(len(r["candidates"]) == 3 and r["id"] not in r["candidates"] for r in rows)

    limited = tmp_path / "limited.jsonl"
    result = invoke("candidates", "--train", train, *FIELDS, "--n", 3, "--limit", 5, "--out", limited)
    assert result.exit_code == 0, result.output
    rows = read_jsonl_rows(limited)
    assert len(rows) == 5
    assert {c for r in rows for c in r["candidates"]} - {r["id"] for r in rows}  # candidates from the whole pool


@pytest.mark.parametrize("stage,extra,option", [
    ("candidates", ["--n", "0"], "--n"), ("candidates", ["--limit", "0"], "--limit"),
    ("label", ["--method", "bm25", "--k", "0"], "--k"), ("score", ["--candidates", "c.jsonl", "--shard-size", "0"],
                                                         "--shard-size"),
    ("train", ["--labels", "l.jsonl", "--epochs", "0"], "--epochs"),
    ("train", ["--labels", "l.jsonl", "--batch-size", "-1"], "--batch-size"),
])
def test_stage_counts_below_one_are_refused(tmp_path, train, stage, extra, option):
    result = invoke(stage, "--train", train, *extra, "--out", tmp_path / "out")
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output
    assert not (tmp_path / "out").exists()


def test_candidates_with_a_bad_train_file(tmp_path):
    train = write_jsonl_rows(tmp_path / "train[v2].jsonl", [POOL_ROWS[0], {"key": "x", "q": "no output"}])
    out = tmp_path / "cands.jsonl"
    result = invoke("candidates", "--train", train, *FIELDS, "--out", out)
    assert result.exit_code == 2
    assert f"{train}, line 2, field 'a': missing field" in result.stderr  # brackets survive rich markup
    assert "Traceback" not in result.output and not out.exists()


def test_label_bm25(tmp_path, train):
    from taskret.epr.labels import bm25_labels

    cands = tmp_path / "cands.jsonl"
    assert invoke("candidates", "--train", train, *FIELDS, "--n", 5, "--out", cands).exit_code == 0
    out = tmp_path / "labels.jsonl"
    result = invoke("label", "--method", "bm25", "--candidates", cands, "--k", 2, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"8 label rows -> {out}" in result.stderr
    rows = read_jsonl_rows(out)
    assert rows == bm25_labels(read_jsonl_rows(cands), k=2)
    assert all(len(r["positives"]) == 2 == len(r["negatives"]) for r in rows)


def test_label_bm25_without_bm25_scores(tmp_path):
    cands = write_jsonl_rows(tmp_path / "cands.jsonl", [{"id": "a", "candidates": ["b", "c"]}])
    result = invoke("label", "--method", "bm25", "--candidates", cands, "--out", tmp_path / "labels.jsonl")
    assert result.exit_code == 2
    assert "row 'a' has no list of bm25 scores" in result.stderr and "Traceback" not in result.output


def test_label_cbr(tmp_path, train):
    cands = write_jsonl_rows(tmp_path / "cands.jsonl", [
        {"id": "weather", "candidates": ["alarm", "news", "music"]},
        {"id": "alarm", "candidates": ["timer", "weather", "call"]},
    ])
    out = tmp_path / "labels.jsonl"
    result = invoke("label", "--method", "cbr", "--candidates", cands, "--train", train, *FIELDS, "--k", 1, "--out", out)
    assert result.exit_code == 0, result.output
    # CREATE_TIMER / CREATE_CALL share no token with CREATE_ALARM: all F1 0, candidate order decides
    assert read_jsonl_rows(out) == [{"id": "weather", "positives": ["alarm"], "negatives": ["music"]},
                                    {"id": "alarm", "positives": ["timer"], "negatives": ["call"]}]


def test_label_cbr_with_an_unknown_candidate(tmp_path, train):
    cands = write_jsonl_rows(tmp_path / "cands.jsonl", [{"id": "weather", "candidates": ["alarm"]},
                                                        {"id": "alarm", "candidates": ["[/bold]"]}])
    result = invoke("label", "--method", "cbr", "--candidates", cands, "--train", train, *FIELDS,
                    "--out", tmp_path / "labels.jsonl")
    assert result.exit_code == 2
    assert "line 2, field 'candidates': unknown example id '[/bold]'" in result.stderr
    assert "Traceback" not in result.output


def test_label_lm_needs_scores(tmp_path):
    out = tmp_path / "labels.jsonl"
    result = invoke("label", "--method", "lm", "--out", out)
    assert result.exit_code == 2
    assert "--method lm needs --scores" in result.stderr
    assert not out.exists()
    result = invoke("label", "--method", "oracle", "--out", out)
    assert result.exit_code == 2 and "unknown method 'oracle'" in result.stderr


def test_label_lm(tmp_path):
    scores = write_jsonl_rows(tmp_path / "scores.jsonl", [{"id": "x", "candidates": [
        {"id": "a", "logprob": -3.0, "n_tokens": 3}, {"id": "b", "logprob": -1.0, "n_tokens": 3},
        {"id": "c", "logprob": -7.5, "n_tokens": 3}]}])
    out = tmp_path / "labels.jsonl"
    result = invoke("label", "--scores", scores, "--k", 1, "--out", out)
    assert result.exit_code == 0, result.output
    assert read_jsonl_rows(out) == [{"id": "x", "positives": ["b"], "negatives": ["c"]}]


def test_score_rejects_unknown_candidate_ids_before_loading_a_model(tmp_path, train):
    cands = write_jsonl_rows(tmp_path / "cands.jsonl", [{"id": "weather", "candidates": ["alarm", "ghost"]}])
    result = invoke("score", "--train", train, *FIELDS, "--candidates", cands, "--lm", "no-such-model",
                    "--out", tmp_path / "scoring")
    assert result.exit_code == 2
    assert f"{cands}, line 1, field 'candidates': unknown example id 'ghost'" in result.stderr


def test_run_with_an_unknown_config_key(tmp_path):
    config = tmp_path / "epr.json"
    config.write_text(json.dumps({"train": "train.jsonl", "n_candidates": 4, "eval_limt": 8}))
    result = invoke("run", config)
    assert result.exit_code == 2
    # what would work, not pydantic's dump (its type names and URL)
    assert f"error: {config}: unknown key 'eval_limt' (did you mean 'eval_limit'?)\n" == result.stderr
    assert "Traceback" not in result.output


def test_run_with_a_missing_config_file(tmp_path):
    result = invoke("run", tmp_path / "nope.json")
    assert result.exit_code == 2 and "cannot read file" in result.stderr


def test_run_a_bm25_pipeline(tmp_path, train, tiny_model_dir, tiny_bert_dir):
    pytest.importorskip("sentence_transformers")
    bert = tiny_bert_dir
    work = tmp_path / "work"
    config = tmp_path / "epr.json"
    config.write_text(json.dumps({
        "train": str(train), "test": str(train), "input_field": "q", "output_field": "a", "id_field": "key",
        "work_dir": str(work), "labels": "bm25", "n_candidates": 4, "k": 1, "inference_lm": str(tiny_model_dir),
        "training": {"base_model": str(bert), "epochs": 1, "batch_size": 4, "mini_batch_size": 4},
        "eval_limit": 2, "context_window": 256, "max_new_tokens": 4}))
    result = invoke("run", config)
    assert result.exit_code == 0, result.output
    for stage in ("candidates: 8 examples x 4", "labels: 8 rows (bm25)",
                  "training: 2 steps, final loss", f"(trainer log: {work / 'logs' / 'run.log'}) -> {work / 'retriever'}",
                  "index: 8 examples", "EPR on train: em"):
        assert stage in result.stderr, stage
    assert result.stdout == "" and "'loss'" not in result.stderr and "it/s]" not in result.stderr  # no trainer output
    assert '"loss": ' in (work / "logs" / "run.log").read_text(encoding="utf-8")
    assert json.loads((work / "eval" / "summary.json").read_text())["n"] == 2
    # the last line pairs EPR with BM25 on the same test inputs
    assert json.loads((work / "baseline" / "summary.json").read_text())["retriever"] == "bm25"
    assert result.stderr.strip().splitlines()[-1].startswith("EPR solves ") and "(McNemar p=" in result.stderr
    again = invoke("run", config)
    assert again.exit_code == 0
    assert again.stderr.count("exists, skipped") == 5 and "index:" in again.stderr and "EPR on train: em" in again.stderr
    # the same run from a copy of its work folder elsewhere (--work-dir): it goes on there, nothing recomputed
    import shutil

    copy = tmp_path / "kept" / "work"
    shutil.copytree(work, copy)
    moved = invoke("run", config, "--work-dir", copy)
    assert moved.exit_code == 0, moved.output
    assert moved.stderr.count("exists, skipped") == 5 and str(copy / "eval") in moved.stderr


def test_the_shared_task_options_take_a_known_format(tmp_path):
    rows = [{"idx": f"s{i}", "user_utterance": f"schedule meeting number {i} with Abby",
             "lispress": f"(Yield (Create {i}))"} for i in range(5)]
    train = write_jsonl_rows(tmp_path / "sm_train.jsonl", rows)
    out = tmp_path / "cands.jsonl"
    result = invoke("candidates", "--train", train, "--format", "smcalflow", "--n", 2, "--out", out)
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in read_jsonl_rows(out)] == [f"s{i}" for i in range(5)]  # ids from the layout's id field
    result = invoke("candidates", "--train", train, "--format", "squad", "--out", out)
    assert result.exit_code == 2 and "unknown format 'squad'" in result.stderr


def test_the_stages_read_the_task_options_from_a_config(tmp_path, train, tiny_bert_dir):
    pytest.importorskip("sentence_transformers")
    config = tmp_path / "pipeline_config.json"
    config.write_text(json.dumps({"train": str(train), "input_field": "q", "output_field": "a", "id_field": "key"}))
    cands, labels, model, index = (tmp_path / name for name in ("cands.jsonl", "labels.jsonl", "retriever", "index"))
    assert invoke("candidates", "--config", config, "--n", 3, "--out", cands).exit_code == 0
    assert [r["id"] for r in read_jsonl_rows(cands)] == [r["key"] for r in POOL_ROWS]  # the id field was read
    assert invoke("label", "--method", "cbr", "--candidates", cands, "--config", config, "--k", 1,
                  "--out", labels).exit_code == 0
    result = invoke("train", "--labels", labels, "--config", config, "--base-model", tiny_bert_dir, "--epochs", 1,
                    "--batch-size", 4, "--mini-batch-size", 4, "--out", model)
    assert result.exit_code == 0, result.output
    assert f"(trainer log: {model / 'logs' / 'train.log'})" in result.stderr and result.stdout == ""
    result = invoke("index", "--model", model, "--config", config, "--out", index)
    assert result.exit_code == 0, result.output
    assert sorted(IdList.load(index)) == sorted(r["key"] for r in POOL_ROWS)
    # an option given on the command line wins over the config's
    result = invoke("candidates", "--config", config, "--id-field", "nope", "--n", 3, "--out", cands)
    assert result.exit_code == 0 and read_jsonl_rows(cands)[0]["id"] == "train-1"
