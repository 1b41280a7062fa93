"""TART training data: negatives of three kinds mined from tiny hand-made tasks, JSONL round trip."""

from __future__ import annotations

import json

import pytest

from taskret.io import DataError
from taskret.retrieval import make_retriever
from taskret.tart.config import NEGATIVE_KINDS
from taskret.tart.tasks import doc_text, split_pooled_id
from taskret.tart.training_data import (
    build_training_examples,
    read_training_examples,
    sibling_tasks,
    task_batch_groups,
    write_training_examples,
)


@pytest.fixture(scope="module")
def built(tasks):
    stats: dict = {}
    rows = build_training_examples(tasks, n_hard=2, n_random=2, n_unfollowing=3, seed=0, stats=stats)
    return rows, stats


def test_rows_have_the_documented_fields_and_instructions(tasks, built):
    rows, stats = built
    by_name = {t.name: t for t in tasks}
    assert stats["n_rows"] == len(rows) == 3 + 4 + 3
    assert stats["n_skipped"] == 1  # qd has no relevant document
    for row in rows:
        task = by_name[row["task"]]
        assert set(row) == {"task", "qid", "instruction", "query", "positive", "positive_text", "negatives"}
        assert row["instruction"] in task.instructions
        assert row["query"] == task.queries[row["qid"]]
        assert task.qrels[row["qid"]][row["positive"]] > 0
        assert row["positive_text"] == doc_text(task.corpus[row["positive"]])
        assert {n["kind"] for n in row["negatives"]} <= set(NEGATIVE_KINDS)
    assert sum(stats["n_negatives"].values()) == sum(len(r["negatives"]) for r in rows)


def test_negatives_never_include_a_judged_document(tasks, built):
    rows, _ = built
    by_name = {t.name: t for t in tasks}
    for row in rows:
        task = by_name[row["task"]]
        relevant_texts = {doc_text(task.corpus[d]) for d, r in task.qrels[row["qid"]].items() if r > 0}
        own = [n["id"] for n in row["negatives"] if n["kind"] != "unfollowing"]
        assert len(own) == len(set(own))  # no document twice
        assert not set(own) & set(task.qrels[row["qid"]])
        assert not {n["text"] for n in row["negatives"]} & relevant_texts


def test_hard_negatives_are_the_first_stage_top_unjudged_documents(tasks, built):
    rows, _ = built
    by_name = {t.name: t for t in tasks}
    for row in rows:
        task = by_name[row["task"]]
        ranked = make_retriever("bm25").index_texts(*task.doc_ids_and_texts()).retrieve([row["query"]], k=6).ids[0]
        expected = [d for d in ranked if d not in task.qrels[row["qid"]]][:2]
        assert [n["id"] for n in row["negatives"] if n["kind"] == "hard"] == expected


def test_random_negatives_come_from_the_own_corpus(tasks, built):
    rows, _ = built
    by_name = {t.name: t for t in tasks}
    for row in rows:
        randoms = [n for n in row["negatives"] if n["kind"] == "random"]
        assert len(randoms) == 2
        for n in randoms:
            assert n["id"] in by_name[row["task"]].corpus
            assert n["text"] == doc_text(by_name[row["task"]].corpus[n["id"]])


def test_unfollowing_negatives_come_only_from_other_tasks(tasks, built):
    rows, stats = built
    by_name = {t.name: t for t in tasks}
    seen_tasks = set()
    counted: dict[str, dict[str, int]] = {t.name: {} for t in tasks}
    for row in rows:
        for n in row["negatives"]:
            if n["kind"] == "unfollowing":
                source = split_pooled_id(n["id"])[0]
                counted[row["task"]][source] = counted[row["task"]].get(source, 0) + 1
    assert stats["unfollowing_sources"] == counted
    for row in rows:
        unfollowing = [n for n in row["negatives"] if n["kind"] == "unfollowing"]
        assert len(unfollowing) == 3
        for n in unfollowing:
            other, doc_id = split_pooled_id(n["id"])
            assert other != row["task"] and other in by_name
            assert n["text"] == doc_text(by_name[other].corpus[doc_id])
            seen_tasks.add((row["task"], other))
    # every task drew from both others somewhere
    assert {a for a, _ in seen_tasks} == set(by_name)
    # the other corpora's top documents for the query: "heart attacks" finds the facts about aspirin
    m3 = next(r for r in rows if r["qid"] == "m3")
    assert "facts/f1" in [n["id"] for n in m3["negatives"]]


def test_pooled_unfollowing_negatives_are_the_top_documents_of_the_other_corpora_pooled(tasks):
    from taskret.tart.tasks import pooled_corpus

    rows = build_training_examples(tasks, n_hard=0, n_random=0, n_unfollowing=2, unfollowing_from="pooled")
    ids, texts = pooled_corpus(tasks)
    text_of = dict(zip(ids, texts))
    index = make_retriever("bm25").index_texts(ids, texts)
    by_name = {t.name: t for t in tasks}
    for row in rows:
        task = by_name[row["task"]]
        relevant = {doc_text(task.corpus[d]) for d, r in task.qrels[row["qid"]].items() if r > 0}
        ranked = index.retrieve([row["query"]], k=len(ids)).ids[0]
        expected = [d for d in ranked if split_pooled_id(d)[0] != row["task"] and text_of[d] not in relevant][:2]
        assert [n["id"] for n in row["negatives"]] == expected
        assert all(n["kind"] == "unfollowing" for n in row["negatives"])


def test_pooled_unfollowing_negatives_come_from_the_sibling_task_a_pooled_search_confuses():
    from taskret.tart.tasks import Document, RetrievalTask

    hours = range(1, 9)
    def corpus(texts):
        return {doc_id: Document(doc_id, "", text) for doc_id, text in texts.items()}

    utterances = corpus({f"u{h}": f"set an alarm for {h} pm tomorrow" for h in hours})
    parses = RetrievalTask(name="parses", corpus=corpus({f"p{h}": f"[IN:CREATE_ALARM [SL:DATE_TIME {h} pm ] ]"
                                                         for h in hours}),
                           queries={f"q{h}": f"wake me at {h} pm tomorrow" for h in hours},
                           qrels={f"q{h}": {f"p{h}": 1} for h in hours}, instructions=["Retrieve the parse"])
    similar = RetrievalTask(name="similar", corpus=utterances, queries=dict(parses.queries),
                            qrels={f"q{h}": {f"u{h}": 1} for h in hours}, instructions=["Retrieve a paraphrase"])
    # Many unrelated tasks: drawn in a random order, the sibling gives few of the unfollowing negatives.
    unrelated = [RetrievalTask(name=f"other{j}", corpus=corpus({f"d{i}": f"tomorrow news item {j} {i}"
                                                                for i in range(5)}),
                               queries={"x": "news"}, qrels={"x": {"d0": 1}}, instructions=["Find news"])
                 for j in range(6)]
    all_tasks = [parses, similar, *unrelated]

    def from_sibling(rows):
        negatives = [n for r in rows if r["task"] == "parses" for n in r["negatives"]]
        return sum(split_pooled_id(n["id"])[0] == "similar" for n in negatives) / len(negatives)

    pooled = build_training_examples(all_tasks, n_hard=0, n_random=0, n_unfollowing=2, unfollowing_from="pooled")
    spread = build_training_examples(all_tasks, n_hard=0, n_random=0, n_unfollowing=2)
    assert from_sibling(pooled) == 1.0
    assert from_sibling(spread) < 0.5
    assert ("parses", "similar") in sibling_tasks(pooled)
    assert task_batch_groups(pooled, "siblings")["parses"] == "parses+similar"
    assert ("parses", "similar") not in sibling_tasks(spread)


@pytest.mark.parametrize("unfollowing_from", ["pooled", "random_tasks"])
def test_unfollowing_first_stage_mines_only_the_unfollowing_negatives(tasks, unfollowing_from):
    def kinds(rows, kind):
        return [[n["id"] for n in r["negatives"] if n["kind"] == kind] for r in rows]

    def build(first_stage, unfollowing_first_stage=None):
        return build_training_examples(tasks, first_stage=first_stage, n_hard=2, n_random=0, n_unfollowing=2,
                                       unfollowing_from=unfollowing_from,
                                       unfollowing_first_stage=unfollowing_first_stage)

    mixed, by_bm25, by_random = build("bm25", "random"), build("bm25"), build("random")
    assert kinds(mixed, "hard") == kinds(by_bm25, "hard")
    assert kinds(mixed, "unfollowing") == kinds(by_random, "unfollowing")
    assert kinds(mixed, "unfollowing") != kinds(by_bm25, "unfollowing")
    assert build("bm25", "bm25") == by_bm25


def _unfollowing_rows(sources: dict[str, dict[str, int]]) -> list[dict]:
    return [{"task": task, "negatives": [{"id": f"{source}/d{i}", "kind": "unfollowing"}
                                         for source, n in counts.items() for i in range(n)]}
            for task, counts in sources.items()]


def test_siblings_are_mutual_and_a_hub_corpus_is_nobody_s_sibling():
    rows = _unfollowing_rows({
        "mtop": {"wiki": 6, "mtop-similar": 4},  # wiki supplies most, but it supplies everyone
        "mtop-similar": {"wiki": 6, "mtop": 4},
        "news": {"wiki": 9, "mtop": 1},
        "bash": {"wiki": 5, "python": 5},  # python's best is not bash: no pair
        "python": {"mtop": 10},
        "wiki": {"python": 10},
    })
    assert sibling_tasks(rows) == [("mtop", "mtop-similar")]
    assert sibling_tasks(rows, min_lift=100.0) == []


def test_batch_groups_are_named_or_explicit_and_checked():
    rows = _unfollowing_rows({"a": {"b": 1}, "b": {"a": 1}, "c": {"a": 1}})
    assert task_batch_groups(rows, None) == {}
    assert task_batch_groups(rows, "tasks") == {"a": "a", "b": "b", "c": "c"}
    assert task_batch_groups(rows, [["a", "c"]]) == {"a": "a+c", "c": "a+c"}
    with pytest.raises(ValueError, match="unknown batch_groups 'pairs'"):
        task_batch_groups(rows, "pairs")
    with pytest.raises(ValueError, match="task 'a' is in two batch groups"):
        task_batch_groups(rows, [["a", "b"], ["a", "c"]])
    with pytest.raises(ValueError, match="lists of task names"):
        task_batch_groups(rows, ["a", "b"])


def test_unfollowing_from_must_be_known(tasks):
    with pytest.raises(ValueError, match="unfollowing_from must be one of random_tasks, pooled"):
        build_training_examples(tasks, unfollowing_from="nearest")


def test_a_single_task_has_no_unfollowing_negatives(tasks):
    rows = build_training_examples(tasks[:1], n_hard=1, n_random=0, n_unfollowing=3)
    assert all([n["kind"] for n in r["negatives"]] == ["hard"] for r in rows)


def test_denoiser_drops_exactly_the_document_it_scores_high(tasks, built):
    rows, _ = built
    calls = []
    flagged = "f4"  # regular exercise improves heart health: a plausible false negative for qa

    def denoiser(pairs):
        calls.append(list(pairs))
        return [5.0 if text == doc_text(tasks[0].corpus[flagged]) else -5.0 for _, text in pairs]

    stats: dict = {}
    denoised = build_training_examples(tasks, n_hard=2, n_random=2, n_unfollowing=3, seed=0, denoiser=denoiser,
                                       denoise_threshold=0.0, stats=stats)
    hard_before = {(r["task"], r["qid"]): [n["id"] for n in r["negatives"] if n["kind"] == "hard"] for r in rows}
    hard_after = {(r["task"], r["qid"]): [n["id"] for n in r["negatives"] if n["kind"] == "hard"] for r in denoised}
    expected_drops = [[t, q, flagged] for (t, q), ids in hard_before.items() if t == "facts" and flagged in ids]
    assert expected_drops  # the fixture must give the denoiser something to drop
    assert stats["n_denoised"] == len(expected_drops) and stats["denoised"] == expected_drops
    for key, ids in hard_before.items():
        assert hard_after[key] == [d for d in ids if not (key[0] == "facts" and d == flagged)]
    assert len(calls) == 3 and all(isinstance(q, str) and isinstance(t, str) for q, t in calls[0])


def test_building_is_seeded(tasks, built):
    rows, _ = built
    again = build_training_examples(tasks, n_hard=2, n_random=2, n_unfollowing=3, seed=0)
    assert again == rows
    others = [build_training_examples(tasks, n_hard=2, n_random=2, n_unfollowing=3, seed=s) for s in (1, 2, 3)]
    assert any(o != rows for o in others)


def test_bad_arguments_are_rejected(tasks):
    with pytest.raises(ValueError, match="n_hard"):
        build_training_examples(tasks, n_hard=-1)
    with pytest.raises(ValueError, match="no instructions"):
        build_training_examples([tasks[0].with_instructions([])])
    with pytest.raises(ValueError, match="2 scores"):
        build_training_examples(tasks[:1], n_hard=1, n_random=0, denoiser=lambda pairs: [1.0, 2.0])


def test_jsonl_round_trip(tmp_path, built):
    rows, _ = built
    path = write_training_examples(tmp_path / "data" / "train.jsonl", rows)
    assert read_training_examples(path) == rows


@pytest.mark.parametrize("mutate, line_field", [
    (lambda row: row.pop("positive_text"), "positive_text"),
    (lambda row: row.update(query=3), "query"),
    (lambda row: row.update(negatives="none"), "negatives"),
    (lambda row: row["negatives"][1].update(kind="easy"), "negatives[1].kind"),
    (lambda row: row["negatives"][0].pop("text"), "negatives[0].text"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, built, mutate, line_field):
    rows = json.loads(json.dumps(built[0]))
    mutate(rows[2])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_training_examples(path)
    assert info.value.line == 3 and info.value.field == line_field
    assert str(path) in str(info.value) and "line 3" in str(info.value)


def test_a_query_judged_zero_in_its_own_corpus_is_never_its_own_negative(tmp_path):
    from taskret.tart.tasks import mtop_similar_task

    from ..conftest import write_jsonl_rows

    path = write_jsonl_rows(tmp_path / "train.jsonl", [
        {"idx": f"t{i}", "question": f"set an alarm for {h} pm", "logical_form": f"[IN:CREATE_ALARM [SL:DATE_TIME {h} pm ] ]"}
        for i, h in enumerate((5, 6, 7))] + [
        {"idx": "w", "question": "weather in rome", "logical_form": "[IN:GET_WEATHER [SL:LOCATION rome ] ]"},
        {"idx": "w2", "question": "weather in paris", "logical_form": "[IN:GET_WEATHER [SL:LOCATION paris ] ]"}])
    task = mtop_similar_task(path, path)
    rows = build_training_examples([task], n_hard=4, n_random=1, n_unfollowing=0)
    assert len(rows) == 5
    for row in rows:
        ids = [n["id"] for n in row["negatives"]]
        assert row["qid"] not in ids and row["positive"] != row["qid"]
        assert ids and task.qrels[row["qid"]][row["positive"]] == 1


# -- DPR-style rows (TART's released BERRI data, Tevatron) -------------------------------------------


def _dpr_line(**overrides):
    row = {"question": "Retrieve a Bash command that does the following [SEP] list files by size",
           "positive_ctxs": [{"title": "", "text": "ls -S", "passage_id": "7"}],
           "negative_ctxs": [{"title": "", "text": "rm -rf /tmp/x"}, {"title": "", "text": "ls -S"}],
           "hard_negative_ctxs": [{"title": "bash", "text": ["ls -t"]}]}
    row.update(overrides)
    return json.dumps(row)


def test_dpr_rows_split_instruction_and_query_and_keep_kinds(tmp_path):
    path = tmp_path / "nl2bash.jsonl"
    path.write_text(_dpr_line() + "\n" + _dpr_line(question="find big files", instruction="Find a command") + "\n")
    first, second = read_training_examples(path)
    assert first["task"] == "nl2bash" and first["qid"] == "1"
    assert first["instruction"] == "Retrieve a Bash command that does the following"
    assert first["query"] == "list files by size"
    assert (first["positive"], first["positive_text"]) == ("7", "ls -S")
    # the negative whose text is the positive's is dropped; titles are joined as TART's trainer does
    assert [(n["kind"], n["text"]) for n in first["negatives"]] == [("random", "rm -rf /tmp/x"), ("hard", "bash ls -t")]
    assert len({n["id"] for n in first["negatives"]}) == 2
    assert (second["instruction"], second["query"]) == ("Find a command", "find big files")


@pytest.mark.parametrize("overrides, field", [
    ({"positive_ctxs": []}, "positive_ctxs"),
    ({"hard_negative_ctxs": [{"title": "x"}]}, "hard_negative_ctxs[0].text"),
    ({"negative_ctxs": "nope"}, "negative_ctxs"),
])
def test_dpr_rows_with_bad_fields_name_file_line_and_field(tmp_path, overrides, field):
    path = tmp_path / "rows.jsonl"
    path.write_text(_dpr_line() + "\n" + _dpr_line(**overrides) + "\n")
    with pytest.raises(DataError) as err:
        read_training_examples(path)
    assert (err.value.line, err.value.field) == (2, field)
    assert str(path) in str(err.value)


def test_progress_shows_the_dense_encoders_bars_also_inside_a_hybrid():
    from taskret.tart.training_data import _make_first_stage

    quiet = _make_first_stage("hybrid:bm25+dense:minilm-l6")
    loud = _make_first_stage("hybrid:bm25+dense:minilm-l6", progress=True)
    assert [getattr(c, "show_progress_bar", None) for c in quiet.components] == [None, False]
    assert [getattr(c, "show_progress_bar", None) for c in loud.components] == [None, True]
    assert _make_first_stage("dense:minilm-l6", progress=True).show_progress_bar is True
