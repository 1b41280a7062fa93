"""Reading tasks: named fields in JSONL/CSV/TSV, built-in layouts, Break formatting, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskret.data import (
    BUILTIN_TASKS,
    Example,
    default_data_dir,
    load_task,
    read_examples,
    sample,
)
from taskret.formats import (
    BREAK_FORMAT,
    break_from_prompt,
    break_to_prompt,
    format_query,
    normalize_whitespace,
    split_query,
)
from taskret.io import DataError

from .conftest import write_jsonl_rows

# --- reading good files ----------------------------------------------------------------------------


def test_read_jsonl_with_named_fields(tmp_path):
    path = write_jsonl_rows(tmp_path / "pool.jsonl", [
        {"key": "a1", "q": "first question", "a": "first answer", "other": 1},
        {"key": 7, "q": "second question", "a": "second answer"},
    ])
    examples = read_examples(path, input_field="q", output_field="a", id_field="key")
    assert examples == [
        Example("a1", "first question", "first answer"),
        Example("7", "second question", "second answer"),  # a numeric id is read as its text
    ]


def test_ids_default_to_file_stem_and_line_number_skipping_blank_lines(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"input": "x", "output": "y"}\n\n{"input": "z", "output": "w"}\n', encoding="utf-8")
    examples = read_examples(path)
    assert [e.id for e in examples] == ["mine-1", "mine-3"]
    assert [(e.input, e.output) for e in examples] == [("x", "y"), ("z", "w")]


def test_read_csv_with_named_fields_quotes_and_multiline(tmp_path):
    path = tmp_path / "break.csv"
    path.write_text(
        'question_id,question_text,decomposition,split\n'
        'q1,"Flights from Boston, then Denver?",return flights ;return #1 from  boston,train\n'
        'q2,"two\nlines",return x,train\n',
        encoding="utf-8",
    )
    examples = read_examples(path, "question_text", "decomposition", "question_id")
    assert examples == [
        Example("q1", "Flights from Boston, then Denver?", "return flights ;return #1 from  boston"),
        Example("q2", "two\nlines", "return x"),
    ]


def test_csv_ids_without_id_field_count_the_header(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("input,output\na,b\nc,d\n", encoding="utf-8")
    assert [e.id for e in read_examples(path)] == ["rows-2", "rows-3"]


def test_read_tsv(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_text("src\ttgt\nhello, world\tbonjour, monde\n", encoding="utf-8")
    assert read_examples(path, "src", "tgt") == [Example("rows-2", "hello, world", "bonjour, monde")]


@pytest.mark.parametrize("names", [("input", "output", None), ("text", "label", "uid"),
                                   ("user_utterance", "lispress", "idx"), ("Frage", "Antwort_1", "Nummer"),
                                   ("question text", "sql-query", "id#")])
def test_generic_reader_accepts_any_field_names(tmp_path, names):
    input_field, output_field, id_field = names
    rows = [{input_field: f"in {i}", output_field: f"out {i}", **({id_field: f"id{i}"} if id_field else {})}
            for i in range(3)]
    path = write_jsonl_rows(tmp_path / "any.jsonl", rows)
    examples = read_examples(path, input_field, output_field, id_field)
    assert [e.input for e in examples] == ["in 0", "in 1", "in 2"]
    assert [e.output for e in examples] == ["out 0", "out 1", "out 2"]
    assert [e.id for e in examples] == ([f"id{i}" for i in range(3)] if id_field else ["any-1", "any-2", "any-3"])


def test_byte_order_mark_is_not_part_of_the_first_csv_field(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("input,output\nhello,world\n".encode("utf-8-sig"))
    assert read_examples(path) == [Example("excel-2", "hello", "world")]


def test_byte_order_mark_in_jsonl(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes('{"input": "a", "output": "b"}\n'.encode("utf-8-sig"))
    assert read_examples(path) == [Example("bom-1", "a", "b")]


# --- tasks ----------------------------------------------------------------------------------------


SMCAL_TRAIN = [
    {"idx": "s1", "user_utterance": "make a meeting with Abby tomorrow",
     "lispress": "(Yield (CreateCommitEventWrapper (CreatePreflightEventWrapper)))"},
    {"idx": "s2", "user_utterance": "what is on my calendar today", "lispress": "(Yield (FindEventWrapperWithDefaults))"},
]
SMCAL_TEST = [{"idx": "s3", "user_utterance": "cancel my lunch", "lispress": "(Yield (DeleteCommitEventWrapper))"}]


def test_load_task_smcalflow_fields_from_arguments(tmp_path):
    train = write_jsonl_rows(tmp_path / "sm_train.jsonl", SMCAL_TRAIN)
    test = write_jsonl_rows(tmp_path / "sm_test.jsonl", SMCAL_TEST)
    task = load_task(train=train, test=test, input_field="user_utterance", output_field="lispress", id_field="idx")
    assert task.name == "sm_train"
    assert [e.id for e in task.train] == ["s1", "s2"]
    assert task.train[0].input == "make a meeting with Abby tomorrow"
    assert task.test == [Example("s3", "cancel my lunch", "(Yield (DeleteCommitEventWrapper))")]
    assert task.prompt_output(task.train[1]) == "(Yield (FindEventWrapperWithDefaults))"


def test_load_task_smcalflow_by_name_uses_its_layout_and_data_dir(tmp_path):
    write_jsonl_rows(tmp_path / "smcalflow" / "train.jsonl", SMCAL_TRAIN)
    write_jsonl_rows(tmp_path / "smcalflow" / "test.jsonl", SMCAL_TEST)
    task = load_task("smcalflow", data_dir=tmp_path)
    assert task.name == "smcalflow"
    assert [e.id for e in task.train] == ["s1", "s2"] and task.test[0].id == "s3"


def test_data_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKRET_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    write_jsonl_rows(tmp_path / "smcalflow" / "train.jsonl", SMCAL_TRAIN)
    write_jsonl_rows(tmp_path / "smcalflow" / "test.jsonl", SMCAL_TEST)
    assert len(load_task("smcalflow").train) == 2


def test_load_task_break_csv_formats_outputs_for_the_prompt(tmp_path):
    rows = "question_id,question_text,decomposition\nb1,flights to DC?,return flights ;return #1 to  DC\n"
    (tmp_path / "train.csv").write_text(rows, encoding="utf-8")
    (tmp_path / "test.csv").write_text(rows.replace("b1", "b2"), encoding="utf-8")
    task = load_task("break", train=tmp_path / "train.csv", test=tmp_path / "test.csv")
    assert task.output_format is BREAK_FORMAT
    assert task.prompt_output(task.train[0]) == "1#) return flights 2#) return #1 to DC"
    assert task.test[0].id == "b2"


def test_demo_task_ships_with_the_package(demo_task):
    assert demo_task.name == "demo"
    assert len(demo_task.train) == 1237 and len(demo_task.test) == 100
    assert len({e.id for e in demo_task.train}) == 1237
    assert not {e.id for e in demo_task.train} & {e.id for e in demo_task.test}
    assert all(e.output.startswith("[IN:") for e in demo_task.test)


def test_load_task_rejects_unknown_names_and_missing_files():
    with pytest.raises(ValueError, match="unknown task 'nope'.*break, mtop, smcalflow, demo"):
        load_task("nope")
    with pytest.raises(ValueError, match="--train and --test"):
        load_task(train="only_train.jsonl")


def test_a_builtin_task_not_installed_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKRET_DATA_DIR", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError) as err:
        load_task("mtop")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'cache' / 'mtop' / 'train.jsonl'}: the 'mtop' data set is not installed")
    assert "`taskret data download mtop`" in message and "`taskret data list`" in message
    with pytest.raises(FileNotFoundError, match=r"`taskret data download break --data-dir .*elsewhere`"):
        load_task("break", data_dir=tmp_path / "elsewhere")
    write_jsonl_rows(tmp_path / "smcalflow" / "train.jsonl", SMCAL_TRAIN)  # the test file alone is missing
    with pytest.raises(FileNotFoundError, match="smcalflow/test.jsonl: the 'smcalflow' data set is not installed"):
        load_task("smcalflow", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown task 'mtopp'; built-in tasks: break, mtop, smcalflow, demo"):
        load_task("mtopp")


def test_builtin_layouts():
    assert (BUILTIN_TASKS["mtop"].input_field, BUILTIN_TASKS["mtop"].output_field) == ("question", "logical_form")
    assert BUILTIN_TASKS["break"].output_format is BREAK_FORMAT


# --- Break formatting -----------------------------------------------------------------------------


def test_break_to_prompt():
    assert break_to_prompt("return flights ;return #1 from  washington") == \
        "1#) return flights 2#) return #1 from washington"


def test_break_from_prompt():
    assert break_from_prompt("1#) return flights 2#) return #1 from washington") == \
        "return flights ;return #1 from washington"


@pytest.mark.parametrize("gold", [
    "return flights ;return #1 from  washington",
    "return flights ;return #1 from  washington ;return #2 to  boston ;return #3 on  monday",
    "return cubes ;return #1 that are red ;return number of  #2",
    "return a ;return b ;return c ;return d ;return e ;return f ;return g ;return h ;return i ;return j ;return #10",
    "return the population of  France",
])
def test_break_round_trip_on_normalised_text(gold):
    assert normalize_whitespace(break_from_prompt(break_to_prompt(gold))) == normalize_whitespace(gold)


def test_break_from_prompt_on_text_without_step_marks_keeps_it():
    assert break_from_prompt("  return flights  ") == "return flights"


def test_split_query_undoes_format_query():
    assert split_query(format_query(" Find the abstract ", "aspirin cuts risk")) == ("Find the abstract",
                                                                                    "aspirin cuts risk")
    assert split_query(format_query(None, "aspirin cuts risk")) == (None, "aspirin cuts risk")
    assert split_query(" [SEP] a bare query") == (None, "[SEP] a bare query")  # no instruction before it: kept whole


# --- sampling -------------------------------------------------------------------------------------


def test_sample_is_seeded_ordered_and_a_subset():
    pool = [Example(str(i), f"in {i}", "o") for i in range(50)]
    first = sample(pool, 10, seed=3)
    assert first == sample(pool, 10, seed=3)
    assert first != sample(pool, 10, seed=4)
    assert len(first) == 10 and len({e.id for e in first}) == 10
    assert [int(e.id) for e in first] == sorted(int(e.id) for e in first)  # file order kept
    assert sample(pool, None) == pool and sample(pool, 500) == pool


# --- bad input: DataError naming the file, the line and the field ---------------------------------


def _expect_error(path: Path, line: int | None, field: str | None, text: str, **fields) -> DataError:
    with pytest.raises(DataError) as info:
        read_examples(path, **fields)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    message = str(err)
    assert message.startswith(str(path))
    assert text in message
    if line is not None:
        assert f"line {line}" in message
    if field is not None:
        assert f"field '{field}'" in message
    return err


GOOD = '{"input": "a", "output": "b"}\n'


def test_malformed_json_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + '{"input": "a", "output": \n' + GOOD, encoding="utf-8")
    _expect_error(path, 2, None, "malformed JSON")


def test_json_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + GOOD + '["a", "b"]\n', encoding="utf-8")
    _expect_error(path, 3, None, "expected a JSON object")


@pytest.mark.parametrize("record,field,text", [
    ({"input": "a"}, "output", "missing field"),
    ({"output": "b"}, "input", "missing field"),
    ({"input": None, "output": "b"}, "input", "missing field"),
    ({"input": "a", "output": ""}, "output", "empty value"),
    ({"input": " \t ", "output": "b"}, "input", "empty value"),
    ({"input": ["a"], "output": "b"}, "input", "expected a string, got list"),
    ({"input": "a", "output": {"x": 1}}, "output", "expected a string, got dict"),
    ({"input": True, "output": "b"}, "input", "expected a string, got bool"),
])
def test_bad_field_values(tmp_path, record, field, text):
    path = tmp_path / "fields.jsonl"
    path.write_text(GOOD + GOOD + json.dumps(record) + "\n", encoding="utf-8")
    _expect_error(path, 3, field, text)


def test_bad_field_in_custom_layout_names_that_field(tmp_path):
    path = write_jsonl_rows(tmp_path / "custom.jsonl", [
        {"idx": "1", "user_utterance": "hi", "lispress": "(a)"},
        {"idx": "2", "user_utterance": "hi", "lispress": "  "},
    ])
    _expect_error(path, 2, "lispress", "empty value",
                  input_field="user_utterance", output_field="lispress", id_field="idx")


def test_empty_id_is_an_error(tmp_path):
    path = write_jsonl_rows(tmp_path / "ids.jsonl", [{"id": "", "input": "a", "output": "b"}])
    _expect_error(path, 1, "id", "empty value", id_field="id")


def test_duplicate_id(tmp_path):
    path = write_jsonl_rows(tmp_path / "dup.jsonl", [
        {"id": "x", "input": "a", "output": "b"},
        {"id": "y", "input": "a", "output": "b"},
        {"id": "x", "input": "c", "output": "d"},
    ])
    err = _expect_error(path, 3, "id", "duplicate id 'x'", id_field="id")
    assert "first seen on line 1" in str(err)


def test_missing_csv_column(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text("input,answer\na,b\n", encoding="utf-8")
    _expect_error(path, 2, "output", "missing field")


def test_short_csv_row(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("input,output\na,b\nc\n", encoding="utf-8")
    _expect_error(path, 3, "output", "missing field")


def test_missing_file(tmp_path):
    _expect_error(tmp_path / "nowhere.jsonl", None, None, "cannot read file")


def test_unreadable_file(tmp_path):
    folder = tmp_path / "folder.jsonl"  # a directory cannot be opened as a file, even by root
    folder.mkdir()
    _expect_error(folder, None, None, "cannot read file")


def test_invalid_utf8_names_the_line_and_byte(tmp_path):
    path = tmp_path / "latin1.jsonl"
    good = GOOD.encode()
    path.write_bytes(good * 2 + b'{"input": "caf\xe9", "output": "b"}\n')
    err = _expect_error(path, 3, None, "not valid UTF-8")
    bad_at = 2 * len(good) + len(b'{"input": "caf')
    assert f"at byte {bad_at}" in str(err)


def test_invalid_utf8_far_into_a_large_file_is_located_in_the_file(tmp_path):
    # Text files are decoded in chunks; the reported place must be the file's, not the chunk's.
    path = tmp_path / "big.csv"
    header = b"input,output\n"
    row = b"some input text that is long enough,output\n"
    path.write_bytes(header + row * 2000 + b"caf\xe9,x\n")
    err = _expect_error(path, 2002, None, "not valid UTF-8")
    assert f"at byte {len(header) + 2000 * len(row) + 3}" in str(err)


def test_unknown_extension(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("input\toutput\na\tb\n", encoding="utf-8")
    _expect_error(path, None, None, "unknown file type '.txt'")


@pytest.mark.parametrize("name,content", [("empty.jsonl", ""), ("blank.jsonl", "\n  \n"),
                                          ("header_only.csv", "input,output\n")])
def test_empty_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    _expect_error(path, None, None, "no examples in file")


def test_load_task_reports_errors_in_the_test_file(tmp_path):
    train = write_jsonl_rows(tmp_path / "train.jsonl", [{"input": "a", "output": "b"}])
    test = write_jsonl_rows(tmp_path / "test.jsonl", [{"input": "a", "output": "b"}, {"input": "c"}])
    with pytest.raises(DataError) as info:
        load_task(train=train, test=test)
    assert (info.value.path, info.value.line, info.value.field) == (str(test), 2, "output")


def test_data_error_is_a_value_error():
    err = DataError("f.jsonl", 4, "q", "empty value")
    assert isinstance(err, ValueError)
    assert str(err) == "f.jsonl, line 4, field 'q': empty value"


def test_a_multi_line_output_is_refused_naming_file_line_and_field(tmp_path):
    path = write_jsonl_rows(tmp_path / "multiline.jsonl", [{"uid": "a", "nl": "list files", "cmd": "ls"},
                                                           {"uid": "b", "nl": "two steps", "cmd": "cd /tmp\nls"}])
    with pytest.raises(DataError, match=r"multiline.jsonl, line 2, field 'cmd': the output spans 2 lines; it must be "
                                        r"one line"):
        read_examples(path, "nl", "cmd", "uid")
    path.write_text(json.dumps({"nl": "x", "cmd": "ls\n"}) + "\n", encoding="utf-8")  # a trailing newline is not a line
    assert read_examples(path, "nl", "cmd")[0].output == "ls\n"


def test_an_id_field_that_is_not_read_is_one_warning_naming_the_fields(tmp_path, caplog):
    path = write_jsonl_rows(tmp_path / "mine.jsonl", [{"id": "q1", "input": "x", "output": "y"},
                                                      {"id": "q2", "input": "z", "output": "w"}])
    with caplog.at_level("WARNING", logger="taskret.data"):
        assert [e.id for e in read_examples(path)] == ["mine-1", "mine-2"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: ids are the file's name and line ('mine-1', ...), not its field 'id' (--id-field id reads it)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="taskret.data"):
        read_examples(path, id_field="uid")
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: no id field 'uid' (fields here: id, input, output), so ids are the file's name and line "
        f"('mine-1', ...)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="taskret.data"):
        read_examples(path, id_field="id")
    assert caplog.records == []
