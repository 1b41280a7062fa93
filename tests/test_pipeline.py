"""taskret.pipeline: a Stage runs once, writes its output atomically and prints one line; a work folder keeps
the config it was made with and refuses another (guard_config)."""

from __future__ import annotations

import json
import os
from typing import Optional

import pytest
from pydantic import BaseModel, ConfigDict

from taskret.io import DataError
from taskret.pipeline import Stage, count_earlier_sessions, guard_config, read_config


class Boom(RuntimeError):
    pass


def test_a_file_stage_writes_atomically_runs_once_and_reports(tmp_path):
    lines: list[str] = []
    out = tmp_path / "work" / "rows.jsonl"
    seen = []

    def make(path):
        seen.append(path)
        assert path != out and path.parent == out.parent and not out.exists()  # written beside, renamed after
        path.write_text('{"id": 1}\n', encoding="utf-8")
        return "1 row"

    stage = Stage("rows", out, say=lines.append)
    assert not stage.done
    assert stage.run(make) is True
    assert stage.done and out.read_text(encoding="utf-8") == '{"id": 1}\n'
    assert os.listdir(out.parent) == ["rows.jsonl"]  # no temporary left
    assert len(lines) == 1 and lines[0].startswith(f"rows: 1 row -> {out} (") and lines[0].endswith(" s)")

    assert Stage("rows", out, say=lines.append).run(make) is False
    assert len(seen) == 1 and lines[1] == f"rows: {out} exists, skipped"
    Stage("rows", out, say=lines.append).run(make, reused="loaded")
    assert lines[2] == f"rows: {out} exists, loaded"


def test_a_failed_file_stage_leaves_nothing_and_runs_again(tmp_path):
    out = tmp_path / "rows.jsonl"

    def crash(path):
        path.write_text("half a fi", encoding="utf-8")
        raise Boom("killed mid-write")

    with pytest.raises(Boom):
        Stage("rows", out).run(crash)
    assert os.listdir(tmp_path) == []
    assert Stage("rows", out).run(lambda path: path.write_text("whole\n", encoding="utf-8") and None) is True
    assert out.read_text(encoding="utf-8") == "whole\n"


def test_a_folder_stage_is_done_when_its_marker_exists(tmp_path):
    folder, marker = tmp_path / "model", tmp_path / "model" / "config.json"
    lines: list[str] = []

    def weights_only(out):
        out.mkdir()
        (out / "weights.bin").write_bytes(b"\0")

    stage = Stage("train", folder, marker=marker, say=lines.append)
    with pytest.raises(RuntimeError, match="finished without writing .*config.json"):
        stage.run(weights_only)
    assert folder.exists() and not stage.done  # a folder without its marker is not a finished stage

    def train(out):
        (out / "config.json").write_text("{}", encoding="utf-8")  # last: marks the stage done

    assert stage.run(train) is True and stage.done
    assert lines[-1].startswith(f"train: -> {folder} (")  # nothing to say but where it went
    assert stage.run(train) is False and lines[-1] == f"train: {marker} exists, skipped"


class JobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = 4
    name: str = "job"
    workers: Optional[int] = None


def test_a_stage_that_resumed_earlier_sessions_work_records_their_seconds_beside_its_own(tmp_path):
    """A training resumed from a checkpoint counts the seconds that got it there (earlier_s) apart from this run's."""
    times = tmp_path / "stage_times.jsonl"

    def resumed(path):
        count_earlier_sessions(600.0)  # the checkpoint's training seconds
        path.write_text("model\n", encoding="utf-8")

    Stage("training", tmp_path / "a.txt", timings=times).run(resumed)
    Stage("index", tmp_path / "b.txt", timings=times).run(lambda path: path.write_text("x", encoding="utf-8") and None)
    first, second = (json.loads(line) for line in times.read_text().splitlines())
    assert first["stage"] == "training" and first["earlier_s"] == 600.0 and first["wall_s"] < 600
    assert "earlier_s" not in second  # nothing resumed: no key
    count_earlier_sessions(5.0)  # outside any stage: nowhere to count, nothing happens


def test_guard_config_saves_then_refuses_another_config(tmp_path):
    path = tmp_path / "work" / "pipeline_config.json"
    guard_config(path, JobConfig(n=4))
    assert json.loads(path.read_text()) == {"n": 4, "name": "job", "workers": None}
    guard_config(path, JobConfig(n=4))  # the same config: fine
    with pytest.raises(ValueError, match=r"work was made with another config \(changed: n\)"):
        guard_config(path, JobConfig(n=8))
    with pytest.raises(ValueError, match=r"changed: n, name"):
        guard_config(path, JobConfig(n=8, name="other"))
    guard_config(path, JobConfig(n=4, workers=16), ignore={"workers"})  # where it runs, not what it computes
    assert json.loads(path.read_text())["workers"] is None  # the saved config is never rewritten


def test_guard_config_compares_a_field_added_later_with_its_default(tmp_path):
    path = tmp_path / "pipeline_config.json"
    path.write_text(json.dumps({"n": 4, "name": "job"}))  # saved before `workers` existed
    guard_config(path, JobConfig(n=4))
    with pytest.raises(ValueError, match=r"changed: workers"):
        guard_config(path, JobConfig(n=4, workers=2))


def test_guard_config_takes_plain_settings(tmp_path):
    path = tmp_path / "bench_config.json"
    guard_config(path, {"k": 10, "tasks": ["mtop"]})
    guard_config(path, {"k": 10, "tasks": ["mtop"]})
    with pytest.raises(ValueError, match=r"changed: seed, tasks"):
        guard_config(path, {"k": 10, "tasks": ["break"], "seed": 1})


def test_read_config_names_the_file(tmp_path):
    path = tmp_path / "job[1].json"
    path.write_text(json.dumps({"n": 3, "nmae": "typo"}))
    with pytest.raises(DataError, match=r"job\[1\]\.json: unknown key 'nmae' \(did you mean 'name'\?\)$"):
        read_config(JobConfig, path)
    path.write_text(json.dumps({"n": "three", "zzz": 1}))
    with pytest.raises(DataError, match=r"job\[1\]\.json: key 'n': Input should be a valid integer, unable to parse "
                       r"string as an integer \(got 'three'\); unknown key 'zzz' \(keys: "):
        read_config(JobConfig, path)
    path.write_text(json.dumps({"n": 3}))
    assert read_config(JobConfig, path) == JobConfig(n=3)
    with pytest.raises(DataError, match="cannot read file"):
        read_config(JobConfig, tmp_path / "missing.json")
