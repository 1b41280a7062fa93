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
