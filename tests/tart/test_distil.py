"""Distillation of TART-full into a dual encoder: teacher scores, fixed-width candidate rows, a tiny KL run
that lowers the KL to the teacher, and `taskret tart distil` with a trained TART-full folder."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.formats import SEP, format_query
from taskret.io import DataError
from taskret.rerank import Reranker
from taskret.tart.cross_encoder import TartFullConfig, train_tart_full
from taskret.tart.distil import (
    CONFIG_FILE,
    LOG_FILE,
    TartDistilConfig,
    build_distillation_rows,
    distillation_kl,
    student_model_folder,
    teacher_scores,
    train_tart_distil,
)
from taskret.tart.training_data import write_training_examples

from .conftest import make_tasks

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


class Overlap(Reranker):
    """A deterministic teacher: twice the number of shared lower-cased words."""

    name = "overlap"

    def __init__(self, use_instruction: bool = True):
        self.use_instruction = use_instruction
        self.n_pairs = 0

    def score_pairs(self, pairs):
        self.n_pairs += len(pairs)
        return np.array([2.0 * len(set(q.lower().split()) & set(d.lower().split())) for q, d in pairs])


def tiny_config(base, **overrides) -> TartDistilConfig:
    settings = dict(base_model=str(base), epochs=3, batch_size=4, learning_rate=1e-3, warmup_ratio=0.0,
                    max_seq_length=32, seed=0)
    settings.update(overrides)
    return TartDistilConfig(**settings)


def test_config_round_trips_and_validates():
    config = TartDistilConfig(epochs=2, n_negatives=3, temperature=2.0, negative_kinds=("hard", "random"))
    assert TartDistilConfig.from_json(config.to_json()) == config
    assert TartDistilConfig.from_dict({**config.to_dict(), "teacher": "x", "steps": 1}) == config
    with pytest.raises(ValueError, match="temperature"):
        TartDistilConfig(temperature=0)
    with pytest.raises(ValueError, match="teacher_batch_size"):
        TartDistilConfig(teacher_batch_size=0)


def test_teacher_scores_every_pair_once_with_its_own_query_format(rows):
    teacher = Overlap()
    scores = teacher_scores(rows, teacher)
    expected = {(format_query(r["instruction"], r["query"]), t) for r in rows
                for t in [r["positive_text"], *(n["text"] for n in r["negatives"])]}
    assert set(scores) == expected and teacher.n_pairs == len(expected)
    plain = teacher_scores(rows, Overlap(use_instruction=False))
    assert not any(SEP in q for q, _ in plain)


def test_rows_have_fixed_width_and_the_teachers_labels(rows):
    teacher = Overlap()
    config = TartDistilConfig(n_negatives=4)
    scores = teacher_scores(rows, teacher, config)
    columns = build_distillation_rows(rows, scores, teacher, config)
    assert list(columns) == ["anchor", "positive", "negative_1", "negative_2", "negative_3", "negative_4", "label"]
    for i, row in enumerate(rows):
        docs = [columns[name][i] for name in list(columns)[1:-1]]
        assert docs[0] == row["positive_text"]
        negatives = {n["text"] for n in row["negatives"]}
        assert set(docs[1:]) <= negatives
        # fewer negatives than columns: each one at least once, the rest repeated
        assert len(set(docs[1:])) == min(4, len(negatives))
        query = format_query(row["instruction"], row["query"])
        assert columns["label"][i] == [scores[query, d] for d in docs]
        assert columns["anchor"][i] == query
    no_instruction = build_distillation_rows(rows, scores, teacher, TartDistilConfig(use_instruction=False))
    assert no_instruction["anchor"] == [r["query"] for r in rows]
    assert no_instruction["label"] == build_distillation_rows(rows, scores, teacher, TartDistilConfig())["label"]


def test_bad_rows_name_the_source_line_and_field(rows):
    bad = [rows[0], rows[1], {k: v for k, v in rows[2].items() if k != "query"}]
    with pytest.raises(DataError, match=r"rows\.jsonl, line 3, field 'query'"):
        teacher_scores(bad, Overlap(), source="rows.jsonl")


class StopsAfter(Overlap):
    """The overlap teacher, killed after ``calls`` calls (as a long teacher pass is, by a user or a machine)."""

    def __init__(self, calls: int):
        super().__init__()
        self.calls = calls

    def score_pairs(self, pairs):
        if self.calls == 0:
            raise KeyboardInterrupt
        self.calls -= 1
        return super().score_pairs(pairs)


def test_a_stopped_teacher_pass_resumes_from_its_cache(rows, tmp_path):
    cache = tmp_path / "teacher_scores.jsonl"
    expected = teacher_scores(rows, Overlap())
    with pytest.raises(KeyboardInterrupt):
        teacher_scores(rows, StopsAfter(calls=2), cache=cache, chunk_size=3)
    assert len(cache.read_text().splitlines()) == 6  # two chunks kept
    teacher = Overlap()
    assert teacher_scores(rows, teacher, cache=cache, chunk_size=3) == expected
    assert teacher.n_pairs == len(expected) - 6  # only what the stopped pass had not scored
    again = Overlap()
    assert teacher_scores(rows, again, cache=cache) == expected and again.n_pairs == 0


def test_a_teacher_cache_cut_mid_line_is_mended_and_a_bad_line_named(rows, tmp_path):
    cache = tmp_path / "teacher_scores.jsonl"
    expected = teacher_scores(rows, Overlap(), cache=cache, chunk_size=4)
    lines = cache.read_text().splitlines()
    cache.write_text("\n".join(lines[:5]) + "\n" + lines[5][:9])  # killed while writing the sixth line
    teacher = Overlap()
    assert teacher_scores(rows, teacher, cache=cache) == expected and teacher.n_pairs == len(expected) - 5
    assert all(json.loads(line) for line in cache.read_text().splitlines())
    cache.write_text(lines[0] + "\n" + "not json\n")
    with pytest.raises(DataError, match="line 2"):
        teacher_scores(rows, Overlap(), cache=cache)


def test_training_lowers_the_kl_to_the_teacher(tmp_path, rows, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    from taskret.training.encoders import build_bi_encoder

    teacher = Overlap()
    config = tiny_config(tiny_bert_dir)
    columns = build_distillation_rows(rows, teacher_scores(rows, teacher, config), teacher, config)
    before = distillation_kl(build_bi_encoder(str(tiny_bert_dir), max_seq_length=32), columns, config)
    folder = train_tart_distil(rows, teacher, tmp_path / "out", config, progress=False)
    after = distillation_kl(SentenceTransformer(str(folder)), columns, config)
    assert after < 0.8 * before
    cache = [p.name for p in (tmp_path / "out").glob("teacher_scores.*.jsonl")]  # the teacher pass, resumable
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([LOG_FILE, "model", CONFIG_FILE, *cache])
    assert len(cache) == 1
    assert len((tmp_path / "out" / cache[0]).read_text().splitlines()) == len(teacher_scores(rows, Overlap(), config))
    summary = json.loads((tmp_path / "out" / CONFIG_FILE).read_text())
    assert TartDistilConfig.from_dict(summary) == config and summary["teacher"] == "overlap"
    assert summary["train_tasks"] == dict(sorted(Counter(row["task"] for row in rows).items()))  # for dev_overlap
    assert summary["n_examples"] == len(rows) * config.epochs and summary["steps"] == config.epochs * -(-len(rows) // 4)
    log = [json.loads(line) for line in (tmp_path / "out" / LOG_FILE).read_text().splitlines()]
    assert log[-1]["epoch"] == config.epochs and all(np.isfinite(r["loss"]) for r in log)


def test_student_folder_of_a_run(tmp_path):
    (tmp_path / "run" / "model").mkdir(parents=True)
    assert student_model_folder(tmp_path / "run") == str(tmp_path / "run" / "model")
    assert student_model_folder("minilm-l6") == "minilm-l6"


def test_cli_distils_a_trained_tart_full_into_tart_dual(tmp_path, rows, tiny_bert_dir):
    full = tmp_path / "full"
    train_tart_full(rows, full, TartFullConfig(base_model=str(tiny_bert_dir), epochs=1, batch_size=16, max_length=64),
                    progress=False)
    data = write_training_examples(tmp_path / "train.jsonl", rows)
    out = tmp_path / "distil"
    result = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", str(full), "--out", str(out),
                                      "--base-model", str(tiny_bert_dir), "--batch-size", "4", "--quiet"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "use --retriever dense:" in result.output
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert summary["teacher"] == str(full) and summary["n_teacher_pairs"] > 0 and summary["teacher_pairs_per_s"] > 0

    from taskret.tart.evaluation import evaluate_retriever

    metrics = evaluate_retriever(f"dense:{out / 'model'}", make_tasks(), k=5)
    assert set(metrics["settings"]["closed"]) == {"facts", "parses", "steps"}

    missing = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", str(tmp_path / "nope"),
                                       "--out", str(tmp_path / "x")], env=ENV)
    assert missing.exit_code == 2 and "nope" in missing.output


def test_instruction_dropout_leaves_some_anchors_bare_and_the_teachers_labels_alone(rows):
    teacher = Overlap(use_instruction=False)
    scores = teacher_scores(rows, teacher)
    instructed = build_distillation_rows(rows, scores, teacher, TartDistilConfig())
    half = build_distillation_rows(rows, scores, teacher, TartDistilConfig(instruction_dropout=0.5, seed=3))
    bare = build_distillation_rows(rows, scores, teacher, TartDistilConfig(instruction_dropout=1.0))
    assert bare["anchor"] == [r["query"] for r in rows]
    assert all(SEP in a for a in instructed["anchor"])
    assert set(half["anchor"]) <= set(bare["anchor"]) | set(instructed["anchor"])
    assert 0 < sum(SEP in a for a in half["anchor"]) < len(rows)
    names = [n for n in half if n not in ("anchor", "label")]
    for i, row in enumerate(rows):  # the teacher read the bare query, whatever the student reads
        assert half["label"][i] == [scores[row["query"], half[n][i]] for n in names]
    with pytest.raises(ValueError, match="instruction_dropout"):
        TartDistilConfig(instruction_dropout=1.5)


def test_cli_distils_a_fusion_teacher_named_by_its_spec(tmp_path, rows, tiny_bert_dir):
    data = write_training_examples(tmp_path / "train.jsonl", rows)
    out = tmp_path / "distil"
    teacher = f"fusion:{tiny_bert_dir}?weight=0.4"
    result = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", teacher, "--out", str(out),
                                      "--base-model", str(tiny_bert_dir), "--batch-size", "4", "--temperature", "0.05",
                                      "--instruction-dropout", "0.5", "--negatives", "hard,random",
                                      "--exclude-instruction-from-pooling", "--quiet"], env=ENV)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert summary["teacher"] == teacher and summary["instruction_dropout"] == 0.5
    assert summary["exclude_instruction_from_pooling"] is True
    assert summary["negative_kinds"] == ["hard", "random"] and summary["n_teacher_pairs"] > 0
    bad = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", "fusion:minilm-l6?weight=7",
                                   "--out", str(tmp_path / "x")], env=ENV)
    assert bad.exit_code == 2 and "weight (BM25's share) must be in [0, 1]" in bad.output
    frozen = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", teacher, "--out",
                                      str(tmp_path / "frozen"), "--base-model", str(tiny_bert_dir), "--batch-size", "4",
                                      "--freeze-documents", "--quiet"], env=ENV)
    assert frozen.exit_code == 0, frozen.output
    assert json.loads((tmp_path / "frozen" / CONFIG_FILE).read_text())["freeze_documents"] is True
    both = CliRunner().invoke(app, ["tart", "distil", "--data", str(data), "--teacher", teacher, "--out",
                                    str(tmp_path / "both"), "--freeze-documents", "--exclude-instruction-from-pooling"],
                              env=ENV)
    assert both.exit_code == 2 and "cannot be combined" in both.output and not (tmp_path / "both").exists()


def test_a_student_trained_without_its_instruction_in_the_pooling_is_saved_and_loaded_that_way(
        tmp_path, rows, tiny_bert_dir):
    from taskret.retrieval.dense import load_encoder
    from taskret.retrieval.pooling import InstructionExcludedPooling

    config = tiny_config(tiny_bert_dir, epochs=1, exclude_instruction_from_pooling=True)
    folder = train_tart_distil(rows, Overlap(), tmp_path / "out", config, progress=False)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["include_prompt"] is False
    assert "taskret" not in (folder / "modules.json").read_text()
    summary = json.loads((tmp_path / "out" / CONFIG_FILE).read_text())
    assert TartDistilConfig.from_dict(summary).exclude_instruction_from_pooling is True
    assert isinstance(load_encoder(str(folder))[1], InstructionExcludedPooling)
    # a second round from this student keeps its pooling though its own config does not ask again
    again = train_tart_distil(rows, Overlap(), tmp_path / "again", tiny_config(folder, epochs=1), progress=False)
    assert json.loads((again / "1_Pooling" / "config.json").read_text())["include_prompt"] is False


def test_a_student_with_frozen_documents_trains_its_query_encoder_only(tmp_path, rows, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    config = tiny_config(tiny_bert_dir, freeze_documents=True)
    texts = [rows[0]["query"], rows[0]["positive_text"]]
    base = SentenceTransformer(str(tiny_bert_dir))
    folder = train_tart_distil(rows, Overlap(), tmp_path / "out", config, progress=False)
    student = SentenceTransformer(str(folder))
    # the documents' vectors are the base's: an index built with the base serves the student as it is
    np.testing.assert_allclose(student.encode_document(texts), base.encode(texts), atol=1e-5)
    assert not np.allclose(student.encode_query(texts), base.encode(texts), atol=1e-3)
    assert student.max_seq_length == base.max_seq_length  # trained at 32 tokens, saved at the base's length
    assert "taskret" not in (folder / "modules.json").read_text()
    assert TartDistilConfig.from_dict(json.loads((tmp_path / "out" / CONFIG_FILE).read_text())).freeze_documents
    columns = build_distillation_rows(rows, teacher_scores(rows, Overlap(), config), Overlap(), config)
    assert distillation_kl(student, columns, config) < 0.8 * distillation_kl(base, columns, config)
    with pytest.raises(ValueError, match="cannot be combined"):
        tiny_config(tiny_bert_dir, freeze_documents=True, exclude_instruction_from_pooling=True)


def test_an_index_built_with_the_base_serves_a_student_with_frozen_documents(tmp_path, rows, beir, tiny_bert_dir):
    from taskret.tart.search import search_index

    frozen = train_tart_distil(rows, Overlap(), tmp_path / "frozen", tiny_config(tiny_bert_dir, freeze_documents=True),
                               progress=False)
    shared = train_tart_distil(rows, Overlap(), tmp_path / "shared", tiny_config(tiny_bert_dir), progress=False)
    base_index, own_index = tmp_path / "base-index", tmp_path / "own-index"
    for out, encoder in ((base_index, tiny_bert_dir), (own_index, frozen)):
        result = CliRunner().invoke(app, ["tart", "index", "--task", str(beir["facts"]), "--retriever",
                                          f"dense:{encoder}", "--out", str(out)], env=ENV)
        assert result.exit_code == 0, result.output
    queries = ["aspirin heart attack", "vitamin cold"]
    _, swapped = search_index(base_index, queries, top_k=3, query_encoder=str(frozen))
    _, own = search_index(own_index, queries, top_k=3)  # the student's own index: the same document vectors
    _, plain = search_index(base_index, queries, top_k=3)
    assert swapped.ids == own.ids
    np.testing.assert_allclose(swapped.scores, own.scores, atol=1e-5)
    assert not np.allclose(swapped.scores, plain.scores, atol=1e-4)  # the queries are the student's
    with pytest.raises(ValueError, match="encodes this index's documents differently"):
        search_index(base_index, queries, query_encoder=str(shared))  # its documents moved too
    cli = CliRunner().invoke(app, ["tart", "search", "--index", str(base_index), "--query-encoder", str(frozen),
                                   "--top-k", "3", "--json", *queries], env=ENV)
    assert cli.exit_code == 0, cli.output
    # stdout alone: a model's loading bar on stderr (shown when an earlier test left progress bars on) has no newline
    assert [json.loads(line)["ids"] for line in cli.stdout.splitlines() if line.startswith("{")] == swapped.ids
    bm25_index = tmp_path / "bm25-index"
    assert CliRunner().invoke(app, ["tart", "index", "--task", str(beir["facts"]), "--setup", "bm25", "--out", str(bm25_index)],
                              env=ENV).exit_code == 0
    bad = CliRunner().invoke(app, ["tart", "search", "--index", str(bm25_index), "--query-encoder", str(frozen),
                                   "aspirin"], env=ENV)
    assert bad.exit_code == 2 and "needs a dense index" in bad.output
    # the service takes the same query encoder, and refuses the same models
    from fastapi.testclient import TestClient

    from taskret.serve.app import create_app

    client = TestClient(create_app(base_index, query_encoder=str(frozen)))
    assert [client.post("/retrieve", json={"query": q, "k": 3}).json()["ids"] for q in queries] == swapped.ids
    assert client.get("/health").json()["query_encoder"] == str(frozen)
    with pytest.raises(ValueError, match="encodes this index's documents differently"):
        create_app(base_index, query_encoder=str(shared))
    bad = CliRunner().invoke(app, ["serve", "--index", str(bm25_index), "--query-encoder", str(frozen)], env=ENV)
    assert bad.exit_code == 2 and "needs a dense index" in bad.output
    # a bare saved retriever has no texts to check a query encoder against: refused, not trusted
    from taskret.retrieval import DenseRetriever
    from taskret.retrieval.index import load_index

    DenseRetriever(encoder=str(tiny_bert_dir)).index_texts(["d1", "d2"], ["aspirin", "vitamin"]).save(tmp_path / "bare")
    with pytest.raises(ValueError, match="holds no texts"):
        load_index(tmp_path / "bare", texts_required=False).use_query_encoder(str(frozen))
