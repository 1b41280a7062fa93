"""The LM engines benchmark's bookkeeping (benchmarks/speed/lm_engines.py): the agreement of candidate rankings, the
engine it names the default (faster only counts at the reference's answers), shards from another CPU never
compared, and the page's table."""

from __future__ import annotations

import json

import pytest

from taskret.data import Example, Task

from . import import_script

MACHINE = {"cpu": "Some CPU", "cpu_flags": ["avx2"], "cores": 2, "load_average": [0.3, 0.3, 0.3]}


@pytest.fixture(scope="module")
def engines():
    return import_script("benchmarks/speed", "lm_engines")


N = 20


def _task() -> Task:
    train = [Example(id=f"t{i}", input=f"call {i}", output=f"[IN:CALL {i} ]") for i in range(N)]
    test = [Example(id=f"x{i}", input=f"ring {i}", output=f"[IN:CALL {i} ]") for i in range(N)]
    return Task(name="mtop", train=train, test=test)


def _generation(answers: list[str], seconds: float, machine: dict = MACHINE) -> dict:
    return {"n": len(answers), "seconds": seconds, "generated_tokens": 10 * len(answers), "prompt_tokens": 1000,
            "answers": answers, "machine": machine}


def test_rankings_agree_when_the_order_of_each_inputs_candidates_is_kept(engines):
    reference = [float(-i) for i in range(50)] + [float(i) for i in range(50)]
    same_order = [2 * s - 1 for s in reference]  # another scale, the same ranking
    assert engines.ranking_agreement(same_order, reference) == {
        "spearman_mean": 1.0, "spearman_min": 1.0, "top5_kept": 1.0, "inputs": 2,
        "max_abs_logprob_diff": 50.0}
    swapped = list(reference)
    swapped[0], swapped[10] = swapped[10], swapped[0]  # the first input's best candidate falls to 11th
    result = engines.ranking_agreement(swapped, reference)
    assert result["top5_kept"] == pytest.approx((4 / 5 + 1) / 2)
    assert result["spearman_min"] < 1.0 and result["spearman_mean"] < 1.0


def _report(engines, fast_answers: list[str], fast_machine: dict = MACHINE, tasks=None) -> dict:
    """Every task measured on both engines (the same synthetic inputs under each task's name)."""
    task = _task()
    gold = [e.output for e in task.test]
    tasks = list(tasks or engines.TASKS)
    results = {
        engines.REFERENCE: {"scoring": None, "generation": {t: _generation(gold, 40.0) for t in tasks}, "batch1": {}},
        "llamacpp": {"scoring": None, "batch1": {},
                     "generation": {t: _generation(fast_answers, 10.0, fast_machine) for t in tasks}},
    }
    inputs = {t: {"task": task, "examples": task.test, "prompt_tokens": [250] * N} for t in tasks}
    bounds = {"matmul_gflops_float32": 100.0, "memory_read_gbps": 10.0, "threads": 2}
    return engines.build_report(results, inputs, tasks, bounds, "smollm2-135m")


def test_the_faster_engine_is_the_default_only_at_the_reference_answers(engines):
    task = _task()
    same = _report(engines, [e.output for e in task.test])
    assert same["default"] == "llamacpp"
    row = same["engines"]["llamacpp"]["generation"]["mtop"]
    assert row["speedup"] == 4.0 and row["same_as_reference"] == 1.0 and row["metric"]["em"] == 100.0
    assert same["em_within_noise"]["llamacpp"]["mtop"]["within_noise"]
    # every answer different, and wrong: 4x faster is not enough
    wrong = _report(engines, ["[IN:OTHER ]"] * N)
    assert wrong["engines"]["llamacpp"]["generation"]["mtop"]["same_as_reference"] == 0.0
    assert not wrong["em_within_noise"]["llamacpp"]["mtop"]["within_noise"]
    assert wrong["default"] == engines.REFERENCE


def test_an_engine_as_fast_within_noise_on_one_task_and_faster_on_the_others_is_the_default(engines):
    """Prefill-bound tasks run at about the same speed on both engines: 2% slower there does not keep the default
    from the engine that is 1.6x faster on the others; 10% slower does."""
    task = _task()
    gold = [e.output for e in task.test]
    for slower, default in ((0.98, "llamacpp"), (0.90, engines.REFERENCE)):
        report = _report(engines, gold)
        rows = report["engines"]
        for t in engines.TASKS:
            rows["llamacpp"]["generation"][t]["answers_per_s"] = 1.6 * rows[engines.REFERENCE]["generation"][t][
                "answers_per_s"]
        rows["llamacpp"]["generation"]["mtop"]["answers_per_s"] = slower * rows[engines.REFERENCE]["generation"][
            "mtop"]["answers_per_s"]
        assert engines.choose_default(rows, list(engines.TASKS)) == default, slower


def test_shards_from_another_cpu_are_not_compared(engines):
    task = _task()
    elsewhere = {**MACHINE, "cpu": "Another CPU", "cpu_flags": ["amx_bf16"]}
    report = _report(engines, [e.output for e in task.test], fast_machine=elsewhere)
    row = report["engines"]["llamacpp"]["generation"]["mtop"]
    assert "speedup" not in row and "same_as_reference" not in row
    assert report["default"] == engines.REFERENCE  # nothing measured beside the reference on one machine


def test_the_default_stays_the_reference_until_every_task_is_measured(engines):
    task = _task()
    assert _report(engines, [e.output for e in task.test], tasks=["mtop"])["default"] == engines.REFERENCE


def test_the_page_shows_every_engine_beside_the_machines_bounds(engines, tmp_path, monkeypatch):
    from renderers import common, speed

    task = _task()
    report = {**_report(engines, [e.output for e in task.test]), "command": "python benchmarks/speed/lm_engines.py",
              "machine": {**MACHINE, "python": "3.11"}}
    (tmp_path / "lm_engines.json").write_text(json.dumps(report))
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    text = "\n".join(speed.lm_engines_table())
    assert "| mtop (20) | llamacpp | 2.000 | 4.0 |" in text
    assert "Default for generation here: **llamacpp**" in text
    assert "float32 matrix products 100.0 GFLOP/s" in text
