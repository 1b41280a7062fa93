"""The headroom pilot's verdicts (benchmarks/epr/headroom.py): the gap between BM25 and the LM-Oracle against what
the task's full test N can detect, "at the floor" when the gap is under twice that, and the LM's measured costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import import_script

MACHINE = {"cpu": "Some CPU", "cpu_flags": ["avx2"], "cores": 2, "dtype": "float32", "engine": "llama.cpp"}


@pytest.fixture(scope="module")
def headroom():
    return import_script("benchmarks/epr", "headroom")


def _evaluation(folder: Path, rows: list[dict], metrics: dict, wall_s: float, machine: dict = MACHINE) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps({"n": len(rows), "metrics": metrics, "wall_time_s": wall_s,
                                                     "machine": machine}))


def _mtop(results: Path, solved: dict[str, range], n: int = 100, machine: dict = MACHINE) -> None:
    folder = results / "mtop" / "smollm2-135m"
    for method, ids in solved.items():
        rows = [{"id": f"t{i}", "correct": i in ids} for i in range(n)]
        _evaluation(folder / method / "eval", rows, {"em": 100.0 * len(ids) / n}, wall_s=50.0,
                    machine=machine if method == "lm_oracle" else MACHINE)
    oracle = folder / "lm_oracle" / "oracle"
    oracle.mkdir(parents=True, exist_ok=True)
    for chunk in range(4):
        (oracle / f"{chunk:05d}.json").write_text(json.dumps({"inputs": [], "ids": [], "scores": [], "pairs": 1250,
                                                              "seconds": 250.0}))


def test_a_gap_twice_what_the_full_n_detects_passes_and_a_small_one_is_at_the_floor(headroom, tmp_path):
    _mtop(tmp_path / "wide", {"random": range(5), "bm25": range(20), "lm_oracle": range(45)})
    row = headroom.assemble_one("mtop", "smollm2-135m", tmp_path / "wide", n_full=859)
    assert (row["random"], row["bm25"], row["lm_oracle"], row["gap"]) == (5.0, 20.0, 45.0, 25.0)
    assert row["metric"] == "em" and row["n"] == 100 and row["n_full"] == 859
    low, high = row["gap_ci95"]
    assert low < 25.0 < high and row["gap_p"] < 0.001
    # 25 of 100 discordant carried to 859 inputs: McNemar detects about 4.7 points at 80% power
    assert 4 < row["min_detectable_diff_full_n"] < 6 and row["floor"] is False
    assert row["s_per_pair"] == pytest.approx(0.2) and row["s_per_answer"] == pytest.approx(0.5)
    assert row["generation_engine"] == "llama.cpp" and row["load_average_at_start"] is None  # not recorded then
    for method, load in (("random", 0.4), ("bm25", 2.6), ("lm_oracle", 0.9)):  # the busiest start is the row's
        summary = tmp_path / "wide" / "mtop" / "smollm2-135m" / method / "eval" / "summary.json"
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "load_average_at_start": load}))
    assert headroom.assemble_one("mtop", "smollm2-135m", tmp_path / "wide", n_full=859)["load_average_at_start"] == 2.6

    _mtop(tmp_path / "narrow", {"random": range(5), "bm25": range(20), "lm_oracle": [*range(2, 22), 90, 91]})
    narrow = headroom.assemble_one("mtop", "smollm2-135m", tmp_path / "narrow", n_full=859)
    # 6 of 100 discordant: about 2.3 points detectable at 859, and a gap of 2 is under twice that
    assert narrow["gap"] == 2.0 and narrow["floor"] is True
    assert headroom.assemble_one("mtop", "gemma3-270m", tmp_path / "narrow", n_full=859) is None  # not run yet


def test_seconds_per_pair_count_only_the_chunks_ranked_on_the_evaluations_cpu_kind(headroom, tmp_path):
    """A ranking resumed on another CPU kind, its precision kept: the row's seconds per pair are those of the chunks
    ranked where the evaluations ran (a chunk from before machines were recorded says nothing of where)."""
    _mtop(tmp_path, {"random": range(5), "bm25": range(20), "lm_oracle": range(45)})
    oracle = tmp_path / "mtop" / "smollm2-135m" / "lm_oracle" / "oracle"
    here = {"cpu": MACHINE["cpu"], "cpu_flags": MACHINE["cpu_flags"]}
    elsewhere = {"cpu": "Another CPU", "cpu_flags": ["amx_bf16"]}
    for chunk, (where, seconds) in enumerate([(None, 1900.0), (elsewhere, 20.0), (here, 125.0), (here, 175.0)]):
        path = oracle / f"{chunk:05d}.json"
        row = {**json.loads(path.read_text()), "inputs": [f"t{i}" for i in range(25)], "seconds": seconds,
               "runtime": {"engine": "transformers", "device": "cpu", "dtype": "float32"}}
        path.write_text(json.dumps({**row, **({"machine": where} if where else {})}))
    row = headroom.assemble_one("mtop", "smollm2-135m", tmp_path, n_full=859)
    assert row["s_per_pair"] == pytest.approx(300.0 / 2500) and row["s_per_pair_inputs"] == 50
    assert row["scoring_runtime"]["dtype"] == "float32"


def test_evaluations_from_two_machines_are_never_paired(headroom, tmp_path):
    _mtop(tmp_path, {"random": range(5), "bm25": range(20), "lm_oracle": range(45)},
          machine={**MACHINE, "cpu": "Another CPU"})
    with pytest.raises(SystemExit, match="another machine"):
        headroom.assemble_one("mtop", "smollm2-135m", tmp_path, n_full=859)


def test_a_graded_metric_carries_the_spread_of_its_differences_to_the_full_n(headroom):
    pilot = {f"c{i}": 40.0 + (i % 10) for i in range(100)}
    oracle = {f"c{i}": 50.0 + (i % 7) for i in range(100)}
    at_100 = headroom.detectable_at(100, oracle, pilot, "chrf")
    at_400 = headroom.detectable_at(400, oracle, pilot, "chrf")
    assert at_400 == pytest.approx(at_100 / 2, abs=0.01)  # sqrt(N): four times the inputs, half the difference
    assert type(at_100) is float and json.dumps({"floor": 5.0 < 2 * at_100})  # numpy's types do not reach JSON


def test_the_page_renders_each_row_with_its_verdict_and_nothing_without_the_result(headroom, tmp_path, monkeypatch):
    renderer = import_script("benchmarks", "renderers.epr_tasks")
    monkeypatch.setattr(renderer, "load", lambda name: None)
    assert renderer.headroom_table() == []
    _mtop(tmp_path / "wide", {"random": range(5), "bm25": range(20), "lm_oracle": range(45)})
    _mtop(tmp_path / "narrow", {"random": range(5), "bm25": range(20), "lm_oracle": [*range(2, 22), 90, 91]})
    rows = {"wide": headroom.assemble_one("mtop", "smollm2-135m", tmp_path / "wide", n_full=859),
            "narrow": headroom.assemble_one("mtop", "smollm2-135m", tmp_path / "narrow", n_full=859)}
    result = {"command": "python benchmarks/epr/headroom.py", "machine": MACHINE, "n": 100,
              "tasks": {"mtop": {"smollm2-135m": rows["wide"]}, "geoquery": {"gemma3-270m": rows["narrow"]}}}
    monkeypatch.setattr(renderer, "load", lambda name: result)
    lines = renderer.headroom_table()
    wide = next(line for line in lines if line.startswith("| mtop |"))
    narrow = next(line for line in lines if line.startswith("| geoquery |"))
    assert "| SmolLM2-135M | EM | 100 (859) | 5.0 | 20.0 | 45.0 | +25.0 [" in wide and "| passes |" in wide
    assert "| Gemma 3 270M |" in narrow and "| +2.0 [" in narrow and "| at the floor |" in narrow
    assert "0.200 | 0.50 (llama.cpp; AVX2) |" in wide  # no load recorded: none said
    rows["narrow"]["load_average_at_start"] = 2.6
    rows["narrow"]["machine"] = {**MACHINE, "cpu_flags": ["avx2", "avx512_bf16"]}  # a row from another session's CPU
    assert "| 0.50 (llama.cpp; AVX512-BF16; load 2.6) |" in next(line for line in renderer.headroom_table()
                                                               if "| geoquery |" in line)


def test_an_oracle_chunk_ranked_in_another_precision_is_ranked_again(tmp_path, demo_task, tiny_lm):
    """A stopped LM-Oracle resumes at its first missing chunk, but a chunk a session on another kind of machine ranked
    (float32 there, bfloat16 here) is ranked again: one ranking, one precision."""
    runs = import_script("benchmarks/epr", "epr_runs")
    inputs = demo_task.test[:3]
    folder = tmp_path / "oracle"
    first = runs.lm_oracle(demo_task, inputs, tiny_lm, folder)
    chunk = folder / "00000.json"
    kept = json.loads(chunk.read_text())
    assert kept["runtime"] == tiny_lm.runtime() and kept["pairs"] == 3 * 50
    assert set(kept["machine"]) == {"cpu", "cpu_flags"}  # where its seconds hold
    runs.lm_oracle(demo_task, inputs, tiny_lm, folder)
    assert json.loads(chunk.read_text()) == kept  # the same runtime: kept, not ranked again
    chunk.write_text(json.dumps({**kept, "runtime": {**kept["runtime"], "dtype": "bfloat16"}, "seconds": -1.0}))
    again = runs.lm_oracle(demo_task, inputs, tiny_lm, folder)
    redone = json.loads(chunk.read_text())
    assert redone["runtime"] == tiny_lm.runtime() and redone["seconds"] >= 0
    assert again.ids == first.ids
