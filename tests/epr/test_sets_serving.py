"""A CEIL run (``set_training``) is trained for its DPP: `taskret evaluate --retriever epr:WORK` selects with it, and
so do an index built from the run (`taskret index`, which records the selection), the service's /prompt over that
index and the LangChain selector; each can be told not to (`--select none`, ``select=None``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from taskret.cli import app as cli_app  # noqa: E402
from taskret.epr.pipeline import run_pipeline  # noqa: E402
from taskret.retrieval.index import INFO_FILE  # noqa: E402
from taskret.serve.app import create_app  # noqa: E402
from tests.conftest import read_jsonl_rows  # noqa: E402
from tests.epr.test_pipeline import _round_one, data_files, lm_run, make_config  # noqa: E402, F401 - fixtures

ENV = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]
MAX_DEMOS = 2  # fewer than the 6 candidates: the DPP's set and the ranking's top can differ


def _invoke(*args):
    result = CliRunner().invoke(cli_app, [str(a) for a in args], env=ENV)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def ceil_run(lm_run, tmp_path_factory, data_files, tiny_model_dir, tiny_bert_dir):  # noqa: F811 - fixtures
    """A tiny CEIL run continuing the module's EPR run, as tests/epr/test_pipeline.py builds one."""
    work = _round_one(lm_run, tmp_path_factory.mktemp("ceil"))
    settings = {"n_candidates": 6, "set_size": 3, "n_sets": 4, "epochs": 2, "batch_size": 4, "learning_rate": 1e-3}
    run_pipeline(make_config(work, data_files, tiny_model_dir, tiny_bert_dir, set_training=settings), progress=False)
    return work


def _evaluate(work, data_files, tiny_model_dir, out, *extra):  # noqa: F811 - a fixture's value
    train, test = data_files
    _invoke("evaluate", "--train", train, "--test", test, *FIELDS, "--retriever", f"epr:{work}", "--lm",
            tiny_model_dir, "--context-window", 256, "--max-new-tokens", 8, "--k", MAX_DEMOS, "--out", out, *extra)
    return read_jsonl_rows(out / "predictions.jsonl")


def test_an_index_of_a_ceil_run_serves_and_selects_the_prompts_taskret_evaluate_builds(
        ceil_run, data_files, tiny_model_dir, tmp_path):  # noqa: F811 - fixtures
    train, _ = data_files
    index_dir = tmp_path / "index"
    built = _invoke("index", "--train", train, *FIELDS, "--retriever", f"epr:{ceil_run}", "--lm", tiny_model_dir,
                    "--out", index_dir)
    info = json.loads((index_dir / INFO_FILE).read_text())
    assert info["selection"]["method"] == "dpp" and info["selection"]["n_candidates"] == 6
    assert info["selection"]["weight"] == pytest.approx(1 / 1.1)  # CEIL's scale factor 0.1, as the run trained
    assert info["context_window"] == 256 and info["max_new_tokens"] == 8 and "selection dpp at weight 0.9091 over the top 6" in built.output

    selected = _evaluate(ceil_run, data_files, tiny_model_dir, tmp_path / "dpp")
    top = _evaluate(ceil_run, data_files, tiny_model_dir, tmp_path / "top", "--select", "none")
    # the test can tell them apart: on some input the DPP's set is not the ranking's top
    assert any(a["prompt_ids"] != b["prompt_ids"] for a, b in zip(selected, top))

    service = TestClient(create_app(index_dir))
    health = service.get("/health").json()
    assert health["selection"]["method"] == "dpp" and health["selection"]["vectors"] == "retriever"
    for row in selected:
        answer = service.post("/prompt", json={"input": row["input"], "max_demos": MAX_DEMOS}).json()
        assert answer["prompt"] == row["prompt"] and answer["ids"] == row["prompt_ids"]
        assert answer["selection"] == health["selection"]
        assert len(answer["ids"]) + len(answer["left_out"]) == 6  # the 6 candidates: in the prompt or left out
    unselected = TestClient(create_app(index_dir, select="none"))
    assert unselected.get("/health").json()["selection"] is None
    for row in top:
        answer = unselected.post("/prompt", json={"input": row["input"], "max_demos": MAX_DEMOS}).json()
        assert answer["prompt"] == row["prompt"] and answer["selection"] is None

    from taskret.integrations.langchain import TaskretExampleSelector

    # LangChain: the k the selection chooses (no token budget), most relevant last, as /prompt without a budget
    chooser = TaskretExampleSelector.from_index(index_dir, k=MAX_DEMOS, template_format=None)
    plain = TaskretExampleSelector.from_index(index_dir, k=MAX_DEMOS, template_format=None, select=None)
    assert chooser.selection is not None and chooser.selection.n_candidates == 6 and plain.selection is None
    differ = False
    for row in selected:
        unbounded = {"input": row["input"], "max_demos": MAX_DEMOS, "token_budget": 100_000}
        chosen = [e["input"] for e in chooser.select_examples({"input": row["input"]})]
        served = service.post("/prompt", json=unbounded).json()
        assert chosen == served["texts"]
        first = [e["input"] for e in plain.select_examples({"input": row["input"]})]
        assert first == unselected.post("/prompt", json=unbounded).json()["texts"]
        differ = differ or chosen != first
    assert differ
    pool = [{"input": r["q"], "output": r["a"], "key": r["key"]} for r in read_jsonl_rows(train)]
    owned = TaskretExampleSelector.from_examples(pool, f"epr:{ceil_run}", k=MAX_DEMOS, id_key="key")
    assert owned.selection == chooser.selection  # read from the run, as `taskret evaluate` reads it
