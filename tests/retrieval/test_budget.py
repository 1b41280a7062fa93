"""The build's memory budget (taskret.retrieval.budget): the dense index type it picks and refuses, BM25's segment
sizes, and the budget taken from the command line into a real build."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from taskret.cli import app as cli_app
from taskret.retrieval import DenseRetriever
from taskret.retrieval.bm25_segments import MERGE_PAIRS, SEGMENT_DOCS
from taskret.retrieval.budget import DENSE_SHARE, MemoryBudget, OverBudget
from taskret.retrieval.dense import AUTO_HNSW_FROM, resolve_index_type
from taskret.retrieval.index import index_examples, load_index

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}


def test_auto_builds_hnsw_while_its_vectors_and_graph_fit_the_budget_and_ivfpq_past_it():
    # the default 8 GiB: about 2M MiniLM vectors (2.5 GB of HNSW a million, measured at 1M)
    assert resolve_index_type("auto", 1_950_000, 384) == "hnsw"
    assert resolve_index_type("auto", 2_050_000, 384) == "ivfpq"
    assert resolve_index_type("auto", 3_000_000, 384, budget=MemoryBudget(16)) == "hnsw"
    assert resolve_index_type("auto", 1_500_000, 768) == "ivfpq"  # wider vectors fill it sooner
    assert resolve_index_type("auto", 500_000, 384, budget=MemoryBudget(1)) == "ivfpq"
    assert resolve_index_type("auto", AUTO_HNSW_FROM - 1, 384, budget=MemoryBudget(0.001)) == "flat"
    assert resolve_index_type("ivfpq", 10, 384) == "ivfpq"


def test_an_index_asked_for_by_name_that_would_not_fit_is_refused_naming_the_budget_it_needs():
    with pytest.raises(OverBudget, match=r"a hnsw index of 3,000,000 vectors of 384 dimensions needs a memory "
                                         r"budget of 12\.0 GiB \(--memory-budget 8 GiB now\)"):
        resolve_index_type("hnsw", 3_000_000, 384)
    assert resolve_index_type("flat", 3_000_000, 384) == "flat"  # no graph: 4.6 GB of vectors fit
    with pytest.raises(ValueError, match="positive number of GiB"):
        MemoryBudget(0)


def test_bm25s_segments_follow_the_budget():
    assert (MemoryBudget().bm25_segment_docs, MemoryBudget().bm25_merge_pairs) == (SEGMENT_DOCS, MERGE_PAIRS)
    assert MemoryBudget(16).bm25_segment_docs == 2 * SEGMENT_DOCS
    assert MemoryBudget(0.25).bm25_segment_docs == 10_000  # a floor: segments of a few documents only cost passes


def test_a_build_over_its_budget_stops_at_the_first_shard_and_leaves_no_index(tmp_path, tiny_bert_dir,
                                                                              pool_examples):
    """A real encoder's vectors (32 dimensions: 128 bytes each as a flat index) against a budget of a few of them:
    refused once the first shard tells their size, with no index written; that shard, whole, is kept for the next
    run, which resumes from it."""
    spec = f"dense:{tiny_bert_dir}?index_type=flat"
    retriever = DenseRetriever(encoder=str(tiny_bert_dir), device="cpu", index_type="flat")
    tiny = MemoryBudget(gib=4 * 128 / DENSE_SHARE / 2**30)  # about four vectors
    with pytest.raises(OverBudget, match=f"a flat index of {len(pool_examples)} vectors of 32 dimensions"):
        index_examples(tmp_path / "idx", retriever, pool_examples, retriever_spec=spec, memory_budget=tiny)
    assert not (tmp_path / "idx" / "index_info.json").exists() and (tmp_path / "idx" / ".shards").is_dir()
    index_examples(tmp_path / "idx", retriever, pool_examples, retriever_spec=spec,
                   memory_budget=MemoryBudget(gib=(len(pool_examples) * 128 + 1024) / DENSE_SHARE / 2**30))
    assert load_index(tmp_path / "idx").retriever.index_type == "flat"


def test_the_command_line_takes_a_budget(tmp_path, pool_files):
    train, _ = pool_files
    runner = CliRunner()
    args = ["index", "--train", str(train), "--input-field", "q", "--output-field", "a", "--id-field", "key"]
    result = runner.invoke(cli_app, [*args, "--memory-budget", "1", "--out", str(tmp_path / "idx")], env=ENV)
    assert result.exit_code == 0, result.output
    assert load_index(tmp_path / "idx").records["weather"].output == "GET_WEATHER paris tomorrow"
    result = runner.invoke(cli_app, [*args, "--memory-budget", "0", "--out", str(tmp_path / "other")], env=ENV)
    assert result.exit_code == 2 and "--memory-budget" in result.stderr and not (tmp_path / "other").exists()
