"""The recipe-beyond-MTOP benchmark's bookkeeping (benchmarks/epr/epr_tasks.py): each task paired by its own metric
(Break's LF-EM verdicts with McNemar, nl2bash's sentence chrF with Wilcoxon), the share of the BM25 -> LM-Oracle gap,
the held-out rows, each task's methods on one machine (tasks may differ), the recipe reusing plain EPR's scores, and
the page's table."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from taskret.data import Example
from taskret.retrieval import RetrievalResult

from ..conftest import write_jsonl_rows as _write
from . import import_script

MACHINE = {"cpu": "Some CPU", "cpu_flags": ["avx2"], "torch": "2.13.0+cpu", "transformers": "5.0", "dtype": "float32"}


@pytest.fixture(scope="module")
def tasks():
    return import_script("benchmarks/epr", "epr_tasks")


def _evaluation(folder: Path, rows: list[dict], metrics: dict, machine: dict = MACHINE) -> None:
    _write(folder / "predictions.jsonl", rows)
    (folder / "summary.json").write_text(json.dumps({"n": len(rows), "metrics": metrics, "machine": machine}))


def _break_method(folder: Path, lf_em: list[bool], machine: dict = MACHINE) -> None:
    """A Break evaluation whose exact match is wrong everywhere (its strings differ) but LF-EM is ``lf_em``."""
    rows = [{"id": f"q{n}", "correct": False, "lf_em": v, "normalized_match": v} for n, v in enumerate(lf_em)]
    score = 100.0 * sum(lf_em) / len(lf_em)
    _evaluation(folder / "eval", rows, {"em": 0.0, "lf_em": score, "normalized_match": score}, machine)


def _nl2bash_method(folder: Path, chrf: list[float]) -> None:
    rows = [{"id": f"c{n}", "correct": False, "chrf": v} for n, v in enumerate(chrf)]
    _evaluation(folder / "eval", rows, {"em": 0.0, "chrf": sum(chrf) / len(chrf)})


def _break_results(results: Path) -> None:
    n = 40
    for method, solved in (("bm25", range(0, 10)), ("epr", range(0, 14)), ("recipe", range(4, 24)),
                           ("lm_oracle", range(0, 30))):
        _break_method(results / "break" / method, [i in solved for i in range(n)])


def test_break_is_paired_by_lf_em_with_mcnemar_and_its_gap_share(tasks, tmp_path):
    _break_results(tmp_path)
    section = tasks.assemble_task("break", tmp_path)
    methods = section["methods"]
    assert section["metric"] == "lf_em" and section["n"] == 40
    assert [methods[m]["score"] for m in ("bm25", "epr", "recipe", "lm_oracle")] == [25.0, 35.0, 50.0, 75.0]
    assert methods["recipe"]["metrics"]["em"] == 0.0  # exact match says nothing here: LF-EM is what is paired
    recipe = methods["recipe"]
    assert (recipe["vs_bm25"]["only_method"], recipe["vs_bm25"]["only_other"]) == (14, 4)
    assert (recipe["vs_epr"]["only_method"], recipe["vs_epr"]["only_other"]) == (10, 4)
    low, high = recipe["vs_bm25"]["diff_ci95"]
    assert low < 25.0 < high and 0 < recipe["vs_bm25"]["p"] < 0.05
    assert section["min_detectable_diff"]["recipe_vs_bm25"] == recipe["vs_bm25"]["min_detectable_diff"] > 0
    assert "vs_bm25" not in methods["bm25"] and "vs_epr" not in methods["epr"] and "vs_epr" in methods["lm_oracle"]
    assert recipe["gap_share"] == section["gap_share"] == pytest.approx((50 - 25) / (75 - 25))
    assert methods["epr"]["gap_share"] == pytest.approx(0.2)
    assert methods["lm_oracle"]["cost"]["lm_calls"] == 50 * 40 and methods["bm25"]["cost"]["lm_calls"] == 0


def test_nl2bash_is_paired_by_sentence_chrf_with_wilcoxon_and_an_interval_in_points(tasks, tmp_path):
    base = [20.0 + (n % 7) for n in range(30)]
    _nl2bash_method(tmp_path / "nl2bash" / "bm25", base)
    _nl2bash_method(tmp_path / "nl2bash" / "epr", [v + (1.0 if n % 3 else -0.5) for n, v in enumerate(base)])
    _nl2bash_method(tmp_path / "nl2bash" / "recipe", [v + 5.0 + (n % 4) for n, v in enumerate(base)])
    section = tasks.assemble_task("nl2bash", tmp_path)
    recipe = section["methods"]["recipe"]
    assert section["metric"] == "chrf" and recipe["vs_bm25"]["higher_method"] == 30
    assert recipe["vs_bm25"]["p"] < 0.001
    low, high = recipe["vs_bm25"]["diff_ci95"]  # the mean difference is 6.5 chrF points, not 650
    assert 5.0 <= low < 6.5 < high <= 8.0
    assert 0 < recipe["vs_bm25"]["min_detectable_diff"] < 6.5
    assert section["gap_share"] is None  # no LM-Oracle yet: no gap to share


def test_evaluations_from_another_machine_or_on_other_inputs_are_not_paired(tasks, tmp_path):
    _break_results(tmp_path)
    _break_method(tmp_path / "break" / "epr", [True] * 40, machine={**MACHINE, "dtype": "bfloat16"})
    with pytest.raises(SystemExit, match="another machine"):
        tasks.assemble_task("break", tmp_path)
    _break_method(tmp_path / "break" / "epr", [True] * 39)
    with pytest.raises(SystemExit, match="other test inputs"):
        tasks.assemble_task("break", tmp_path)


def test_held_out_rows_pair_the_multitask_retriever_with_bm25_and_the_single_task_one(tasks, tmp_path):
    _break_results(tmp_path)
    _break_method(tmp_path / "held_out" / "break" / "multitask", [i < 12 for i in range(40)])
    for method, solved in (("multitask", 5), ("bm25", 3), ("single_task", 6)):  # MTOP: exact match
        rows = [{"id": f"m{n}", "correct": n < solved} for n in range(10)]
        _evaluation(tmp_path / "held_out" / "mtop" / method / "eval", rows, {"em": 10.0 * solved})
    (tmp_path / "held_out" / "mtop" / "multitask" / "tasks.json").write_text(json.dumps([{"task": "break"}]))
    table = tasks.assemble(tmp_path, ["break"], ["mtop", "break", "nl2bash"])
    held = table["held_out"]
    assert set(held) == {"mtop", "break"}  # nl2bash's evaluations are not there yet: no row
    assert (held["mtop"]["metric"], held["mtop"]["multitask"], held["mtop"]["bm25"]) == ("em", 50.0, 30.0)
    assert held["mtop"]["trained_on"] == [{"task": "break"}]
    # Break's BM25 and single-task (the recipe's) evaluations are the main section's
    assert (held["break"]["metric"], held["break"]["bm25"], held["break"]["single_task"]) == ("lf_em", 25.0, 50.0)
    assert held["break"]["p_vs_bm25"] == held["break"]["vs_bm25"]["p"]
    assert table["held_out_mean"]["multitask"] == pytest.approx((50.0 + 30.0) / 2)
    assert table["machine"] == MACHINE
    # where step 2 ran on another machine, BM25 and the recipe are evaluated again beside the multitask retriever,
    # in held_out/break/: the row reads those, and step 2's section keeps its own
    _break_method(tmp_path / "held_out" / "break" / "bm25", [i < 4 for i in range(40)])
    _break_method(tmp_path / "held_out" / "break" / "single_task", [i < 8 for i in range(40)])
    again = tasks.assemble(tmp_path, ["break"], ["break"])
    assert (again["held_out"]["break"]["bm25"], again["held_out"]["break"]["single_task"]) == (10.0, 20.0)
    assert again["break"]["methods"]["bm25"]["score"] == 25.0
    _evaluation(tmp_path / "held_out" / "mtop" / "bm25" / "eval", [{"id": f"m{n}", "correct": n < 3}
                                                                   for n in range(10)], {"em": 30.0},
                {**MACHINE, "cpu": "Another CPU"})
    with pytest.raises(SystemExit, match="another machine"):
        tasks.assemble(tmp_path, ["break"], ["mtop"])


def test_each_held_out_retriever_trains_on_mtop_and_the_other_labelled_tasks_only(tasks):
    labelled = ["trec", "geoquery", "nl2bash"]
    assert tasks.multitask_training_tasks("trec", labelled) == ["mtop", "geoquery", "nl2bash"]
    assert tasks.multitask_training_tasks("mtop", labelled) == labelled
    assert tasks.multitask_training_tasks("mtop", ["mtop", *labelled]) == labelled  # named twice: trained on once


def test_an_evaluation_made_here_is_kept_and_one_made_elsewhere_is_made_again(tasks, tmp_path, monkeypatch):
    from taskret.models import machine_info

    test = [Example("t1", "x1", "y1"), Example("t2", "x2", "y2")]
    out = tmp_path / "eval"
    here = {**machine_info(), "dtype": "float32"}
    monkeypatch.setattr("taskret.models.dtype_name", lambda dtype, device=None: "float32")
    made = []
    monkeypatch.setattr("taskret.icl.evaluation.evaluate", lambda *a, **k: made.append(k["retrieved"]))
    ranked = RetrievalResult.from_rows([["e1"], ["e2"]], [[1.0], [0.5]])
    args = Namespace(lm="tiny", context_window=64, max_new_tokens=8)
    _evaluation(out, [{"id": "t1", "correct": True}, {"id": "t2", "correct": False}], {"em": 50.0}, here)
    tasks.evaluate_method(None, test, out, "x/epr", lambda lm: (None, ranked), {"lm": "an LM"}, args)
    assert made == []
    _evaluation(out, [{"id": "t1", "correct": True}], {"em": 100.0}, here)  # another --limit's
    tasks.evaluate_method(None, test, out, "x/epr", lambda lm: (None, ranked), {"lm": "an LM"}, args)
    _evaluation(out, [{"id": "t1", "correct": True}, {"id": "t2", "correct": False}], {"em": 50.0},
                {**here, "cpu": "Another CPU"})
    tasks.evaluate_method(None, test, out, "x/epr", lambda lm: (None, ranked), {"lm": "an LM"}, args)
    assert made == [ranked, ranked]


def _config(path: Path, **changes) -> str:
    config = {"task": "demo", "work_dir": "unused", "max_train_examples": 4, "n_candidates": 4, "k": 1,
              "training": {"epochs": 1}, "baseline": None, **changes}
    path.write_text(json.dumps(config))
    return str(path)


def test_the_recipe_runs_on_plain_eprs_scores_and_its_new_rounds_are_kept(tasks, tmp_path, monkeypatch):
    results, work = tmp_path / "results", tmp_path / "work"
    args = Namespace(epr_config=_config(tmp_path / "plain.json"),
                     recipe=_config(tmp_path / "recipe.json", listwise={}, rounds=2))
    seen = {}

    def run(config, console):  # what taskret epr run leaves, minus the models
        folder = Path(config.work_dir)
        seen[folder.name] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        stages = ["training", "index"]
        if folder.name == "epr":
            stages = ["candidates", "labels", *stages]
            _write(folder / "candidates.jsonl", [{"id": "a", "candidates": []}])
            _write(folder / "labels.jsonl", [{"id": "a"}])
            _write(folder / "scoring" / "scores.jsonl", [{"id": "a", "candidates": [{"id": "b"}, {"id": "c"}]}])
            (folder / "scoring" / "scoring_meta.json").write_text("{}")
        else:
            stages = ["training", "round 2 candidates", "round 2 labels", "round 2 training", "index"]
            _write(folder / "round2" / "scoring" / "scores.jsonl", [{"id": "a", "candidates": [{"id": "c"}, {"id": "d"}]}])
            _write(folder / "stage_times_gpu.jsonl", [{"stage": "round 2 training"}])
        _write(folder / "stage_times.jsonl", [{"stage": s, "wall_s": 360.0} for s in stages])

    monkeypatch.setattr(tasks, "_run", run)
    monkeypatch.setattr(tasks, "ranking", lambda source, test: RetrievalResult.from_rows([["e1"]], [[0.5]]))
    tasks.train("demo", args, results, work, [Example("t1", "x1", "y1")])
    assert "scoring/scores.jsonl" not in seen["epr"]
    assert {"candidates.jsonl", "labels.jsonl", "scoring/scores.jsonl"} <= set(seen["recipe"])  # scored once
    for method in ("epr", "recipe"):
        assert json.loads((results / "demo" / method / "rankings.jsonl").read_text())["ids"] == ["e1"]
    assert (results / "demo" / "epr" / "scoring" / "scores.jsonl").exists()
    assert (results / "demo" / "recipe" / "round2" / "scoring" / "scores.jsonl").exists()
    assert not (results / "demo" / "recipe" / "scoring").exists()  # plain EPR's, not kept twice
    recipe = tasks.method_cost(results / "demo", "recipe", 1)
    assert recipe["lm_calls"] == 3  # a-b, a-c, and round 2's new a-d
    assert (recipe["cpu_hours"], recipe["gpu_minutes"]) == (0.4, 6.0)
    labels = tasks.labelling_cost(results / "demo" / "epr")
    assert (labels["lm_calls"], labels["labelled_inputs"], labels["cpu_hours"]) == (2, 1, 0.2)
    tasks.train("demo", args, results, work, [Example("t1", "x1", "y1")])  # both kept: nothing runs again
    assert len(seen) == 2
    args.recipe = _config(tmp_path / "recipe.json", listwise={}, rounds=3)  # another recipe: not in these results
    with pytest.raises(SystemExit, match="another config"):
        tasks.train("demo", args, results, work, [Example("t1", "x1", "y1")])
    args.recipe = _config(tmp_path / "recipe.json", n_candidates=8)  # its own scores: refused before anything runs
    with pytest.raises(SystemExit, match="n_candidates"):
        tasks.train("demo", args, results, work, [Example("t1", "x1", "y1")])


def test_tasks_evaluated_on_different_machines_each_name_their_own_and_are_paired_within_themselves(
        tasks, tmp_path, monkeypatch):
    """A long run moves between machines: each task's methods on one machine, the tasks on two."""
    _break_results(tmp_path)
    other = {**MACHINE, "cpu": "Another CPU", "cpu_flags": ["avx2", "avx512_bf16"], "dtype": "bfloat16"}
    for method, chrf in (("bm25", 20.0), ("epr", 24.0)):
        rows = [{"id": f"c{n}", "correct": False, "chrf": chrf + n % 3} for n in range(12)]
        _evaluation(tmp_path / "nl2bash" / method / "eval", rows, {"em": 0.0, "chrf": chrf + 1}, other)
    table = tasks.assemble(tmp_path, ["break", "nl2bash"], [])
    assert table["machine"] is None
    assert table["machines"] == {"break": MACHINE, "nl2bash": other}
    assert (table["break"]["machine"], table["nl2bash"]["machine"]) == (MACHINE, other)
    assert table["nl2bash"]["methods"]["epr"]["vs_bm25"]["higher_method"] == 12
    renderer = import_script("benchmarks", "renderers.epr_tasks")
    monkeypatch.setattr(renderer, "load", lambda name: {"command": "python benchmarks/epr/epr_tasks.py", **table})
    first = renderer.epr_tasks_table()[0]
    assert "break on Some CPU" in first and "AVX2" in first
    assert "nl2bash on Another CPU" in first and "AVX512-BF16, LM in bfloat16" in first
    # one machine for all: named once, as before
    assert tasks.assemble(tmp_path, ["break"], [])["machine"] == MACHINE


def test_the_page_renders_the_result_and_nothing_without_it(tasks, tmp_path, monkeypatch):
    renderer = import_script("benchmarks", "renderers.epr_tasks")
    monkeypatch.setattr(renderer, "load", lambda name: None)
    assert renderer.epr_tasks_table() == []
    _break_results(tmp_path)
    table = tasks.assemble(tmp_path, ["break"], [])
    result = {"command": "python benchmarks/epr/epr_tasks.py", **table}
    monkeypatch.setattr(renderer, "load", lambda name: result)
    lines = renderer.epr_tasks_table()
    recipe = next(line for line in lines if "| the recipe |" in line)
    assert "50.0 LF-EM" in recipe and "0.50" in recipe and "14 / 4" in recipe


def test_the_readme_puts_each_task_beside_bm25_and_plain_epr_in_one_row_with_its_command(monkeypatch):
    readme = import_script("benchmarks", "renderers.readme")

    def method(score, **paired):
        return {"score": score, "n": 500, **paired}

    paired = {"vs_bm25": {"only_method": 56, "only_other": 11, "p": 0.0, "diff_ci95": [5.8, 12.2]},
              "vs_epr": {"only_method": 12, "only_other": 8, "p": 0.5034, "diff_ci95": [-1.0, 2.6]}}
    tasks = {"command": "python benchmarks/epr/epr_tasks.py --tasks trec,geoquery", "machine": {"cpu": "Some CPU"},
             "trec": {"metric": "accuracy", "methods": {"bm25": method(87.0), "epr": method(95.2),
                                                         "recipe": method(96.0, **paired)}},
             "geoquery": {"metric": "em", "methods": {"bm25": method(30.0)}}}  # the recipe not evaluated yet
    files: dict = {}
    monkeypatch.setattr(readme, "load", files.get)
    assert readme.readme_table() == []  # nothing measured, no block
    files["epr_tasks.json"] = tasks
    table = readme.readme_table()
    row = next(line for line in table if "beyond MTOP" in line)
    assert ("TREC accuracy, 500 inputs: **96.0** (BM25 87.0, 56 / 11, p<0.001, [+5.8, +12.2]; plain EPR 95.2, p=0.50)"
            in row) and "GeoQuery" not in row and row.endswith("| [1] |")
    assert "1. `python benchmarks/epr/epr_tasks.py --tasks trec,geoquery`" in table


def test_a_labelling_resumed_across_sessions_costs_every_sessions_scoring(tasks, tmp_path):
    """The labels stage a resumed run records is only its last session's; the shards' own times add up to all of it."""
    folder = tmp_path / "epr"
    _write(folder / "stage_times.jsonl", [{"stage": "candidates", "wall_s": 2.0},
                                          {"stage": "labels", "wall_s": 1000.0},
                                          {"stage": "training", "wall_s": 600.0}])
    _write(folder / "scoring" / "scoring_times.jsonl",
           [{"shards": [0], "pairs": 10, "wall_s": 2600.0}, {"shards": [1], "pairs": 10, "wall_s": 1000.0}])
    cost = tasks.labelling_cost(folder)
    assert cost["stages_wall_s"] == {"candidates": 2.0, "labels": 3600.0}
    assert cost["cpu_hours"] == 1.0
    # scored in one go: the stage (which also merges the labels) is the larger and stands
    _write(folder / "scoring" / "scoring_times.jsonl", [{"shards": [0, 1], "pairs": 20, "wall_s": 990.0}])
    assert tasks.labelling_cost(folder)["stages_wall_s"]["labels"] == 1000.0


def test_a_training_resumed_from_an_earlier_sessions_checkpoint_costs_both_sessions(tasks, tmp_path):
    """The recipe's training stopped at a checkpoint in one session and finished in the next: its hours are both."""
    _write(tmp_path / "recipe" / "stage_times.jsonl", [
        {"stage": "training", "wall_s": 3000.0, "cpu_s": 5900.0, "made": "390 steps", "earlier_s": 600.0},
        {"stage": "index", "wall_s": 60.0, "cpu_s": 100.0, "made": "5000 examples"}])
    cost = tasks.method_cost(tmp_path, "recipe", 200)
    assert cost["stages_wall_s"] == {"training": 3600.0, "index": 60.0}
    assert cost["cpu_hours"] == pytest.approx((3600 + 60) / 3600, abs=0.01)
