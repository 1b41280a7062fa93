"""TART-full trained by query likelihood (UPR fine-tuned on the training tasks): the config, the groups it draws,
a tiny causal LM that learns to rank its positives first and reloads as a CausalLMReranker, validation keeping
the best step, and the errors for a base that is not a causal LM or a denoiser that cannot threshold."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taskret.formats import SEP, format_query
from taskret.rerank import CausalLMReranker, load_reranker, make_denoiser
from taskret.tart.cross_encoder import CONFIG_FILE, LOG_FILE, TartFullConfig, train_tart_full
from taskret.tart.query_likelihood import ranking_sampler
from taskret.tart.training_data import usable_rows
from taskret.tart.validation import full_validator


def ql_config(base, **overrides) -> TartFullConfig:
    settings = dict(base_model=str(base), objective="query_likelihood", epochs=6, batch_size=2, n_negatives=2,
                    learning_rate=3e-3, warmup_ratio=0.0, max_length=128, max_doc_tokens=48, seed=0)
    settings.update(overrides)
    return TartFullConfig(**settings)


def test_the_objective_and_its_options_are_checked():
    assert TartFullConfig(objective="query_likelihood", n_negatives=0).n_negatives == 0  # the LM objective alone
    with pytest.raises(ValueError, match="objective must be one of relevance, query_likelihood"):
        TartFullConfig(objective="pairwise")
    with pytest.raises(ValueError, match="n_negatives must be an integer >= 1 for objective relevance"):
        TartFullConfig(n_negatives=0)
    with pytest.raises(ValueError, match="instruction_dropout applies to objective query_likelihood only"):
        TartFullConfig(instruction_dropout=0.5)
    with pytest.raises(ValueError, match="ranking_weight"):
        TartFullConfig(objective="query_likelihood", ranking_weight=-1.0)
    config = TartFullConfig(objective="query_likelihood", instruction_dropout=0.5, ranking_weight=0.5)
    assert TartFullConfig.from_json(config.to_json()) == config


def test_groups_hold_the_positive_first_then_its_negatives(rows):
    config = TartFullConfig(objective="query_likelihood", n_negatives=2)
    usable, _ = usable_rows(rows, config.negative_kinds, "rows")
    groups = ranking_sampler(config).epoch(usable, seed=0, epoch=0)
    assert len(groups) == len(usable)
    for (row, negatives), query, documents in zip(usable, groups.columns["query"], groups.columns["documents"]):
        assert query == format_query(row["instruction"], row["query"])
        assert documents[0] == row["positive_text"]
        assert len(documents) == 1 + min(2, len(negatives)) and set(documents[1:]) <= {n["text"] for n in negatives}
    bare = ranking_sampler(TartFullConfig(objective="query_likelihood", instruction_dropout=1.0)).epoch(usable, 0, 0)
    assert not any(SEP in q for q in bare.columns["query"])


def test_a_bare_query_never_ranks_an_unfollowing_negative_when_they_need_the_instruction(rows):
    many = [{**r, "qid": f"{r['qid']}-{i}"} for i in range(25) for r in rows]

    def bare_and_instructed(config):
        usable, _ = usable_rows(many, config.negative_kinds, "rows")
        groups = ranking_sampler(config).epoch(usable, 0, 0).columns
        counts = [0, 0]  # [bare, instructed] groups holding one of their row's unfollowing negatives
        for (_row, negatives), query, documents in zip(usable, groups["query"], groups["documents"]):
            own = {n["text"] for n in negatives if n["kind"] != "unfollowing"}
            counts[SEP in query] += any(d not in own for d in documents[1:])
        return counts

    settings = dict(objective="query_likelihood", n_negatives=1, instruction_dropout=0.5, seed=1)
    assert bare_and_instructed(TartFullConfig(**settings))[0] > 0  # the old draw gives bare queries some
    bare, instructed = bare_and_instructed(TartFullConfig(**settings, unfollowing_needs_instruction=True))
    assert bare == 0 and instructed > 0
    with pytest.raises(ValueError, match="unfollowing_needs_instruction applies to objective query_likelihood"):
        TartFullConfig(unfollowing_needs_instruction=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, rows, tiny_model_dir, tasks):
    out = tmp_path_factory.mktemp("tart-full-ql")
    validate = full_validator(tasks, top_k=3)
    folder = train_tart_full(rows, out, ql_config(tiny_model_dir), progress=False, validate=validate,
                             validate_steps=4)
    return out, folder


def test_training_writes_a_causal_lm_folder_log_and_summary(trained, rows):
    out, folder = trained
    assert folder == out / "model"
    assert sorted(p.name for p in out.iterdir()) == ["model", CONFIG_FILE, LOG_FILE]  # no temporary folders
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert summary["objective"] == "query_likelihood" and summary["n_used"] == len(rows)
    assert summary["steps"] == 6 * -(-len(rows) // 2)
    assert summary["n_pairs"] == summary["n_positive_pairs"] + sum(summary["negatives_used"].values())
    log = [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert steps[-1]["step"] == summary["steps"] and steps[-1]["epoch"] == 6
    assert np.mean([r["loss"] for r in steps if r["epoch"] > 5]) < steps[0]["loss"]
    checks = summary["validation"]
    expected = sorted({0, *range(4, summary["steps"] + 1, 4), summary["steps"]})
    assert [r["step"] for r in log if "dev_score" in r] == expected
    assert sorted(map(int, checks["dev_scores"])) == expected
    assert checks["best_dev_score"] == max(checks["dev_scores"].values())


def test_the_trained_folder_reranks_by_query_likelihood_and_learned(trained, rows, tiny_model_dir):
    out, _ = trained
    reranker = load_reranker(out)
    assert isinstance(reranker, CausalLMReranker) and reranker.max_doc_tokens == 48 and reranker.use_instruction
    base = CausalLMReranker(str(tiny_model_dir), max_doc_tokens=48)
    pairs = [(format_query(r["instruction"], r["query"]), r["positive_text"]) for r in rows]
    negatives = [(format_query(r["instruction"], r["query"]), r["negatives"][0]["text"]) for r in rows]
    # it learned: positives now score above negatives by more than before training
    margin = lambda model: float(np.mean(model.score_pairs(pairs)) - np.mean(model.score_pairs(negatives)))  # noqa: E731
    assert margin(reranker) > margin(base) + 0.5
    with pytest.raises(ValueError, match="not a relevance probability"):
        make_denoiser(out)


def test_the_lm_objective_alone_raises_the_positives_likelihood(tmp_path, rows, tiny_model_dir):
    out = tmp_path / "plain"
    config = ql_config(tiny_model_dir, n_negatives=0, epochs=3, use_instruction=False)
    train_tart_full(rows, out, config, progress=False)
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert summary["n_pairs"] == summary["n_positive_pairs"] == 3 * len(rows)
    assert summary["n_skipped"] == 0  # no negatives needed: every row trains
    trained = load_reranker(out)
    assert trained.use_instruction is False  # a distillation teacher then reads the bare queries, as it trained
    pairs = [(r["query"], r["positive_text"]) for r in rows]
    before = CausalLMReranker(str(tiny_model_dir), max_doc_tokens=48).score_pairs(pairs)
    assert np.mean(trained.score_pairs(pairs)) > np.mean(before) + 1.0


def test_a_base_that_is_not_a_causal_lm_is_named(tmp_path, rows, tiny_bert_dir):
    with pytest.raises(ValueError, match="needs a causal LM as base_model"):
        train_tart_full(rows, tmp_path / "out", ql_config(tiny_bert_dir), progress=False)
    assert not (tmp_path / "out" / "model").exists()


def test_cli_trains_by_query_likelihood_and_reranks_with_it(tmp_path, rows, tiny_model_dir):
    from typer.testing import CliRunner

    from taskret.cli import app
    from taskret.tart.training_data import write_training_examples

    from .builders import write_beir

    def invoke(*args):
        return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"})

    data = write_training_examples(tmp_path / "train.jsonl", rows)
    out = tmp_path / "full"
    result = invoke("tart", "train-full", "--data", data, "--out", out, "--base-model", tiny_model_dir,
                    "--objective", "query_likelihood", "--instruction-dropout", 0.5, "--batch-size", 4,
                    "--n-negatives", 2, "--epochs", 1, "--max-length", 128, "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads((out / CONFIG_FILE).read_text())["instruction_dropout"] == 0.5
    corpus = [{"_id": "d1", "text": "Aspirin lowers the risk of heart attacks."},
              {"_id": "d2", "text": "Vitamin C does not prevent the common cold."}]
    beir = write_beir(tmp_path / "facts", corpus=corpus, qrels={"test": [("q1", "d1", 1), ("q2", "d2", 1)]})
    result = invoke("tart", "evaluate", "--tasks", beir, "--retriever", "bm25", "--rerank", out, "--rerank-top-k", 2,
                    "--k", 2, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["reranker"].startswith("upr:") and metrics["settings"]["closed"]["facts"]["rerank_pairs"] == 4
    bad = invoke("tart", "train-full", "--data", data, "--out", tmp_path / "x", "--objective", "pairwise")
    assert bad.exit_code == 2 and "objective must be one of" in bad.output
