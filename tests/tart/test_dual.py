"""TART-dual: triplets with and without instructions, and a 1-epoch run of a tiny BERT that reloads
as a dense retriever and goes through evaluate_retriever."""

from __future__ import annotations

import json

import pytest

from taskret.formats import SEP, format_query
from taskret.retrieval import DenseRetriever, make_retriever
from taskret.tart.dual import (
    CONFIG_FILE,
    LOG_FILE,
    TartDualConfig,
    build_triplets,
    train_tart_dual,
)
from taskret.tart.evaluation import evaluate_retriever


def tiny_config(base, **overrides) -> TartDualConfig:
    settings = dict(base_model=str(base), epochs=1, batch_size=4, mini_batch_size=4, learning_rate=1e-3,
                    max_seq_length=32, seed=0)
    settings.update(overrides)
    return TartDualConfig(**settings)


def test_config_round_trips_and_validates():
    config = TartDualConfig(epochs=2, use_instruction=False, negative_kinds=("hard",))
    assert TartDualConfig.from_json(config.to_json()) == config
    assert TartDualConfig.from_dict({**config.to_dict(), "steps": 3, "final_loss": 1.0}) == config
    with pytest.raises(ValueError, match="epochs"):
        TartDualConfig(epochs=0)
    with pytest.raises(ValueError, match="negative_kinds"):
        TartDualConfig(negative_kinds=("easy",))
    with pytest.raises(ValueError, match="unknown"):
        TartDualConfig.from_dict({"lr": 1})


def test_instruction_and_no_instruction_anchors(rows):
    with_instruction = build_triplets(rows, TartDualConfig())
    without = build_triplets(rows, TartDualConfig(use_instruction=False))
    assert with_instruction["anchor"] == [format_query(r["instruction"], r["query"]) for r in rows]
    assert all(SEP in a for a in with_instruction["anchor"])
    assert without["anchor"] == [r["query"] for r in rows]
    assert not any(SEP in a for a in without["anchor"])
    # the documents do not depend on the instruction
    assert with_instruction["positive"] == without["positive"] == [r["positive_text"] for r in rows]
    assert with_instruction["negative"] == without["negative"]


def test_one_negative_per_row_seeded_per_epoch(rows):
    config = TartDualConfig(seed=3)
    first = build_triplets(rows, config, epoch=0)
    assert build_triplets(rows, config, epoch=0) == first
    for row, negative in zip(rows, first["negative"]):
        assert negative in {n["text"] for n in row["negatives"]}
    draws = [build_triplets(rows, config, epoch=e)["negative"] for e in range(1, 5)]
    assert any(d != first["negative"] for d in draws)


def test_negative_kinds_filter_and_skip(rows):
    only_unfollowing = build_triplets(rows, TartDualConfig(negative_kinds=("unfollowing",)))
    unfollowing_texts = [{n["text"] for n in r["negatives"] if n["kind"] == "unfollowing"} for r in rows]
    assert all(t in allowed for t, allowed in zip(only_unfollowing["negative"], unfollowing_texts))
    stripped = [{**r, "negatives": []} for r in rows[:2]] + rows[2:]
    assert len(build_triplets(stripped, TartDualConfig())["anchor"]) == len(rows) - 2
    with pytest.raises(ValueError, match="no usable"):
        build_triplets([{**r, "negatives": []} for r in rows], TartDualConfig())


@pytest.fixture(scope="module")
def trained(tmp_path_factory, rows, tiny_bert_dir):
    out = tmp_path_factory.mktemp("tart-dual")
    folder = train_tart_dual(rows, out, tiny_config(tiny_bert_dir), progress=False)
    return out, folder


def test_training_writes_model_log_and_config(trained, rows):
    out, folder = trained
    assert folder == out / "model"
    assert (folder / "model.safetensors").exists() or any(folder.rglob("*.safetensors"))
    assert not list(folder.rglob("pytorch_model.bin"))
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["n_rows"] == config["n_used"] == config["n_triplets"] == len(rows)
    assert config["use_instruction"] is True and config["steps"] == -(-len(rows) // 4)
    assert sum(config["negatives_used"].values()) == len(rows)
    log = [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]
    assert log and log[-1]["step"] == config["steps"] and log[-1]["epoch"] == 1.0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_trained_model_is_a_dense_retriever(trained, tasks):
    _, folder = trained
    retriever = make_retriever("dense:" + str(folder))
    assert isinstance(retriever, DenseRetriever)
    task = tasks[0]
    retriever.index_texts(*task.doc_ids_and_texts())
    result = retriever.retrieve([format_query(task.instruction, task.queries["qa"])], k=3)
    assert len(result.ids[0]) == 3 and set(result.ids[0]) <= set(task.corpus)
    metrics = evaluate_retriever("dense:" + str(folder), tasks, setting="both", k=5)
    assert set(metrics["settings"]) == {"closed", "pooled"} and "gap_mean" in metrics


def test_no_instruction_training_records_the_ablation(tmp_path, rows, tiny_bert_dir):
    out = tmp_path / "no-instruction"
    train_tart_dual(rows[:4], out, tiny_config(tiny_bert_dir, use_instruction=False), progress=False)
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["use_instruction"] is False and config["n_triplets"] == 4
    assert (out / "model").is_dir()


def test_cli_builds_data_and_trains(tmp_path, tiny_bert_dir):
    from typer.testing import CliRunner

    from taskret.cli import app
    from taskret.tart.training_data import read_training_examples

    from .builders import make_data_dir

    env = {"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"}
    data_dir = make_data_dir(tmp_path / "data")
    data = tmp_path / "train.jsonl"
    result = CliRunner().invoke(app, ["tart", "build-data", "--tasks", "mtop,scifact,ambigqa", "--split", "train",
                                      "--data-dir", str(data_dir), "--n-hard", "1", "--n-random", "1",
                                      "--n-unfollowing", "1", "--unfollowing-from", "pooled",
                                      "--unfollowing-first-stage", "random", "--out", str(data)],
                                 env=env)
    assert result.exit_code == 0, result.output
    assert "task 'ambigqa' has no split 'train'" in result.output and "skipped" in result.output
    rows = read_training_examples(data)
    assert {r["task"] for r in rows} == {"mtop", "scifact"}
    unfollowing = [(r["task"], n["id"]) for r in rows for n in r["negatives"] if n["kind"] == "unfollowing"]
    assert unfollowing and all(not doc.startswith(task + "/") for task, doc in unfollowing)
    # --unfollowing-first-stage mines the unfollowing negatives alone: the same ones as a random first stage.
    by_random = tmp_path / "random.jsonl"
    result = CliRunner().invoke(app, ["tart", "build-data", "--tasks", "mtop,scifact", "--data-dir", str(data_dir),
                                      "--first-stage", "random", "--n-hard", "0", "--n-random", "0",
                                      "--n-unfollowing", "1", "--unfollowing-from", "pooled", "--out", str(by_random)],
                                 env=env)
    assert result.exit_code == 0, result.output
    assert unfollowing == [(r["task"], n["id"]) for r in read_training_examples(by_random) for n in r["negatives"]]

    out = tmp_path / "dual"
    result = CliRunner().invoke(app, ["tart", "train-dual", "--data", str(data), "--out", str(out), "--no-instruction",
                                      "--base-model", str(tiny_bert_dir), "--batch-size", "4",
                                      "--exclude-instruction-from-pooling", "--instruction-dropout", "0.5",
                                      "--unfollowing-needs-instruction", "--batch-groups", "mtop,scifact",
                                      "--quiet"], env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / CONFIG_FILE).read_text())
    assert summary["batch_groups"] == [["mtop", "scifact"]]
    assert summary["task_groups"] == {"mtop+scifact": ["mtop", "scifact"]}
    assert summary["use_instruction"] is False and summary["exclude_instruction_from_pooling"] is True
    assert summary["instruction_dropout"] == 0.5 and summary["unfollowing_needs_instruction"] is True
    assert json.loads((out / "model" / "1_Pooling" / "config.json").read_text())["include_prompt"] is False

    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text().splitlines()[0].replace('"positive"', '"positif"') + "\n")
    result = CliRunner().invoke(app, ["tart", "train-dual", "--data", str(bad), "--out", str(tmp_path / "x")], env=env)
    assert result.exit_code == 2 and "line 1, field 'positive'" in result.output


def test_new_settings_are_validated():
    for bad in ({"instruction_dropout": 1.5}, {"base_weight": -0.1}, {"encode_max_seq_length": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TartDualConfig(**bad)
    with pytest.raises(ValueError, match="unknown batch_groups 'pairs'"):
        TartDualConfig(batch_groups="pairs")
    config = TartDualConfig(batch_groups=[["mtop", "mtop-similar"]])
    assert TartDualConfig.from_json(config.to_json()) == config


def test_each_triplet_carries_its_task_s_batch_group(rows):
    from taskret.tart.dual import triplet_sampler
    from taskret.tart.training_data import usable_rows

    usable, _ = usable_rows(rows, TartDualConfig().negative_kinds, "rows")
    task = rows[0]["task"]
    epoch = triplet_sampler(TartDualConfig(), {task: "siblings"}).epoch(usable, 0, 0)
    groups = {(row["task"], key.group) for (row, _), key in zip(usable, epoch.keys)}
    assert (task, "siblings") in groups and all(g == ("siblings" if t == task else "") for t, g in groups)
    assert all(k.group == "" for k in triplet_sampler(TartDualConfig()).epoch(usable, 0, 0).keys)


def test_grouped_tasks_keep_their_instruction_when_asked(rows):
    from taskret.tart.dual import triplet_sampler
    from taskret.tart.training_data import usable_rows

    many = [{**r, "qid": f"{r['qid']}-{i}"} for i in range(25) for r in rows]
    usable, _ = usable_rows(many, TartDualConfig().negative_kinds, "rows")
    grouped = many[0]["task"]
    assert any(r["task"] != grouped for r, _ in usable)

    def instructed_share(**settings):
        config = TartDualConfig(instruction_dropout=0.5, seed=1, **settings)
        anchors = triplet_sampler(config, {grouped: "g"}).epoch(usable, 0, 0).columns["anchor"]
        share = {}
        for task in (grouped, None):
            mine = [SEP in a for (r, _), a in zip(usable, anchors) if (r["task"] == grouped) == (task == grouped)]
            share[task] = sum(mine) / len(mine)
        return share

    assert 0.2 < instructed_share()[grouped] < 0.8
    for flag in (False, True):
        share = instructed_share(keep_instruction_in_groups=True, unfollowing_needs_instruction=flag)
        assert share[grouped] == 1.0 and 0.2 < share[None] < 0.8


def test_instruction_dropout_trains_some_anchors_on_the_bare_query(rows):
    many = [{**r, "qid": f"{r['qid']}-{i}"} for i in range(25) for r in rows]
    anchors = build_triplets(many, TartDualConfig(instruction_dropout=0.5, seed=1))["anchor"]
    bare = [a == r["query"] for a, r in zip(anchors, many)]
    instructed = [a == format_query(r["instruction"], r["query"]) for a, r in zip(anchors, many)]
    assert all(b != i for b, i in zip(bare, instructed))  # every anchor is one or the other
    assert 0.3 < sum(bare) / len(many) < 0.7
    assert build_triplets(many, TartDualConfig(instruction_dropout=0.5, seed=1))["anchor"] == anchors  # seeded
    assert build_triplets(many, TartDualConfig(instruction_dropout=1.0))["anchor"] == [r["query"] for r in many]


def test_a_bare_anchor_never_gets_an_unfollowing_negative_when_they_need_the_instruction(rows):
    many = [{**r, "qid": f"{r['qid']}-{i}"} for i in range(25) for r in rows]
    unfollowing = [{n["text"] for n in r["negatives"] if n["kind"] == "unfollowing"} for r in many]
    own = [{n["text"] for n in r["negatives"] if n["kind"] != "unfollowing"} for r in many]
    assert all(own) and any(unfollowing)

    def bare_with_unfollowing(config):
        columns = build_triplets(many, config)
        bare = [a == r["query"] for a, r in zip(columns["anchor"], many)]
        kinds = [n in u and n not in o for n, u, o in zip(columns["negative"], unfollowing, own)]
        return sum(b and k for b, k in zip(bare, kinds)), sum(not b and k for b, k in zip(bare, kinds))

    assert bare_with_unfollowing(TartDualConfig(instruction_dropout=0.5, seed=1))[0] > 0  # today's draw mixes them
    bare, instructed = bare_with_unfollowing(TartDualConfig(instruction_dropout=0.5, seed=1,
                                                            unfollowing_needs_instruction=True))
    assert bare == 0 and instructed > 0


def test_saved_model_encodes_with_the_base_length_not_the_training_length(trained, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    _, folder = trained
    base_length = SentenceTransformer(str(tiny_bert_dir), device="cpu").max_seq_length
    assert base_length > 32  # the fixture trains at 32 tokens
    assert SentenceTransformer(str(folder), device="cpu").max_seq_length == base_length


def test_base_weight_moves_the_trained_weights_back_to_the_base(tmp_path, rows, tiny_bert_dir):
    import torch
    from sentence_transformers import SentenceTransformer

    base = SentenceTransformer(str(tiny_bert_dir), device="cpu").state_dict()
    runs = {}
    for weight in (0.0, 0.5, 1.0):
        out = tmp_path / f"w{weight}"
        train_tart_dual(rows, out, tiny_config(tiny_bert_dir, base_weight=weight, encode_max_seq_length=48),
                        progress=False)
        model = SentenceTransformer(str(out / "model"), device="cpu")
        assert model.max_seq_length == 48
        runs[weight] = model.state_dict()
        assert json.loads((out / CONFIG_FILE).read_text())["base_weight"] == weight
    floats = [n for n, t in base.items() if t.is_floating_point()]
    assert any(not torch.equal(runs[0.0][n], base[n]) for n in floats)  # training moved the weights
    for name in floats:
        assert torch.allclose(runs[1.0][name], base[name])
        assert torch.allclose(runs[0.5][name], (runs[0.0][name] + base[name]) / 2, atol=1e-6)
