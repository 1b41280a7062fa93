"""The `taskret` command line, run in-process with typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from taskret.cli import app
from tests.conftest import read_jsonl_rows, write_jsonl_rows

# A wide "terminal", so rich does not wrap long paths in error messages.
ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(app, [str(a) for a in args], env=ENV)


def test_help_lists_the_commands(runner):
    result = invoke(runner, "--help")
    assert result.exit_code == 0
    for command in ("evaluate", "index", "retrieve", "models", "demo"):
        assert command in result.output


def test_no_arguments_shows_help(runner):
    result = invoke(runner)
    assert "evaluate" in result.output and "Usage" in result.output


def test_models_lists_the_registry(runner):
    result = invoke(runner, "models")
    assert result.exit_code == 0
    for name in ("smollm2-135m", "gemma3-270m", "minilm-l6"):
        assert name in result.output


def test_evaluate_with_a_malformed_train_file_names_file_line_and_field(runner, tmp_path, pool_files):
    _, test = pool_files
    train = tmp_path / "broken[v2].jsonl"  # brackets in a path must survive rich's markup
    write_jsonl_rows(train, [{"key": "1", "q": "fine", "a": "fine"}, {"key": "2", "q": "no output here"}])
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q",
                    "--output-field", "a", "--id-field", "key", "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert str(train) in result.stderr
    assert "line 2" in result.stderr and "field 'a'" in result.stderr and "missing field" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_evaluate_with_malformed_json_names_the_line(runner, tmp_path, pool_files):
    _, test = pool_files
    train = tmp_path / "train.jsonl"
    train.write_text('{"q": "a", "a": "b"}\n{"q": "a", "a": \n', encoding="utf-8")
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a")
    assert result.exit_code == 2
    assert f"{train}, line 2: malformed JSON" in result.stderr


@pytest.mark.parametrize("extra,message", [
    (["--retriever", "colbert"], "unknown retriever 'colbert'"),
    (["--lm", "no-such-model"], "unknown model 'no-such-model'"),
    (["--lm", "models/[exp1]"], "unknown model 'models/[exp1]'"),  # not read as rich markup
    (["--format", "squad"], "unknown format 'squad'"),
])
def test_evaluate_bad_options_fail_clearly(runner, pool_files, tmp_path, extra, message):
    train, test = pool_files
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q",
                    "--output-field", "a", "--id-field", "key", "--out", tmp_path / "run", *extra)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("extra,option", [
    (["--k", "0"], "--k"), (["--k", "-1"], "--k"), (["--limit", "0"], "--limit"), (["--limit", "-5"], "--limit"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
])
def test_evaluate_refuses_counts_below_one_before_loading_anything(runner, pool_files, tmp_path, monkeypatch,
                                                                   extra, option):
    import taskret.backends.base

    monkeypatch.setattr(taskret.backends.base, "load_lm", lambda *a, **k: pytest.fail("the LM was loaded"))
    train, test = pool_files
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q",
                    "--output-field", "a", "--id-field", "key", "--out", tmp_path / "run", *extra)
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.output and "greater than or equal to 1" in result.output
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_a_context_with_no_room_for_the_prompt(runner, pool_files, tmp_path, monkeypatch):
    import taskret.backends.base

    monkeypatch.setattr(taskret.backends.base, "load_lm", lambda *a, **k: pytest.fail("the LM was loaded"))
    train, test = pool_files
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a",
                    "--context-window", "128", "--max-new-tokens", "128")
    assert result.exit_code == 2
    assert "--context-window 128 leaves no room for the prompt" in result.stderr


def test_retrieve_refuses_top_k_below_one(runner, tmp_path):
    result = invoke(runner, "retrieve", "--index", tmp_path, "--top-k", "0", "query")
    assert result.exit_code == 2 and "Invalid value for '--top-k'" in result.output


def test_evaluate_with_missing_files(runner, tmp_path):
    result = invoke(runner, "evaluate", "--train", tmp_path / "nope.jsonl", "--test", tmp_path / "nope.jsonl")
    assert result.exit_code == 2
    assert f"{tmp_path / 'nope.jsonl'}: cannot read file" in result.stderr


def test_index_then_retrieve_round_trip(runner, tmp_path, pool_files):
    train, _ = pool_files
    index_dir = tmp_path / "index"
    result = invoke(runner, "index", "--train", train, "--input-field", "q", "--output-field", "a",
                    "--id-field", "key", "--retriever", "bm25", "--out", index_dir)
    assert result.exit_code == 0, result.output
    assert (index_dir / "meta.json").exists()
    result = invoke(runner, "retrieve", "--index", index_dir, "--k", "2", "--json",
                    "is it sunny in paris tomorrow", "play miles davis")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["is it sunny in paris tomorrow", "play miles davis"]
    assert [line["ids"][0] for line in lines] == ["weather", "music"]
    assert all(len(line["ids"]) == len(line["scores"]) == len(line["snippets"]) == 2 for line in lines)
    assert all(line["scores"][0] >= line["scores"][1] for line in lines)
    assert lines[1]["snippets"][0] == "play some jazz music by miles davis -> PLAY_MUSIC jazz davis"


def test_retrieve_prints_the_retrieved_examples(runner, tmp_path, pool_files):
    train, _ = pool_files
    index_dir = tmp_path / "index"
    assert invoke(runner, "index", "--train", train, "--input-field", "q", "--output-field", "a",
                  "--id-field", "key", "--out", index_dir).exit_code == 0
    result = invoke(runner, "retrieve", "--index", index_dir, "--k", "2", "play miles davis")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "query: play miles davis" and len(lines) == 3
    rank, score, shown = lines[1].split("\t")
    assert rank == "  1. music" and float(score) > 0 and shown == "play some jazz music by miles davis -> PLAY_MUSIC jazz davis"
    assert lines[2].startswith("  2. ")


def test_retrieve_from_a_bare_retriever_says_why_there_are_no_texts(runner, tmp_path, pool_examples):
    from taskret.retrieval import BM25Retriever

    BM25Retriever().index(pool_examples).save(tmp_path / "bare")  # the EPR pipeline's index/
    result = invoke(runner, "retrieve", "--index", tmp_path / "bare", "--k", "1", "play miles davis")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split("\t")[0] == "  1. music"
    assert "without the examples' texts" in result.stderr and "`taskret epr index`" in result.stderr


def test_index_errors(runner, tmp_path):
    result = invoke(runner, "index", "--train", tmp_path / "missing.csv", "--out", tmp_path / "index")
    assert result.exit_code == 2 and "cannot read file" in result.stderr
    result = invoke(runner, "retrieve", "--index", tmp_path / "not-an-index", "query")
    assert result.exit_code == 2 and "no meta.json" in result.stderr


def _check_run(out, test_ids, n):
    rows = read_jsonl_rows(out / "predictions.jsonl")
    assert len(rows) == n and {r["id"] for r in rows} <= set(test_ids)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["n"] == n and 0 <= summary["metrics"]["em"] <= 100
    return rows, summary


def test_evaluate_end_to_end_with_a_local_model_folder(runner, tmp_path, pool_files, tiny_model_dir):
    train, test = pool_files
    out = tmp_path / "run"
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q",
                    "--output-field", "a", "--id-field", "key", "--retriever", "bm25", "--lm", tiny_model_dir,
                    "--context-window", "256", "--max-new-tokens", "8", "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    rows, summary = _check_run(out, ["t1", "t2", "t3"], 3)
    assert [r["id"] for r in rows] == ["t1", "t2", "t3"]
    assert summary["lm"] == str(tiny_model_dir) and summary["retriever"] == "bm25"
    assert summary["context_window"] == 256 and summary["max_new_tokens"] == 8
    assert rows[0]["retrieved_ids"][0] == "weather" and rows[0]["prompt_ids"][-1] == "weather"
    assert all(r["prompt_tokens"] <= 256 - 8 for r in rows)
    assert f"-> {out}" in result.stderr.replace("\n", "")


def test_evaluate_one_shot_on_a_sample_with_a_known_format(runner, tmp_path, tiny_model_dir):
    rows = [{"idx": f"s{i}", "user_utterance": f"schedule meeting number {i} with Abby",
             "lispress": f"(Yield (Create {i}))"} for i in range(6)]
    train = write_jsonl_rows(tmp_path / "sm_train.jsonl", rows)
    test = write_jsonl_rows(tmp_path / "sm_test.jsonl", [dict(r, idx=f"t{i}") for i, r in enumerate(rows[:4])])
    out = tmp_path / "run"
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--format", "smcalflow", "--retriever",
                    "random", "--lm", tiny_model_dir, "--limit", "2", "--k", "1", "--context-window", "256",
                    "--max-new-tokens", "8", "--out", out)
    assert result.exit_code == 0, result.output
    predictions, summary = _check_run(out, ["t0", "t1", "t2", "t3"], 2)
    assert summary["max_demos"] == 1 and summary["mean_demos"] == 1.0
    assert all(len(r["prompt_ids"]) == 1 and r["prompt_ids"][0].startswith("s") for r in predictions)


def test_evaluate_with_a_saved_index(runner, tmp_path, pool_files, tiny_model_dir):
    train, test = pool_files
    assert invoke(runner, "index", "--train", train, "--input-field", "q", "--output-field", "a", "--id-field", "key",
                  "--retriever", "bm25:both", "--out", tmp_path / "index").exit_code == 0
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a",
                    "--id-field", "key", "--retriever", tmp_path / "index", "--lm", tiny_model_dir,
                    "--context-window", "256", "--max-new-tokens", "4", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    rows, _ = _check_run(tmp_path / "run", ["t1", "t2", "t3"], 3)
    assert rows[1]["retrieved_ids"][0] == "alarm"


def test_demo_command_with_a_local_model(runner, tmp_path, tiny_model_dir):
    out = tmp_path / "demo"
    result = invoke(runner, "demo", "--out", out, "--lm", tiny_model_dir, "--methods", "random,bm25",
                    "--dtype", "float32")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "demo_summary.json").read_text(encoding="utf-8"))
    assert summary["lm_dtype"] == "float32" and summary["settings"]["dtype"] == "float32"
    rows = summary["rows"]
    assert [row["retriever"] for row in rows] == ["random", "bm25"]
    assert all(row["n"] == 100 and row["task"] == "demo" for row in rows)
    assert summary["verdict"] is None  # no EPR row: nothing to pair
    for method in ("random", "bm25"):
        assert len(read_jsonl_rows(out / method / "predictions.jsonl")) == 100
    assert "exact match" in result.stdout


def test_evaluate_sizes_the_answer_by_the_training_outputs_when_max_new_tokens_is_not_given(runner, tmp_path,
                                                                                          pool_files, tiny_model_dir,
                                                                                          tokenizer):
    train, test = pool_files
    out = tmp_path / "run"
    result = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a",
                    "--id-field", "key", "--retriever", "bm25", "--lm", tiny_model_dir, "--context-window", "256",
                    "--limit", "1", "--out", out)
    assert result.exit_code == 0, result.output
    longest = max(len(tokenizer(row["a"], add_special_tokens=False)["input_ids"]) for row in read_jsonl_rows(train))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["max_new_tokens"] == longest + 16 < 128
    assert f"--max-new-tokens {longest + 16}: 99% of the training outputs fit in {longest} tokens, + 16" in \
        result.stderr  # 8 outputs: 99% of them is all of them
    small = invoke(runner, "evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a",
                   "--id-field", "key", "--retriever", "bm25", "--lm", tiny_model_dir, "--context-window", "20",
                   "--limit", "1", "--out", tmp_path / "small")
    assert small.exit_code == 0, small.output
    assert json.loads((tmp_path / "small" / "summary.json").read_text())["max_new_tokens"] == 10  # half the window


def test_max_new_tokens_for_counts_the_longest_outputs():
    from taskret.icl.prompt import max_new_tokens_for

    words = lambda text: len(text.split())  # noqa: E731
    outputs = ["a b", "a b c d e", "a"]
    assert max_new_tokens_for(outputs, words, margin=3) == (8, 5)  # 99% of 3 outputs: all of them
    many = ["w " * 5] * 99 + ["w " * 190]  # one outlier in 100
    assert max_new_tokens_for(many, words) == (5 + 16, 5) and max_new_tokens_for(many, words, quantile=1.0)[1] == 190
    counted = []
    max_new_tokens_for(many * 30, lambda text: counted.append(text) or words(text), sample_size=200)
    assert len(counted) == 200  # a seeded sample of a big pool is counted
    with pytest.raises(ValueError, match="no training outputs"):
        max_new_tokens_for([], len)


def test_evaluate_warns_once_when_its_retriever_does_not_read_the_instruction(runner, tmp_path, pool_files,
                                                                              tiny_model_dir):
    train, test = pool_files
    args = ["evaluate", "--train", train, "--test", test, "--input-field", "q", "--output-field", "a", "--id-field",
            "key", "--lm", tiny_model_dir, "--context-window", "128", "--max-new-tokens", "4", "--limit", "1",
            "--instruction", "Parse the request"]
    result = invoke(runner, *args, "--retriever", "bm25", "--out", tmp_path / "bm25")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning: bm25 reads the query alone, not --instruction: its ranking is the same "
                               "without it") == 1
    reads = invoke(runner, *args, "--retriever", "bm25?read_instruction=1", "--out", tmp_path / "reads")
    assert reads.exit_code == 0, reads.output
    assert "warning" not in reads.stderr
