"""`train_multitask`: two tasks' labels merged under namespaced ids, each query written with its task's
instruction, one tiny dual encoder trained on both (a random 2-layer BERT with the MiniLM tokenizer)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("sentence_transformers")

from taskret.data import Example, Task
from taskret.epr.multitask import LabelledTask, merge_labelled_tasks, train_multitask
from taskret.epr.training import TrainingConfig, triplet_sampler
from tests.conftest import read_jsonl_rows, write_jsonl_rows


def _task(name: str, word: str, n: int = 8) -> Task:
    train = [Example(id=f"e{i}", input=f"{word} request {i}", output=f"{word.upper()} {i}") for i in range(n)]
    return Task(name=name, train=train, test=[])


def _labels(path, n: int = 8):
    return write_jsonl_rows(path, [{"id": f"e{i}", "positives": [f"e{(i + 1) % n}"], "negatives": [f"e{(i + 2) % n}"]}
                                   for i in range(n)])


@pytest.fixture()
def two_tasks(tmp_path):
    return [LabelledTask(_task("alarms", "alarm"), _labels(tmp_path / "a.jsonl"), "Find a similar alarm request"),
            LabelledTask(_task("berri-lite/music", "music"), _labels(tmp_path / "b.jsonl"), "Find a music request")]


def test_merge_namespaces_ids_and_writes_each_query_with_its_tasks_instruction(two_tasks):
    examples, rows, queries = merge_labelled_tasks(two_tasks)
    assert len(examples) == 16 and len({e.id for e in examples}) == 16  # the same ids e0..e7 in both, kept apart
    assert rows[0] == {"id": "alarms/e0", "positives": ["alarms/e1"], "negatives": ["alarms/e2"]}
    assert rows[8]["id"] == "berri-lite/music/e0" and rows[8]["positives"] == ["berri-lite/music/e1"]
    assert queries["alarms/e3"] == "Find a similar alarm request [SEP] alarm request 3"
    assert queries["berri-lite/music/e3"] == "Find a music request [SEP] music request 3"
    # The anchors the trainer sees carry the instruction; positives and negatives are the examples as indexed.
    by_id = {e.id: e for e in examples}
    usable = [(r["id"], r["positives"], r["negatives"]) for r in rows]
    columns = triplet_sampler(by_id, TrainingConfig(), lambda e: queries[e.id]).epoch(usable, 0, 0).columns
    assert all(" [SEP] " in a for a in columns["anchor"])
    assert not any("[SEP]" in p for p in columns["positive"] + columns["negative"])


def test_a_task_named_twice_or_an_empty_instruction_is_refused(two_tasks, tmp_path):
    with pytest.raises(ValueError, match="named twice"):
        merge_labelled_tasks([two_tasks[0], two_tasks[0]])
    with pytest.raises(ValueError, match="instruction is empty"):
        LabelledTask(_task("x", "x"), tmp_path / "x.jsonl", "  ")


def test_train_multitask_trains_one_encoder_on_both_tasks(two_tasks, tmp_path, tiny_bert_dir):
    from taskret.retrieval import DenseRetriever

    config = TrainingConfig(base_model=str(tiny_bert_dir), epochs=1, batch_size=8, mini_batch_size=4)
    model = train_multitask(two_tasks, tmp_path / "out", config, progress=False)
    assert model.is_dir()
    tasks = json.loads((tmp_path / "out" / "tasks.json").read_text())
    assert [(t["task"], t["rows"]) for t in tasks] == [("alarms", 8), ("berri-lite/music", 8)]
    assert len(read_jsonl_rows(tmp_path / "out" / "labels.jsonl")) == 16
    trained = json.loads((tmp_path / "out" / "epr_config.json").read_text())
    assert trained["n_labelled"] == 16 and trained["n_examples"] == 16
    # The model serves a task's own pool, queried with its instruction.
    retriever = DenseRetriever(encoder=str(model)).index(two_tasks[1].task.train)
    result = retriever.retrieve(["Find a music request [SEP] music request 3"], k=3)
    assert len(result.ids[0]) == 3 and set(result.ids[0]) <= {f"e{i}" for i in range(8)}


def test_train_multitask_with_udrs_listwise_objective_learns_from_every_tasks_scores(tmp_path, tiny_bert_dir):
    from taskret.epr.listwise import ListwiseConfig

    def scores(path, n: int = 8):
        return write_jsonl_rows(path, [{"id": f"e{i}", "candidates": [
            {"id": f"e{(i + j) % n}", "logprob": -float(j), "n_tokens": 2} for j in range(1, 6)]} for i in range(n)])

    tasks = [LabelledTask(_task("alarms", "alarm"), _labels(tmp_path / "a.jsonl"), "Find a similar alarm request",
                          scores=scores(tmp_path / "a_scores.jsonl")),
             LabelledTask(_task("music", "music"), _labels(tmp_path / "b.jsonl"), "Find a music request",
                          scores=scores(tmp_path / "b_scores.jsonl"))]
    objective = ListwiseConfig(base_model=str(tiny_bert_dir), list_size=3, top_k=1, epochs=2, batch_inputs=4)
    model = train_multitask(tasks, tmp_path / "out", listwise=objective, progress=False)
    trained = json.loads((tmp_path / "out" / "epr_config.json").read_text())
    assert model.is_dir() and trained["method"] == "udr listwise" and trained["n_inputs"] == 16
    assert trained["steps"] == 2 * 4 and json.loads((tmp_path / "out" / "tasks.json").read_text())[1]["task"] == "music"
    without = LabelledTask(_task("x", "x"), _labels(tmp_path / "c.jsonl"), "Find x")
    with pytest.raises(ValueError, match="needs the run's scores.jsonl"):
        train_multitask([without], tmp_path / "out2", listwise=objective, progress=False)
