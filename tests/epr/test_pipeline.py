"""`run_pipeline`: every EPR stage on small files, with the tiny Llama as scoring and inference LM and
a tiny random BERT (MiniLM tokenizer) as the dual encoder's base model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")

from taskret.epr.pipeline import EPRConfig, run_pipeline
from taskret.ids import IdList
from taskret.io import DataError
from tests.conftest import read_jsonl_rows, write_jsonl_rows  # noqa: E402

TOPICS = [("weather", "GET_WEATHER"), ("alarm", "CREATE_ALARM"), ("music", "PLAY_MUSIC"), ("timer", "CREATE_TIMER")]
PLACES = ["paris", "london", "tokyo", "berlin"]


def _row(i: int) -> dict:
    topic, intent = TOPICS[i % 4]
    place = PLACES[(i // 4) % 4]
    return {"key": f"ex{i}", "q": f"{topic} please for {place} number {i}", "a": f"{intent} {place} {i}"}


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("epr-data")
    train = write_jsonl_rows(root / "train.jsonl", [_row(i) for i in range(16)])
    test = write_jsonl_rows(root / "test.jsonl", [_row(i) for i in range(100, 104)])
    return train, test


def make_config(work: Path, data_files, tiny_model_dir, tiny_bert_dir, **overrides) -> EPRConfig:
    train, test = data_files
    settings = dict(train=str(train), test=str(test), input_field="q", output_field="a", id_field="key",
                    work_dir=str(work), labels="lm", scoring_lm=str(tiny_model_dir), inference_lm=str(tiny_model_dir),
                    training={"base_model": str(tiny_bert_dir), "epochs": 1, "batch_size": 8, "mini_batch_size": 4},
                    n_candidates=4, k=1, shard_size=5, context_window=256, max_new_tokens=8, eval_limit=None)
    settings.update(overrides)
    return EPRConfig(**settings)


STAGE_FILES = ["candidates.jsonl", "scoring/scores.jsonl", "labels.jsonl", "retriever/model", "retriever/epr_config.json",
               "index/meta.json", "eval/predictions.jsonl", "eval/summary.json"]


def _stamps(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in work.rglob("*")}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, data_files, tiny_model_dir, tiny_bert_dir):
    work = tmp_path_factory.mktemp("epr-lm") / "work"
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir)
    summary = run_pipeline(config, progress=False)
    return work, config, summary


def test_lm_pipeline_writes_every_stage(lm_run):
    from taskret.epr.labels import lm_labels

    work, config, summary = lm_run
    for name in STAGE_FILES:
        assert (work / name).exists(), name
    train_ids = {f"ex{i}" for i in range(16)}
    cands = read_jsonl_rows(work / "candidates.jsonl")
    assert [r["id"] for r in cands] == [f"ex{i}" for i in range(16)]
    assert all(len(r["candidates"]) == 4 and r["id"] not in r["candidates"] for r in cands)
    scores = read_jsonl_rows(work / "scoring" / "scores.jsonl")
    assert [[c["id"] for c in s["candidates"]] for s in scores] == [r["candidates"] for r in cands]
    assert len(list((work / "scoring" / "shards").iterdir())) == 4  # 16 examples, shards of 5
    labels = read_jsonl_rows(work / "labels.jsonl")
    assert labels == lm_labels(scores, k=1)
    assert all(len(r["positives"]) == 1 and len(r["negatives"]) == 1 for r in labels)
    meta = json.loads((work / "index" / "meta.json").read_text())
    assert meta["retriever"] == "dense" and sorted(IdList.load(work / "index")) == sorted(train_ids)
    assert meta["encoder"] == "models/encoder" and (work / "index" / "models" / "encoder").is_dir()  # kept inside
    predictions = read_jsonl_rows(work / "eval" / "predictions.jsonl")
    assert len(predictions) == 4
    assert json.loads((work / "eval" / "summary.json").read_text()) == summary
    assert summary["n"] == 4 and summary["retriever"] == f"epr:{work}" and summary["lm"] == str(config.inference_lm)
    assert json.loads((work / "retriever" / "epr_config.json").read_text())["epochs"] == 1
    times = read_jsonl_rows(work / "stage_times.jsonl")  # what each stage cost
    assert [t["stage"] for t in times] == ["candidates", "labels", "training", "index", "evaluation", "baseline"]
    assert all(t["wall_s"] >= 0 and t["cpu_s"] >= 0 for t in times)


def test_a_second_run_skips_every_stage(lm_run):
    work, config, summary = lm_run
    before = _stamps(work)
    lms: dict = {}
    assert run_pipeline(config, progress=False, lms=lms) == summary
    assert _stamps(work) == before  # nothing rewritten, nothing added
    assert lms == {}  # no LM was even loaded


def test_make_retriever_loads_the_saved_index(lm_run, data_files):
    from taskret.data import read_examples
    from taskret.retrieval import DenseRetriever, make_retriever

    work, _, _ = lm_run
    retriever = make_retriever(f"epr:{work}")
    assert isinstance(retriever, DenseRetriever)
    train_ids = [f"ex{i}" for i in range(16)]
    assert sorted(retriever.ids) == sorted(train_ids)
    test = read_examples(data_files[1], "q", "a", "key")
    result = retriever.retrieve([e.input for e in test], k=3)
    assert all(len(ids) == 3 and set(ids) <= set(train_ids) for ids in result.ids)
    assert make_retriever(f"epr:{work / 'index'}").ids == retriever.ids
    # the training output alone gives the trained encoder, to be indexed by the caller
    unindexed = make_retriever(f"epr:{work / 'retriever'}")
    assert isinstance(unindexed, DenseRetriever) and unindexed.ids == []
    assert unindexed.encoder_name == str(work / "retriever" / "model") and unindexed.field == "both"  # the default demonstration field
    with pytest.raises(FileNotFoundError, match="no EPR index"):
        make_retriever(f"epr:{work / 'scoring'}")


@pytest.mark.parametrize("method", ["bm25", "cbr"])
def test_bm25_and_cbr_labels_need_no_lm_scoring(method, tmp_path, data_files, tiny_model_dir, tiny_bert_dir, tiny_lm):
    from taskret.data import read_examples
    from taskret.epr.labels import bm25_labels, cbr_labels

    work = tmp_path / "work"
    # scoring_lm names no model at all: loading it would fail
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, labels=method, scoring_lm="no-such-model")
    lms = {str(tiny_model_dir): tiny_lm}
    summary = run_pipeline(config, progress=False, lms=lms)
    assert not (work / "scoring").exists()
    for name in STAGE_FILES:
        if not name.startswith("scoring/"):
            assert (work / name).exists(), name
    assert list(lms) == [str(tiny_model_dir)]
    cands = read_jsonl_rows(work / "candidates.jsonl")
    examples = {e.id: e for e in read_examples(data_files[0], "q", "a", "key")}
    expected = bm25_labels(cands, k=1) if method == "bm25" else cbr_labels(cands, examples, k=1)
    assert read_jsonl_rows(work / "labels.jsonl") == expected
    assert summary["n"] == 4


def test_max_train_examples_labels_a_sample_with_candidates_from_all(tmp_path, data_files, tiny_model_dir,
                                                                     tiny_bert_dir, tiny_lm):
    work = tmp_path / "work"
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, labels="bm25", max_train_examples=6)
    run_pipeline(config, progress=False, lms={str(tiny_model_dir): tiny_lm})
    cands = read_jsonl_rows(work / "candidates.jsonl")
    assert len(cands) == 6 == len(read_jsonl_rows(work / "labels.jsonl"))
    candidate_ids = {c for r in cands for c in r["candidates"]}
    assert candidate_ids - {r["id"] for r in cands}  # candidates come from the whole training set
    assert len(IdList.load(work / "index")) == 16


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="n_candidatez"):
        EPRConfig(n_candidatez=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"train": "t.jsonl", "shard_sise": 3}))
    with pytest.raises(DataError, match=rf"{path}: unknown key 'shard_sise' \(did you mean 'shard_size'\?\)"):
        EPRConfig.from_file(path)  # a bad file is a DataError naming it
    with pytest.raises(ValidationError, match="n_candidates"):
        EPRConfig(n_candidates=1)
    assert EPRConfig.from_file(write_jsonl_rows(tmp_path / "ok.json", [{"k": 3, "labels": "cbr"}])).k == 3


def test_unknown_labels_method_fails_before_training(tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    work = tmp_path / "work"
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, labels="oracle")
    with pytest.raises(ValueError, match="unknown labels 'oracle'"):
        run_pipeline(config, progress=False)
    assert not (work / "labels.jsonl").exists() and not (work / "retriever").exists()


def test_a_work_dir_made_with_another_config_is_refused(tmp_path):
    from taskret.epr.pipeline import EPRConfig, run_pipeline

    first = EPRConfig(task="demo", work_dir=str(tmp_path / "work"), labels="bm25", n_candidates=4)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pipeline_config.json").write_text(first.model_dump_json())
    (tmp_path / "work" / "candidates.jsonl").write_text("")  # a stage's output, made under the first config
    changed = first.model_copy(update={"n_candidates": 8})
    with pytest.raises(ValueError, match="changed: n_candidates"):
        run_pipeline(changed)


def test_a_run_failing_on_its_training_file_leaves_no_folder_and_the_corrected_config_runs(
        tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    train, test = data_files
    bad = write_jsonl_rows(tmp_path / "bad.jsonl", [_row(0), {**_row(1), "a": "GET_WEATHER\nparis 1"}])
    work = tmp_path / "runs" / "epr-ml"
    with pytest.raises(DataError, match="bad.jsonl, line 2, field 'a': the output spans 2 lines"):
        run_pipeline(make_config(work, (bad, test), tiny_model_dir, tiny_bert_dir), progress=False)
    assert not work.exists()  # no config, no empty log: nothing that would refuse the corrected run
    fixed = make_config(work, (train, test), tiny_model_dir, tiny_bert_dir)
    assert run_pipeline(fixed, progress=False, stop_after="candidates") == {"stopped_after": "candidates"}
    assert json.loads((work / "pipeline_config.json").read_text())["train"] == str(train)


def test_a_folder_left_by_a_run_that_failed_at_start_is_taken_over_by_the_corrected_config(
        tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)  # as a failed run left it before: its config and an empty log
    (work / "logs" / "run.log").write_text("")
    old = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, train=str(tmp_path / "bad.jsonl"))
    (work / "pipeline_config.json").write_text(old.model_dump_json())
    fixed = make_config(work, data_files, tiny_model_dir, tiny_bert_dir)
    assert run_pipeline(fixed, progress=False, stop_after="candidates") == {"stopped_after": "candidates"}
    assert json.loads((work / "pipeline_config.json").read_text())["train"] == str(data_files[0])


def test_a_work_folder_copied_elsewhere_resumes_without_redoing_a_stage(lm_run, tmp_path):
    import shutil
    from io import StringIO

    from rich.console import Console

    work, config, summary = lm_run
    copy = tmp_path / "moved" / "work"
    shutil.copytree(work, copy)
    shutil.move(str(work), str(tmp_path / "original"))  # the old folder is gone: nothing may be read from it
    try:
        before = _stamps(copy)
        lines = StringIO()
        lms: dict = {}
        resumed = run_pipeline(config.model_copy(update={"work_dir": str(copy)}), console=Console(file=lines),
                               progress=False, lms=lms)
        assert resumed["metrics"] == summary["metrics"]
        assert lms == {}  # no LM loaded: every stage was skipped
        after = _stamps(copy)
        assert {k: v for k, v in after.items() if not k.startswith("logs")} == \
            {k: v for k, v in before.items() if not k.startswith("logs")}
        printed = lines.getvalue()
        assert printed.count("exists, skipped") == 5 and "exists, loaded" in printed  # 5: the baseline too
    finally:
        shutil.move(str(tmp_path / "original"), str(work))


def test_library_logs_go_to_the_work_folder_and_the_terminal_gets_stage_lines(tmp_path, data_files, tiny_model_dir,
                                                                               tiny_bert_dir, tiny_lm, capfd):
    from io import StringIO

    from rich.console import Console

    work = tmp_path / "work"
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, labels="bm25", eval_limit=1)
    lines = StringIO()
    run_pipeline(config, console=Console(file=lines, width=400), progress=True, lms={str(tiny_model_dir): tiny_lm})
    terminal = capfd.readouterr()
    assert terminal.out == ""  # no trainer dicts on stdout
    assert "'loss'" not in terminal.err and "it/s]" not in terminal.err  # nor tqdm bars on stderr
    assert "training: 2/2" in terminal.err  # taskret's own bar counts the steps
    log = work / "logs" / "run.log"
    training_line = next(line for line in lines.getvalue().splitlines() if line.startswith("training:"))
    assert training_line.startswith("training: 2 steps, final loss ") and f"(trainer log: {log})" in training_line
    text = log.read_text(encoding="utf-8")
    assert "taskret.training: step 1: {\"loss\": " in text and "***** Running training *****" in text


def test_a_second_round_mines_with_the_trained_retriever_and_scores_only_new_pairs(lm_run, tmp_path, data_files,
                                                                                  tiny_model_dir, tiny_bert_dir):
    from taskret.epr.labels import lm_labels
    from taskret.retrieval import DenseRetriever

    work = _round_one(lm_run, tmp_path)
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, rounds=2)
    summary = run_pipeline(config, progress=False)
    round2 = work / "round2"
    mined = read_jsonl_rows(round2 / "candidates.jsonl")
    assert [r["id"] for r in mined] == [f"ex{i}" for i in range(16)]
    assert all(len(r["candidates"]) == 4 and r["id"] not in r["candidates"] for r in mined)
    # The candidates are round 1's retriever's top 4 for the example's input, not BM25's (its demonstrations
    # encoded as it was trained to: input and output, the default field).
    round1 = DenseRetriever(encoder=str(work / "retriever" / "model"), field="both").index(
        [e for e in _examples(data_files[0])])
    expected = round1.retrieve([_row(i)["q"] for i in range(16)], k=4, exclude=[f"ex{i}" for i in range(16)])
    assert [r["candidates"] for r in mined] == expected.ids
    # Only pairs that round 1 did not score went to the LM; the labels read every pair scored in both rounds.
    first_scores = {r["id"]: {c["id"]: c for c in r["candidates"]}
                    for r in read_jsonl_rows(work / "scoring" / "scores.jsonl")}
    second_scores = read_jsonl_rows(round2 / "scoring" / "scores.jsonl")
    for row in second_scores:
        assert not set(c["id"] for c in row["candidates"]) & set(first_scores[row["id"]])
    union = {i: dict(c) for i, c in first_scores.items()}
    for row in second_scores:
        union[row["id"]].update({c["id"]: c for c in row["candidates"]})
    assert read_jsonl_rows(round2 / "labels.jsonl") == lm_labels(
        [{"id": i, "candidates": list(c.values())} for i, c in union.items()], k=1)
    # The second retriever trained on from the first (same Router layout), and it is the one indexed.
    assert (round2 / "retriever" / "model").is_dir()
    meta = json.loads((work / "index" / "meta.json").read_text())
    assert meta["retriever"] == "dense" and summary["n"] == 4


def test_rounds_need_lm_labels():
    with pytest.raises(ValueError, match="labels must be 'lm'"):
        EPRConfig(task="demo", labels="bm25", rounds=2)


def _examples(train: Path):
    from taskret.data import Example

    return [Example(id=r["key"], input=r["q"], output=r["a"]) for r in read_jsonl_rows(train)]


def test_set_training_scores_sets_fine_tunes_the_query_encoder_and_selects_with_the_dpp(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    work = _round_one(lm_run, tmp_path)
    settings = {"n_candidates": 6, "set_size": 3, "n_sets": 4, "epochs": 2, "batch_size": 4, "learning_rate": 1e-3}
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, set_training=settings)
    summary = run_pipeline(config, progress=False)
    sets = read_jsonl_rows(work / "sets" / "sets.jsonl")
    assert len(sets) == 16 and all(len(r["sets"]) == 4 and all(len(s) == 3 for s in r["sets"]) for r in sets)
    assert all(r["id"] not in s for r in sets for s in r["sets"])
    scores = read_jsonl_rows(work / "sets" / "set_scores.jsonl")
    assert [[s["ids"] for s in r["sets"]] for r in scores] == [r["sets"] for r in sets]
    assert all(s["logprob"] < 0 and s["n_tokens"] > 0 for r in scores for s in r["sets"])
    # Only the query encoder moved: the examples' vectors (the index) are the EPR encoder's.
    _assert_only_the_query_encoder_moved(work / "retriever", work / "sets" / "retriever",
                                         "weather please for paris number 3")
    trained = json.loads((work / "sets" / "retriever" / "ceil_config.json").read_text())
    # 2 of 16 inputs held out for early stopping (CEIL's 10%); 14 trained on, 4 steps per epoch; margin 1 / n_sets.
    assert trained["n_held_out"] == 2 and trained["n_inputs"] == 14 and trained["steps"] == 2 * 4
    assert len(trained["epoch_losses"]) == len(trained["held_out_losses"]) == 2 and trained["margin"] == 0.25
    assert all(len({frozenset(s) for s in r["sets"]}) == 4 for r in sets)  # no set drawn twice
    assert len(list((work / "sets" / "set_shards").glob("*.jsonl"))) == 1  # 16 inputs, shards of 25
    assert summary["selection"]["method"] == "dpp" and summary["selection"]["n_candidates"] == 6
    assert summary["selection"]["weight"] == pytest.approx(1 / 1.1, abs=1e-3)
    # `taskret evaluate --retriever epr:WORK` selects with the DPP the run was trained for, unless told not to.
    from typer.testing import CliRunner

    from taskret.cli import app

    train, test = data_files
    common = ["evaluate", "--train", str(train), "--test", str(test), "--input-field", "q", "--output-field", "a",
              "--id-field", "key", "--retriever", f"epr:{work}", "--lm", str(tiny_model_dir), "--limit", "2",
              "--context-window", "200", "--max-new-tokens", "4"]
    env = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
    result = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "auto")], env=env)
    assert result.exit_code == 0, result.output
    chosen = json.loads((tmp_path / "auto" / "summary.json").read_text())["selection"]
    assert chosen["method"] == "dpp" and chosen["n_candidates"] == 6 and "trained for its DPP" in result.stderr
    result = CliRunner().invoke(app, [*common, "--select", "none", "--out", str(tmp_path / "top")], env=env)
    assert result.exit_code == 0, result.output
    assert "selection" not in json.loads((tmp_path / "top" / "summary.json").read_text())


def test_set_scoring_resumes_from_its_shards(lm_run, tmp_path, data_files, tiny_model_dir):
    from taskret.backends.base import load_lm
    from taskret.data import load_task
    from taskret.epr.sets import score_sets_in_shards

    task = load_task(None, train=data_files[0], test=data_files[1], input_field="q", output_field="a", id_field="key")
    ids = [e.id for e in task.train]
    rows = [{"id": ids[n], "sets": [[ids[(n + 1) % 16], ids[(n + 2) % 16]], [ids[(n + 3) % 16], ids[(n + 5) % 16]]]}
            for n in range(5)]
    lm = load_lm(str(tiny_model_dir))
    first = score_sets_in_shards(task, rows, lm, tmp_path / "shards", shard_size=2)
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == ["00000.jsonl", "00001.jsonl", "00002.jsonl"]
    (tmp_path / "shards" / "00001.jsonl").unlink()  # a run stopped in the second shard
    calls = []
    again = score_sets_in_shards(task, rows, lm, tmp_path / "shards", shard_size=2, progress=calls.append)
    assert again == first and sum(calls) == 10  # every set counted, only the missing shard scored anew


def test_ceil_ranking_loss_is_zero_when_the_scores_follow_the_lm_by_the_margins_and_positive_otherwise():
    import torch

    from taskret.epr.sets import ranking_loss

    agreeing = torch.tensor([[3.0, 2.0, 1.0, 0.0]])  # scaled to 1, 2/3, 1/3, 0: gaps of 1/3 per place
    assert float(ranking_loss(agreeing, margin=0.2)) == 0.0
    assert float(ranking_loss(agreeing.flip(-1), margin=0.2)) > 1.0


def test_llm_r_trains_a_gold_reading_teacher_reports_its_agreement_and_distils_a_retriever(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    from taskret.epr.reward import teacher_query

    work = _round_one(lm_run, tmp_path)
    settings = {"base_model": str(tiny_bert_dir), "student_model": str(tiny_bert_dir), "group_size": 3,
                "top_k_positive": 1, "bottom_k_negative": 2, "epochs": 2, "batch_inputs": 4, "learning_rate": 1e-3,
                "held_out": 0.25, "distill_group_size": 3, "distill_epochs": 2, "distill_batch_inputs": 4,
                "distill_learning_rate": 1e-3}
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, reward_model=settings)
    run_pipeline(config, progress=False)
    trained = json.loads((work / "reward" / "teacher" / "reward_config.json").read_text())
    # 4 of the 16 scored inputs held out; the other 12 trained on, 3 steps of 4 per epoch.
    assert len(trained["held_out_ids"]) == 4 and trained["n_inputs"] == 12 and trained["steps"] == 6
    teacher = read_jsonl_rows(work / "reward" / "teacher_scores.jsonl")
    scores = read_jsonl_rows(work / "scoring" / "scores.jsonl")
    assert [[c["id"] for c in r["candidates"]] for r in teacher] == [[c["id"] for c in r["candidates"]] for r in scores]
    # the teacher rates candidates, not inputs: its rewards differ within most inputs (a 2-layer random BERT trained
    # 2 epochs gives some inputs' candidates logits equal to the 5 decimals kept)
    assert sum(len({c["reward"] for c in r["candidates"]}) > 1 for r in teacher) > len(teacher) / 2
    # The teacher's scores are its raw logits (distillation softmaxes them), not predict's default sigmoid.
    import torch
    from sentence_transformers import CrossEncoder

    from taskret.data import load_task
    from taskret.epr.candidate_reranker import candidate_text

    task = load_task(None, train=data_files[0], test=data_files[1], input_field="q", output_field="a", id_field="key")
    pool, cross_encoder = {e.id: e for e in task.train}, CrossEncoder(str(work / "reward" / "teacher" / "model"))
    row = teacher[0]
    features = cross_encoder.tokenizer([teacher_query(task, pool[row["id"]])] * len(row["candidates"]),
                                       [candidate_text(task, pool[c["id"]]) for c in row["candidates"]],
                                       padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = cross_encoder.model(**features).logits.view(-1).tolist()
    assert [c["reward"] for c in row["candidates"]] == pytest.approx(logits, abs=0.05)
    agreement = json.loads((work / "reward" / "agreement.json").read_text())
    assert agreement["n_inputs"] == 4
    assert set(agreement["scorers"]) == {"reward_model", "epr_retriever", "bm25"}
    assert all(v["spearman"] is None or -1 <= v["spearman"] <= 1 for v in agreement["scorers"].values()), agreement
    assert agreement["scorers"]["reward_model"]["spearman"] is not None
    assert all(0 <= v["top5_overlap"] <= 1 for v in agreement["scorers"].values())
    student = json.loads((work / "reward" / "student_agreement.json").read_text())
    assert student["n_inputs"] == 4
    assert all(-1 <= student["distilled_retriever"][k] <= 1 for k in ("spearman", "spearman_vs_teacher")), student
    distilled = json.loads((work / "reward" / "retriever" / "epr_config.json").read_text())
    assert distilled["field"] == "both" and distilled["n_inputs"] == 16 and len(distilled["epoch_losses"]) == 2
    # The index encodes what the student was trained on: each example's input and output.
    meta = json.loads((work / "index" / "meta.json").read_text())
    assert meta["retriever"] == "dense" and meta["field"] == "both"
    # The teacher reads the gold output beside the input.
    assert teacher_query(task, task.train[0]) == f"{_row(0)['q']}\t{_row(0)['a']}"


def test_llm_r_groups_take_one_positive_and_cycle_through_the_negatives():
    from taskret.epr.reward import _group

    positives, negatives = ["p1", "p2", "p3"], [f"n{i}" for i in range(16)]
    first, second = _group(positives, negatives, 8, 0), _group(positives, negatives, 8, 1)
    assert first == ["p1"] + [f"n{i}" for i in range(7)] and second == ["p2"] + [f"n{i}" for i in range(7, 14)]
    assert _group(positives, negatives, 8, 2)[1:] == ["n14", "n15"] + [f"n{i}" for i in range(5)]


def test_llm_r_contrastive_scores_mask_the_own_pair():
    import torch

    from taskret.epr.reward import _contrastive_scores

    queries, passages = torch.eye(4)[:2], torch.eye(4)[[0, 2, 1, 3]]  # groups of 2: positives rows 0 and 2
    logits, labels = _contrastive_scores(queries, passages, 2)
    assert labels.tolist() == [0, 2] and logits.shape == (2, 4 + 3 * 2)
    assert logits[0, 0] == 1 and logits[1, 2] == 1  # each query's own positive
    for block in (4, 6, 8):  # positive-query, query-query, positive-positive: the own pair masked
        assert torch.isinf(logits[:, block: block + 2].diagonal()).all()
        assert not torch.isinf(logits[:, block: block + 2]).fill_diagonal_(False).any()


def test_a_candidate_reranker_learns_the_lm_scores_without_reading_the_gold_output(lm_run, tmp_path, data_files,
                                                                                   tiny_bert_dir):
    from taskret.data import load_task
    from taskret.epr.candidate_reranker import RerankerConfig, reranker_scores, train_candidate_reranker
    from taskret.epr.scoring import read_scores

    work, _, _ = lm_run
    task = load_task(None, train=data_files[0], test=data_files[1], input_field="q", output_field="a", id_field="key")
    rows = read_scores(work / "scoring" / "scores.jsonl")
    settings = RerankerConfig(base_model=str(tiny_bert_dir), epochs=2, batch_inputs=4, learning_rate=1e-3)
    model = train_candidate_reranker(task, rows, tmp_path / "reranker", settings)
    trained = json.loads((tmp_path / "reranker" / "reranker_config.json").read_text())
    assert trained["n_inputs"] == 16 and trained["n_pairs"] == 64 and len(trained["epoch_losses"]) == 2
    scores = reranker_scores(model, task, [_row(0)["q"], _row(1)["q"]], [[c["id"] for c in r["candidates"]]
                                                                         for r in rows[:2]])
    assert [len(s) for s in scores] == [4, 4] and all(len(set(s.tolist())) > 1 for s in scores)


def test_fused_scores_weigh_min_max_scaled_components():
    import numpy as np

    from taskret.epr.candidate_reranker import fuse_scores

    fused = fuse_scores(np.array([0.9, 0.5, 0.1]), np.array([-3.0, 5.0, 1.0]), weight=0.5)
    assert fused.tolist() == pytest.approx([0.5, 0.75, 0.25])
    assert fuse_scores(np.array([1.0, 1.0]), np.array([2.0, 0.0]), weight=0.3).tolist() == pytest.approx([1.0, 0.3])


def test_listwise_rounds_train_from_the_base_on_every_rounds_scores(lm_run, tmp_path, data_files, tiny_model_dir,
                                                                     tiny_bert_dir):
    import shutil

    work = _round_one(lm_run, tmp_path)
    shutil.rmtree(work / "retriever")  # round one trains with the listwise objective too
    settings = {"base_model": str(tiny_bert_dir), "list_size": 3, "top_k": 1, "epochs": 2, "batch_inputs": 4,
                "learning_rate": 1e-3}
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, listwise=settings, rounds=2,
                         baseline=None)
    run_pipeline(config, progress=False)
    first = json.loads((work / "retriever" / "epr_config.json").read_text())
    second = json.loads((work / "round2" / "retriever" / "epr_config.json").read_text())
    assert first["method"] == second["method"] == "udr listwise" and first["field"] == "both"
    assert first["n_inputs"] == 16 and first["steps"] == 2 * 4 and len(second["epoch_losses"]) == 2
    # Round two mined with round one's retriever and scored only the pairs round one had not.
    old = {(r["id"], c["id"]) for r in read_jsonl_rows(work / "scoring" / "scores.jsonl") for c in r["candidates"]}
    new_rows = read_jsonl_rows(work / "round2" / "scoring" / "scores.jsonl")
    assert new_rows and not {(r["id"], c["id"]) for r in new_rows for c in r["candidates"]} & old
    assert json.loads((work / "index" / "meta.json").read_text())["field"] == "both"


def test_a_run_stopped_after_a_stage_goes_on_from_a_copy_and_trains_no_round_it_does_not_need(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    """The hand-over of a run split between machines: one stops after round 2's training (scoring and training on
    a GPU, say); a copy of its folder without round 1's retriever goes on elsewhere. Listwise rounds train anew
    from the base, so round 1's retriever, which only mined round 2's candidates, is not trained again there."""
    import shutil

    work = _round_one(lm_run, tmp_path)
    shutil.rmtree(work / "retriever")
    settings = {"base_model": str(tiny_bert_dir), "list_size": 3, "top_k": 1, "epochs": 1, "batch_inputs": 4,
                "learning_rate": 1e-3}
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, listwise=settings, rounds=2, baseline=None)
    assert run_pipeline(config, progress=False, stop_after="round 2 training") == {"stopped_after": "round 2 training"}
    assert (work / "round2" / "retriever" / "model").is_dir() and not (work / "index").exists()

    copy = tmp_path / "copy"
    shutil.copytree(work, copy, ignore=shutil.ignore_patterns("retriever", "logs", "stage_times.jsonl"))
    shutil.copytree(work / "round2" / "retriever", copy / "round2" / "retriever")
    lines = []

    class Console:
        def print(self, text):
            lines.append(str(text))

    summary = run_pipeline(config.model_copy(update={"work_dir": str(copy)}), console=Console(), progress=False)
    assert not (copy / "retriever").exists()
    assert any(line.startswith("training: not needed, round 2's candidates exist") for line in lines)
    ran = [json.loads(line)["stage"] for line in (copy / "stage_times.jsonl").read_text().splitlines()]
    assert ran == ["index", "evaluation"] and summary["n"] == 4


def test_stop_after_a_stage_that_never_runs_names_the_stages(lm_run, tmp_path, data_files, tiny_model_dir,
                                                              tiny_bert_dir):
    work = _round_one(lm_run, tmp_path)
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, baseline=None)
    with pytest.raises(ValueError, match=r"no stage named 'round 9 training' ran; the stages were: candidates, "
                                         r"labels, training, index, evaluation"):
        run_pipeline(config, progress=False, stop_after="round 9 training")


def _round_one(lm_run, tmp_path: Path) -> Path:
    """A copy of the module's finished EPR run without its config, index and evaluation: round one of a run
    that a test's config then continues."""
    import shutil

    first, _, _ = lm_run
    work = tmp_path / "work"
    shutil.copytree(first, work, ignore=shutil.ignore_patterns("pipeline_config.json", "index", "eval"))
    return work


def _assert_only_the_query_encoder_moved(before_dir: Path, after_dir: Path, text: str) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    before = SentenceTransformer(str(before_dir / "model"), device="cpu")
    after = SentenceTransformer(str(after_dir / "model"), device="cpu")
    assert torch.allclose(before.encode_document([text], convert_to_tensor=True),
                          after.encode_document([text], convert_to_tensor=True))
    assert not torch.allclose(before.encode_query([text], convert_to_tensor=True),
                              after.encode_query([text], convert_to_tensor=True))


class _CountingLM:
    """The scoring LM as the pipeline loaded it, counting the pairs it scores; ``stop_after`` shard calls it
    raises KeyboardInterrupt, as a user's Ctrl-C or a session's end would stop the run."""

    def __init__(self, lm, stop_after: int | None = None):
        self._lm, self._stop_after, self.calls, self.pairs = lm, stop_after, 0, 0

    def score_shared(self, prefixes, prompts, targets, **kwargs):
        if self._stop_after is not None and self.calls == self._stop_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.pairs += len(targets)
        return self._lm.score_shared(prefixes, prompts, targets, **kwargs)

    def __getattr__(self, name):
        return getattr(self._lm, name)


def test_a_run_stopped_part_way_resumes_from_a_fresh_clone_of_its_committed_shards_scoring_no_pair_twice(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    """A long run under benchmarks/results/ commits what it has and stops; a fresh clone of the repository (the
    project's own .gitignore applied, so only what git keeps travels) goes on from there and scores only the pairs
    the committed shards lack, ending where an uninterrupted run ends."""
    import shutil
    import subprocess

    from taskret.backends.base import load_lm

    def git(*args, cwd):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                       capture_output=True)

    _, _, uninterrupted = lm_run
    repo = tmp_path / "repo"
    work = repo / "benchmarks" / "results" / "epr_ladder_e2e" / "tiny"
    work.parent.mkdir(parents=True)
    shutil.copy(Path(__file__).parents[2] / ".gitignore", repo / ".gitignore")
    git("init", "-q", cwd=repo)
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir)
    stopping = _CountingLM(load_lm(str(tiny_model_dir)), stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(config, progress=False, lms={str(tiny_model_dir): stopping})
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "shards so far", cwd=repo)

    clone = tmp_path / "clone"
    git("clone", "-q", str(repo), str(clone), cwd=tmp_path)
    moved = clone / work.relative_to(repo)
    committed = sorted(p.name for p in (moved / "scoring" / "shards").iterdir())
    assert committed == ["shard-00000.jsonl", "shard-00001.jsonl"]
    resumed_lm = _CountingLM(load_lm(str(tiny_model_dir)))
    summary = run_pipeline(config.model_copy(update={"work_dir": str(moved)}), progress=False,
                           lms={str(tiny_model_dir): resumed_lm})
    assert stopping.pairs + resumed_lm.pairs == 16 * 4  # every pair scored once, across the two machines
    assert resumed_lm.pairs == 16 * 4 - 2 * 5 * 4  # the two committed shards of five inputs were not scored again
    assert summary["metrics"] == uninterrupted["metrics"]


def test_a_budgeted_second_round_scores_only_its_budget_on_the_inputs_its_retriever_ranks_least_like_the_lm(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    """Rung h of the ladder: round 2 sends the LM new pairs only up to round_budget x round 1's (16 x 4 = 64 pairs:
    0.25 is 16), whole inputs, those whose round-1 retriever's ranking of their scored candidates agrees least with
    the LM's first; the other inputs keep round 1's labels."""
    from scipy.stats import spearmanr

    from taskret.epr.reward import encoder_scores
    from taskret.epr.training import load_retriever

    work = _round_one(lm_run, tmp_path)
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, rounds=2, round_budget=0.25, baseline=None)
    run_pipeline(config, progress=False)
    record = json.loads((work / "round2" / "budget.json").read_text())
    assert record["round1_pairs"] == 64 and record["budget_pairs"] == 16
    scored = read_jsonl_rows(work / "round2" / "scoring" / "scores.jsonl")
    assert 0 < sum(len(r["candidates"]) for r in scored) == record["pairs"] <= 16
    assert [r["id"] for r in scored] == record["inputs"]
    # the chosen inputs are those of least agreement between round 1's retriever and the LM
    first = read_jsonl_rows(work / "scoring" / "scores.jsonl")
    pool = {e.id: e for e in _examples(data_files[0])}
    mine = encoder_scores(load_retriever(work / "retriever"), first, pool)
    rho = {r["id"]: spearmanr([c["logprob"] for c in r["candidates"]], mine[r["id"]]).statistic for r in first}
    rho = {i: (0.0 if v != v else v) for i, v in rho.items()}
    scored_before = {r["id"]: {c["id"] for c in r["candidates"]} for r in first}
    new_pairs = {r["id"]: len(set(r["candidates"]) - scored_before[r["id"]])
                 for r in read_jsonl_rows(work / "round2" / "candidates.jsonl")}
    expected, spent = [], 0
    for i in sorted((i for i in new_pairs if new_pairs[i]), key=lambda i: (rho[i], i)):  # least agreement first
        if spent + new_pairs[i] <= 16:
            expected.append(i)
            spent += new_pairs[i]
    assert sorted(record["inputs"]) == sorted(expected)
    assert (work / "round2" / "labels.jsonl").exists()


def test_a_second_round_labelled_by_a_reward_model_sends_the_lm_no_pair_and_puts_its_labels_on_the_lms_scale(
        lm_run, tmp_path, data_files, tiny_model_dir, tiny_bert_dir):
    """Rung g of the ladder: a reward model trained on round 1's LM scores rates round 2's new pairs; the LM scores
    none. Each new pair's score is the least-squares map (one slope, one intercept per input) of its logit, fitted on
    the input's round-1 pairs, which keep the LM's own scores."""
    import numpy as np

    from taskret.backends.base import load_lm
    from taskret.data import load_task
    from taskret.epr.labels import mean_logprob
    from taskret.epr.reward import reward_scores

    work = _round_one(lm_run, tmp_path)
    settings = {"base_model": str(tiny_bert_dir), "group_size": 3, "top_k_positive": 1, "bottom_k_negative": 2,
                "epochs": 3, "batch_inputs": 4, "learning_rate": 1e-3, "held_out": 0.25}
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, rounds=2, round_labeller=settings,
                         baseline=None)
    counting = _CountingLM(load_lm(str(tiny_model_dir)))
    run_pipeline(config, progress=False, lms={str(tiny_model_dir): counting})
    assert counting.pairs == 0 and not (work / "round2" / "scoring").exists()
    first = {r["id"]: r["candidates"] for r in read_jsonl_rows(work / "scoring" / "scores.jsonl")}
    mined = {r["id"]: r["candidates"] for r in read_jsonl_rows(work / "round2" / "candidates.jsonl")}
    labelled = {r["id"]: r["candidates"] for r in read_jsonl_rows(work / "round2" / "reward_labels" / "scores.jsonl")}
    new = {i: [c for c in ids if c not in {s["id"] for s in first[i]}] for i, ids in mined.items()}
    assert labelled and {i: [c["id"] for c in cands] for i, cands in labelled.items()} == {i: c for i, c in new.items()
                                                                                          if c}
    fit = json.loads((work / "round2" / "reward_labels" / "fit.json").read_text())
    assert fit["slope"] > 0 and fit["pairs_fitted_on"] == sum(len(first[i]) for i in labelled)
    # the map, recomputed from the reward model's own logits on one input's old and new candidates
    task = load_task(None, train=data_files[0], test=data_files[1], input_field="q", output_field="a", id_field="key")
    pool = {e.id: e for e in task.train}
    key = sorted(labelled)[0]
    old_ids = [c["id"] for c in first[key]]
    logits = reward_scores(work / "round_labeller" / "model", task, [pool[key]],
                           [old_ids + [c["id"] for c in labelled[key]]])[0]
    intercept = np.mean([mean_logprob(c) for c in first[key]]) - fit["slope"] * np.mean(logits[:len(old_ids)])
    n_tokens = first[key][0]["n_tokens"]
    expected = [(fit["slope"] * r + intercept) * n_tokens for r in logits[len(old_ids):]]
    assert [c["logprob"] for c in labelled[key]] == pytest.approx(expected, abs=0.02 * n_tokens)
    agreement = json.loads((work / "round_labeller" / "agreement.json").read_text())
    assert agreement["n_inputs"] == 4 and -1 <= agreement["spearman"] <= 1 and 0 <= agreement["top5_overlap"] <= 1
    assert (work / "round2" / "labels.jsonl").exists() and (work / "round2" / "retriever" / "model").exists()
