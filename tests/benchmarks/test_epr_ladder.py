"""The EPR ladder's bookkeeping (benchmarks/epr/epr_ladder.py): rankings read back in the test inputs' order (the
EPR benchmarks' shared epr_runs.py), the recommended rung, and the refusal to pair evaluations made on different
machines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from taskret.data import Example

from . import import_script


@pytest.fixture(scope="module")
def ladder():
    return import_script("benchmarks/epr", "epr_ladder")


@pytest.fixture(scope="module")
def runs():
    return import_script("benchmarks/epr", "epr_runs")


def _write(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _evaluations(results: Path, verdicts: dict[str, list[bool]]) -> None:
    """Each rung's evaluation on one machine, input ``tN`` solved where ``verdicts[rung][N]``."""
    for name, correct in verdicts.items():
        _write(results / name / "eval" / "predictions.jsonl",
               [{"id": f"t{n}", "correct": c} for n, c in enumerate(correct)])
        (results / name / "eval" / "summary.json").write_text(json.dumps(
            {"n": len(correct), "metrics": {"em": 100.0 * sum(correct) / len(correct)}, "machine": {"cpu": "Some CPU"}}))


def test_rankings_come_back_in_the_test_inputs_order_whatever_their_source(runs, tmp_path):
    test = [Example("t1", "x1", "y1"), Example("t2", "x2", "y2")]
    _write(tmp_path / "b" / "rankings.jsonl", [{"id": "t2", "ids": ["e3"], "scores": [0.5]},
                                               {"id": "t1", "ids": ["e1", "e2"], "scores": [0.9, 0.1]}])
    ranked = runs.ranking(f"file:{tmp_path / 'b' / 'rankings.jsonl'}", test)
    assert ranked.ids == [["e1", "e2"], ["e3"]]
    assert ranked.scores[0].tolist() == pytest.approx([0.9, 0.1]) and np.isnan(ranked.scores[1][1])
    _write(tmp_path / "a" / "predictions.jsonl", [{"id": "t1", "retrieved_ids": ["e2"], "retrieved_scores": [1.0]},
                                                  {"id": "t2", "retrieved_ids": ["e1"], "retrieved_scores": [2.0]}])
    assert runs.ranking(f"committed:{tmp_path / 'a'}", test).ids == [["e2"], ["e1"]]
    with pytest.raises(SystemExit, match="no ranking for 1 test inputs"):
        runs.ranking(f"committed:{tmp_path / 'a'}", [*test, Example("t3", "x3", "y3")])


def test_the_recommended_rung_is_the_cheapest_within_noise_of_the_best_under_holm(ladder):
    rungs = {"a": {"em": 39.3, "lm_calls": 61850, "cpu_hours_to_index": 2.3, "vs_best_p_holm": 0.001},
             "d": {"em": 45.0, "lm_calls": 61850, "cpu_hours_to_index": 3.1, "vs_best_p_holm": 0.4},
             "e": {"em": 46.0, "lm_calls": 87901, "cpu_hours_to_index": 4.0, "vs_best_p_holm": 0.9},
             "f": {"em": 46.4, "lm_calls": 95301, "cpu_hours_to_index": None}}
    assert ladder.recommended(rungs) == "d"
    rungs["d"]["vs_best_p_holm"] = 0.01  # now significantly below the best: the next cheapest that is not
    assert ladder.recommended(rungs) == "e"


def test_a_synthetic_ladder_keeps_a_rung_that_only_the_uncorrected_test_drops(ladder, tmp_path, monkeypatch):
    """Four rungs against the best (f) on the same 400 inputs: the cheap rung d is below f at p < 0.05 alone (4
    inputs only d solves, 14 only f) but not once the family of four comparisons is Holm-corrected, so the rule
    picks d, not the dearer e or f; a and b stay below f either way."""
    solved = {"a": range(100), "b": range(120), "d": [*range(166), *range(380, 384)],
              "e": [*range(177), *range(383, 385)], "f": range(180)}
    for name, ids in solved.items():
        ids = set(ids)
        _write(tmp_path / name / "eval" / "predictions.jsonl", [{"id": f"t{i}", "correct": i in ids} for i in range(400)])
        (tmp_path / name / "eval" / "summary.json").write_text(json.dumps(
            {"n": 400, "metrics": {"em": len(ids) / 4}, "machine": {"cpu": "Some CPU"}}))
    calls = {"a": 61850, "b": 61850, "d": 61850, "e": 87901, "f": 95301}
    monkeypatch.setattr(ladder, "_cost", lambda name, results: {"lm_calls": calls[name], "cpu_hours_to_index": 1.0})
    rungs = ladder.assemble(tmp_path, list(solved))["rungs"]
    assert "vs_best_p" not in rungs["f"]
    assert rungs["d"]["vs_best_p"] < 0.05 <= rungs["d"]["vs_best_p_holm"]
    assert rungs["a"]["vs_best_p_holm"] < 0.05 and rungs["b"]["vs_best_p_holm"] < 0.05
    assert ladder.recommended(rungs) == "d"
    uncorrected = {name: {**row, "vs_best_p_holm": row.get("vs_best_p", 1.0)} for name, row in rungs.items()}
    assert ladder.recommended(uncorrected) == "e"  # what the rule picked before the correction


def test_evaluations_from_two_machines_are_not_paired(ladder, tmp_path):
    from taskret.models import machine_info

    here = {**machine_info(), "dtype": "float32"}
    for name, machine in (("a", here), ("b", {**here, "cpu": "Another CPU"})):
        _write(tmp_path / name / "eval" / "predictions.jsonl", [{"id": "t1", "correct": True}])
        (tmp_path / name / "eval" / "summary.json").write_text(json.dumps(
            {"n": 1, "metrics": {"em": 100.0}, "machine": machine}))
    with pytest.raises(SystemExit, match="another machine"):
        ladder.assemble(tmp_path, ["a", "b"])


def test_evaluations_from_one_other_machine_pair_and_each_rung_meets_the_best(ladder, tmp_path):
    """Read side by side, evaluations need one machine among themselves, not this one (a committed set read
    elsewhere); every rung but the best gets its p against the best, which the recommendation reads."""
    elsewhere = {"cpu": "Another CPU", "cpu_flags": ["avx512_bf16"], "cores": 16, "dtype": "bfloat16"}
    for name, correct in (("a", [True, False, False, False]), ("b", [True, True, True, False])):
        _write(tmp_path / name / "eval" / "predictions.jsonl",
               [{"id": f"t{n}", "correct": c} for n, c in enumerate(correct)])
        (tmp_path / name / "eval" / "summary.json").write_text(json.dumps(
            {"n": 4, "metrics": {"em": 100.0 * sum(correct) / 4}, "machine": elsewhere}))
    table = ladder.assemble(tmp_path, ["a", "b"])
    assert table["machine"] == elsewhere
    assert "vs_best_p" in table["rungs"]["a"] and "vs_best_p" not in table["rungs"]["b"]
    assert 0 < table["rungs"]["a"]["vs_best_p"] <= 1


def test_a_rung_that_skipped_a_stage_another_rung_ran_counts_that_rungs_time(ladder, tmp_path, monkeypatch):
    """Rung e trains only UDR's second round (its first is d's, to the setting): its hours count d's training, and
    its round-2 mining as two of its index stages; its LM calls are every distinct pair of its score files."""
    scores = [tmp_path / "round1.jsonl", tmp_path / "round2.jsonl"]
    _write(scores[0], [{"id": "q1", "candidates": [{"id": "c1"}, {"id": "c2"}]}])
    _write(scores[1], [{"id": "q1", "candidates": [{"id": "c2"}, {"id": "c3"}]}])  # c2 scored again, counted once
    monkeypatch.setitem(ladder.RUNGS, "d", ("d", "index:d", scores[:1], tmp_path / "work_d"))
    monkeypatch.setitem(ladder.RUNGS, "e", ("e", "index:e", scores, tmp_path / "work_e"))
    _write(tmp_path / "d" / "stage_times.jsonl", [{"stage": "training", "wall_s": 2000.0},
                                                  {"stage": "index", "wall_s": 10.0}])
    _write(tmp_path / "e" / "stage_times.jsonl", [{"stage": "round 2 training", "wall_s": 1000.0},
                                                  {"stage": "index", "wall_s": 12.0}])
    cost = ladder._cost("e", tmp_path)
    assert cost["lm_calls"] == 3
    assert cost["stages_wall_s"] == {"round 2 training": 1000.0, "index": 12.0, "training": 2000.0,
                                     "round 2 candidates": 24.0}
    assert cost["cpu_hours_to_index"] == round((3 / ladder.SCORING_PAIRS_PER_S + 3036.0) / 3600, 2)
    assert ladder._cost("d", tmp_path)["stages_wall_s"] == {"training": 2000.0, "index": 10.0}


def test_a_rung_whose_round_1_was_an_earlier_run_of_ds_config_counts_that_runs_training(ladder, tmp_path,
                                                                                        monkeypatch):
    """e's round 1 is the ladder's first d; once d's row comes from another run of its config (end to end, on
    another machine), e keeps counting the training it started from, which it holds in ``e/round1/``."""
    scores = tmp_path / "round1.jsonl"
    _write(scores, [{"id": "q1", "candidates": [{"id": "c1"}]}])
    monkeypatch.setitem(ladder.RUNGS, "d", ("d", "index:d", [scores], tmp_path / "work_d"))
    monkeypatch.setitem(ladder.RUNGS, "e", ("e", "index:e", [scores], tmp_path / "work_e"))
    _write(tmp_path / "d" / "stage_times.jsonl", [{"stage": "training", "wall_s": 1500.0}])  # today's d
    _write(tmp_path / "e" / "stage_times.jsonl", [{"stage": "round 2 training", "wall_s": 1000.0}])
    assert ladder._cost("e", tmp_path)["stages_wall_s"]["training"] == 1500.0
    _write(tmp_path / "e" / "round1" / "stage_times.jsonl", [{"stage": "training", "wall_s": 2000.0}])
    assert ladder._cost("e", tmp_path)["stages_wall_s"]["training"] == 2000.0


def test_an_end_to_end_rung_names_the_machine_its_hours_were_measured_on(ladder, tmp_path, monkeypatch):
    """A rung run from its own config measures its LM scoring; its row records where (the scoring's machine and the
    LM's precision), and the ladder's table says so in the cell, beside rows whose scoring is modelled."""
    from renderers import epr_beyond

    work = tmp_path / "e2e_d"
    _write(work / "scoring" / "scores.jsonl", [{"id": "q1", "candidates": [{"id": "c1"}, {"id": "c2"}]}])
    _write(work / "scoring" / "scoring_times.jsonl", [{"wall_s": 3600.0}])
    (work / "scoring" / "scoring_meta.json").write_text(json.dumps(
        {"dtype": "bfloat16", "machine": {"cpu": "Some EPYC", "cpu_flags": ["avx2", "avx512_bf16"]}}))
    _write(work / "stage_times.jsonl", [{"stage": "training", "wall_s": 1800.0}, {"stage": "index", "wall_s": 0.0}])
    monkeypatch.setitem(ladder.RUNGS, "d", ("d", f"index:{work}", [work / "scoring" / "scores.jsonl"], work))
    cost = ladder._cost("d", tmp_path)
    assert cost["end_to_end"] is True and cost["cpu_hours_to_index"] == 1.5
    assert cost["built_on"]["dtype"] == "bfloat16" and cost["built_on"]["cpu"] == "Some EPYC"
    row = {"adds": "d", "em": 44.0, "n": 2, "lm_calls": 2, **cost}
    monkeypatch.setattr(epr_beyond, "load", lambda name: {"command": "c", "machine": {"cpu": "Some EPYC"}, "mtop": {
        "n": 2, "recommended": "d", "rungs": {"d": row}}} if name == "epr_ladder.json" else None)
    assert "1.5, measured end to end on Some EPYC AVX512-BF16, LM scoring in bfloat16 |" in epr_beyond.epr_ladder_table()[-1]
    row.update(end_to_end=False, stages_run_by={"training": "d"})  # g: its round 1 is d's run
    assert ("1.5, measured on Some EPYC AVX512-BF16, LM scoring in bfloat16; its round-1 training is rung d's run |"
            in epr_beyond.epr_ladder_table()[-1])


def test_a_round_labelled_without_the_lm_counts_its_reward_model_and_a_budgeted_one_its_choice(ladder, tmp_path,
                                                                                                  monkeypatch):
    """g's round 2 is labelled by its reward model: the labeller's training and the whole labels stage count, and
    no LM call is added. h's round 2 is LM-scored: its measured scoring counts once, and its labels stage only for
    what it took beyond that (choosing the inputs within the budget). Both count d's round-1 training."""
    round1 = tmp_path / "g" / "scoring" / "scores.jsonl"
    _write(round1, [{"id": "q1", "candidates": [{"id": "c1"}, {"id": "c2"}]}])
    _write(round1.parent / "scoring_times.jsonl", [{"wall_s": 7000.0}, {"wall_s": 200.0}])  # two sessions
    h_rounds = [tmp_path / "h" / "scoring" / "scores.jsonl", tmp_path / "h" / "round2" / "scoring" / "scores.jsonl"]
    _write(h_rounds[0], [{"id": "q1", "candidates": [{"id": "c1"}, {"id": "c2"}]}])
    _write(h_rounds[0].parent / "scoring_times.jsonl", [{"wall_s": 7200.0}])
    _write(h_rounds[1], [{"id": "q1", "candidates": [{"id": "c3"}]}])
    _write(h_rounds[1].parent / "scoring_times.jsonl", [{"wall_s": 450.0}])
    monkeypatch.setitem(ladder.RUNGS, "d", ("d", "index:d", [round1], tmp_path / "work_d"))
    monkeypatch.setitem(ladder.RUNGS, "g", ("g", "index:g", [round1], tmp_path / "g"))
    monkeypatch.setitem(ladder.RUNGS, "h", ("h", "index:h", h_rounds, tmp_path / "h"))
    _write(tmp_path / "d" / "stage_times.jsonl", [{"stage": "training", "wall_s": 2000.0}])
    _write(tmp_path / "g" / "stage_times.jsonl", [  # the labeller trains inside round 2's labels (300 s of its 420)
        {"stage": "labels", "wall_s": 7230.0}, {"stage": "round labeller", "wall_s": 300.0},
        {"stage": "round 2 labels", "wall_s": 420.0}, {"stage": "round 2 training", "wall_s": 1000.0}])
    _write(tmp_path / "h" / "stage_times.jsonl", [
        {"stage": "labels", "wall_s": 7000.0},  # resumed: the last session's part only, under the scoring's sum
        {"stage": "round 2 labels", "wall_s": 500.0}, {"stage": "round 2 training", "wall_s": 900.0}])
    g = ladder._cost("g", tmp_path)
    assert g["lm_calls"] == 2 and g["scoring_s"] == {"1": 7200.0}
    assert g["stages_wall_s"] == {"round labeller": 300.0, "labels beyond LM scoring": 30.0,
                                  "round 2 labels beyond LM scoring": 120.0, "round 2 training": 1000.0,
                                  "training": 2000.0}
    assert g["end_to_end"] is False  # its round 1 is d's
    # every round's LM scoring measured: its hours are measured too, and say whose run the borrowed stage was
    assert g["cpu_hours_to_index"] == round((7200.0 + 3450.0) / 3600, 2) and g["stages_run_by"] == {"training": "d"}
    assert "scoring_modelled_pairs_per_s" not in g
    h = ladder._cost("h", tmp_path)
    assert h["lm_calls"] == 3 and h["scoring_s"] == {"1": 7200.0, "2": 450.0}
    assert h["stages_wall_s"] == {"labels beyond LM scoring": 0.0, "round 2 labels beyond LM scoring": 50.0,
                                  "round 2 training": 900.0, "training": 2000.0}


def test_g_and_h_are_paired_with_e_whose_round_2_they_replace_and_with_d(ladder, tmp_path, monkeypatch):
    monkeypatch.setattr(ladder, "_cost", lambda name, results: {"lm_calls": 1, "cpu_hours_to_index": 1.0})
    verdicts = {"a": [False] * 6, "d": [True, True, False, False, False, False],
                "e": [True, True, True, False, False, False], "g": [True, True, True, True, False, False]}
    _evaluations(tmp_path, verdicts)
    rows = ladder.assemble(tmp_path, ["a", "d", "e", "g"])["rungs"]
    assert (rows["g"]["vs_prev"]["only_method"], rows["g"]["vs_prev"]["only_prev"]) == (1, 0)  # against e
    assert (rows["g"]["vs_d"]["only_method"], rows["g"]["vs_d"]["only_d"]) == (2, 0)
    assert "vs_d" not in rows["e"]


def _rung(em: float, calls: int, **extra) -> dict:
    return {"em": em, "n": 859, "lm_calls": calls, "cpu_hours_to_index": calls / 20000,
            "vs_epr": {"p": 0.0004}, **extra}


def test_the_readme_names_the_ladders_pick_as_the_recipe(monkeypatch):
    setups = import_script("benchmarks", "renderers.setups")
    ladder = {"machine": {"cpu": "Some CPU"}, "mtop": {"recommended": "e", "rungs": {
        "a": _rung(39.3, 61850, vs_best_p=0.0001, vs_best_p_holm=0.0002),
        "e": _rung(46.1, 87901, vs_best_p=0.71, vs_best_p_holm=0.71), "f": _rung(46.6, 95301)}}}
    files: dict = {}
    monkeypatch.setattr(setups, "load", files.get)
    assert setups._recipe_row() == []  # no ladder, no recommended recipe
    files["epr_ladder.json"] = ladder
    row = setups._recipe_row()[0]
    assert "over 2 mining rounds (`benchmarks/epr/configs/epr_ladder/e.json`)" in row
    assert "46.1 on all 859 inputs (plain EPR 39.3, p<0.001; the best rung" in row and "46.6, p=0.71" in row
    assert "46.6, p=0.71, Holm p=0.71)" in row
    # the ladder's machine, not the block's; hours that model the LM scoring say so in the cell
    assert "87,901 LM-scored pairs, 4.4 h on 2 cores (Some CPU; LM scoring modelled, not measured)" in row
    ladder["mtop"]["rungs"]["e"]["end_to_end"] = True  # measured: on the machine that built it, not the ladder's
    ladder["mtop"]["rungs"]["e"]["built_on"] = {"cpu": "Build CPU", "cpu_flags": ["avx2"], "dtype": "float32"}
    assert "4.4 h on 2 cores (measured end to end on Build CPU AVX2, LM scoring in float32) |" in setups._recipe_row()[0]
    # the pick's next lever, paired with it, and what it costs in LM calls
    ladder["mtop"]["recommended"] = "d"
    ladder["mtop"]["rungs"]["d"] = _rung(45.4, 61850, vs_best_p=0.7, vs_best_p_holm=0.9)
    ladder["mtop"]["rungs"]["e"]["vs_prev"] = {"only_method": 36, "only_prev": 33, "p": 0.81, "rung": "d"}
    assert ("UDR's listwise loss over 2 mining rounds: +0.7 EM, p=0.81, for 42% more LM calls)"
            in setups._recipe_row()[0])
    for rung, (_what, config) in setups.LADDER_RECIPES.items():  # every rung the ladder may pick has a config to run
        assert (Path(__file__).resolve().parents[2] / config).exists(), (rung, config)


def test_a_rung_is_paired_with_the_rung_it_adds_its_lever_to(ladder, tmp_path):
    """c branches off b; d adds the listwise loss to b, so d is paired with b, not with c listed before it."""
    verdicts = {"a": [True, False, False, False, False, False], "b": [True, True, False, False, False, False],
                "c": [False, False, False, False, False, False], "d": [True, True, True, True, False, False]}
    _evaluations(tmp_path, verdicts)
    rungs = ladder.assemble(tmp_path, list(verdicts))["rungs"]
    assert (rungs["d"]["vs_prev"]["only_method"], rungs["d"]["vs_prev"]["only_prev"]) == (2, 0)  # against b
    assert (rungs["c"]["vs_prev"]["only_method"], rungs["c"]["vs_prev"]["only_prev"]) == (0, 2)  # against b


def test_the_ladders_table_shows_g_against_e_and_against_d(ladder, tmp_path, monkeypatch):
    renderer = import_script("benchmarks", "renderers.epr_beyond")
    verdict = {"only_method": 2, "p": 0.5, "diff_ci95": [-1.0, 3.0]}
    rungs = {"a": _rung(39.3, 61850), "g": _rung(44.0, 61850, adds="+ reward-labelled round 2",
                                                  vs_prev={**verdict, "only_prev": 1}, vs_d={**verdict, "only_d": 0},
                                                  vs_best_p=0.2, vs_best_p_holm=0.4)}
    rungs["a"]["adds"] = "plain EPR"
    monkeypatch.setattr(renderer, "load", lambda name: {"command": "python benchmarks/epr/epr_ladder.py",
                                                        "machine": {"cpu": "Some CPU", "cores": 2},
                                                        "mtop": {"n": 859, "recommended": "g", "rungs": rungs}}
                        if name == "epr_ladder.json" else None)
    row = next(line for line in renderer.epr_ladder_table() if line.startswith("| g |"))
    assert "| 2 / 1, p=0.500, [-1.0, +3.0]; against d: 2 / 0, p=0.500, [-1.0, +3.0] |" in row and "**44.0**" in row


def test_g_starts_from_ds_round_1_copied_where_it_lacks_it_and_not_from_an_unfinished_one(ladder, tmp_path,
                                                                                          monkeypatch):
    d, g = tmp_path / "d", tmp_path / "g"
    monkeypatch.setitem(ladder.RUNGS, "g", ("g", f"index:{g}", [], g))
    with pytest.raises(SystemExit, match="no finished round 1"):
        ladder.seed_round1("g", d)
    _write(d / "candidates.jsonl", [{"id": "q1", "candidates": ["c1"]}])
    _write(d / "labels.jsonl", [{"id": "q1"}])
    _write(d / "scoring" / "scores.jsonl", [{"id": "q1", "candidates": []}])
    _write(d / "scoring" / "scoring_times.jsonl", [{"wall_s": 10.0}])
    (d / "retriever" / "model").mkdir(parents=True)
    (d / "retriever" / "model" / "weights").write_text("w")
    _write(g / "candidates.jsonl", [{"id": "mine"}])  # g's own part is kept
    assert ladder.seed_round1("g", d) == ["labels.jsonl", "scoring", "retriever"]
    assert (g / "candidates.jsonl").read_text() == '{"id": "mine"}\n'
    assert (g / "scoring" / "scoring_times.jsonl").exists() and (g / "retriever" / "model" / "weights").read_text() == "w"
    assert ladder.seed_round1("g", d) == []  # a second call copies nothing


def test_an_end_to_end_rung_takes_its_own_runs_evaluation_only_where_it_is_the_ladders(ladder, tmp_path, monkeypatch):
    """``taskret epr run`` of d's config, run to the end, evaluated d on every test input: the ladder takes that
    evaluation (d's row is then one run, candidates to exact match) only where it was made on this machine, with the
    ladder's prompt settings and the demonstrations d's rankings file holds; otherwise the ladder evaluates d."""
    from types import SimpleNamespace

    from taskret.backends.base import engine_of, generation_spec
    from taskret.icl.evaluation import machine_info
    from taskret.models import dtype_name

    e2e, results = tmp_path / "e2e", tmp_path / "ladder"
    monkeypatch.setattr(ladder, "E2E", e2e)
    monkeypatch.setitem(ladder.RUNGS, "d", ("d", f"index:{e2e / 'd'}", [], e2e / "d"))
    test = [Example("t1", "x1", "y1"), Example("t2", "x2", "y2")]
    args = SimpleNamespace(lm="smollm2-135m", context_window=640, max_new_tokens=128)
    here = {**machine_info(), "dtype": dtype_name("auto"), "engine": engine_of(generation_spec(args.lm))}
    _write(results / "d" / "rankings.jsonl", [{"id": "t1", "ids": ["e1", "e2", "e3"]}, {"id": "t2", "ids": ["e2"]}])
    _write(e2e / "d" / "eval" / "predictions.jsonl", [{"id": "t1", "retrieved_ids": ["e1", "e2"], "correct": True},
                                                      {"id": "t2", "retrieved_ids": ["e2"], "correct": False}])
    summary = {"n": 2, "context_window": 640, "max_new_tokens": 128, "machine": here}
    (e2e / "d" / "eval" / "summary.json").write_text(json.dumps(summary))
    assert ladder.own_evaluation("d", test, results, args) == e2e / "d" / "eval"
    assert ladder.own_evaluation("d", test[:1], results, args) is None  # a sample, not every test input
    assert ladder.own_evaluation("d", test, results, SimpleNamespace(**{**vars(args), "max_new_tokens": 64})) is None
    (e2e / "d" / "eval" / "summary.json").write_text(json.dumps({**summary, "machine": {**here, "cpu": "Other"}}))
    assert ladder.own_evaluation("d", test, results, args) is None
    (e2e / "d" / "eval" / "summary.json").write_text(json.dumps(summary))
    _write(results / "d" / "rankings.jsonl", [{"id": "t1", "ids": ["e2", "e1"]}, {"id": "t2", "ids": ["e2"]}])
    assert ladder.own_evaluation("d", test, results, args) is None  # other demonstrations than d's ranking
    assert ladder.own_evaluation("bm25", test, results, args) is None  # a reference has no run of its own


def _dpp(results: Path, correct: list[bool], machine: dict, on: str = "d") -> None:
    """The DPP's evaluation over rung ``on``'s top 50 and its tuning on training inputs, as ``--step dpp`` writes."""
    _write(results / "dpp" / "eval" / "predictions.jsonl", [{"id": f"t{n}", "correct": c} for n, c in enumerate(correct)])
    (results / "dpp" / "eval" / "summary.json").write_text(json.dumps(
        {"n": len(correct), "metrics": {"em": 100.0 * sum(correct) / len(correct)}, "machine": machine,
         "selection": {"method": "dpp", "weight": 0.9, "n_candidates": 50}}))
    (results / "dpp" / "tuning.json").write_text(json.dumps(
        {"on": on, "n": 100, "weights": [0.5, 0.9], "chosen": 0.9, "scores": {"0.5": 30.0, "0.9": 32.0},
         "wall_s": 60.0, "machine": machine}))


def test_the_dpp_row_is_paired_with_the_rung_it_selects_from_and_rendered_under_the_ladder(ladder, tmp_path,
                                                                                         monkeypatch):
    from renderers import epr_beyond

    machine = {"cpu": "Some CPU"}
    _evaluations(tmp_path, {"a": [False, False, True, False], "d": [True, False, True, False]})
    _dpp(tmp_path, [True, True, True, False], machine)
    monkeypatch.setattr(ladder, "_cost", lambda name, results: {"lm_calls": 10, "cpu_hours_to_index": 1.0})
    table = ladder.assemble(tmp_path, ["a", "d"])
    dpp = table["dpp"]
    assert dpp["on"] == "d" and dpp["em"] == 75.0 and dpp["vs_d"]["only_method"] == 1 and dpp["vs_d"]["only_d"] == 0
    assert dpp["lm_calls_to_tune"] == 200 and dpp["tuning"]["chosen"] == 0.9
    result = {"command": "c", "machine": machine, "mtop": {"n": 4, "recommended": "d", "rungs": table["rungs"],
                                                           "dpp": dpp}}
    monkeypatch.setattr(epr_beyond, "load", lambda name: result if name == "epr_ladder.json" else None)
    line = epr_beyond.epr_ladder_table()[-1]
    assert line.startswith("CEIL's DPP over d's top 50 at inference (trade-off 0.9 chosen among 0.5, 0.9 on 100 held-out")
    assert "75.0 EM against d's 50.0; only it / only d: 1 / 0" in line
    # one discordance is no evidence; the chosen weight is the grid's largest, and the line says what that means
    assert "Within noise of d alone. The tuning chose the largest relevance weight offered" in line
    _dpp(tmp_path, [True, True, True, False], {"cpu": "Another CPU"})  # not on the ladder's machine: not paired
    with pytest.raises(SystemExit, match="dpp: evaluated on another machine"):
        ladder.assemble(tmp_path, ["a", "d"])


def test_the_dpp_step_needs_the_rungs_retriever_on_this_machine(ladder, tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setitem(ladder.RUNGS, "d", ("d", f"index:{tmp_path / 'e2e_d'}", [], tmp_path / "e2e_d"))
    args = SimpleNamespace(lm="smollm2-135m", seed=0)
    with pytest.raises(SystemExit, match="rung d's retriever is not on this machine"):
        ladder.dpp_evaluation(None, [], tmp_path, "d", args)
    ladder.dpp_evaluation(None, [], tmp_path, "d", args, required=False)  # a step of --step all: skipped
    assert not (tmp_path / "dpp").exists()


def test_the_ladder_says_what_its_n_detects_and_which_steps_fall_below_it(ladder, tmp_path, monkeypatch):
    """The detectable differences come from the paired tests in the result, not typed into the page."""
    from renderers import epr_beyond

    _evaluations(tmp_path, {"a": [True] * 10 + [False] * 30, "b": [True] * 20 + [False] * 20,
                            "d": [True] * 17 + [False] * 13 + [True] * 2 + [False] * 8})
    monkeypatch.setattr(ladder, "_cost", lambda name, results: {"lm_calls": 10, "cpu_hours_to_index": 1.0})
    rungs = ladder.assemble(tmp_path, ["a", "b", "d"])["rungs"]
    assert rungs["d"]["vs_prev"]["rung"] == "b" and rungs["d"]["vs_prev"]["min_detectable_diff"] > 5
    result = {"command": "c", "machine": {"cpu": "Some CPU"}, "mtop": {"n": 40, "recommended": "b", "rungs": rungs}}
    monkeypatch.setattr(epr_beyond, "load", lambda name: result if name == "epr_ladder.json" else None)
    line = epr_beyond.epr_ladder_table()[-1]
    assert line.startswith("At N=40 the smallest difference these discordances detect at 80% power is ")
    assert line.endswith("; d's -2.50 against b are below it and within noise (p >= 0.05).")  # b's +25 over a is not


def test_the_ladders_answer_is_written_from_the_result_and_says_whether_the_target_is_met(monkeypatch):
    from renderers import epr_beyond

    def rung(adds, em, calls, share, prev=None, **extra):
        return {"adds": adds, "em": em, "n": 859, "lm_calls": calls, "share_of_gap": share, **extra,
                **({"vs_prev": {"only_method": 30, f"only_{prev}": 20, "p": 0.2, "rung": prev}} if prev else {})}

    rungs = {"a": rung("plain EPR", 39.3, 61850, 0.45, vs_best_p=0.0001, vs_best_p_holm=0.0002),
             "d": rung("+ UDR's listwise loss, one round", 45.4, 61850, 0.64, "a", vs_best_p=0.37, vs_best_p_holm=0.74,
                       end_to_end=True, cpu_hours_to_index=2.03, scoring_s={"1": 4500.0},
                       built_on={"cpu": "Some EPYC", "cpu_flags": ["avx512_bf16"], "dtype": "bfloat16"}),
             "f": rung("full UDR", 46.4, 95301, 0.68, "d", vs_epr={"only_method": 98, "only_epr": 37, "p": 0.0001})}
    result = {"command": "c", "machine": {"cpu": "Some EPYC", "cores": 2, "cpu_flags": ["avx512_bf16"],
                                          "dtype": "bfloat16"},
              "mtop": {"n": 859, "bm25": 24.7, "lm_oracle": 56.9, "recommended": "d", "rungs": rungs}}
    monkeypatch.setattr(epr_beyond, "load", lambda name: result if name == "epr_ladder.json" else None)
    answer = epr_beyond.epr_ladder_answer()[0]
    assert "(Some EPYC, 2 cores, Python ?, AVX512-BF16, LM in bfloat16)" in answer
    assert "the best rung, f (full UDR), gets 46.4 EM against plain EPR's 39.3 (98 / 37, p<0.001)" in answer
    assert "d (UDR's listwise loss, one round) +6.1 (30 / 20, p=0.200)" in answer
    assert "**Recommended: rung d**" in answer and "45.4 EM against f's 46.4 (p=0.370, Holm p=0.740), 64% of" in answer
    assert "2.03 h from BM25 candidates to its index, measured in one run of its config on Some EPYC" in answer
    assert ("**The target is not met**: the best rung at <= 1.1x plain EPR's LM calls (d, 1.00x) reaches 64.0% of the "
            "gap against the 66% asked, within noise of the best (Holm p=0.740)") in answer
    assert answer.endswith("the best rung of all (f) reaches 68%, 12 points short of the project's 80% goal.")
    rungs["d"]["share_of_gap"] = 0.66
    assert "**The target is met**" in epr_beyond.epr_ladder_answer()[0]


def test_g_and_h_rows_carry_how_their_round_2_was_labelled_and_the_table_says_it(ladder, tmp_path, monkeypatch):
    """g's reward model against the LM on held-out round-1 inputs (issue 77 asks for its Spearman and top-5 overlap)
    and its map's fit, h's budget, as their work folders record them, go into their rows and under the table."""
    from renderers import epr_beyond

    g, h = tmp_path / "work_g", tmp_path / "work_h"
    (g / "round_labeller").mkdir(parents=True)
    (g / "round_labeller" / "agreement.json").write_text(json.dumps(
        {"what": "...", "spearman": 0.4123, "top5_overlap": 0.38, "n_inputs": 124}))
    (g / "round2" / "reward_labels").mkdir(parents=True)
    (g / "round2" / "reward_labels" / "fit.json").write_text(json.dumps(
        {"slope": 0.5, "inputs": 1237, "pairs_labelled": 26000, "pairs_fitted_on": 30000, "r2_within_inputs": 0.21}))
    (h / "round2").mkdir(parents=True)
    (h / "round2" / "budget.json").write_text(json.dumps(
        {"round_budget": 0.1, "round1_pairs": 61850, "earlier_rounds_pairs": 0, "budget_pairs": 6185, "pairs": 6170,
         "inputs": ["q1", "q2"], "inputs_with_new_pairs": 1200, "spearman_of_chosen": {"q1": -0.2, "q2": -0.1}}))
    monkeypatch.setitem(ladder.RUNGS, "g", ("g", "index:g", [], g))
    monkeypatch.setitem(ladder.RUNGS, "h", ("h", "index:h", [], h))
    monkeypatch.setattr(ladder, "_cost", lambda name, results: {"lm_calls": 1, "cpu_hours_to_index": 1.0})
    _evaluations(tmp_path, {"d": [True, False], "e": [True, True], "g": [False, True], "h": [True, True]})
    rows = ladder.assemble(tmp_path, ["d", "e", "g", "h"])["rungs"]
    assert rows["g"]["labeller_agreement"] == {"spearman": 0.4123, "top5_overlap": 0.38, "n_inputs": 124}
    assert rows["g"]["labeller_fit"]["pairs_labelled"] == 26000 and "round2_budget" not in rows["g"]
    assert rows["h"]["round2_budget"] == {"round_budget": 0.1, "budget_pairs": 6185, "pairs": 6170, "inputs": 2,
                                          "inputs_with_new_pairs": 1200}
    assert "labeller_agreement" not in rows["d"]
    result = {"command": "c", "machine": {"cpu": "Some CPU"}, "mtop": {"n": 2, "recommended": "d", "rungs": rows}}
    monkeypatch.setattr(epr_beyond, "load", lambda name: result if name == "epr_ladder.json" else None)
    text = "\n".join(epr_beyond.epr_ladder_table())
    assert ("Rung g's reward model against the LM on 124 round-1 inputs it held out of training: Spearman 0.41, 38% "
            "of the LM's top 5 in its top 5; its 26,000 round-2 labels") in text
    assert "Rung h's round 2 (budget 0.1 of round 1's pairs): 6,170 new pairs LM-scored of 6,185 allowed, on 2 of" in text
