"""Retrieval tasks: the BEIR layout (good files and every kind of bad one), instruction files, and MTOP /
Break / AmbigQA / SciFact cast as retrieval, all on tiny hand-made files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskret.io import DataError
from taskret.tart.tasks import (
    AMBIGQA_INSTRUCTIONS,
    BREAK_INSTRUCTIONS,
    MTOP_INSTRUCTIONS,
    MTOP_SIMILAR_INSTRUCTIONS,
    RETRIEVAL_TASKS,
    SCIFACT_TEST_INSTRUCTIONS,
    SCIFACT_TRAIN_INSTRUCTIONS,
    Document,
    RetrievalTask,
    ambigqa_task,
    break_task,
    doc_text,
    load_retrieval_task,
    load_training_tasks,
    mtop_similar_task,
    mtop_task,
    parse_template,
    read_beir,
    read_instructions,
    split_task_spec,
    task_source,
)

from ..conftest import write_jsonl_rows
from .builders import AMBIGQA_ITEMS, make_data_dir, write_beir, write_break, write_mtop

# --- BEIR: good files --------------------------------------------------------------------------------


def test_read_beir_reads_corpus_queries_and_the_split_qrels(tmp_path):
    task = read_beir(write_beir(tmp_path / "facts"), "test", instructions=["Find evidence"])
    assert task.name == "facts"
    assert task.corpus == {
        "d1": Document("d1", "Aspirin and the heart", "Aspirin lowers the risk of heart attacks."),
        "d2": Document("d2", "", "Vitamin C does not prevent the common cold."),
        "3": Document("3", "", "Coffee consumption and sleep quality in adults."),
    }
    # Only the queries judged in the split, as BEIR evaluates.
    assert task.queries == {"q1": "Aspirin prevents heart attacks.", "q2": "Vitamin C cures colds."}
    assert task.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1, "3": 2}}
    assert task.instructions == ["Find evidence"] and task.instruction == "Find evidence"
    train = read_beir(tmp_path / "facts", "train")
    assert train.queries == {"q3": "Coffee harms sleep."} and train.instruction is None


def test_qrels_header_is_optional(tmp_path):
    task = read_beir(write_beir(tmp_path / "b", header=False), "test")
    assert task.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1, "3": 2}}


def test_doc_text_joins_title_and_text_trimmed():
    assert doc_text(Document("a", "Title ", " body text ")) == "Title body text"
    assert doc_text(Document("a", "", "  only text")) == "only text"
    assert doc_text(Document("a", "Only title", "")) == "Only title"


def test_a_missing_split_names_the_available_ones(tmp_path):
    write_beir(tmp_path / "b")
    with pytest.raises(FileNotFoundError, match=r"split 'dev'.*available: test, train"):
        read_beir(tmp_path / "b", "dev")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        read_beir(tmp_path / "nowhere")


# --- BEIR: bad files ---------------------------------------------------------------------------------


def _bad_line(path: Path, line_no: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line_no - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("file, line_no, text, field, message", [
    ("corpus.jsonl", 2, '{"_id": "d2", "text": "unterminated', None, "malformed JSON"),
    ("corpus.jsonl", 2, '["not", "an", "object"]', None, "expected a JSON object"),
    ("corpus.jsonl", 2, '{"title": "t", "text": "no id"}', "_id", "missing field"),
    ("corpus.jsonl", 2, '{"_id": "d2", "title": "only a title"}', "text", "missing field"),
    ("corpus.jsonl", 2, '{"_id": "d2", "title": "", "text": "  "}', "text", "empty document"),
    ("corpus.jsonl", 2, '{"_id": "d2", "text": 5}', "text", "expected a string"),
    ("corpus.jsonl", 2, '{"_id": "d1", "text": "same id again"}', "_id", "duplicate id 'd1' (first seen on line 1)"),
    ("queries.jsonl", 3, '{"_id": "q3"}', "text", "missing field"),
    ("queries.jsonl", 2, '{"_id": "q1", "text": "again"}', "_id", "duplicate id 'q1'"),
    ("qrels/test.tsv", 3, "q2\td2", None, "expected 3 tab-separated columns"),
    ("qrels/test.tsv", 3, "q2\td2\t1\textra", None, "got 4"),
    ("qrels/test.tsv", 3, "q2\td2\t1.5", "score", "expected an integer relevance, got '1.5'"),
    ("qrels/test.tsv", 3, "q2\td2\thigh", "score", "expected an integer relevance"),
    ("qrels/test.tsv", 3, "q9\td2\t1", "query-id", "unknown query id 'q9'"),
    ("qrels/test.tsv", 3, "q2\td9\t1", "corpus-id", "unknown document id 'd9'"),
    ("qrels/test.tsv", 3, "q1\td1\t1", "corpus-id", "duplicate judgement of ('q1', 'd1') (first on line 2)"),
    ("qrels/test.tsv", 3, "\td2\t1", "query-id", "empty value"),
])
def test_bad_beir_files_name_file_line_and_field(tmp_path, file, line_no, text, field, message):
    folder = write_beir(tmp_path / "b")
    _bad_line(folder / file, line_no, text)
    with pytest.raises(DataError) as caught:
        read_beir(folder, "test")
    err = caught.value
    assert err.path == str(folder / file)
    assert err.line == line_no
    assert err.field == field
    assert message in str(err)


def test_invalid_utf8_in_qrels_names_the_line(tmp_path):
    folder = write_beir(tmp_path / "b")
    (folder / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td\xff2\t1\n")
    with pytest.raises(DataError, match="not valid UTF-8") as caught:
        read_beir(folder, "test")
    assert caught.value.line == 3


@pytest.mark.parametrize("file", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_empty_files_are_errors(tmp_path, file):
    folder = write_beir(tmp_path / "b")
    (folder / file).write_text("query-id\tcorpus-id\tscore\n" if file.endswith(".tsv") else "", encoding="utf-8")
    with pytest.raises(DataError, match="no (documents|queries|relevance judgements)"):
        read_beir(folder, "test")


def test_a_task_rejects_qrels_outside_its_corpus_or_queries():
    corpus = {"d1": Document("d1", "", "text")}
    with pytest.raises(ValueError, match="document 'd2'"):
        RetrievalTask("t", corpus, {"q1": "query"}, {"q1": {"d2": 1}})
    with pytest.raises(ValueError, match="query 'q2'"):
        RetrievalTask("t", corpus, {"q1": "query"}, {"q2": {"d1": 1}})


def test_sample_keeps_the_corpus_and_is_seeded():
    corpus = {f"d{i}": Document(f"d{i}", "", f"doc {i}") for i in range(10)}
    queries = {f"q{i}": f"query {i}" for i in range(10)}
    task = RetrievalTask("t", corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(10)}, ["instr"])
    small = task.sample(4, seed=1)
    assert len(small.queries) == 4 and set(small.qrels) == set(small.queries)
    assert small.corpus == corpus and small.instructions == ["instr"]
    assert list(small.queries) == list(task.sample(4, seed=1).queries)  # same sample every time
    assert task.sample(None) is task and task.sample(50) is task


# --- instruction files -------------------------------------------------------------------------------


def test_read_berri_instructions_tsv(tmp_path):
    path = tmp_path / "berri_instructions.tsv"
    path.write_text(
        "dataset\tprompt_1\tprompt_2\tprompt_3\n"
        "fever\tRetrieve a Wikipedia paragraph to verify this claim\tFind evidence for \"this\" \t\n"
        "nq\tAnswer this question \t\t\n", encoding="utf-8")
    assert read_instructions(path) == {
        "fever": ["Retrieve a Wikipedia paragraph to verify this claim", 'Find evidence for "this"'],
        "nq": ["Answer this question"],
    }


@pytest.mark.parametrize("text, line, message", [
    ("name\tprompt_1\nfever\tx\n", 1, "header"),
    ("dataset\tprompt_1\nfever\tx\nfever\ty\n", 3, "duplicate dataset 'fever'"),
    ("dataset\tprompt_1\nfever\t\t\n", 2, "no instruction"),
])
def test_bad_berri_instructions(tmp_path, text, line, message):
    path = tmp_path / "berri.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as caught:
        read_instructions(path)
    assert caught.value.line == line


def test_read_eval_instructions_json(tmp_path):
    path = tmp_path / "eval_instructions.json"
    path.write_text(json.dumps({"beir": {"scifact": "Verify this claim "}, "x2_retrieval": {"ambigqa": "Similar"}}))
    assert read_instructions(path) == {"beir/scifact": ["Verify this claim"], "x2_retrieval/ambigqa": ["Similar"]}
    path.write_text(json.dumps({"beir": {"scifact": 3}}))
    with pytest.raises(DataError, match="non-empty instruction") as caught:
        read_instructions(path)
    assert caught.value.field == "beir.scifact"
    path.write_text("{not json")
    with pytest.raises(DataError, match="malformed JSON"):
        read_instructions(path)


# --- non-retrieval data cast as retrieval ------------------------------------------------------------


def test_mtop_task_shares_one_document_per_distinct_parse(tmp_path):
    task = mtop_task(write_mtop(tmp_path / "mtop.jsonl"))
    assert task.name == "mtop" and task.instructions == MTOP_INSTRUCTIONS and len(task.instructions) >= 3
    assert task.queries == {"m1": "wake me up at 7 am", "m2": "what is the weather in paris",
                            "m3": "set a new alarm", "m4": "make an alarm"}
    assert set(task.corpus) == {"m1", "m2", "m3"}  # m4's parse is m3's (up to spacing)
    assert task.corpus["m3"].text == "[IN:CREATE_ALARM ]"
    assert task.qrels == {"m1": {"m1": 1}, "m2": {"m2": 1}, "m3": {"m3": 1}, "m4": {"m3": 1}}


def test_parse_template_keeps_intents_and_slot_labels_only():
    assert parse_template("[IN:GET_WEATHER [SL:LOCATION new york ] [SL:DATE_TIME this week ] ]") == \
        "[IN:GET_WEATHER [SL:LOCATION ] [SL:DATE_TIME ] ]"
    assert parse_template("[IN:CREATE_ALARM  ]") == parse_template("[IN:CREATE_ALARM ]") == "[IN:CREATE_ALARM ]"


def test_mtop_similar_task_pairs_commands_with_the_same_template(tmp_path):
    corpus_path = write_jsonl_rows(tmp_path / "train.jsonl", [
        {"idx": "t1", "question": "set an alarm for  6 pm", "logical_form": "[IN:CREATE_ALARM [SL:DATE_TIME for 6 pm ] ]"},
        {"idx": "t2", "question": "alarm at noon please", "logical_form": "[IN:CREATE_ALARM [SL:DATE_TIME at noon ] ]"},
        {"idx": "t3", "question": "new alarm", "logical_form": "[IN:CREATE_ALARM ]"},
        {"idx": "m2", "question": "weather in rome", "logical_form": "[IN:GET_WEATHER [SL:LOCATION rome ] ]"},
    ])
    task = mtop_similar_task(write_mtop(tmp_path / "test.jsonl"), corpus_path)
    assert task.name == "mtop-similar" and task.instructions == MTOP_SIMILAR_INSTRUCTIONS
    assert {d.id: d.text for d in task.corpus.values()} == {
        "t1": "set an alarm for 6 pm", "t2": "alarm at noon please", "t3": "new alarm", "m2": "weather in rome"}
    # m1: same intent and slot, other value; m3/m4: the bare intent; m2 is its own id in the corpus, and a
    # command never counts itself, so m2 has no relevant command and is left out.
    assert task.qrels == {"m1": {"t1": 1, "t2": 1}, "m3": {"t3": 1}, "m4": {"t3": 1}}
    # The train split: every query is in the corpus, judged 0 so it is neither its own positive nor negative.
    train = mtop_similar_task(corpus_path, corpus_path)
    assert train.qrels == {"t1": {"t2": 1, "t1": 0}, "t2": {"t1": 1, "t2": 0}}
    assert set(task.queries) == {"m1", "m3", "m4"} and task.queries["m1"] == "wake me up at 7 am"
    # The X^2 pair: the same queries as MTOP's, whose instructions ask for a different kind of document.
    assert not set(task.instructions) & set(MTOP_INSTRUCTIONS)


def test_mtop_similar_task_without_any_shared_template_is_an_error(tmp_path):
    corpus_path = write_jsonl_rows(tmp_path / "train.jsonl", [
        {"idx": "t1", "question": "play jazz", "logical_form": "[IN:PLAY_MUSIC [SL:MUSIC_GENRE jazz ] ]"}])
    with pytest.raises(DataError, match="no command shares a parse template"):
        mtop_similar_task(write_mtop(tmp_path / "test.jsonl"), corpus_path)


def test_break_task_maps_questions_to_decompositions(tmp_path):
    task = break_task(write_break(tmp_path / "break.csv"))
    assert task.instructions == BREAK_INSTRUCTIONS and len(task.instructions) >= 3
    assert task.queries["b1"] == "show me flights from boston to denver"
    assert task.corpus["b1"].text == "return flights ;return #1 from boston ;return #2 to denver"
    assert task.qrels == {"b1": {"b1": 1}, "b2": {"b2": 1}, "b3": {"b3": 1}}


def test_ambigqa_task_maps_ambiguous_questions_to_their_rewrites(tmp_path):
    path = tmp_path / "dev_light.json"
    path.write_text(json.dumps(AMBIGQA_ITEMS), encoding="utf-8")
    task = ambigqa_task(path)
    assert task.instructions == AMBIGQA_INSTRUCTIONS and len(task.instructions) >= 3
    assert task.queries == {"a2": "When did the simpsons first air?", "3": "Who won the world cup?"}
    assert {d.id: d.text for d in task.corpus.values()} == {
        "a2-0": "When did the simpsons first air as a short?",
        "a2-1": "When did the simpsons first air as a half-hour show?",
        "3-0": "Who won the 2018 world cup?",
        "3-1": "Who won the 2014 world cup?",
    }
    assert task.qrels == {"a2": {"a2-0": 1, "a2-1": 1}, "3": {"3-0": 1, "3-1": 1}}


@pytest.mark.parametrize("items, field, message", [
    ({"not": "a list"}, None, "expected a JSON list"),
    ([{"question": "q?", "annotations": []}], "id", "missing or empty 'id'"),
    ([{"id": "x", "question": "q?", "annotations": [{"type": "multipleQAs", "qaPairs": [{"answer": ["a"]}]}]}],
     "[0].annotations[0].qaPairs[0].question", "expected a non-empty question"),
    ([{"id": "x", "question": "q?", "annotations": "none"}], "[0].annotations", "expected a list"),
    ([{"id": "x", "question": "q?", "annotations": [{"type": "singleAnswer", "answer": ["a"]}]}], None,
     "no question has disambiguated rewrites"),
])
def test_bad_ambigqa_files(tmp_path, items, field, message):
    path = tmp_path / "dev_light.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        ambigqa_task(path)
    assert caught.value.field == field and caught.value.path == str(path)


def test_bad_mtop_file_names_line_and_field(tmp_path):
    path = write_jsonl_rows(tmp_path / "mtop.jsonl", [{"idx": "1", "question": "hi", "logical_form": "[IN:X ]"},
                                                      {"idx": "2", "question": "no parse"}])
    with pytest.raises(DataError, match="missing field") as caught:
        mtop_task(path)
    assert (caught.value.line, caught.value.field) == (2, "logical_form")


# --- the registry --------------------------------------------------------------------------------------


def test_load_retrieval_task_reads_every_builtin_task_from_data_dir(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    assert set(RETRIEVAL_TASKS) == {"scifact", "mtop", "mtop-similar", "break", "ambigqa"}
    for name in RETRIEVAL_TASKS:
        task = load_retrieval_task(name, data_dir, "test")
        assert task.name == name and task.queries and task.corpus and len(task.instructions) >= 3
    assert load_retrieval_task("scifact", data_dir, "test").instructions == SCIFACT_TEST_INSTRUCTIONS
    train = load_retrieval_task("scifact", data_dir, "train")
    assert train.instructions == SCIFACT_TRAIN_INSTRUCTIONS and set(train.queries) == {"q3"}
    # The paper's SciFact evaluation instruction is never a training instruction.
    assert not set(SCIFACT_TEST_INSTRUCTIONS) & set(SCIFACT_TRAIN_INSTRUCTIONS)
    assert load_retrieval_task("mtop", data_dir, "train").queries
    assert load_retrieval_task(str(data_dir / "scifact"), split="train").name == "scifact"  # a BEIR folder by path


def test_load_retrieval_task_errors(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    with pytest.raises(ValueError, match="unknown retrieval task 'nope'.*scifact, mtop, mtop-similar, break, ambigqa"):
        load_retrieval_task("nope", data_dir)
    with pytest.raises(ValueError, match="no split 'train'; splits: test, dev"):
        load_retrieval_task("ambigqa", data_dir, "train")
    with pytest.raises(FileNotFoundError, match="break/train.csv"):
        load_retrieval_task("break", data_dir, "train")


def test_data_dir_defaults_to_taskret_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKRET_DATA_DIR", str(make_data_dir(tmp_path / "data")))
    assert load_retrieval_task("mtop").name == "mtop"


# --- instructions that travel with a BEIR folder; berri-lite by name ------------------------------


@pytest.mark.parametrize("content, split, expected", [
    (["Find evidence", "Verify"], "test", ["Find evidence", "Verify"]),
    ({"train": ["Train on this"], "test": ["Evaluate with this"]}, "train", ["Train on this"]),
    ({"train": ["Train on this"], "test": ["Evaluate with this"]}, "dev", ["Evaluate with this"]),
])
def test_read_beir_takes_the_folders_instructions_json(tmp_path, content, split, expected):
    folder = write_beir(tmp_path / "facts")
    (folder / "qrels" / f"{split}.tsv").write_text((folder / "qrels" / "test.tsv").read_text())
    (folder / "instructions.json").write_text(json.dumps(content))
    assert read_beir(folder, split).instructions == expected
    assert load_retrieval_task(str(folder), split=split).instruction == expected[0]
    # explicit instructions win over the file
    assert read_beir(folder, split, instructions=["mine"]).instructions == ["mine"]


def test_read_beir_without_instructions_json_has_none(tmp_path):
    assert read_beir(write_beir(tmp_path / "facts"), "test").instructions == []


@pytest.mark.parametrize("content, field", [({"train": ["x"]}, "test"), ([], None), (["ok", " "], "[1]")])
def test_bad_instructions_json_names_the_file_and_field(tmp_path, content, field):
    folder = write_beir(tmp_path / "facts")
    (folder / "instructions.json").write_text(json.dumps(content))
    with pytest.raises(DataError) as err:
        read_beir(folder, "test")
    assert err.value.field == field and "instructions.json" in str(err.value)


def _write_berri_lite(root: Path) -> Path:
    for task in ("alpha", "beta"):
        folder = write_beir(root / "berri-lite" / task)
        (folder / "qrels" / "dev.tsv").write_text((folder / "qrels" / "test.tsv").read_text())
        (folder / "qrels" / "train.tsv").write_text((folder / "qrels" / "test.tsv").read_text())
    (root / "berri-lite" / "instructions.json").write_text(json.dumps({"alpha": ["Do alpha"], "beta": ["Do beta"]}))
    return root


def test_berri_lite_tasks_load_by_name_with_dev_as_the_held_out_split(tmp_path):
    root = _write_berri_lite(tmp_path)
    task = load_retrieval_task("berri-lite/alpha", root, "test")
    assert task.name == "alpha" and task.instructions == ["Do alpha"]
    assert task_source("berri-lite/alpha", "test", root) == task_source("berri-lite/alpha", "dev", root)
    assert split_task_spec("berri-lite/beta:train", "test") == ("berri-lite/beta", "train")
    tasks, skipped = load_training_tasks(["berri-lite"], root)
    assert [t.name for t in tasks] == ["alpha", "beta"] and not skipped
    assert [t.instruction for t in tasks] == ["Do alpha", "Do beta"]
    with pytest.raises(FileNotFoundError, match="no berri-lite task 'gamma'"):
        load_retrieval_task("berri-lite/gamma", root)


# --- any corpus, with or without qrels ------------------------------------------------------------


def test_load_corpus_reads_a_folder_without_qrels_a_bare_corpus_file_and_a_csv_with_named_fields(tmp_path):
    from taskret.tart.tasks import load_corpus

    folder = tmp_path / "my-corpus"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "first"}\n'
                                         '{"_id": "d2", "text": "second"}\n', encoding="utf-8")
    (folder / "instructions.json").write_text('["Find the passage"]', encoding="utf-8")
    corpus = load_corpus(folder)  # no queries.jsonl, no qrels/
    assert corpus.name == "my-corpus" and list(corpus.documents) == ["d1", "d2"]
    assert corpus.documents["d1"] == Document("d1", "T", "first") and corpus.instructions == ["Find the passage"]
    bare = load_corpus(folder / "corpus.jsonl")
    assert bare.name == "my-corpus" and bare.documents == corpus.documents and bare.instructions == []

    table = tmp_path / "faq.csv"
    table.write_text("question,answer,key\nWhat is it?,An answer,q1\nAnd that?,Another,q2\n", encoding="utf-8")
    faq = load_corpus(table, text_field="answer", title_field="question", id_field="key")
    assert faq.name == "faq" and faq.documents["q2"] == Document("q2", "And that?", "Another")
    numbered = load_corpus(table, text_field="answer", title_field=None)  # no id field: the line number
    assert list(numbered.documents) == ["2", "3"] and numbered.documents["2"].title == ""
    with pytest.raises(DataError, match=r"faq.csv, line 2, field 'body': missing field \(fields here: question, "
                       r"answer, key; name the text's field with --text-field\)"):
        load_corpus(table, text_field="body")
    with pytest.raises(DataError, match=r"faq.csv, line 2, field 'id': missing field \(fields here: question, "
                       r"answer, key; name the id's field with --id-field, or leave it out to number the documents "
                       r"by line\)"):
        load_corpus(table, text_field="answer", id_field="id")
    with pytest.raises(FileNotFoundError, match="corpus.jsonl: missing"):
        load_corpus(tmp_path)


def test_an_unknown_berri_lite_task_lists_the_known_ones(tmp_path):
    from taskret.tart.tasks import load_corpus

    for task in ("medquad", "nl2bash"):
        (tmp_path / "berri-lite" / task).mkdir(parents=True)
        (tmp_path / "berri-lite" / task / "corpus.jsonl").write_text('{"_id": "1", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="no berri-lite task 'medqad'; known tasks: medquad, nl2bash"):
        load_retrieval_task("berri-lite/medqad", tmp_path)
    assert load_corpus("berri-lite/medquad", tmp_path).name == "medquad"  # a corpus needs no qrels


def test_a_corpus_whose_id_or_title_column_is_not_read_says_so_in_one_warning(tmp_path, caplog):
    from taskret.tart.tasks import load_corpus

    table = tmp_path / "medquad.csv"
    table.write_text("doc_no,focus,answer_body\n12109,Diabetes,Insulin helps\n12110,Asthma,Inhalers help\n",
                     encoding="utf-8")
    with caplog.at_level("WARNING", logger="taskret.tart.tasks"):
        corpus = load_corpus(table, text_field="answer_body", title_field="focus")
    assert list(corpus.documents) == ["2", "3"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{table}: no id field ('_id' or 'id'), so ids are line numbers; --id-field names one (fields not read: "
        f"doc_no)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="taskret.tart.tasks"):
        assert list(load_corpus(table, text_field="answer_body", title_field="focus", id_field="doc_no").documents) \
            == ["12109", "12110"]
    assert caplog.records == []
    titled = tmp_path / "titled.jsonl"
    titled.write_text('{"_id": "d1", "Title": "T", "text": "first"}\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="taskret.tart.tasks"):
        load_corpus(titled)
    assert [r.getMessage() for r in caplog.records] == [
        f"{titled}: no title field 'title', so no titles; --title-field names one (fields not read: Title)"]


def test_a_beir_folder_with_only_dev_qrels_is_evaluated_on_dev_and_says_so(tmp_path, caplog):
    folder = write_beir(tmp_path / "mine", qrels={"dev": [("q1", "d1", 1)], "train": [("q3", "3", 1)]})
    with caplog.at_level("WARNING", logger="taskret.tart.tasks"):
        task = load_retrieval_task(str(folder))
    assert task.qrels == {"q1": {"d1": 1}} and list(task.queries) == ["q1"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder} has no test qrels: evaluating on its dev qrels ({folder / 'qrels' / 'dev.tsv'})"]
    assert load_retrieval_task(str(folder), split="train").qrels == {"q3": {"3": 1}}
    (folder / "qrels" / "dev.tsv").unlink()
    with pytest.raises(FileNotFoundError, match=r"no qrels for split 'test' \(available: train\)"):
        load_retrieval_task(str(folder))
