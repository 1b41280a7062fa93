"""Indexing that streams and resumes (`index_documents`, `tart index`): a corpus read in passes, its vectors encoded
in shards under OUT/.shards/, a killed run resumed from them, and shards of another corpus or encoder refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.corpus import DocumentStream, iter_corpus, read_corpus
from taskret.io import DataError
from taskret.retrieval import DenseRetriever, make_retriever
from taskret.retrieval.index import index_documents, load_index
from taskret.retrieval.shards import MANIFEST, SHARDS_DIR, ShardMismatch
from tests.conftest import write_jsonl_rows

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
TOPICS = ["aspirin lowers the risk of heart attacks", "vitamin c and the common cold", "coffee and sleep quality",
          "exercise improves mood", "smoking causes lung cancer", "sugar and tooth decay", "sleep and memory",
          "salt raises blood pressure", "fish oil and the heart", "reading to children"]
QUERIES = ["heart attack risk", "does coffee keep you awake", "colds and vitamins", "what harms the lungs"]


def corpus_rows(n: int = 23) -> list[dict]:
    return [{"_id": f"d{i}", "title": f"study {i}", "text": f"{TOPICS[i % len(TOPICS)]} " + "more words " * (i % 5)}
            for i in range(n)]


def stream_of(path) -> DocumentStream:
    return DocumentStream(path.stem, lambda: iter_corpus(path))


@pytest.fixture
def corpus_file(tmp_path):
    return write_jsonl_rows(tmp_path / "corpus.jsonl", corpus_rows())


def dense(tiny_bert_dir, **options) -> DenseRetriever:
    return DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32", **options)


def test_a_streamed_index_finds_what_one_built_in_memory_finds(tmp_path, corpus_file, tiny_bert_dir):
    out = index_documents(tmp_path / "index", dense(tiny_bert_dir), stream_of(corpus_file), shard_size=5)
    docs = read_corpus(corpus_file)
    held = dense(tiny_bert_dir).index_texts(list(docs), [f"{d.title} {d.text}" for d in docs.values()])
    loaded = load_index(out)
    assert loaded.retriever.ids == list(docs) and len(loaded.records) == len(docs)
    assert not (out / SHARDS_DIR).exists()  # the shards went with the folder the index replaced
    streamed, in_memory = loaded.retriever.retrieve(QUERIES, k=10), held.retrieve(QUERIES, k=10)
    # Shards are batched apart (5 texts at a time, not all 23): the same vectors but for float rounding.
    assert streamed.ids == in_memory.ids
    np.testing.assert_allclose(streamed.scores, in_memory.scores, atol=1e-5)
    info = json.loads((out / "index_info.json").read_text())
    assert info["n"] == 23 and info["kind"] == "documents" and info["task"] == "corpus"


def test_a_killed_run_resumes_from_its_shards(tmp_path, corpus_file, tiny_bert_dir, monkeypatch):
    calls: list[int] = []
    vectors = DenseRetriever._vectors

    def dies_after_two_shards(self, model, texts, queries, advance=None):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is killed while it encodes its third shard
        calls.append(len(texts))
        return vectors(self, model, texts, queries, advance)

    monkeypatch.setattr(DenseRetriever, "_vectors", dies_after_two_shards)
    out = tmp_path / "index"
    with pytest.raises(KeyboardInterrupt):
        index_documents(out, dense(tiny_bert_dir), stream_of(corpus_file), shard_size=5)
    shards = out / SHARDS_DIR
    assert sorted(p.name for p in shards.iterdir()) == ["00000.npy", "00001.npy", MANIFEST]  # no temporary file
    assert not (out / "meta.json").exists()
    manifest = json.loads((shards / MANIFEST).read_text())
    assert manifest["n"] == 23 and manifest["shard_size"] == 5 and manifest["dtype"] == "float32"
    assert manifest["encoder"] == str(tiny_bert_dir) and len(manifest["corpus"]) == 64

    calls.clear()
    monkeypatch.setattr(DenseRetriever, "_vectors", vectors)
    encoded: list[int] = []
    monkeypatch.setattr(DenseRetriever, "_vectors",
                        lambda self, model, texts, queries, advance=None: encoded.append(len(texts)) or
                        vectors(self, model, texts, queries, advance))
    index_documents(out, dense(tiny_bert_dir), stream_of(corpus_file), shard_size=5)
    assert encoded == [5, 5, 3]  # shards 2, 3 and 4: the first two came from disk
    whole = index_documents(tmp_path / "whole", dense(tiny_bert_dir), stream_of(corpus_file), shard_size=5)
    resumed, fresh = load_index(out).retriever, load_index(whole).retriever
    np.testing.assert_array_equal(resumed._index.reconstruct_n(0, 23), fresh._index.reconstruct_n(0, 23))


def interrupted(out, corpus_file, retriever, monkeypatch):
    """OUT/.shards/ holding one shard of ``corpus_file``, as a run killed after it leaves it."""
    vectors = DenseRetriever._vectors
    state = {"n": 0}

    def one_shard(self, *args, **kwargs):
        state["n"] += 1
        if state["n"] > 1:
            raise KeyboardInterrupt
        return vectors(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(DenseRetriever, "_vectors", one_shard)
        with pytest.raises(KeyboardInterrupt):
            index_documents(out, retriever, stream_of(corpus_file), shard_size=5)


def test_shards_of_another_corpus_or_encoder_are_refused(tmp_path, corpus_file, tiny_bert_dir, monkeypatch):
    out = tmp_path / "index"
    interrupted(out, corpus_file, dense(tiny_bert_dir), monkeypatch)
    manifest = out / SHARDS_DIR / MANIFEST
    edited = write_jsonl_rows(tmp_path / "edited" / "corpus.jsonl",
                              [*corpus_rows()[:-1], {"_id": "d22", "text": "an edited last document"}])
    with pytest.raises(ShardMismatch, match=rf"{manifest}: these shards were encoded from a corpus whose fingerprint "
                                            rf"is '[0-9a-f]{{64}}', and this run's is '[0-9a-f]{{64}}'.*remove "):
        index_documents(out, dense(tiny_bert_dir), stream_of(edited), shard_size=5)
    with pytest.raises(ShardMismatch, match=r"these shards were encoded from the dtype 'float32', and this run's is "
                                            r"'bfloat16'"):
        index_documents(out, DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="bfloat16"),
                        stream_of(corpus_file), shard_size=5)
    with pytest.raises(ShardMismatch, match="the encoder"):
        index_documents(out, DenseRetriever(encoder="minilm-l6", device="cpu", dtype="float32"),
                        stream_of(corpus_file), shard_size=5)
    assert sorted(p.name for p in (out / SHARDS_DIR).iterdir()) == ["00000.npy", MANIFEST]  # left as they were

    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(edited), "--setup", f"dense:{tiny_bert_dir}?"
                                      "dtype=float32", "--shard-size", "5", "--out", str(out)], env=ENV)
    assert result.exit_code == 2 and "these shards were encoded from a corpus whose fingerprint" in result.output
    assert "Traceback" not in result.output


def test_an_interrupted_run_says_what_it_saved_and_the_next_what_it_reuses_at_the_shards_size(
        tmp_path, corpus_file, tiny_bert_dir, monkeypatch, capsys):
    from taskret.progress import reporting

    out = tmp_path / "index"
    with reporting():
        interrupted(out, corpus_file, dense(tiny_bert_dir), monkeypatch)  # Ctrl-C while the second shard encodes
    shards = out / SHARDS_DIR
    assert f"interrupted: 1 of 5 shards (5 of 23 texts) are saved in {shards}; the same command goes on from them" \
        in capsys.readouterr().err
    encoded: list[int] = []
    vectors = DenseRetriever._vectors
    monkeypatch.setattr(DenseRetriever, "_vectors", lambda self, model, texts, queries, advance=None:
                        encoded.append(len(texts)) or vectors(self, model, texts, queries, advance))
    with reporting():  # asked for shards of 7: those on disk are of 5, and as good
        index_documents(out, dense(tiny_bert_dir), stream_of(corpus_file), shard_size=7)
    assert f"resuming: 1 of 5 shards (5 of 23 texts) encoded before, in {shards}: reused" in capsys.readouterr().err
    assert encoded == [5, 5, 5, 3]
    fresh = load_index(index_documents(tmp_path / "fresh", dense(tiny_bert_dir), stream_of(corpus_file)))
    np.testing.assert_allclose(load_index(out).retriever._index.reconstruct_n(0, 23),
                               fresh.retriever._index.reconstruct_n(0, 23), atol=1e-6)


def test_ctrl_c_ends_a_command_with_a_word_and_130(tmp_path, corpus_file, monkeypatch):
    import taskret.retrieval.index

    def interrupted_by_the_user(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(taskret.retrieval.index, "index_documents", interrupted_by_the_user)
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(corpus_file), "--setup", "bm25", "--out",
                                      str(tmp_path / "index")], env=ENV)
    assert result.exit_code == 130 and result.stderr.endswith("interrupted\n") and "Traceback" not in result.output


def test_a_hybrid_keeps_the_shards_of_its_dense_component_apart(tmp_path, corpus_file, tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("TASKRET_ENCODER_DTYPE", "float32")
    out = tmp_path / "index"
    spec = f"hybrid:bm25+dense:{tiny_bert_dir}"
    interrupted(out, corpus_file, make_retriever(spec, device="cpu"), monkeypatch)
    assert (out / SHARDS_DIR / "component_1" / "00000.npy").is_file()
    index_documents(out, make_retriever(spec, device="cpu"), stream_of(corpus_file), retriever_spec=spec,
                    shard_size=5)
    held = make_retriever(spec, device="cpu").index_texts(*zip(*[(d.id, f"{d.title} {d.text}")
                                                               for d in read_corpus(corpus_file).values()]))
    assert load_index(out).retriever.retrieve(QUERIES, k=10).ids == held.retrieve(QUERIES, k=10).ids


def test_bad_input_stops_before_anything_is_written(tmp_path, tiny_bert_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "body": "no text field"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{bad}, line 2, field 'text': missing field"):
        index_documents(tmp_path / "index", dense(tiny_bert_dir), stream_of(bad))
    assert not (tmp_path / "index").exists() and list(tmp_path.iterdir()) == [bad]
    dup = write_jsonl_rows(tmp_path / "dup.jsonl", [{"_id": "a", "text": "one"}, {"_id": "a", "text": "two"}])
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(dup), "--out", str(tmp_path / "index")],
                                env=ENV)
    assert result.exit_code == 2 and "line 2, field '_id': duplicate id 'a' (first seen on line 1)" in result.output
    assert not (tmp_path / "index").exists()


def test_tart_index_reports_each_stage_with_rate_and_eta(tmp_path, corpus_file, tiny_bert_dir):
    out = tmp_path / "index"
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(corpus_file), "--setup",
                                      f"hybrid:bm25+dense:{tiny_bert_dir}", "--shard-size", "5", "--out", str(out)],
                                env={**ENV, "TASKRET_ENCODER_DTYPE": "float32"})
    assert result.exit_code == 0, result.output
    assert f"reading {tmp_path.name}: 23 documents" in result.stderr
    encoding = [line for line in result.stderr.splitlines() if line.startswith("encoding 23 texts")]
    assert len(encoding) == 1 and "23/23 (100%)" in encoding[0] and "texts/s" in encoding[0] and "ETA" in encoding[0]
    assert f"indexed 23 documents of {tmp_path.name}" in result.output and not (out / SHARDS_DIR).exists()


def test_bm25_read_in_a_pass_scores_as_bm25_built_from_held_texts(corpus_file):
    from taskret.retrieval import BM25Retriever

    stream = stream_of(corpus_file)
    ids, _ = stream.scan()
    streamed = BM25Retriever().index_stream(ids, stream.texts)
    held = BM25Retriever().index_texts(ids, list(stream.texts()))
    a, b = streamed.retrieve(QUERIES, k=10), held.retrieve(QUERIES, k=10)
    assert a.ids == b.ids
    np.testing.assert_array_equal(a.scores, b.scores)  # the same terms and counts: the same scores, to the bit
    with pytest.raises(ValueError, match=r"bm25: the 2 indexed texts have no terms .* \(e\.g\. 'the a an'\)"):
        BM25Retriever().index_stream(["x", "y"], lambda: iter(["the a an", "is it"]))


def test_an_hnsw_index_records_its_choice_and_recall_in_meta_json(tmp_path, corpus_file, tiny_bert_dir, monkeypatch):
    import taskret.retrieval.dense as dense_module

    monkeypatch.setattr(dense_module, "AUTO_HNSW_FROM", 20)  # 23 documents: auto builds HNSW
    out = index_documents(tmp_path / "auto", dense(tiny_bert_dir), stream_of(corpus_file), shard_size=5)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["index_type"] == "hnsw" and meta["index_choice"] == "auto: hnsw from 20 vectors on (23 here), flat below"
    assert 0.9 <= meta["recall_at_10"] <= 1.0  # 23 vectors: the graph search is all but exact
    loaded = load_index(out, mmap=True).retriever
    assert loaded.recall_at_10 == meta["recall_at_10"] and loaded.retrieve(QUERIES, k=3).ids
    asked = index_documents(tmp_path / "asked", dense(tiny_bert_dir, index_type="hnsw"), stream_of(corpus_file))
    assert json.loads((asked / "meta.json").read_text())["index_choice"] == "asked for"
    monkeypatch.setattr(dense_module, "AUTO_HNSW_FROM", 24)  # one more than the corpus: flat, meta.json as it was
    flat = json.loads((index_documents(tmp_path / "flat", dense(tiny_bert_dir), stream_of(corpus_file)) /
                       "meta.json").read_text())
    assert "index_type" not in flat and "recall_at_10" not in flat


def test_a_run_killed_with_sigkill_leaves_whole_shards_and_resumes(tmp_path, tiny_bert_dir, monkeypatch):
    import os
    import signal
    import subprocess
    import sys
    import time

    rows = [{**row, "_id": f"d{i}", "text": row["text"] + " and so on" * 30} for i, row in enumerate(corpus_rows(4000))]
    corpus = write_jsonl_rows(tmp_path / "big.jsonl", rows)
    out = tmp_path / "index"
    command = [sys.executable, "-m", "taskret.cli", "tart", "index", "--corpus", str(corpus), "--setup",
               f"dense:{tiny_bert_dir}?dtype=float32", "--shard-size", "100", "--out", str(out)]
    proc = subprocess.Popen(command, env={**os.environ, **ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (out / SHARDS_DIR / "00001.npy").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = sorted(p.name for p in (out / SHARDS_DIR).glob("[0-9]*.npy"))
    assert 2 <= len(written) < 40, written  # killed mid-run: some shards written, not all
    for name in written:  # each written whole (a temporary name, then renamed): every one loads
        assert np.load(out / SHARDS_DIR / name).shape == (100, 32)

    encoded: list[int] = []
    vectors = DenseRetriever._vectors
    monkeypatch.setattr(DenseRetriever, "_vectors", lambda self, model, texts, queries, advance=None:
                        encoded.append(len(texts)) or vectors(self, model, texts, queries, advance))
    index_documents(out, dense(tiny_bert_dir), stream_of(corpus), shard_size=100)
    assert sum(encoded) == 4000 - 100 * len(written)  # only the shards the killed run had not written
    fresh = index_documents(tmp_path / "fresh", dense(tiny_bert_dir), stream_of(corpus), shard_size=100)
    np.testing.assert_allclose(load_index(out).retriever._index.reconstruct_n(0, 4000),
                               load_index(fresh).retriever._index.reconstruct_n(0, 4000), atol=1e-6)


def test_ray_without_a_dense_encoder_builds_here_and_says_so(tmp_path, corpus_file):
    out = tmp_path / "index"
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(corpus_file), "--setup", "bm25", "--ray",
                                      "local", "--out", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "warning: --ray encodes a dense index's documents, and bm25 has no dense encoder: it is built here" in \
        result.stderr
    assert "on Ray" not in result.output and load_index(out).retriever.name == "bm25"


def test_a_corpus_read_in_several_passes_warns_once_of_its_unread_id_column(tmp_path, tiny_bert_dir, caplog):
    rows = [{"doc_no": f"n{i}", "title": row["title"], "text": row["text"]} for i, row in enumerate(corpus_rows())]
    corpus = write_jsonl_rows(tmp_path / "numbered.jsonl", rows)
    with caplog.at_level("WARNING", logger="taskret.corpus"):
        result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(corpus), "--setup",
                                          f"hybrid:bm25+dense:{tiny_bert_dir}", "--out", str(tmp_path / "index")],
                                    env={**ENV, "TASKRET_ENCODER_DTYPE": "float32"})
    assert result.exit_code == 0, result.output
    said = [r.getMessage() for r in caplog.records if "no id field" in r.getMessage()]
    assert said == [f"{corpus}: no id field ('_id' or 'id'), so ids are line numbers; --id-field names one (fields "
                    f"not read: doc_no)"]  # one warning, though the corpus is read once per pass
    corpus.write_text(corpus.read_text() + '{"doc_no": "n99", "text": "one more"}\n')
    caplog.clear()
    with caplog.at_level("WARNING", logger="taskret.corpus"):
        assert len(list(iter_corpus(corpus, id_field=None))) == 24
    assert len(caplog.records) == 1  # a file changed since is warned of again
