"""`taskret evaluate` with set-level selection (--select), weight tuning on training data, and --metric chrf."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from taskret.cli import app

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def _pool_args(pool_files):
    train, test = pool_files
    return ["--train", train, "--test", test, "--input-field", "q", "--output-field", "a", "--id-field", "key"]


def test_select_dpp_with_a_dense_retriever_uses_its_own_vectors(tmp_path, pool_files, tiny_model_dir, tiny_bert_dir):
    out = tmp_path / "run"
    result = invoke("evaluate", *_pool_args(pool_files), "--retriever", f"dense:{tiny_bert_dir}", "--lm",
                    tiny_model_dir, "--context-window", "200", "--max-new-tokens", "4", "--select", "dpp",
                    "--select-weight", "0.8", "--select-candidates", "5", "--k", "3", "--out", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["selection"]["method"] == "dpp" and summary["selection"]["weight"] == 0.8
    assert summary["selection"]["ceil_scale_factor"] == 0.25
    assert summary["selection"]["vectors"] == "retriever" and summary["selection"]["relevance"] == "cosine"  # dpp
    assert summary["max_demos"] == 3
    assert "+dpp" in result.stderr


def test_tune_weights_chooses_on_training_examples(tmp_path, pool_files, tiny_model_dir):
    out = tmp_path / "run"
    result = invoke("evaluate", *_pool_args(pool_files), "--retriever", "bm25", "--lm", tiny_model_dir,
                    "--context-window", "200", "--max-new-tokens", "4", "--select", "mmr", "--tune-weights",
                    "0.5,1", "--tune-n", "4", "--metric", "chrf", "--out", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    tuning = summary["selection_tuning"]
    assert tuning["metric"] == "chrf" and tuning["n"] == 4 and set(tuning["scores"]) == {"0.5", "1.0"}
    assert summary["selection"]["weight"] == tuning["chosen"]
    assert "chrf" in summary["metrics"] and "--select-weight" in result.stderr


@pytest.mark.parametrize("extra,message", [
    (["--select-weight", "0.5"], "--select-weight and --tune-weights need --select"),
    (["--select", "knn"], "unknown selection 'knn'"),
    (["--select", "dpp", "--tune-weights", "0.5,x"], "--tune-weights: expected comma-separated numbers"),
    (["--metric", "bleu"], "unknown metric 'bleu'"),
    (["--select", "dpp", "--tune-weights", "0.5", "--retriever", "bm25-oracle"], "--tune-weights needs a retriever"),
])
def test_bad_selection_options_fail_before_the_lm_loads(tmp_path, pool_files, extra, message):
    result = invoke("evaluate", *_pool_args(pool_files), "--lm", tmp_path / "no-such-lm", *extra)
    assert result.exit_code == 2
    assert message in result.stderr


def _epr_run_folder(folder, pool_files, ids):
    """What `taskret epr run` leaves that `epr multitask` reads: the config and the labels."""
    train, test = pool_files
    folder.mkdir()
    (folder / "pipeline_config.json").write_text(json.dumps({
        "train": str(train), "test": str(test), "input_field": "q", "output_field": "a", "id_field": "key",
        "work_dir": str(folder)}))
    rows = [{"id": ids[i], "positives": [ids[(i + 1) % len(ids)]], "negatives": [ids[(i + 2) % len(ids)]]}
            for i in range(len(ids))]
    (folder / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_multitask_retriever_trains_from_runs_and_evaluates_with_an_instruction(tmp_path, pool_files,
                                                                                   tiny_model_dir, tiny_bert_dir):
    from tests.conftest import POOL_ROWS

    ids = [r["key"] for r in POOL_ROWS]
    first = _epr_run_folder(tmp_path / "a", pool_files, ids[: len(ids) // 2])
    second = _epr_run_folder(tmp_path / "b", pool_files, ids[len(ids) // 2:])
    out = tmp_path / "multi"
    result = invoke("epr", "multitask", "--run", first, "--run", second, "--instruction", "Parse the request",
                    "--instruction", "Name the intent", "--base-model", tiny_bert_dir, "--epochs", "1",
                    "--batch-size", "4", "--mini-batch-size", "4", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "model").is_dir() and "multi-task retriever" in result.stderr
    tasks = json.loads((out / "tasks.json").read_text())
    assert [t["instruction"] for t in tasks] == ["Parse the request", "Name the intent"]
    run = tmp_path / "eval"
    result = invoke("evaluate", *_pool_args(pool_files), "--retriever", f"epr:{out}", "--instruction",
                    "Find a request like this one", "--lm", tiny_model_dir, "--context-window", "200",
                    "--max-new-tokens", "4", "--select", "dpp", "--select-weight", "0.9", "--select-candidates", "4",
                    "--out", run)
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["instruction"] == "Find a request like this one"
    assert summary["selection"]["vectors"] == "retriever"  # the wrapped dense retriever's own vectors


def test_multitask_needs_one_instruction_per_run(tmp_path, pool_files):
    result = invoke("epr", "multitask", "--run", tmp_path, "--instruction", "a", "--instruction", "b",
                    "--out", tmp_path / "out")
    assert result.exit_code == 2 and "one instruction per run" in result.output
