"""``benchmarks/studies/tart/instruction_mix.py``: the instructed ranking's share chosen on dev tasks, each dev task scored at the
share the others chose, and the evaluation task's bare, instructed and fused rankings, on tiny BEIR folders and a
tiny random encoder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..tart.builders import write_beir

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "benchmarks" / "studies" / "tart"  # the TART study's scripts
sys.path.insert(0, str(STUDY))
from instruction_mix import leave_one_task_out  # noqa: E402

sys.path.remove(str(STUDY))


def test_leave_one_task_out_scores_each_task_at_the_weight_the_others_chose():
    per_task = {0.0: {"a": 50.0, "b": 40.0, "c": 30.0},
                0.2: {"a": 0.0, "b": 0.0, "c": 20.0},
                0.4: {"a": 0.0, "b": 0.0, "c": 20.0},
                0.5: {"a": 10.0, "b": 60.0, "c": 35.0},
                1.0: {"a": 70.0, "b": 20.0, "c": 35.0}}
    out = leave_one_task_out(per_task)
    # a: b + c best at 0.5 (95); b: a + c best at 1.0 (105); c: a + b best at 0.0 and 1.0 (90): the lower wins
    assert [out[t]["weight"] for t in "abc"] == [0.5, 1.0, 0.0]
    assert [out[t]["fused"] for t in "abc"] == [10.0, 20.0, 30.0]
    assert out["mean"] == {"fused": 20.0, "instructed": pytest.approx(41.67), "bare": 40.0}
    # ties as tune-weight breaks them: the share nearest 0.5 first (0.4 over 0.2), then the smaller
    tied = leave_one_task_out({0.2: {"a": 30.0, "b": 50.0}, 0.4: {"a": 40.0, "b": 50.0},
                               0.0: {"a": 0.0, "b": 0.0}, 1.0: {"a": 0.0, "b": 0.0}})
    assert tied["a"]["weight"] == 0.4


def test_instruction_mix_writes_dev_choice_held_out_scores_and_the_three_rankings(tmp_path, tiny_bert_dir):
    dev = [write_beir(tmp_path / name) for name in ("dev_a", "dev_b")]
    for folder, words in zip(dev, ("heart aspirin", "cold vitamin")):
        (folder / "instructions.json").write_text(json.dumps([f"find the fact about {words}"]))
    target = write_beir(tmp_path / "facts")
    (target / "instructions.json").write_text(json.dumps(["coffee consumption sleep quality adults"]))
    out = tmp_path / "mix.json"

    def run(name: str, *more: str) -> dict:
        done = subprocess.run([sys.executable, str(STUDY / "instruction_mix.py"), "--task", str(target),
                               "--dev-tasks", ",".join(map(str, dev)), "--student", f"{name}={tiny_bert_dir}",
                               "--out", str(out), *more],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr
        return json.loads(out.read_text())

    result = run("tiny")
    entry = result["students"]["tiny"]
    assert set(entry["dev"]) == {f"{w / 10:g}" for w in range(11)}
    chosen = entry["dev"][f"{entry['weight']:g}"]["mean"]
    assert chosen == max(row["mean"] for row in entry["dev"].values())
    held = entry["leave_one_task_out"]
    assert set(held) == {"dev_a", "dev_b", "mean"}
    for task in ("dev_a", "dev_b"):  # the other task's best weight, scored on this one
        other = "dev_b" if task == "dev_a" else "dev_a"
        assert entry["dev"][f"{held[task]['weight']:g}"][other] == max(r[other] for r in entry["dev"].values())
        assert held[task]["fused"] == entry["dev"][f"{held[task]['weight']:g}"][task]
        assert held[task]["instructed"] == entry["dev"]["1"][task] and held[task]["bare"] == entry["dev"]["0"][task]
    scifact = entry["scifact"]
    assert scifact["spec"].endswith(f"weight={entry['weight']:g}&read_instruction=1,0")
    assert all(0 <= scifact[k] <= 100 for k in ("bare", "instructed", "fused"))
    again = run("twin", "--merge")  # the same model again: the same choice, the earlier entry kept
    assert list(again["students"]) == ["tiny", "twin"] and again["students"]["tiny"] == entry
    assert again["students"]["twin"]["weight"] == entry["weight"] and len(again["commands"]) == 2
