"""Dev scores during TART training: the validators score a model as the evaluation would (same NDCG@10),
and `taskret tart run` with dev tasks logs the scores and keeps the best step."""

from __future__ import annotations

import json

import pytest

from taskret.tart.cross_encoder import train_tart_full
from taskret.tart.dual import TartDualConfig, train_tart_dual
from taskret.tart.evaluation import evaluate_retriever
from taskret.tart.pipeline import run_pipeline
from taskret.tart.validation import dual_validator, full_validator

from .builders import Say, make_config
from .test_cross_encoder import tiny_config as tiny_full_config


@pytest.fixture(scope="module")
def dual_folder(tmp_path_factory, rows, tiny_bert_dir):
    config = TartDualConfig(base_model=str(tiny_bert_dir), batch_size=4, mini_batch_size=4, max_seq_length=32,
                            learning_rate=1e-3)
    return train_tart_dual(rows, tmp_path_factory.mktemp("dual"), config, progress=False)


@pytest.mark.parametrize("use_instruction", [True, False])
def test_dual_validator_matches_the_evaluation(dual_folder, tasks, use_instruction):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(dual_folder), device="cpu")
    score = dual_validator(tasks, use_instruction=use_instruction)(model)
    # float32 as the validator's model: `auto` encodes in bfloat16 on CPUs with it, and this barely trained model's
    # near-ties (scores 1e-5 apart) then flip
    expected = evaluate_retriever(f"dense:{dual_folder}?dtype=float32", tasks, use_instruction=use_instruction, k=10)
    assert score == pytest.approx(expected["mean"]["closed"]["ndcg@10"], abs=1e-6)
    assert 0.0 <= score <= 100.0


def test_full_validator_matches_reranking_the_same_first_stage(tmp_path, rows, tasks, tiny_bert_dir):
    from sentence_transformers.cross_encoder import CrossEncoder

    from taskret.rerank import load_reranker

    folder = train_tart_full(rows, tmp_path / "full", tiny_full_config(tiny_bert_dir, epochs=1), progress=False)
    score = full_validator(tasks, first_stage="bm25", top_k=10)(CrossEncoder(str(folder), device="cpu"))
    expected = evaluate_retriever("bm25", tasks, k=10, reranker=load_reranker(tmp_path / "full"), rerank_top_k=10,
                                  first_stage_instruction=False)
    assert score == pytest.approx(expected["mean"]["closed"]["ndcg@10"], abs=1e-4)


def test_validators_refuse_a_task_without_judged_queries(tasks):
    empty = tasks[0].__class__(**{**tasks[0].__dict__, "qrels": {}})
    with pytest.raises(ValueError, match="no judged queries"):
        dual_validator([empty])


def test_pipeline_keeps_the_best_checkpoint_on_dev_tasks(tmp_path, beir, tiny_bert_dir):
    dev = [f"{beir['steps']}:train"]
    config = make_config(beir, tmp_path / "w", tiny_bert_dir, redenoise=False, distil=None, dev_tasks=dev,
                         validate_steps=1, dev_limit=3, eval_tasks=[])
    run_pipeline(config, console=Say(), progress=False)
    for model, marker in (("dual", "tart_dual_config.json"), ("full", "tart_full_config.json")):
        summary = json.loads((tmp_path / "w" / model / marker).read_text())
        validation = summary["validation"]
        assert validation["every_steps"] == 1 and len(validation["dev_scores"]) == summary["steps"] + 1
        assert validation["best_dev_score"] == max(validation["dev_scores"].values())
    with pytest.raises(ValueError, match="dev task"):
        run_pipeline(make_config(beir, tmp_path / "x", tiny_bert_dir, dev_tasks=[f"{beir['facts']}:test"],
                                 validate_steps=1), progress=False)


def test_rerank_weight_interpolates_the_reranker_with_its_first_stage(tmp_path, rows, tasks, tiny_bert_dir):

    full = tmp_path / "full"
    train_tart_full(rows, full, tiny_full_config(tiny_bert_dir, epochs=1), progress=False)
    settings = dict(k=10, reranker=str(full), rerank_top_k=10, first_stage_instruction=False)
    first = evaluate_retriever("bm25", tasks, k=10, use_instruction=False)["mean"]["closed"]["ndcg@10"]
    alone = evaluate_retriever("bm25", tasks, **settings)["mean"]["closed"]["ndcg@10"]
    kept = evaluate_retriever("bm25", tasks, rerank_weight=1.0, **settings)
    assert kept["mean"]["closed"]["ndcg@10"] == pytest.approx(first)  # all weight on the first stage: its order
    assert kept["rerank_weight"] == 1.0
    zero = evaluate_retriever("bm25", tasks, rerank_weight=0.0, **settings)["mean"]["closed"]["ndcg@10"]
    assert zero == pytest.approx(alone)  # all weight on the reranker: its order
    with pytest.raises(ValueError, match="rerank_weight"):
        evaluate_retriever("bm25", tasks, rerank_weight=1.5, **settings)



def test_search_and_the_cli_interpolate_too(tmp_path, rows, beir, tiny_bert_dir):
    from typer.testing import CliRunner

    from taskret.cli import app
    from taskret.tart.search import search_index

    full = tmp_path / "full"
    train_tart_full(rows, full, tiny_full_config(tiny_bert_dir, epochs=1), progress=False)
    env = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
    index = tmp_path / "index"
    result = CliRunner().invoke(app, ["tart", "index", "--task", str(beir["facts"]), "--retriever", "bm25",
                                      "--out", str(index)], env=env)
    assert result.exit_code == 0, result.output
    queries = ["aspirin heart attack", "vitamin cold"]
    _, first = search_index(index, queries, top_k=3)
    _, kept = search_index(index, queries, top_k=3, reranker=full, rerank_depth=3, rerank_weight=1.0)
    assert kept.ids == first.ids
    result = CliRunner().invoke(app, ["tart", "search", "--index", str(index), "--rerank", str(full),
                                      "--rerank-depth", "3", "--rerank-weight", "0.5", "--json", *queries], env=env)
    assert result.exit_code == 0, result.output
    assert len([line for line in result.stdout.splitlines() if line.startswith("{")]) == 2
    result = CliRunner().invoke(app, ["tart", "search", "--index", str(index), "--rerank", str(full),
                                      "--rerank-weight", "2", "aspirin"], env=env)
    assert result.exit_code == 2 and "rerank-weight" in result.output
