"""`taskret epr run`'s metrics key and its last line: EPR paired with BM25 on the same test inputs."""

from __future__ import annotations

import json
from io import StringIO

import pytest

pytest.importorskip("sentence_transformers")

from rich.console import Console  # noqa: E402

from taskret.epr.pipeline import EPRConfig, run_pipeline  # noqa: E402
from taskret.io import DataError  # noqa: E402
from tests.epr.test_pipeline import data_files, make_config  # noqa: E402, F401 (data_files: a fixture)


def test_the_run_reports_its_metrics_and_ends_paired_with_bm25(tmp_path, data_files, tiny_model_dir,  # noqa: F811
                                                              tiny_bert_dir, tiny_lm):
    pytest.importorskip("sacrebleu")
    work = tmp_path / "work"
    config = make_config(work, data_files, tiny_model_dir, tiny_bert_dir, labels="bm25", metric=["chrf"])
    lines = StringIO()
    summary = run_pipeline(config, console=Console(file=lines, width=1000), progress=False,
                           lms={str(tiny_model_dir): tiny_lm})
    assert set(summary["metrics"]) == {"em", "chrf"}
    baseline = json.loads((work / "baseline" / "summary.json").read_text())
    assert baseline["retriever"] == "bm25" and set(baseline["metrics"]) == {"em", "chrf"} and baseline["n"] == 4
    eval_ids = [json.loads(line)["id"] for line in (work / "eval" / "predictions.jsonl").read_text().splitlines()]
    base_ids = [json.loads(line)["id"] for line in (work / "baseline" / "predictions.jsonl").read_text().splitlines()]
    assert eval_ids == base_ids  # the same test inputs
    last = lines.getvalue().splitlines()[-1]
    assert last.startswith("EPR solves ") and "BM25 solves (McNemar p=" in last and "on these 4 test inputs" in last
    assert f"chrf: EPR {summary['metrics']['chrf']:.1f}, BM25 {baseline['metrics']['chrf']:.1f}; " in last
    assert "(Wilcoxon p=" in last
    # resumed without a baseline, then with it again: nothing is redone, the line is printed again
    run_pipeline(config.model_copy(update={"baseline": None}), progress=False)
    again = StringIO()
    run_pipeline(config, console=Console(file=again, width=1000), progress=False)
    assert "baseline: " in again.getvalue() and "exists, skipped" in again.getvalue()
    assert again.getvalue().splitlines()[-1] == last


def test_the_metric_key_is_read_from_a_config_file_and_an_unknown_metric_fails_before_any_stage(
        tmp_path, data_files, tiny_model_dir, tiny_bert_dir):  # noqa: F811
    path = tmp_path / "config.json"
    settings = make_config(tmp_path / "work", data_files, tiny_model_dir, tiny_bert_dir).model_dump()
    path.write_text(json.dumps({**{k: v for k, v in settings.items() if k != "metrics"}, "metric": ["chrf"]}))
    assert EPRConfig.from_file(path).metrics == ["chrf"]
    path.write_text(json.dumps({**settings, "metrics": ["bleu"]}))
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        run_pipeline(EPRConfig.from_file(path), progress=False)
    assert not (tmp_path / "work" / "candidates.jsonl").exists()
    path.write_text(json.dumps({**settings, "metricz": ["chrf"]}))
    with pytest.raises(DataError, match="metricz"):
        EPRConfig.from_file(path)
