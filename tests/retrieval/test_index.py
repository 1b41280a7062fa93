"""The index format (taskret-index/2): written atomically with its texts; older layouts still read;
partial or mismatched folders refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from taskret.cli import app as cli_app
from taskret.data import Example
from taskret.ids import IDS_FILE, IDS_OFFSETS_FILE
from taskret.retrieval import BM25Retriever, DenseRetriever
from taskret.retrieval.index import (
    DOCS_FILE,
    EXAMPLES_FILE,
    INDEX_FORMAT,
    INFO_FILE,
    ITEMS_FILE,
    OFFSETS_FILE,
    TART_META,
    InvalidIndex,
    LazyRecords,
    load_index,
    save_index,
)
from taskret.tart.tasks import Document

from ..conftest import read_jsonl_rows, write_jsonl_rows
from .builders import QUERIES, assert_same_results, big_pool

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


def test_save_index_writes_texts_info_and_retriever(bm25_index, pool_examples):
    assert {p.name for p in bm25_index.iterdir()} == {ITEMS_FILE, OFFSETS_FILE, INFO_FILE, IDS_FILE, IDS_OFFSETS_FILE, "meta.json",
                                                     "bm25s"}
    rows = read_jsonl_rows(bm25_index / ITEMS_FILE)
    assert rows == [{"id": e.id, "input": e.input, "output": e.output} for e in pool_examples]
    info = json.loads((bm25_index / INFO_FILE).read_text())
    assert info["kind"] == "examples" and info["n"] == len(pool_examples) and info["lm"] is None
    assert info["format"] == INDEX_FORMAT == "taskret-index/2" and info["task"] == "pool"
    assert info["retriever"] == "bm25" and info["output_format"] == "plain" and info["instruction"] is None
    assert not [p for p in bm25_index.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left

    loaded = load_index(bm25_index)
    assert loaded.kind == "examples" and loaded.retriever.ids == [e.id for e in pool_examples]
    assert loaded.records["alarm"].text == "set an alarm for seven in the morning"
    assert loaded.records["alarm"].output == "CREATE_ALARM seven morning"
    assert loaded.examples() == list(pool_examples)


def test_save_index_replaces_an_index_and_refuses_other_folders(bm25_index, pool_examples, tmp_path):
    smaller = pool_examples[:3]
    save_index(bm25_index, BM25Retriever().index(smaller), smaller)
    assert len(load_index(bm25_index).records) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a taskret index; refusing"):
        save_index(other, BM25Retriever().index(smaller), smaller)
    assert (other / "keep.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="exactly these examples"):
        save_index(tmp_path / "x", BM25Retriever().index(smaller), pool_examples)


def test_break_output_format_is_recorded(tmp_path):
    examples = [Example("a", "how many dogs", "return dogs ;return number of #1")]
    loaded = load_index(save_index(tmp_path / "i", BM25Retriever().index(examples), examples, output_format="break"))
    assert loaded.prompt_output(loaded.records["a"]) == "1#) return dogs 2#) return number of #1"


def _rewrite_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _rewrite_meta(folder, **changes):
    _rewrite_json(folder / "meta.json", **changes)


def _rewrite_info(folder, **changes):
    _rewrite_json(folder / INFO_FILE, **changes)


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "meta.json").unlink(), "meta.json: missing"),
    (lambda d: (d / "meta.json").write_text("{not json"), "meta.json, line 1: malformed JSON"),
    (lambda d: (d / "meta.json").write_text("[1, 2]"), "meta.json: expected a JSON object"),
    (lambda d: _rewrite_meta(d, retriever="colbert"), "meta.json: unknown retriever 'colbert'"),
    (lambda d: _rewrite_meta(d, ids="weather"), "meta.json: 'ids' must be a non-empty list"),
    (lambda d: _rewrite_meta(d, ids=["a", "a"]), "meta.json: 'ids' holds duplicates"),
    (lambda d: (d / "bm25s" / "vocab.index.json").unlink(), "vocab.index.json: missing"),
    (lambda d: (d / ITEMS_FILE).unlink(), "holds no texts"),
    (lambda d: (d / ITEMS_FILE).write_text((d / ITEMS_FILE).read_text().splitlines(True)[0]),
     "items.jsonl: holds 1 records but .* lists 8 ids"),
    (lambda d: (d / ITEMS_FILE).write_text((d / ITEMS_FILE).read_text().replace('"id": "news"', '"id": "sport"')),
     "items.jsonl: has no record for id 'news'"),
    (lambda d: (d / ITEMS_FILE).write_text('{"id": "a", "input": "", "output": "x"}\n'),
     "items.jsonl, line 1: field 'input' must be a non-empty string"),
    (lambda d: (d / ITEMS_FILE).write_text("{broken\n"), "items.jsonl, line 1: malformed JSON"),
    (lambda d: _rewrite_info(d, output_format="yaml"), "index_info.json: unknown output_format"),
    (lambda d: (d / INFO_FILE).unlink(), "index_info.json: missing"),
    (lambda d: _rewrite_info(d, kind="movies"), "index_info.json: 'kind' must be one of examples, documents"),
    (lambda d: _rewrite_info(d, instruction=3), "index_info.json: 'instruction' must be a string or null"),
])
def test_partial_or_mismatched_index_is_refused(bm25_index, damage, message):
    damage(bm25_index)
    with pytest.raises(InvalidIndex, match=message):
        load_index(bm25_index)


def test_bm25_files_of_another_pool_are_refused(bm25_index, pool_examples, tmp_path):
    other = save_index(tmp_path / "other", BM25Retriever().index(pool_examples[:5]), pool_examples[:5])
    shutil.rmtree(bm25_index / "bm25s")
    shutil.copytree(other / "bm25s", bm25_index / "bm25s")
    with pytest.raises(InvalidIndex, match=r"the BM25 index holds 5 documents but the index lists 8 ids"):
        load_index(bm25_index)


def test_not_a_folder(tmp_path):
    with pytest.raises(InvalidIndex, match="no such folder"):
        load_index(tmp_path / "nothing")


def test_document_index_of_tart_is_served_as_documents(tmp_path):
    """The layout `taskret tart index` wrote before taskret-index/2: docs.jsonl + tart.json."""
    docs = [{"id": "d1", "title": "Vitamin D", "text": "deficiency and mood"}, {"id": "d2", "title": "Sleep", "text": ""}]
    folder = tmp_path / "docs"
    write_jsonl_rows(folder / DOCS_FILE, docs)
    BM25Retriever().index_texts(["d1", "d2"], ["Vitamin D deficiency and mood", "Sleep"]).save(folder)
    loaded = load_index(folder)
    assert loaded.kind == "documents" and loaded.records["d1"].title == "Vitamin D"
    assert loaded.instruction is None

    (folder / TART_META).write_text(json.dumps({"task": "facts", "split": "test", "retriever": "bm25", "n_docs": 2,
                                                "instructions": ["Retrieve evidence", "Find a fact"]}))
    loaded = load_index(folder)
    assert loaded.instruction == "Retrieve evidence" and loaded.info["task"] == "facts" and loaded.info["n"] == 2


def test_save_index_of_documents(tmp_path):
    docs = [Document("d1", "Vitamin D", "deficiency and mood"), Document("d2", "", "naps help memory")]
    retriever = BM25Retriever().index_texts(["d1", "d2"], ["Vitamin D deficiency and mood", "naps help memory"])
    folder = save_index(tmp_path / "docs", retriever, docs, kind="documents", task="facts", retriever_spec="bm25",
                        instruction="Retrieve evidence", extra={"split": "test"})
    assert read_jsonl_rows(folder / ITEMS_FILE) == [{"id": "d1", "title": "Vitamin D", "text": "deficiency and mood"},
                                                    {"id": "d2", "title": "", "text": "naps help memory"}]
    info = json.loads((folder / INFO_FILE).read_text())
    assert info["kind"] == "documents" and info["split"] == "test" and info["output_format"] is None
    loaded = load_index(folder)
    assert loaded.kind == "documents" and loaded.instruction == "Retrieve evidence"
    assert loaded.records["d2"].text == "naps help memory" and loaded.records["d1"].title == "Vitamin D"
    assert load_index(folder, mmap=True).records == loaded.records
    with pytest.raises(ValueError, match="a document index has neither"):
        save_index(tmp_path / "x", retriever, docs, kind="documents", lm="smollm2-135m")
    with pytest.raises(ValueError, match="unknown index kind 'passages'"):
        save_index(tmp_path / "x", retriever, docs, kind="passages")


def test_taskret_index_1_folders_are_still_read(bm25_index, pool_examples):
    """taskret-index/1 (taskret index before taskret-index/2): examples.jsonl + index_info.json."""
    (bm25_index / ITEMS_FILE).rename(bm25_index / EXAMPLES_FILE)
    (bm25_index / INFO_FILE).write_text(json.dumps({"format": "taskret-index/1", "kind": "examples", "task": "pool",
                                                    "retriever": "bm25", "n": 8, "output_format": "break", "lm": None}))
    loaded = load_index(bm25_index)
    assert loaded.kind == "examples" and loaded.examples() == list(pool_examples) and loaded.output_format == "break"
    (bm25_index / EXAMPLES_FILE).write_text((bm25_index / EXAMPLES_FILE).read_text().splitlines(True)[0])
    with pytest.raises(InvalidIndex, match="examples.jsonl: holds 1 records"):
        load_index(bm25_index)


def test_a_bare_retriever_is_refused_unless_texts_are_optional(tmp_path, pool_examples):
    BM25Retriever().index(pool_examples).save(tmp_path / "bare")  # as the EPR pipeline's index/
    with pytest.raises(InvalidIndex, match="holds no texts"):
        load_index(tmp_path / "bare")
    loaded = load_index(tmp_path / "bare", texts_required=False)
    assert loaded.kind == "retriever" and loaded.records == {} and loaded.retriever.ids == [e.id for e in pool_examples]


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory, tiny_bert_dir, pool_examples):
    folder = tmp_path_factory.mktemp("dense") / "index"
    retriever = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu").index(pool_examples)
    return save_index(folder, retriever, pool_examples, retriever_spec=f"dense:{tiny_bert_dir}")


def test_dense_index_round_trip_and_refusals(dense_index, tmp_path):
    assert load_index(dense_index).retriever._index.ntotal == 8
    broken = tmp_path / "broken"
    shutil.copytree(dense_index, broken)
    (broken / "index.faiss").unlink()
    with pytest.raises(InvalidIndex, match="index.faiss: missing"):
        load_index(broken)

    import faiss

    fewer = faiss.IndexFlatIP(32)
    fewer.add(np.eye(32, dtype=np.float32)[:7])
    faiss.write_index(fewer, str(broken / "index.faiss"))
    with pytest.raises(InvalidIndex, match="index.faiss holds 7 vectors but the index lists 8 ids"):
        load_index(broken)


def test_cli_index_writes_a_servable_index(tmp_path, pool_files):
    train, _ = pool_files
    runner = CliRunner()
    result = runner.invoke(cli_app, ["index", "--task", str(train), "--input-field", "q", "--output-field", "a",
                                     "--id-field", "key", "--out", str(tmp_path / "idx")], env=ENV)
    assert result.exit_code == 0, result.output
    loaded = load_index(tmp_path / "idx")
    assert loaded.records["weather"].output == "GET_WEATHER paris tomorrow"
    assert json.loads((tmp_path / "idx" / INFO_FILE).read_text())["task"] == "pool_train"


def test_cli_serve_refuses_a_bad_index(tmp_path, bm25_index):
    (bm25_index / ITEMS_FILE).unlink()
    result = CliRunner().invoke(cli_app, ["serve", "--index", str(bm25_index)], env=ENV)
    assert result.exit_code == 2 and "holds no texts" in result.stderr


def test_cli_index_refuses_an_unknown_lm_and_serve_has_help(tmp_path, pool_files):
    train, _ = pool_files
    runner = CliRunner()
    result = runner.invoke(cli_app, ["index", "--train", str(train), "--input-field", "q", "--output-field", "a",
                                     "--lm", "no-such-lm", "--out", str(tmp_path / "idx")], env=ENV)
    assert result.exit_code == 2 and "unknown model 'no-such-lm'" in result.stderr
    assert not (tmp_path / "idx").exists()
    result = runner.invoke(cli_app, ["serve", "--help"], env=ENV)
    assert result.exit_code == 0 and "--index" in result.output and "--port" in result.output


def test_a_memory_mapped_index_gives_identical_results(tmp_path, pool_examples, dense_index):
    pool = big_pool(300)
    bm25 = save_index(tmp_path / "bm25", BM25Retriever().index(pool), pool, retriever_spec="bm25")
    queries = [e.input for e in pool[:50]] + QUERIES
    for folder in (bm25, dense_index):
        read, mapped = load_index(folder), load_index(folder, mmap=True)
        assert mapped.retriever.mmap and not read.retriever.mmap
        assert mapped.records == read.records
        assert_same_results(mapped.retriever.retrieve(queries, k=5), read.retriever.retrieve(queries, k=5))
    arrays = load_index(bm25, mmap=True).retriever._bm25.scores
    assert isinstance(arrays["data"], np.memmap)  # the scores are mapped from the file, not read


def _line_starts(path):
    """Where each line of a file starts, and its size last: counted by hand, as the offsets file should say."""
    data = path.read_bytes()
    return [0, *(i + 1 for i, byte in enumerate(data) if byte == ord("\n"))]


def test_a_memory_mapped_index_reads_its_texts_only_when_asked(tmp_path):
    pool = big_pool(300)
    folder = save_index(tmp_path / "bm25", BM25Retriever().index(pool), pool, retriever_spec="bm25")
    assert np.load(folder / OFFSETS_FILE).tolist() == _line_starts(folder / ITEMS_FILE)
    read, mapped = load_index(folder), load_index(folder, mmap=True)
    records = mapped.records
    assert isinstance(records, LazyRecords) and not isinstance(read.records, LazyRecords)
    assert len(records) == 300 and list(records) == [e.id for e in pool] and records.ids is mapped.retriever.ids
    assert records["e299"] == read.records["e299"] and records.at(7) == read.records["e7"]
    assert "e42" in records and "e300" not in records and 42 not in records and records.get("e300") is None
    assert mapped.examples() == read.examples() == pool
    with pytest.raises(KeyError):
        records["e300"]
    with pytest.raises(IndexError):
        records.at(300)
    ranking = ["e299", "e7", "e42", "e7"]  # one search for them all, in their order, repeats kept
    assert records.take(ranking) == [read.records[i] for i in ranking] == mapped.records_of(ranking)
    assert read.records_of(ranking) == records.take(ranking) and records.take([]) == []
    with pytest.raises(KeyError):
        records.take(["e7", "e300"])


def test_the_offsets_count_bytes_of_texts_beyond_ascii(tmp_path):
    pool = [Example(f"e{i}", f"caf\u00e9 {i} \U0001F600 na\u00efve", f"\u00fcber {i}") for i in range(20)]
    folder = save_index(tmp_path / "bm25", BM25Retriever().index(pool), pool, retriever_spec="bm25")
    assert np.load(folder / OFFSETS_FILE).tolist() == _line_starts(folder / ITEMS_FILE)
    assert load_index(folder, mmap=True).examples() == load_index(folder).examples() == pool


def _replace_line(path, number, text):
    lines = path.read_text(encoding="utf-8").splitlines(True)
    lines[number - 1] = text
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.parametrize("bad_line, message, read_whole", [
    ('{"id": "e250", "input": "x"' + " " * 28 + "\n", r"items.jsonl, line 251: malformed JSON", None),
    ('{"id": "e250", "input": "", "output": "OUT_250"}\n', r"items.jsonl, line 251: field 'input' must be a non-emp",
     None),
    ('{"id": "e251", "input": "swapped", "output": "OUT_251"}\n',
     r"items.jsonl, line 251: holds id 'e251' where the index lists 'e250' \(mismatched index\)",
     r"items.jsonl, line 252: duplicate id 'e251'"),
])
def test_a_memory_mapped_index_checks_a_line_when_it_is_read(tmp_path, bad_line, message, read_whole):
    pool = big_pool(300)
    folder = save_index(tmp_path / "bm25", BM25Retriever().index(pool), pool, retriever_spec="bm25")
    _replace_line(folder / ITEMS_FILE, 251, bad_line)
    with pytest.raises(InvalidIndex, match=read_whole or message):
        load_index(folder)  # read whole, as without mmap: refused at load
    records = load_index(folder, mmap=True).records  # mapped: loaded, the line read when asked for
    assert records["e249"].text == pool[249].input and records["e251"].output == "OUT_251"
    with pytest.raises(InvalidIndex, match=message):
        records["e250"]


def test_the_offsets_are_written_atomically_and_optional(tmp_path, monkeypatch):
    pool = big_pool(30)
    folder = save_index(tmp_path / "bm25", BM25Retriever().index(pool), pool)
    read = load_index(folder)

    def interrupted(handle, array, **kwargs):
        handle.write(b"\x93NUMPY half an array")
        raise OSError("disk full")

    saved = (folder / OFFSETS_FILE).read_bytes()
    monkeypatch.setattr(np, "save", interrupted)
    with pytest.raises(OSError, match="disk full"):
        save_index(folder, BM25Retriever().index(pool[:5]), pool[:5])
    monkeypatch.undo()
    assert (folder / OFFSETS_FILE).read_bytes() == saved
    assert load_index(folder, mmap=True).records == read.records  # the index it was to replace, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25"]  # nothing half-written beside it
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]

    (folder / OFFSETS_FILE).unlink()  # an index saved before the offsets were: its texts are scanned
    assert load_index(folder, mmap=True).records == read.records
    # texts rewritten after the save (lines moved by a longer one, a blank line): the saved offsets no longer fit
    folder = save_index(tmp_path / "again", BM25Retriever().index(pool), pool)
    _replace_line(folder / ITEMS_FILE, 3, '{"id": "e2", "input": "a longer input than before", "output": "O"}\n\n')
    records = load_index(folder, mmap=True).records
    assert records["e2"].text == "a longer input than before" and records["e29"] == read.records["e29"]
    _replace_line(folder / ITEMS_FILE, 10, "{broken\n")  # line 10 holds e8, after the blank line 4
    with pytest.raises(InvalidIndex, match="items.jsonl, line 10: malformed JSON"):
        load_index(folder, mmap=True).records["e8"]
    with pytest.raises(InvalidIndex, match="items.jsonl, line 10: malformed JSON"):
        load_index(folder)


def test_a_memory_mapped_index_still_counts_its_records(bm25_index):
    lines = (bm25_index / ITEMS_FILE).read_text().splitlines(True)
    (bm25_index / ITEMS_FILE).write_text("".join(lines[:-1]))
    with pytest.raises(InvalidIndex, match="items.jsonl: holds 7 records but .* lists 8 ids"):
        load_index(bm25_index, mmap=True)
    (bm25_index / ITEMS_FILE).write_text("")
    with pytest.raises(InvalidIndex, match="items.jsonl: holds 0 records but .* lists 8 ids"):
        load_index(bm25_index, mmap=True)
