"""`taskret tart ...` run in-process with typer's CliRunner, on tiny hand-made data."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from taskret.cli import app
from tests.conftest import read_jsonl_rows, write_jsonl_rows
from tests.tart.builders import make_data_dir, write_beir

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}  # wide: rich must not wrap paths in messages


def invoke(*args):
    return CliRunner().invoke(app, ["tart", *[str(a) for a in args]], env=ENV)


def test_help_lists_the_tart_commands():
    result = CliRunner().invoke(app, ["tart", "--help"], env=ENV)
    assert result.exit_code == 0
    for command in ("evaluate", "index", "search"):
        assert command in result.output
    assert "tart" in CliRunner().invoke(app, ["--help"], env=ENV).output


def test_index_and_search_round_trip(tmp_path):
    long_text = "Aspirin lowers the risk of heart attacks. " + "More words follow here. " * 20
    corpus = [{"_id": "d1", "title": "Aspirin and the heart", "text": long_text},
              {"_id": "d2", "title": "", "text": "Vitamin C does not prevent the common cold."},
              {"_id": "d3", "text": "Coffee consumption and sleep quality in adults."}]
    folder = write_beir(tmp_path / "facts", corpus=corpus, qrels={"test": [("q1", "d1", 1)]})
    index_dir = tmp_path / "index"
    result = invoke("index", "--task", folder, "--retriever", "bm25", "--out", index_dir)
    assert result.exit_code == 0, result.output
    assert (index_dir / "meta.json").exists() and (index_dir / "items.jsonl").exists()
    assert json.loads((index_dir / "index_info.json").read_text())["n"] == 3

    result = invoke("search", "--index", index_dir, "--instruction", "Retrieve scientific evidence",
                    "--k", 2, "aspirin heart attacks")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # BM25 reads the query alone and nothing reranks: one warning, and the query line says what was searched
    assert lines[0] == "query: aspirin heart attacks"
    assert result.stderr.count("warning: no stage of this search reads --instruction (bm25's first stage reads the "
                               "query alone, and no reranker runs)") == 1
    rank, doc_id, score, snippet = lines[1].split(None, 1)[0], *lines[1].split(None, 1)[1].split("\t")
    assert (rank, doc_id) == ("1.", "d1") and float(score) > 0
    assert snippet.startswith("Aspirin and the heart | Aspirin lowers the risk")
    assert snippet.endswith("...") and len(snippet) == len("Aspirin and the heart | ") + 200 + 3
    assert len(lines) == 3  # the query line and k=2 results

    result = invoke("search", "--index", index_dir, "--json", "vitamin c cold", "coffee sleep")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["ids"][0] for r in rows] == ["d2", "d3"]
    assert rows[0]["query"] == "vitamin c cold"  # no instruction: the query alone
    assert rows[1]["snippets"][0] == "Coffee consumption and sleep quality in adults."


def test_dense_index_and_search_round_trip(tmp_path, tiny_bert_dir):
    folder = write_beir(tmp_path / "facts")
    result = invoke("index", "--task", folder, "--retriever", f"dense:{tiny_bert_dir}", "--out", tmp_path / "index")
    assert result.exit_code == 0, result.output
    result = invoke("search", "--index", tmp_path / "index", "--json", "--k", 3, "aspirin")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["ids"]) == ["3", "d1", "d2"]
    result = invoke("search", "--index", tmp_path / "index", "--json", "--instruction", "Find evidence", "aspirin")
    assert json.loads(result.stdout)["query"] == "Find evidence [SEP] aspirin" and "warning" not in result.stderr


def test_evaluate_builtin_tasks_closed_and_pooled(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    out = tmp_path / "eval"
    result = invoke("evaluate", "--tasks", "mtop,break,ambigqa", "--retriever", "bm25", "--setting", "both",
                    "--data-dir", data_dir, "--limit", 2, "--out", out)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["tasks"] == ["mtop", "break", "ambigqa"] and metrics["limit"] == 2
    assert metrics["use_instruction"] is True
    for setting in ("closed", "pooled"):
        for task in ("mtop", "break", "ambigqa"):
            entry = metrics["settings"][setting][task]
            assert entry["n_queries"] == 2 and entry["instruction"]
            assert set(entry["metrics"]) == {"ndcg@10", "recall@100", "mrr@10"}
            rows = read_jsonl_rows(out / "runs" / setting / f"{task}.jsonl")
            assert len(rows) == 2 and rows[0]["query"].startswith(entry["instruction"] + " [SEP] ")
    assert set(metrics["gap"]) == {"mtop", "break", "ambigqa"}
    assert "ndcg@10" in result.stdout and "pooled-closed" in result.stdout


def test_evaluate_a_beir_folder_without_instructions(tmp_path):
    folder = write_beir(tmp_path / "facts")
    result = invoke("evaluate", "--tasks", folder, "--no-instruction", "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    entry = metrics["settings"]["closed"]["facts"]
    assert entry["instruction"] is None and entry["n_queries"] == 2 and entry["metrics"]["ndcg@10"] > 50


def test_evaluate_says_which_instruction_it_used(tmp_path):
    folder = write_beir(tmp_path / "facts")
    result = invoke("evaluate", "--tasks", folder, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    assert "facts: instruction none" in result.output and "without instructions" in result.output
    assert "changes nothing" not in result.output  # no instruction: nothing to say of what reads it
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["settings"]["closed"]["facts"]["instruction"] is None

    result = invoke("evaluate", "--tasks", folder, "--instruction-text", "Find evidence for this claim",
                    "--out", tmp_path / "eval2")
    assert result.exit_code == 0, result.output
    assert "facts: instruction 'Find evidence for this claim'" in result.output and "with instructions" in result.output
    assert "bm25 reads the query alone: the instruction changes nothing here" in result.output
    entry = json.loads((tmp_path / "eval2" / "metrics.json").read_text())["settings"]["closed"]["facts"]
    assert entry["instruction"] == "Find evidence for this claim"

    (folder / "instructions.json").write_text(json.dumps(["Verify the claim"]))
    result = invoke("index", "--task", folder, "--out", tmp_path / "index")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "index" / "index_info.json").read_text())["instruction"] == "Verify the claim"
    assert invoke("evaluate", "--tasks", folder, "--instruction-text", " ", "--out", tmp_path / "e").exit_code == 2


def test_evaluate_errors_exit_2_with_a_clear_message(tmp_path):
    result = invoke("evaluate", "--tasks", "nope", "--data-dir", tmp_path, "--out", tmp_path / "eval")
    assert result.exit_code == 2 and "unknown retrieval task 'nope'" in result.stderr

    result = invoke("evaluate", "--tasks", "mtop", "--data-dir", tmp_path / "missing", "--out", tmp_path / "eval")
    assert result.exit_code == 2 and "not found" in result.stderr

    folder = write_beir(tmp_path / "facts[v2]")  # brackets in a path must survive rich's markup
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\tyes\n", encoding="utf-8")
    result = invoke("evaluate", "--tasks", folder, "--out", tmp_path / "eval")
    assert result.exit_code == 2
    assert str(folder / "qrels" / "test.tsv") in result.stderr and "line 2" in result.stderr
    assert "field 'score'" in result.stderr and "Traceback" not in result.output

    result = invoke("evaluate", "--tasks", write_beir(tmp_path / "ok"), "--setting", "mixed", "--out", tmp_path / "e")
    assert result.exit_code == 2 and "unknown setting 'mixed'" in result.stderr
    assert not (tmp_path / "eval").exists() and not (tmp_path / "e").exists()


def test_search_errors_exit_2(tmp_path):
    result = invoke("search", "--index", tmp_path / "nothing", "query")
    assert result.exit_code == 2 and "taskret tart index" in result.stderr
    (tmp_path / "half").mkdir()
    write_jsonl_rows(tmp_path / "half" / "docs.jsonl", [{"id": "d1", "title": "", "text": "x"}])
    result = invoke("search", "--index", tmp_path / "half", "query")
    assert result.exit_code == 2 and "no meta.json" in result.stderr
    result = invoke("index", "--task", "mtop", "--data-dir", tmp_path, "--out", tmp_path / "i")
    assert result.exit_code == 2 and "mtop/test.jsonl" in result.stderr


def test_tune_weight_prints_the_grid_the_choice_and_how_to_use_it(tmp_path):
    folder = write_beir(tmp_path / "facts")
    out = tmp_path / "weight.json"
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["tasks"] == ["facts"] and set(saved["mean_ndcg"]) == {f"{w / 10:g}" for w in range(11)}
    assert saved["mean_ndcg"][f"{saved['weight']:g}"] == max(saved["mean_ndcg"].values())
    assert f"hybrid:bm25+random?fusion=convex&weight={saved['weight']:g}" in result.output
    assert "<- chosen" in result.output


def test_tune_weight_of_a_hybrid_of_three_prints_its_shares(tmp_path):
    folder = write_beir(tmp_path / "facts")
    out = tmp_path / "weights.json"
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--second",
                    "bm25:output", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["specs"] == ["bm25", "random", "bm25:output"] and len(saved["mean_ndcg"]) == 66
    shares = ",".join(f"{w:g}" for w in saved["weights"])
    assert saved["mean_ndcg"][shares] == max(saved["mean_ndcg"].values()) and sum(saved["weights"]) == 1.0
    assert f"hybrid:bm25+random+bm25:output?fusion=convex&weights={shares}" in result.output.replace("\n", "")


def test_tune_weight_says_which_components_read_the_instruction(tmp_path):
    folder = write_beir(tmp_path / "facts")
    out = tmp_path / "weight.json"
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--instruction",
                    "--instruction-text", "Find the abstract", "--read-instruction", "1,0", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["read_instruction"] == [True, False]
    assert f"weight={saved['weight']:g}&read_instruction=1,0'" in result.output.replace("\n", "")
    # the hybrid's own default (BM25 without it, the rest with it) needs no option in the spec; the output records it
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--second",
                    "bm25:output", "--instruction", "--instruction-text", "Find the abstract", "--out", out)
    assert result.exit_code == 0 and "read_instruction" not in result.output
    assert json.loads(out.read_text())["read_instruction"] == [False, True, False]
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--second",
                    "bm25:output", "--instruction", "--instruction-text", "Find the abstract",
                    "--read-instruction", "0,0,1")
    assert result.exit_code == 0 and "&read_instruction=0,0,1'" in result.output.replace("\n", "")
    # one retriever twice, reading the instructed and the bare query: the spec to paste says so
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "bm25", "--instruction",
                    "--instruction-text", "Find the abstract", "--read-instruction", "1,0", "--out", out)
    saved = json.loads(out.read_text())
    assert result.exit_code == 0 and saved["read_instruction"] == [True, False]
    assert f"hybrid:bm25+bm25?fusion=convex&weight={saved['weight']:g}&read_instruction=1,0'" in \
        result.output.replace("\n", "")
    # a saved BM25 index reads the query alone by default, here as in the hybrid built from it
    from taskret.retrieval import BM25Retriever

    BM25Retriever().index_texts(["d1", "d2"], ["aspirin heart", "vitamin cold"]).save(tmp_path / "bm25-index")
    result = invoke("tune-weight", "--tasks", folder, "--first", str(tmp_path / "bm25-index"), "--second", "random",
                    "--instruction", "--instruction-text", "Find the abstract", "--out", out)
    assert result.exit_code == 0 and "read_instruction" not in result.output, result.output
    assert json.loads(out.read_text())["read_instruction"] == [False, True]
    for bad, message in [("1,2", "expected 0 or 1"), ("1", "one switch per component")]:
        result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--instruction",
                        "--read-instruction", bad)
        assert result.exit_code == 2 and message in result.stderr, result.output
    for partner in (["--rerank", "upr:smollm2-135m", "--instruction"], ["--second", "random"]):  # no hybrid, no instruction
        result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", *partner, "--read-instruction", "1,0")
        assert result.exit_code == 2 and "with --second and --instruction" in result.stderr


def test_tune_weight_refuses_two_partners_or_none(tmp_path):
    folder = write_beir(tmp_path / "facts")
    for extra in ([], ["--second", "random", "--rerank", "upr:smollm2-135m"]):
        result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", *extra)
        assert result.exit_code == 2 and "exactly one" in result.output, result.output
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--second", "random", "--confidence", "0.9")
    assert result.exit_code == 2 and "--confidence guards a reranker" in result.output, result.output


def test_tune_weight_of_a_reranker_records_its_guard(tmp_path, tiny_model_dir):
    folder = write_beir(tmp_path / "facts")
    out = tmp_path / "weight.json"
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--rerank", f"upr:{tiny_model_dir}",
                    "--rerank-depth", "3", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert "0" not in saved["mean_ndcg"] and saved["confidence_required"] == 0.95  # the first stage keeps a share
    # a random tiny LM: its weight stands only if its dev gain passed the guard, else the first stage's order
    assert saved["weight"] == (saved["best"] if saved["confidence"] >= 0.95 else 1.0)
    assert ("keeps its order" in result.output) == (saved["weight"] != saved["best"])
    assert f"--rerank-weight {saved['weight']:g}" in result.output


def test_tune_weight_warns_when_a_dev_task_trained_the_model_it_weighs(tmp_path, tiny_model_dir):
    folder = write_beir(tmp_path / "facts")
    reranker = tmp_path / "run" / "model"
    shutil.copytree(tiny_model_dir, reranker)
    (tmp_path / "run" / "tart_full_config.json").write_text(json.dumps({"train_tasks": {"facts": 4}}))
    out = tmp_path / "weight.json"
    result = invoke("tune-weight", "--tasks", folder, "--first", "bm25", "--rerank", f"upr:{reranker}",
                    "--rerank-depth", "3", "--out", out)
    assert result.exit_code == 0, result.output
    assert "was trained on facts" in result.output.replace("\n", " ")
    assert "DevOverlapWarning" not in result.output  # said once, in the console's words
    assert json.loads(out.read_text())["dev_overlap"] == {str(reranker): ["facts"]}


def test_soup_averages_students_and_keeps_their_training_tasks(tmp_path, tiny_bert_dir):
    from taskret.tart.fusion import training_tasks
    from taskret.training.encoders import build_bi_encoder

    for name, tasks in (("a", ["facts", "health"]), ("b", ["code"])):
        build_bi_encoder(str(tiny_bert_dir), max_seq_length=24).save(str(tmp_path / name / "model"))
        (tmp_path / name / "tart_distil_config.json").write_text(json.dumps({"train_tasks": tasks}))
    out = tmp_path / "soup"
    result = invoke("soup", tmp_path / "a" / "model", tmp_path / "b" / "model", "--out", out, "--weights", "3,1")
    assert result.exit_code == 0, result.output
    assert "weights 0.75, 0.25" in result.output and f"dense:{out}" in result.output
    assert training_tasks(out) == {"facts", "health", "code"}
    bad = invoke("soup", tmp_path / "a" / "model", tmp_path / "b" / "model", "--out", out, "--weights", "1,x")
    assert bad.exit_code == 2 and "--weights must be comma-separated numbers" in bad.output


def test_ict_writes_a_task_that_build_data_reads(tmp_path):
    corpus = [{"_id": f"d{i}", "title": "", "text": f"Trial {i} gave compound {i} to adults with high pressure. "
               f"Their pressure fell within six weeks of trial {i} starting. Side effects of compound {i} were mild."}
              for i in range(8)]
    write_jsonl_rows(tmp_path / "src" / "corpus.jsonl", corpus)
    out = tmp_path / "ict"
    result = invoke("ict", tmp_path / "src", "--out", out, "--dev-queries", 2, "--queries", 4, "--keep-sentence", 0,
                    "--instruction-text", "Find the trial report", "--instruction-text", "Which trial says this?")
    assert result.exit_code == 0, result.output
    assert "8 documents -> 4 train and 2 dev queries" in result.output
    assert json.loads((out / "instructions.json").read_text()) == ["Find the trial report", "Which trial says this?"]
    rows_path = tmp_path / "rows.jsonl"
    result = invoke("build-data", "--tasks", out, "--out", rows_path, "--n-unfollowing", 0, "--n-hard", 2)
    assert result.exit_code == 0, result.output
    rows = read_jsonl_rows(rows_path)
    assert len(rows) == 4 and all(row["query"] not in row["positive"] and row["query"].startswith(("Trial", "Their",
                                                                                                  "Side")) for row in rows)
    again = invoke("ict", tmp_path / "src", "--out", out)
    assert again.exit_code == 2 and "already exists" in again.output
    bad = invoke("ict", tmp_path / "src", "--out", tmp_path / "bad", "--keep-sentence", 2)
    assert bad.exit_code == 2 and "keep_sentence must be in [0, 1]" in bad.output and not (tmp_path / "bad").exists()


def test_evaluate_a_built_index_without_encoding_the_corpus_again(tmp_path, tiny_bert_dir, monkeypatch):
    import taskret.tart.evaluation as evaluation

    folder = write_beir(tmp_path / "facts")
    spec = f"dense:{tiny_bert_dir}"
    assert invoke("index", "--corpus", folder, "--retriever", spec, "--out", tmp_path / "index").exit_code == 0
    fresh = invoke("evaluate", "--tasks", folder, "--retriever", spec, "--out", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output

    def no_encoding(*args, **kwargs):
        raise AssertionError("the corpus was encoded again")

    monkeypatch.setattr(evaluation, "build_indexes", no_encoding)
    result = invoke("evaluate", "--tasks", folder, "--index", tmp_path / "index", "--out", tmp_path / "saved")
    assert result.exit_code == 0, result.output
    assert f"evaluating the index {tmp_path / 'index'} ({spec}; 3 documents, not encoded again)" in result.stderr
    saved = json.loads((tmp_path / "saved" / "metrics.json").read_text())
    assert saved["settings"]["closed"]["facts"]["index_s"] == 0.0
    expected = json.loads((tmp_path / "fresh" / "metrics.json").read_text())["settings"]["closed"]["facts"]
    assert saved["settings"]["closed"]["facts"]["metrics"] == expected["metrics"] and saved["retriever"] == spec
    other = write_beir(tmp_path / "other", corpus=[{"_id": "x1", "text": "something else"}],
                       queries=[{"_id": "q1", "text": "else"}], qrels={"test": [("q1", "x1", 1)]})
    wrong = invoke("evaluate", "--tasks", other, "--index", tmp_path / "index", "--out", tmp_path / "wrong")
    assert wrong.exit_code == 2 and "the index holds other documents than other's corpus: 1 of its 1 documents " \
                                    "missing (e.g. x1), 3 not in it" in wrong.stderr
    pooled = invoke("evaluate", "--tasks", f"{folder},{other}", "--index", tmp_path / "index")
    assert pooled.exit_code == 2 and "give one task in --tasks and --setting closed" in pooled.stderr


def test_the_final_hint_is_one_line_in_a_log_of_80_columns(tmp_path):
    folder = write_beir(tmp_path / "a-corpus-folder-with-a-long-name-to-pass-eighty-columns")
    out = tmp_path / "an-index-folder-with-a-long-name"
    result = CliRunner().invoke(app, ["tart", "index", "--corpus", str(folder), "--setup", "bm25", "--out", str(out)],
                                env={**ENV, "COLUMNS": "80"})  # the width rich takes where stderr is not a terminal
    assert result.exit_code == 0, result.output
    assert f"search it with `taskret tart search --index {out} \"QUERY\"`\n" in result.output


def test_index_shards_writes_the_shards_and_their_config_and_names_a_bad_line(tmp_path):
    parts = []
    for number, words in enumerate(("aspirin heart risk", "coffee sleep adults", "vitamin cold winter")):
        part = tmp_path / f"part-{number}.jsonl"
        write_jsonl_rows(part, [{"_id": f"d{number}{i}", "title": "", "text": f"{words} note {i}"} for i in range(5)])
        parts.append(part)
    out = tmp_path / "shards"
    result = invoke("index-shards", *[a for p in parts for a in ("--part", p)], "--out", out)
    assert result.exit_code == 0, result.output
    assert f"taskret serve --shards {out.resolve() / 'shards.json'}" in result.output
    config = json.loads((out / "shards.json").read_text())
    assert config["shards"] == {"shard-0": "shard-0", "shard-1": "shard-1", "shard-2": "shard-2"}
    found = invoke("search", "--index", out / "shard-1", "coffee sleep", "--json")
    assert json.loads(found.stdout.splitlines()[0])["ids"][0] == "d10"  # equal scores: the corpus's order

    result = invoke("index-shards", "--part", tmp_path / "nowhere.jsonl", "--out", tmp_path / "other")
    assert result.exit_code == 2 and "nowhere.jsonl: no such corpus part" in result.stderr
    parts[1].write_text(parts[1].read_text() + '{"_id": "bad", "title": ""}\n')
    result = invoke("index-shards", *[a for p in parts for a in ("--part", p)], "--out", tmp_path / "again")
    assert result.exit_code == 2 and "part-1.jsonl" in result.stderr and "line 6" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "again").exists()  # nothing half-written
