"""The demo's machinery end to end on a few lines of the shipped slice, with the tiny Llama and tiny BERT:
one line per stage, the table, the closing sentence, and no trainer or library noise. The quality numbers
of the real demo are not asserted here (a tiny random model scores ~0)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from taskret.data import _PACKAGE_DEMO
from taskret.demo import DemoSettings, run_demo, verdict
from taskret.icl.evaluation import PairedTest

from .conftest import write_jsonl_rows

SMALL = DemoSettings(n_test=4, n_labelled=6, n_candidates=3, k=1, epochs=1, batch_size=4, mini_batch_size=4,
                     context_window=128, max_new_tokens=8, threads=1)
NOISE = ("{'loss'", "'grad_norm'", "it/s]", "%|", "Loading weights", "Batches:", "Map:")
VERDICT = re.compile(r"^EPR solves \d+ test inputs BM25 misses and misses \d+ BM25 solves \(McNemar p=[0-9.e-]+\): "
                     r"EPR .+ on these 4 test inputs.*\.$")


def _slice(tmp_path: Path, name: str, n: int) -> Path:
    lines = (_PACKAGE_DEMO / f"mtop_{name}.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    return write_jsonl_rows(tmp_path / f"{name}.jsonl", [json.loads(line) for line in lines])


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_lm, tiny_bert_dir):
    tmp = tmp_path_factory.mktemp("demo")
    train, test = _slice(tmp, "train", 40), _slice(tmp, "test", 6)
    settings = DemoSettings(**{**SMALL.__dict__, "base_model": str(tiny_bert_dir)})
    printed = io.StringIO()
    console = Console(file=printed, width=200, color_system=None)
    result = run_demo(tmp / "out", lm=tiny_lm, settings=settings, console=console, train=train, test=test)
    return tmp / "out", result, printed.getvalue().splitlines()


def test_one_line_per_stage_then_table_and_sentence(demo_run):
    _, result, lines = demo_run
    table = next(i for i, line in enumerate(lines) if "exact match" in line)
    stages = lines[1:table]
    assert all(line.startswith("  ") for line in stages)
    names = [line.strip().split(":")[0] for line in stages]
    assert names[:2] == ["load", "bm25"] and all(name.startswith("epr ") for name in names[2:])
    epr_stages = [name.split()[1] for name in names[2:]]
    order = ["candidates", "labels", "training", "index", "evaluation"]
    assert [name for name in epr_stages if name in order] == order  # each once, in pipeline order
    assert len(epr_stages) <= len(order) + 1  # and at most the pipeline's closing "EPR on ...: em" line
    assert all(re.search(r"\(\d+(\.\d)? s\)$", line) for line in stages[:2])
    assert "6 examples x 3" in stages[names.index("epr candidates")]
    assert "EM " in stages[1] and "4 test inputs" in stages[1]
    assert lines[0].startswith("taskret demo: MTOP, pool of 40 examples, 4 test inputs, tiny, seed 0")
    assert any("exact match" in line for line in lines)
    assert VERDICT.match(lines[-2]) and lines[-2] == result["verdict"]
    assert lines[-1].startswith("total ") and lines[-1].endswith("<method>/predictions.jsonl")


def test_no_trainer_or_library_noise(tmp_path, tiny_lm, tiny_bert_dir, capfd):
    train, test = _slice(tmp_path, "train", 30), _slice(tmp_path, "test", 2)
    settings = DemoSettings(**{**SMALL.__dict__, "n_test": 2, "base_model": str(tiny_bert_dir)})
    printed = io.StringIO()
    run_demo(tmp_path / "out", lm=tiny_lm, methods=["epr"], settings=settings,
             console=Console(file=printed, width=200, color_system=None), train=train, test=test)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""  # everything went to the demo's console
    assert not any(noise in printed.getvalue() for noise in NOISE)
    assert (tmp_path / "out" / "epr" / "retriever" / "training_log.jsonl").stat().st_size > 0  # it did train


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dtype_loads_the_lm_in_it_and_is_recorded(tmp_path, tiny_model_dir, dtype):
    # Greedy decoding, and so EM, depends on the LM's dtype, which auto picks by CPU: a user must be able to
    # choose it, and the summary must say which one ran.
    train, test = _slice(tmp_path, "train", 20), _slice(tmp_path, "test", 2)
    settings = DemoSettings(**{**SMALL.__dict__, "n_test": 2, "dtype": dtype})
    printed = io.StringIO()
    result = run_demo(tmp_path / "out", lm=str(tiny_model_dir), methods=["bm25"], settings=settings,
                      console=Console(file=printed, width=200, color_system=None), train=train, test=test)
    saved = json.loads((tmp_path / "out" / "demo_summary.json").read_text(encoding="utf-8"))
    assert result["lm_dtype"] == saved["lm_dtype"] == dtype and saved["settings"]["dtype"] == dtype
    assert f" in {dtype} (" in next(line for line in printed.getvalue().splitlines() if line.strip().startswith("load:"))


def test_files_and_paired_count(demo_run):
    out, result, _ = demo_run
    saved = json.loads((out / "demo_summary.json").read_text(encoding="utf-8"))
    assert saved["lm_dtype"] == "float32"  # the tiny Llama as it was built
    assert saved["verdict"] == result["verdict"] and [r["retriever"] for r in saved["rows"]] == ["bm25", "epr"]
    rows = {m: [json.loads(x) for x in (out / p / "predictions.jsonl").read_text().splitlines()]
            for m, p in (("bm25", "bm25"), ("epr", "epr/eval"))}
    assert [r["id"] for r in rows["bm25"]] == [r["id"] for r in rows["epr"]] and len(rows["epr"]) == 4
    both = list(zip(rows["epr"], rows["bm25"]))
    assert saved["paired"]["only_a"] == sum(e["correct"] and not b["correct"] for e, b in both)
    assert saved["paired"]["only_b"] == sum(b["correct"] and not e["correct"] for e, b in both)


def test_rerun_gives_the_same_numbers(demo_run, tiny_lm, tiny_bert_dir):
    out, first, _ = demo_run
    settings = DemoSettings(**{**SMALL.__dict__, "base_model": str(tiny_bert_dir)})
    train, test = out.parent / "train.jsonl", out.parent / "test.jsonl"
    again = run_demo(out, lm=tiny_lm, settings=settings, console=Console(file=io.StringIO()), train=train, test=test)
    assert [r["metrics"] for r in again["rows"]] == [r["metrics"] for r in first["rows"]]
    assert again["paired"] == first["paired"]
    epr_ids = [json.loads(x)["retrieved_ids"] for x in (out / "epr/eval/predictions.jsonl").read_text().splitlines()]
    assert epr_ids and all(epr_ids)


@pytest.mark.parametrize("em, paired, words", [
    ((40.0, 25.0), PairedTest(18, 3, 0.001), "EPR beats BM25 by 15.0 EM points on these 100 test inputs, more than chance"),
    ((30.0, 27.0), PairedTest(9, 6, 0.61), "EPR is 3.0 EM points ahead of BM25 on these 100 test inputs, within chance"),
    ((20.0, 25.0), PairedTest(2, 7, 0.18), "EPR is 5.0 EM points behind BM25"),
    ((25.0, 25.0), PairedTest(0, 0, 1.0), "EPR and BM25 are level"),
])
def test_verdict_says_what_the_numbers_show(em, paired, words):
    sentence = verdict("EPR", "BM25", *em, paired, 100)
    assert sentence.startswith(f"EPR solves {paired.only_a} test inputs BM25 misses and misses {paired.only_b} BM25 "
                               f"solves (McNemar p=")
    assert words in sentence and sentence.endswith(".")


def test_unknown_method_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown demo method.*nope"):
        run_demo(tmp_path, methods=["bm25", "nope"])
