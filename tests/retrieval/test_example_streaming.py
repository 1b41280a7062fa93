"""Example indexes that stream and resume (`index_examples`, `taskret index`, `taskret epr index`): the texts a
retriever reads of each example (its field) fingerprinted with the ids, a dense encoder's vectors encoded in shards
under OUT/.shards/, a killed run resumed from them, shards of another pool refused, and the folder the same as
`retriever.index()` + `save_index` write."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.data import Example
from taskret.retrieval import BM25Retriever, DenseRetriever, HybridRetriever, make_retriever
from taskret.retrieval import shards as shards_module
from taskret.retrieval.index import INFO_FILE, ITEMS_FILE, index_examples, load_index, save_index
from taskret.retrieval.shards import MANIFEST, SHARDS_DIR, ShardMismatch

from ..conftest import POOL_ROWS, write_jsonl_rows
from .builders import QUERIES, assert_same_results

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]


def dense(tiny_bert_dir, field: str = "input") -> DenseRetriever:
    return DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", dtype="float32", field=field)


RETRIEVERS = {
    "bm25": lambda tiny: BM25Retriever(),
    "bm25:both": lambda tiny: BM25Retriever(field="both"),
    "random": lambda tiny: make_retriever("random"),
    "dense:input": lambda tiny: dense(tiny),
    "dense:output": lambda tiny: dense(tiny, "output"),
    "dense:both": lambda tiny: dense(tiny, "both"),
    "hybrid:bm25+dense (both)": lambda tiny: HybridRetriever([BM25Retriever(field="both"), dense(tiny, "both")],
                                                            specs=["bm25:both", "dense"], field="both"),
}


@pytest.mark.parametrize("name", list(RETRIEVERS))
def test_a_streamed_example_index_is_the_one_built_in_memory(name, tmp_path, pool_examples, tiny_bert_dir):
    build = RETRIEVERS[name]
    streamed = index_examples(tmp_path / "streamed", build(tiny_bert_dir), pool_examples, task="pool",
                              retriever_spec=name, output_format="plain", lm="smollm2-135m", extra={"k": 1},
                              shard_size=3)
    held = save_index(tmp_path / "held", build(tiny_bert_dir).index(pool_examples), pool_examples, task="pool",
                      retriever_spec=name, output_format="plain", lm="smollm2-135m", extra={"k": 1})
    assert sorted(p.name for p in streamed.iterdir()) == sorted(p.name for p in held.iterdir())  # no .shards/ left
    for file in (ITEMS_FILE, INFO_FILE, "meta.json"):  # the saved format is unchanged
        assert (streamed / file).read_bytes() == (held / file).read_bytes(), file
    a, b = load_index(streamed).retriever, load_index(held).retriever
    # Dense shards are batched apart (3 texts at a time, not all 8): the same vectors but for float rounding.
    assert_same_results(a.retrieve(QUERIES, k=8), b.retrieve(QUERIES, k=8))


def test_an_epr_run_indexes_the_field_it_was_trained_on(tmp_path, pool_examples, tiny_bert_dir):
    run = tmp_path / "run"
    shutil.copytree(tiny_bert_dir, run / "retriever" / "model")
    (run / "retriever" / "epr_config.json").write_text(json.dumps({"field": "both"}))
    spec = f"epr:{run}"
    retriever = make_retriever(spec)
    assert retriever.field == "both"
    texts: list[list[str]] = []
    vectors = DenseRetriever._vectors
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DenseRetriever, "_vectors", lambda self, model, chunk, queries, advance=None:
                      texts.append(list(chunk)) or vectors(self, model, chunk, queries, advance))
        out = index_examples(tmp_path / "index", retriever, pool_examples, retriever_spec=spec)
        in_memory = make_retriever(spec).index(pool_examples)
    assert texts[0] == texts[1] and texts[0][0] == f"{pool_examples[0].input}\t{pool_examples[0].output}"
    assert_same_results(load_index(out).retriever.retrieve(QUERIES, k=8), in_memory.retrieve(QUERIES, k=8))


def counting(monkeypatch, die_after: int | None = None) -> list[int]:
    """The sizes of the shards DenseRetriever encodes from now on; with ``die_after``, the run is killed (as
    KeyboardInterrupt) when it starts the shard after that many."""
    encoded: list[int] = []
    vectors = DenseRetriever._vectors

    def encode(self, model, texts, queries, advance=None):
        if die_after is not None and len(encoded) == die_after:
            raise KeyboardInterrupt
        encoded.append(len(texts))
        return vectors(self, model, texts, queries, advance)

    monkeypatch.setattr(DenseRetriever, "_vectors", encode)
    return encoded


def interrupted(out, examples, retriever) -> None:
    """OUT/.shards/ holding the first shard (3 examples) of ``examples``, as a run killed after it leaves it."""
    with pytest.MonkeyPatch.context() as patch:
        counting(patch, die_after=1)
        with pytest.raises(KeyboardInterrupt):
            index_examples(out, retriever, examples, shard_size=3)
    assert sorted(p.name for p in (out / SHARDS_DIR).iterdir()) == ["00000.npy", MANIFEST]
    assert not (out / "meta.json").exists()


def test_a_killed_example_run_resumes_from_its_shards(tmp_path, pool_examples, tiny_bert_dir, monkeypatch):
    out = tmp_path / "index"
    interrupted(out, pool_examples, dense(tiny_bert_dir))
    first = out / SHARDS_DIR / "00000.npy"
    written = first.stat().st_mtime_ns
    manifest = json.loads((out / SHARDS_DIR / MANIFEST).read_text())
    assert manifest["n"] == 8 and manifest["shard_size"] == 3 and len(manifest["corpus"]) == 64

    encoded = counting(monkeypatch)
    shards, read = [], shards_module._read_shard
    monkeypatch.setattr(shards_module, "_read_shard", lambda path, rows: shards.append(
        (path.name, path.stat().st_mtime_ns)) or read(path, rows))
    index_examples(out, dense(tiny_bert_dir), pool_examples, shard_size=3)
    assert encoded == [3, 2] and shards == [("00000.npy", written)]  # shard 0 read back as written, not encoded
    fresh = index_examples(tmp_path / "fresh", dense(tiny_bert_dir), pool_examples, shard_size=3)
    np.testing.assert_array_equal(load_index(out).retriever._index.reconstruct_n(0, 8),
                                  load_index(fresh).retriever._index.reconstruct_n(0, 8))


def test_shards_of_another_pool_or_field_are_refused(tmp_path, pool_examples, tiny_bert_dir, monkeypatch):
    out = tmp_path / "index"
    interrupted(out, pool_examples, dense(tiny_bert_dir))
    manifest = out / SHARDS_DIR / MANIFEST
    edited = [*pool_examples[:-1], Example(pool_examples[-1].id, "an edited last input", pool_examples[-1].output)]
    renamed = [Example("other", pool_examples[0].input, pool_examples[0].output), *pool_examples[1:]]
    for other in (edited, renamed):
        with pytest.raises(ShardMismatch, match=rf"{manifest}: these shards were encoded from a corpus whose "
                                                rf"fingerprint is '[0-9a-f]{{64}}', and this run's is '[0-9a-f]{{64}}'"
                                                rf".*remove {out / SHARDS_DIR} to encode from scratch"):
            index_examples(out, dense(tiny_bert_dir), other, shard_size=3)
    with pytest.raises(ShardMismatch, match="fingerprint"):  # the same pool, another field: other texts
        index_examples(out, dense(tiny_bert_dir, "both"), pool_examples, shard_size=3)
    assert sorted(p.name for p in (out / SHARDS_DIR).iterdir()) == ["00000.npy", MANIFEST]  # left as they were

    # An output the encoder does not read (field input) is not in the fingerprint: its shards are still good.
    relabelled = [Example(e.id, e.input, e.output.lower()) for e in pool_examples]
    encoded = counting(monkeypatch)
    index_examples(out, dense(tiny_bert_dir), relabelled, shard_size=3)
    assert encoded == [3, 2] and load_index(out).records["weather"].output == "get_weather paris tomorrow"


@pytest.fixture
def pool_train(tmp_path):
    return write_jsonl_rows(tmp_path / "train.jsonl", POOL_ROWS)


def test_taskret_index_reports_each_stage_and_refuses_shards_of_another_pool(tmp_path, pool_train, tiny_bert_dir,
                                                                            pool_examples):
    out = tmp_path / "index"
    setup = f"dense:{tiny_bert_dir}?dtype=float32"
    result = CliRunner().invoke(app, ["index", "--train", str(pool_train), *FIELDS, "--setup", setup, "--shard-size",
                                      "3", "--out", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    reading = [line for line in result.stderr.splitlines() if line.startswith("reading train")]
    encoding = [line for line in result.stderr.splitlines() if line.startswith("encoding 8 texts")]
    assert len(reading) == 1 and "8/8 (100%)" in reading[0] and "examples/s" in reading[0]
    assert len(encoding) == 1 and "8/8 (100%)" in encoding[0] and "ETA" in encoding[0]
    assert f"indexed 8 examples with {setup} -> {out}" in result.output and not (out / SHARDS_DIR).exists()
    assert load_index(out).retriever.ids == [e.id for e in pool_examples]

    other = tmp_path / "other"
    interrupted(other, pool_examples[::-1], dense(tiny_bert_dir))
    result = CliRunner().invoke(app, ["index", "--train", str(pool_train), *FIELDS, "--setup", setup, "--shard-size",
                                      "3", "--out", str(other)], env=ENV)
    assert result.exit_code == 2 and "these shards were encoded from a corpus whose fingerprint" in result.output
    assert "Traceback" not in result.output


def test_taskret_index_with_ray_but_no_dense_encoder_builds_here_and_says_so(tmp_path, pool_train):
    out = tmp_path / "index"
    result = CliRunner().invoke(app, ["index", "--train", str(pool_train), *FIELDS, "--setup", "bm25", "--ray",
                                      "local", "--out", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "warning: --ray encodes a dense index's examples, and bm25 has no dense encoder: it is built here" in \
        result.stderr
    assert "on Ray" not in result.output and load_index(out).retriever.name == "bm25"
