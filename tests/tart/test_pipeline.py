"""`taskret tart run`: build-data -> train-dual -> train-full -> re-denoise -> distil -> evaluate on tiny BEIR
tasks written in tmp_path, with tiny BERTs; stages are skipped when done, a changed config is refused, and
evaluation data never goes into training."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from taskret.cli import app
from taskret.tart.pipeline import TartRunConfig, run_pipeline

from .builders import Say, make_config

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, beir, tiny_bert_dir):
    work = tmp_path_factory.mktemp("tart-run")
    config = make_config(beir, work, tiny_bert_dir)
    say = Say()
    summary = run_pipeline(config, console=say, progress=False)
    return work, config, summary, say


def test_every_stage_writes_its_outputs(finished):
    work, config, summary, say = finished
    for path in ("pipeline_config.json", "train.jsonl", "train_stats.json", "train.denoised.jsonl",
                 "dual/tart_dual_config.json", "dual/model", "full/tart_full_config.json", "full/model",
                 "distil/tart_distil_config.json", "distil/model", "metrics.json"):
        assert (work / path).exists(), path
    assert set(summary) == {"dual", "full", "distil"} == set(json.loads((work / "metrics.json").read_text()))
    full = json.loads((work / "eval" / "full" / "metrics.json").read_text())
    assert full["reranker"] == f"cross-encoder:{work / 'full'}" and full["rerank_top_k"] == 4
    assert full["settings"]["closed"]["facts"]["n_queries"] == 3
    distil = json.loads((work / "distil" / "tart_distil_config.json").read_text())
    assert distil["base_model"] == str(work / "dual" / "model") and distil["teacher"] == str(work / "full")
    rows = [json.loads(line) for line in (work / "train.jsonl").read_text().splitlines()]
    assert {r["task"] for r in rows} == {"parses", "steps"}  # the evaluation task stays out of training
    assert not any(line.endswith("skipped") for line in say.lines)


def test_a_second_run_skips_every_stage(finished):
    work, config, summary, _ = finished
    say = Say()
    assert run_pipeline(config, console=say, progress=False) == summary
    assert sum("skipped" in line for line in say.lines) == 8  # data, dual, full, re-denoise, distil, 3 evaluations
    result = CliRunner().invoke(app, ["tart", "run", str(work / "pipeline_config.json")], env=ENV)
    assert result.exit_code == 0, result.output
    assert "train-full:" in result.output and "exists, skipped" in result.output


def test_a_changed_config_is_refused(finished, beir, tiny_bert_dir):
    work, config, _, _ = finished
    changed = make_config(beir, work, tiny_bert_dir, rerank_top_k=3)
    with pytest.raises(ValueError, match="another config.*rerank_top_k"):
        run_pipeline(changed, progress=False)


def test_evaluation_data_cannot_be_trained_on(tmp_path, beir, tiny_bert_dir):
    config = make_config(beir, tmp_path / "work", tiny_bert_dir, train_tasks=[str(beir["facts"]) + ":test"])
    with pytest.raises(ValueError, match="reads the data of evaluation task"):
        run_pipeline(config, progress=False)
    assert not (tmp_path / "work" / "pipeline_config.json").exists()


def test_ambigqa_dev_is_ambigqa_test(tmp_path, tiny_bert_dir):
    from .builders import make_data_dir

    data_dir = make_data_dir(tmp_path / "data")
    config = TartRunConfig(work_dir=str(tmp_path / "work"), data_dir=str(data_dir), train_tasks=["mtop", "ambigqa:dev"],
                           eval_tasks=["ambigqa"])
    with pytest.raises(ValueError, match="'ambigqa:dev' reads the data of evaluation task 'ambigqa'"):
        run_pipeline(config, progress=False)


def test_bad_configs_fail_before_any_stage(tmp_path, beir, tiny_bert_dir):
    with pytest.raises(ValueError, match="unknown TartFullConfig keys: lr"):
        run_pipeline(make_config(beir, tmp_path / "a", tiny_bert_dir, full={"lr": 1}), progress=False)
    assert not (tmp_path / "a" / "train.jsonl").exists()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"work_dir": str(tmp_path / "b"), "epochs": 3}))
    result = CliRunner().invoke(app, ["tart", "run", str(path)], env=ENV)
    assert result.exit_code == 2 and "config.json" in result.output and "epochs" in result.output
    path.write_text(json.dumps({"work_dir": str(tmp_path / "c"), "train_tasks": [str(beir["parses"])],
                                "eval_tasks": [str(beir["facts"])]}))
    result = CliRunner().invoke(app, ["tart", "run", str(path)], env=ENV)
    assert result.exit_code == 2 and "has no instructions" in result.output  # a BEIR folder needs instructions


def test_task_specs_name_a_split(tmp_path, beir):
    from taskret.tart.tasks import load_training_tasks, split_task_spec

    assert split_task_spec("ambigqa:dev", "train") == ("ambigqa", "dev")
    assert split_task_spec("mtop", "train") == ("mtop", "train")
    assert split_task_spec(f"{beir['facts']}:test", "train") == (str(beir["facts"]), "test")
    assert split_task_spec("no/such:thing", "train") == ("no/such:thing", "train")
    tasks, skipped = load_training_tasks([str(beir["parses"]), f"{beir['facts']}:test"], split="train",
                                         instructions={"facts": ["Find evidence"]}, limit=2)
    assert [t.name for t in tasks] == ["parses", "facts"] and tasks[1].instructions == ["Find evidence"]
    assert len(tasks[0].queries) == 2 and not tasks[0].instructions and skipped == []
    capped, _ = load_training_tasks([str(beir["parses"]), str(beir["steps"])], split="train", limit=2,
                                    task_limits={"steps": 1})
    assert [len(t.queries) for t in capped] == [2, 1]  # a per-task cap replaces the shared limit


def test_a_training_only_run_trains_both_models_and_evaluates_nothing(tmp_path, beir, tiny_bert_dir):
    config = make_config(beir, tmp_path / "w", tiny_bert_dir, eval_tasks=[], redenoise=False, distil=None)
    say = Say()
    assert run_pipeline(config, console=say, progress=False) == {}
    assert (tmp_path / "w" / "dual" / "tart_dual_config.json").exists()
    assert (tmp_path / "w" / "full" / "tart_full_config.json").exists()
    assert not (tmp_path / "w" / "eval").exists() and not (tmp_path / "w" / "metrics.json").exists()
    assert say.lines[-1] == "evaluate: no eval_tasks, skipped"


def test_a_dual_only_run_trains_and_evaluates_tart_dual_alone(tmp_path, beir, tiny_bert_dir):
    with pytest.raises(ValueError, match="need TART-full"):
        make_config(beir, tmp_path / "x", tiny_bert_dir, full=None)  # redenoise and distil are on
    with pytest.raises(ValueError, match="task_caps"):
        make_config(beir, tmp_path / "x", tiny_bert_dir, task_caps={"parses": 0})
    config = make_config(beir, tmp_path / "w", tiny_bert_dir, full=None, redenoise=False, distil=None,
                         task_caps={"parses": 1}, unfollowing_first_stage="random")
    summary = run_pipeline(config, console=Say(), progress=False)
    assert set(summary) == {"dual"} and not (tmp_path / "w" / "full").exists()
    stats = json.loads((tmp_path / "w" / "train_stats.json").read_text())
    assert stats["per_task"]["parses"] == 1
    assert stats["unfollowing_sources"]["parses"] == {"steps": 2}  # the one row's 2 come from the other task


def test_a_distillation_only_run_learns_from_a_fusion_teacher(tmp_path, beir, tiny_bert_dir):
    teacher = f"fusion:{tiny_bert_dir}?weight=0.5"
    with pytest.raises(ValueError, match="distil_teacher is set but distil is null"):
        make_config(beir, tmp_path / "x", tiny_bert_dir, distil_teacher=teacher, distil=None, redenoise=False)
    with pytest.raises(ValueError, match="nothing to train"):
        make_config(beir, tmp_path / "x", tiny_bert_dir, dual=None, full=None, distil=None, redenoise=False)
    config = make_config(beir, tmp_path / "w", tiny_bert_dir, dual=None, full=None, redenoise=False,
                         distil={"base_model": str(tiny_bert_dir), "batch_size": 4, "max_seq_length": 32,
                                 "instruction_dropout": 0.5, "negative_kinds": ["hard", "random"]},
                         distil_teacher=teacher)
    summary = run_pipeline(config, console=Say(), progress=False)
    work = tmp_path / "w"
    assert set(summary) == {"distil"} and not (work / "dual").exists() and not (work / "full").exists()
    distil = json.loads((work / "distil" / "tart_distil_config.json").read_text())
    assert distil["teacher"] == f"fusion:{tiny_bert_dir}?weight=0.5" and distil["base_model"] == str(tiny_bert_dir)
    assert distil["n_teacher_pairs"] > 0 and distil["instruction_dropout"] == 0.5

    from sentence_transformers import SentenceTransformer

    # trained at 32 tokens, the student encodes with its base's own length (the tiny BERT's 128)
    assert SentenceTransformer(str(work / "distil" / "model")).max_seq_length == 128


def test_a_work_folder_copied_elsewhere_resumes_without_redoing_a_stage(finished, tmp_path):
    import shutil

    work, config, summary, _ = finished
    copy = tmp_path / "moved"
    shutil.copytree(work, copy)
    say = Say()
    assert run_pipeline(config.model_copy(update={"work_dir": str(copy)}), console=say, progress=False) == summary
    assert sum("skipped" in line for line in say.lines) == 8
    assert "taskret.training: step 1: " in (copy / "logs" / "run.log").read_text(encoding="utf-8")


def test_the_training_stage_lines_say_where_the_trainer_log_is(finished):
    work, _, _, say = finished
    for stage in ("train-dual", "train-full", "distil"):
        line = next(line for line in say.lines if line.startswith(f"{stage}:"))
        assert " steps, final loss " in line and f"(trainer log: {work / 'logs' / 'run.log'})" in line, line
