"""TART-full: 1:4 pairs, a tiny cross-encoder run (BCE) that reloads as a reranker, reranking in evaluation
and search, the CLI (train-full, evaluate/search --rerank, `taskret search`), and TART-full as the denoiser.
The reranker API itself is tested in tests/rerank."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.formats import SEP, format_query
from taskret.io import DataError
from taskret.rerank import CrossEncoderReranker, Reranker, cross_encoder_folder, load_reranker, make_denoiser
from taskret.retrieval import make_retriever
from taskret.tart.cross_encoder import (
    CONFIG_FILE,
    LOG_FILE,
    TartFullConfig,
    build_pairs,
    train_tart_full,
)
from taskret.tart.evaluation import evaluate_retriever
from taskret.tart.tasks import doc_text
from taskret.tart.training_data import build_training_examples, write_training_examples

from .builders import write_beir

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


class Reverse(Reranker):
    """Prefers what the first stage ranked last: scores are the document's position in the query's list."""

    name = "reverse"

    def score_pairs(self, pairs):
        scores, seen = [], {}
        for q, _ in pairs:
            seen[q] = seen.get(q, -1) + 1
            scores.append(seen[q])
        return np.array(scores, dtype=np.float32)


def tiny_config(base, **overrides) -> TartFullConfig:
    settings = dict(base_model=str(base), epochs=5, batch_size=8, learning_rate=1e-3, warmup_ratio=0.0,
                    max_length=64, seed=0)
    settings.update(overrides)
    return TartFullConfig(**settings)


# -- config and pairs ----------------------------------------------------------------------------


def test_config_round_trips_and_validates():
    config = TartFullConfig(epochs=2, n_negatives=3, use_instruction=False, negative_kinds=("hard",))
    assert TartFullConfig.from_json(config.to_json()) == config
    assert TartFullConfig.from_dict({**config.to_dict(), "steps": 3, "n_pairs": 10}) == config
    with pytest.raises(ValueError, match="n_negatives"):
        TartFullConfig(n_negatives=0)
    with pytest.raises(ValueError, match="negative_kinds"):
        TartFullConfig(negative_kinds=("easy",))
    with pytest.raises(ValueError, match="unknown TartFullConfig keys: lr"):
        TartFullConfig.from_dict({"lr": 1})


def test_pairs_are_one_positive_then_up_to_four_negatives(rows):
    config = TartFullConfig()
    pairs = build_pairs(rows, config)
    assert set(pairs) == {"query", "document", "label"}
    position = 0
    for row in rows:
        query = format_query(row["instruction"], row["query"])
        n = min(4, len(row["negatives"]))
        assert pairs["query"][position:position + 1 + n] == [query] * (1 + n)
        assert pairs["label"][position:position + 1 + n] == [1.0] + [0.0] * n
        assert pairs["document"][position] == row["positive_text"]
        negatives = pairs["document"][position + 1:position + 1 + n]
        assert len(set(negatives)) == n and set(negatives) <= {x["text"] for x in row["negatives"]}
        position += 1 + n
    assert position == len(pairs["label"])
    assert sum(pairs["label"]) == len(rows)


def test_pairs_are_seeded_per_epoch_and_follow_the_options(rows):
    config = TartFullConfig(n_negatives=2, seed=3)
    first = build_pairs(rows, config, epoch=0)
    assert build_pairs(rows, config, epoch=0) == first
    assert any(build_pairs(rows, config, epoch=e)["document"] != first["document"] for e in range(1, 5))
    plain = build_pairs(rows, TartFullConfig(use_instruction=False))
    assert not any(SEP in q for q in plain["query"])
    only_hard = build_pairs(rows, TartFullConfig(negative_kinds=("hard",)))
    hard_texts = {n["text"] for r in rows for n in r["negatives"] if n["kind"] == "hard"}
    assert {d for d, label in zip(only_hard["document"], only_hard["label"]) if label == 0.0} <= hard_texts


def test_bad_rows_name_the_source_line_and_field(rows):
    bad = [rows[0], {**rows[1], "negatives": [{"id": "x", "text": "y", "kind": "easy"}]}]
    with pytest.raises(DataError, match=r"train\.jsonl, line 2, field 'negatives\[0\]\.kind'"):
        build_pairs(bad, TartFullConfig(), source="train.jsonl")
    with pytest.raises(ValueError, match="no usable training rows"):
        build_pairs([{**r, "negatives": []} for r in rows], TartFullConfig())


# -- training ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory, rows, tiny_bert_dir):
    out = tmp_path_factory.mktemp("tart-full")
    config = tiny_config(tiny_bert_dir)
    folder = train_tart_full(rows, out, config, progress=False)
    return out, folder, config


def test_training_writes_model_log_and_config(trained, rows):
    out, folder, config = trained
    assert folder == out / "model"
    assert sorted(p.name for p in out.iterdir()) == ["model", CONFIG_FILE, LOG_FILE]  # no temporary folders
    assert (folder / "model.safetensors").exists() and not list(folder.rglob("*.bin"))
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert TartFullConfig.from_dict(summary) == config
    assert summary["n_used"] == len(rows) and summary["n_positive_pairs"] == len(rows) * config.epochs
    assert summary["n_pairs"] == summary["n_positive_pairs"] + sum(summary["negatives_used"].values())
    assert summary["steps"] == sum(-(-(len(rows) + sum(min(4, len(r["negatives"])) for r in rows)) // 8)
                                   for _ in range(config.epochs))
    log = [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]
    assert log[-1]["step"] == summary["steps"] and log[-1]["epoch"] == config.epochs
    # binary cross-entropy goes down: the last epoch's steps against the first step
    assert np.mean([r["loss"] for r in log if r["epoch"] > config.epochs - 1]) < log[0]["loss"]


def test_a_failed_run_leaves_no_model(tmp_path, rows, tiny_bert_dir, monkeypatch):
    from sentence_transformers.cross_encoder import CrossEncoderTrainer

    def crash(self, *args, **kwargs):
        raise RuntimeError("out of memory, say")

    monkeypatch.setattr(CrossEncoderTrainer, "train", crash)
    with pytest.raises(RuntimeError, match="out of memory"):
        train_tart_full(rows, tmp_path / "out", tiny_config(tiny_bert_dir, epochs=1), progress=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [LOG_FILE]


def test_trained_folder_is_a_reranker(trained):
    out, folder, _ = trained
    assert cross_encoder_folder(out) == folder
    reranker = load_reranker(out)
    assert isinstance(reranker, CrossEncoderReranker) and reranker.use_instruction is True
    assert reranker.config == json.loads((out / CONFIG_FILE).read_text())
    docs = ["aspirin lowers the risk of heart attacks", "coffee harms sleep", "jazz by miles davis"]
    ranked = reranker.rank("Find evidence [SEP] aspirin prevents heart attacks", docs, doc_ids=["a", "b", "c"])
    assert sorted(ranked.ids[0]) == ["a", "b", "c"] and np.isfinite(ranked.scores).all()
    probabilities = reranker.predict([("q", d) for d in docs])
    assert ((probabilities > 0) & (probabilities < 1)).all()  # the model's own activation: a sigmoid


def test_a_causal_lm_trains_as_a_yes_no_tart_full(tmp_path, rows, tiny_model_dir):
    """TART-full on an instruction-following LM, as the paper builds it: the yes/no log-odds is the logit."""
    from taskret.rerank.cross_encoder import RELEVANCE_PROMPT

    out = tmp_path / "full-lm"
    folder = train_tart_full(rows, out, tiny_config(tiny_model_dir, epochs=8, learning_rate=1e-2, max_length=96), progress=False)
    assert RELEVANCE_PROMPT in (folder / "chat_template.jinja").read_text()
    log = [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]
    assert np.mean([r["loss"] for r in log if r["epoch"] > 7]) < log[0]["loss"]
    trained, base = load_reranker(out), load_reranker(tiny_model_dir)
    pairs = [(format_query(r["instruction"], r["query"]), r["positive_text"]) for r in rows]
    negatives = [(format_query(r["instruction"], r["query"]), r["negatives"][0]["text"]) for r in rows]
    # it learned: positives now score above negatives by more than before training
    margin = lambda model: float(np.mean(model.score_pairs(pairs)) - np.mean(model.score_pairs(negatives)))  # noqa: E731
    assert margin(trained) > margin(base) + 0.5


# -- reranking -----------------------------------------------------------------------------------


def test_evaluation_reranks_and_changes_the_order(tasks, tmp_path):
    evaluate_retriever("bm25", tasks, k=4, run_dir=tmp_path / "plain")
    reranked = evaluate_retriever("bm25", tasks, k=4, run_dir=tmp_path / "reranked", reranker=Reverse(),
                                  rerank_top_k=3, first_stage_instruction=False, setting="both")
    assert reranked["reranker"] == "reverse" and reranked["rerank_top_k"] == 3
    entry = reranked["settings"]["closed"]["facts"]
    assert entry["rerank_pairs"] > 0 and entry["rerank_pairs_per_s"] > 0 and entry["first_stage_instruction"] is None
    before = {r["qid"]: r["retrieved_ids"] for r in map(json.loads, (tmp_path / "plain/closed/facts.jsonl").open())}
    first_stage = make_retriever("bm25").index_texts(*tasks[0].doc_ids_and_texts())
    for row in map(json.loads, (tmp_path / "reranked/closed/facts.jsonl").open()):
        top = first_stage.retrieve([tasks[0].queries[row["qid"]]], k=4).ids[0]  # the query alone
        assert row["retrieved_ids"] == top[:3][::-1] + top[3:]
        assert row["query"] == format_query(tasks[0].instruction, tasks[0].queries[row["qid"]])
        assert len(row["retrieved_ids"]) == len(before[row["qid"]]) == 4
    pooled = [json.loads(line) for line in (tmp_path / "reranked/pooled/facts.jsonl").open()]
    assert all("/" in d for r in pooled for d in r["retrieved_ids"])  # pooled ids: texts found across tasks


def test_evaluation_with_the_trained_model(trained, tasks):
    out, _, _ = trained
    result = evaluate_retriever("bm25", tasks, k=5, reranker=out, rerank_top_k=5)
    assert result["reranker"] == f"cross-encoder:{out}"
    for entry in result["settings"]["closed"].values():
        assert 0 <= entry["metrics"]["ndcg@10"] <= 100 and entry["rerank_pairs"] == 5 * entry["n_queries"]


# -- denoising -----------------------------------------------------------------------------------


def test_a_trained_folder_denoises_with_the_instruction(trained, tasks):
    out, _, _ = trained
    score, with_instruction = make_denoiser(out)
    assert with_instruction is True
    seen = []

    def recording(pairs):
        seen.extend(pairs)
        return score(pairs)

    stats: dict = {}
    rows = build_training_examples(tasks, n_hard=2, n_random=0, n_unfollowing=0, seed=0, denoiser=recording,
                                   denoise_threshold=0.5, stats=stats, denoise_with_instruction=True)
    assert seen and all(SEP in q for q, _ in seen)
    by_query = {(r["instruction"], r["query"]) for r in rows}
    assert {q for q, _ in seen} <= {format_query(i, q) for i, q in by_query}
    probabilities = score(seen)
    assert stats["n_denoised"] == int((probabilities > 0.5).sum())


# -- command line --------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def test_cli_train_full_evaluate_and_search_with_rerank(tmp_path, rows, tiny_bert_dir):
    data = write_training_examples(tmp_path / "train.jsonl", rows)
    out = tmp_path / "full"
    result = invoke("tart", "train-full", "--data", data, "--out", out, "--base-model", tiny_bert_dir, "--epochs", 1,
                    "--batch-size", 16, "--max-length", 64, "--quiet")
    assert result.exit_code == 0, result.output
    assert "use --rerank" in result.output and (out / CONFIG_FILE).exists()

    corpus = [{"_id": "d1", "title": "Aspirin", "text": "Aspirin lowers the risk of heart attacks."},
              {"_id": "d2", "text": "Vitamin C does not prevent the common cold."},
              {"_id": "d3", "text": "Coffee consumption and sleep quality in adults."}]
    beir = write_beir(tmp_path / "facts", corpus=corpus, qrels={"test": [("q1", "d1", 1), ("q2", "d2", 1)]})
    result = invoke("tart", "evaluate", "--tasks", beir, "--retriever", "bm25", "--rerank", out, "--rerank-top-k", 2,
                    "--k", 3, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["rerank_top_k"] == 2 and metrics["settings"]["closed"]["facts"]["rerank_pairs"] == 4

    index = tmp_path / "index"
    assert invoke("tart", "index", "--task", beir, "--out", index).exit_code == 0
    plain = invoke("search", "--index", index, "--json", "--k", 3, "aspirin heart attacks")
    reranked = invoke("search", "--index", index, "--json", "--k", 3, "--rerank", out, "--instruction", "Find evidence",
                      "aspirin heart attacks")
    tart_reranked = invoke("tart", "search", "--index", index, "--json", "--k", 3, "--rerank", out, "--instruction",
                           "Find evidence", "aspirin heart attacks")
    assert plain.exit_code == reranked.exit_code == tart_reranked.exit_code == 0, reranked.output
    plain_row, row = json.loads(plain.stdout), json.loads(reranked.stdout)
    assert row == json.loads(tart_reranked.stdout)  # `taskret search` is `taskret tart search`
    assert row["query"] == "Find evidence [SEP] aspirin heart attacks" and sorted(row["ids"]) == ["d1", "d2", "d3"]
    assert row["scores"] == sorted(row["scores"], reverse=True) and row["scores"] != plain_row["scores"]
    text = invoke("search", "--index", index, "--k", 1, "--rerank", out, "aspirin")
    assert text.exit_code == 0 and text.stdout.startswith("query: aspirin\n  1. d")

    missing = invoke("search", "--index", index, "--rerank", tmp_path / "nope", "aspirin")
    assert missing.exit_code == 2 and "nope" in missing.output


def test_cli_build_data_with_a_trained_denoiser(tmp_path, trained):
    from .builders import make_data_dir

    out, _, _ = trained
    data_dir = make_data_dir(tmp_path / "data")
    target = tmp_path / "denoised.jsonl"
    result = invoke("tart", "build-data", "--tasks", "mtop,scifact", "--data-dir", data_dir, "--n-hard", 2,
                    "--denoiser", out, "--denoise-threshold", 0.0, "--out", target)
    assert result.exit_code == 0, result.output
    assert "hard negatives dropped by the denoiser" in result.output and target.exists()
    bad = invoke("tart", "build-data", "--tasks", "mtop", "--data-dir", data_dir, "--denoiser", tmp_path / "nope",
                 "--out", tmp_path / "x.jsonl")
    assert bad.exit_code == 2 and "nope" in bad.output


def test_cli_bad_training_rows_name_the_line_and_field(tmp_path, rows):
    data = write_training_examples(tmp_path / "train.jsonl", rows[:2])
    lines = data.read_text().splitlines()
    data.write_text(lines[0] + "\n" + lines[1].replace('"positive_text"', '"positive_txt"') + "\n")
    result = invoke("tart", "train-full", "--data", data, "--out", tmp_path / "x")
    assert result.exit_code == 2 and "line 2, field 'positive_text'" in result.output


def test_doc_text_of_pooled_ids_is_the_task_document(tasks):
    from taskret.tart.evaluation import _doc_texts
    from taskret.tart.tasks import pooled_id

    lookup = _doc_texts(tasks, tasks[0], "pooled")
    assert lookup(pooled_id("parses", "p1")) == doc_text(tasks[1].corpus["p1"])
    assert _doc_texts(tasks, tasks[0], "closed")("f1") == doc_text(tasks[0].corpus["f1"])
