"""Fusion weights chosen on dev tasks: each component ranks once, every grid weight is scored by NDCG@10; a hybrid's
weight from two retriever specs, a reranker's from a first stage and its reranking."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taskret.rerank import Reranker
from taskret.retrieval import BM25Retriever, RandomRetriever
from taskret.retrieval.base import RetrievalResult
from taskret.tart.fusion import (
    RERANK_GRID,
    DevOverlapWarning,
    choose_rerank_weight,
    choose_weight,
    choose_weights,
    dev_overlap,
    fused_ndcg,
    gain_confidence,
    rank_tasks,
    simplex_grid,
    training_tasks,
    tune_weight,
    tune_weights,
)
from taskret.tart.tasks import Document, RetrievalTask

TOPICS = ["aspirin heart attack risk", "vitamin colds immune", "coffee sleep caffeine", "glacier ice melting",
          "volcano lava eruption", "bread yeast baking", "chess opening gambit", "tide moon gravity"]


def _task(name: str, offset: int) -> RetrievalTask:
    corpus = {f"d{i}": Document(f"d{i}", "", f"{topic} document about {topic.split()[0]}")
              for i, topic in enumerate(TOPICS)}
    queries = {f"q{i}": f"what about {topic.split()[(i + offset) % 3]}" for i, topic in enumerate(TOPICS)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(TOPICS))}
    return RetrievalTask(name, corpus, queries, qrels, ["Find the document"])


def test_lexical_ranking_wins_the_weight_against_random():
    tasks = [_task("a", 0), _task("b", 1)]
    bm25 = rank_tasks(BM25Retriever, tasks, depth=8)
    noise = rank_tasks(lambda: RandomRetriever(seed=3), tasks, depth=8)
    choice = choose_weight(bm25, noise, tasks, grid=[0.0, 0.5, 1.0])
    assert choice.mean_ndcg[1.0] == pytest.approx(100.0)  # BM25 alone finds every document first
    assert choice.mean_ndcg[0.0] < choice.mean_ndcg[1.0]
    assert choice.weight in (0.5, 1.0) and choice.mean_ndcg[choice.weight] == max(choice.mean_ndcg.values())
    assert set(choice.per_task[1.0]) == {"a", "b"}
    # symmetric: the same fusion seen from the other side
    assert fused_ndcg(noise, bm25, tasks, 0.0) == fused_ndcg(bm25, noise, tasks, 1.0)


def test_choose_weight_refuses_bad_grids_and_no_tasks():
    tasks = [_task("a", 0)]
    bm25 = rank_tasks(BM25Retriever, tasks)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        choose_weight(bm25, bm25, tasks, grid=[1.5])
    with pytest.raises(ValueError, match="at least one dev task"):
        choose_weight(bm25, bm25, [])


class WordOverlap(Reranker):
    """A deterministic lexical reranker: words shared by query and document."""

    name = "overlap"

    def score_pairs(self, pairs):
        return np.array([len(set(q.lower().split()) & set(d.lower().split())) for q, d in pairs], dtype=np.float32)


def test_tune_weight_fuses_two_retriever_specs():
    tasks = [_task("a", 0), _task("b", 1)]
    choice = tune_weight("bm25", tasks, second="random", depth=8, grid=[0.0, 0.5, 1.0])
    assert choice.mean_ndcg[1.0] == pytest.approx(100.0) and choice.mean_ndcg[0.0] < 100.0
    assert choice.weight in (0.5, 1.0)


def test_tune_weight_against_a_reranker_gives_the_first_stage_a_small_share():
    # A random first stage reranked (all 8 documents) by word overlap: the reranking alone is perfect, so the
    # first stage's share must be the smallest weight that keeps NDCG@10 at its best.
    tasks = [_task("a", 0), _task("b", 1)]
    choice = tune_weight("random", tasks, reranker=WordOverlap(), rerank_depth=8, depth=8, grid=[0.0, 0.5, 1.0])
    assert choice.mean_ndcg[0.0] == pytest.approx(100.0)
    assert choice.mean_ndcg[1.0] < 100.0
    assert choice.weight in (0.0, 0.5) and choice.mean_ndcg[choice.weight] == pytest.approx(100.0)
    # the reranker only reorders the top rerank_depth: at depth 1 it cannot fix a random order
    shallow = tune_weight("random", tasks, reranker=WordOverlap(), rerank_depth=1, depth=8, grid=[0.0])
    assert shallow.mean_ndcg[0.0] < 100.0
    # by default the first stage keeps at least a tenth, and the (large) gain passes the guard
    default = tune_weight("random", tasks, reranker=WordOverlap(), rerank_depth=8, depth=8)
    assert min(default.mean_ndcg) == 0.1 and default.confidence >= 0.95 and default.weight == default.best < 1.0


def _second_first(task: RetrievalTask, fixed: int) -> tuple:
    """Rankings of ``task``'s queries putting each relevant document second, and a "reranking" that moves it
    first for the first ``fixed`` queries only."""
    qids = list(task.qrels)
    docs = list(task.corpus)

    def ranking(first_for: set[str]) -> RetrievalResult:
        ids = []
        for q in qids:
            relevant = next(iter(task.qrels[q]))
            others = [d for d in docs if d != relevant]
            ids.append([relevant, *others] if q in first_for else [others[0], relevant, *others[1:]])
        scores = np.tile(np.arange(len(docs), 0, -1, dtype=np.float32), (len(qids), 1))
        return RetrievalResult(ids, scores)

    return {task.name: (qids, ranking(set()))}, {task.name: (qids, ranking(set(qids[:fixed])))}


def test_a_gain_on_one_query_in_eight_is_noise_the_guard_keeps_the_first_stage():
    task = _task("a", 0)
    first, lucky = _second_first(task, fixed=1)
    plain = choose_weight(first, lucky, [task], grid=RERANK_GRID)
    assert plain.weight < 1.0 and plain.mean_ndcg[plain.weight] > plain.mean_ndcg[1.0]  # the dev gain is real...
    guarded = choose_weight(first, lucky, [task], grid=RERANK_GRID, confidence=0.95)
    # ...but 7 of 8 queries gain nothing: a resample misses the one that does in (7/8)^8 = 34% of draws
    assert guarded.best == plain.weight and 0.5 < guarded.confidence < 0.8
    assert guarded.weight == 1.0 and guarded.mean_ndcg == plain.mean_ndcg
    assert choose_weight(first, lucky, [task], grid=RERANK_GRID, confidence=0.0).weight == plain.weight
    assert choose_rerank_weight(first, lucky, [task]) == guarded  # the reranker's defaults: RERANK_GRID, 0.95
    # a reranker that helps every query keeps its share
    _, better = _second_first(task, fixed=8)
    sure = choose_weight(first, better, [task], grid=RERANK_GRID, confidence=0.95)
    assert sure.confidence == 1.0 and sure.weight == sure.best < 1.0
    # the first stage against itself gains nothing: never confident
    assert gain_confidence(first, first, [task], 0.5) == 0.0
    with pytest.raises(ValueError, match="confidence"):
        choose_weight(first, better, [task], confidence=1.5)


def test_the_guard_scores_the_first_stage_alone_even_off_the_grid():
    task = _task("a", 0)
    first, better = _second_first(task, fixed=8)
    choice = choose_weight(first, better, [task], grid=[0.2, 0.5], confidence=0.95)
    assert 1.0 in choice.mean_ndcg and choice.weight in (0.2, 0.5)


def test_tune_weight_needs_exactly_one_partner_and_plain_retrievers_to_fuse():
    tasks = [_task("a", 0)]
    with pytest.raises(ValueError, match="exactly one"):
        tune_weight("bm25", tasks)
    with pytest.raises(ValueError, match="exactly one"):
        tune_weight("bm25", tasks, second="random", reranker=WordOverlap())
    with pytest.raises(ValueError, match="plain retrievers"):
        tune_weight("hybrid:bm25+random", tasks, second="random")
    with pytest.raises(ValueError, match="at least one dev task"):
        tune_weight("bm25", [], second="random")


def test_simplex_grid_lists_every_split_of_one():
    grid = simplex_grid(3)
    assert len(grid) == 66 and len(set(grid)) == 66  # C(12, 2) splits of ten tenths into three
    assert all(sum(w) == pytest.approx(1.0) and min(w) >= 0 for w in grid)
    assert simplex_grid(2, step=0.5) == [(1.0, 0.0), (0.5, 0.5), (0.0, 1.0)]
    with pytest.raises(ValueError, match="step dividing 1"):
        simplex_grid(3, step=0.3)


def test_three_rankings_give_the_lexical_one_a_share_and_two_agree_with_choose_weight():
    tasks = [_task("a", 0), _task("b", 1)]
    bm25 = rank_tasks(BM25Retriever, tasks, depth=8)
    noise = [rank_tasks(lambda seed=seed: RandomRetriever(seed=seed), tasks, depth=8) for seed in (3, 4)]
    choice = choose_weights([noise[0], bm25, noise[1]], tasks)
    assert choice.mean_ndcg[(0.0, 1.0, 0.0)] == pytest.approx(100.0) and choice.mean_ndcg[(1.0, 0.0, 0.0)] < 100.0
    assert choice.mean_ndcg[choice.weights] == max(choice.mean_ndcg.values())
    assert choice.weights[1] == max(choice.weights)  # ties go to near-equal shares: BM25 still leads
    assert set(choice.per_task[choice.weights]) == {"a", "b"}
    two = choose_weights([bm25, noise[0]], tasks, grid=[(w, 1 - w) for w in (0.0, 0.5, 1.0)])
    one = choose_weight(bm25, noise[0], tasks, grid=[0.0, 0.5, 1.0])
    assert two.weights[0] == one.weight and {w[0]: m for w, m in two.mean_ndcg.items()} == one.mean_ndcg
    with pytest.raises(ValueError, match="3 shares"):
        choose_weights([bm25, bm25, bm25], tasks, grid=[(0.5, 0.5)])


def test_tune_weights_ranks_each_spec_once_and_refuses_hybrids():
    tasks = [_task("a", 0), _task("b", 1)]
    choice = tune_weights(["random", "bm25", "bm25:output"], tasks, depth=8)
    assert choice.mean_ndcg[(0.0, 1.0, 0.0)] == pytest.approx(100.0)
    assert choice.mean_ndcg[choice.weights] == pytest.approx(100.0) and choice.weights[0] < 0.5
    with pytest.raises(ValueError, match="plain retrievers"):
        tune_weights(["hybrid:bm25+random", "bm25"], tasks)
    with pytest.raises(ValueError, match="plain retrievers"):
        tune_weights(["bm25"], tasks)


def test_components_read_the_instruction_as_the_hybrid_will_give_it():
    # an instruction whose words name one topic pulls every instructed BM25 query to that topic's document
    tasks = [_task("a", 0).with_instructions(["bread yeast baking bread yeast baking"])]
    bare = tune_weights(["bm25", "bm25:output"], tasks, depth=8, grid=[(1.0, 0.0)])
    assert bare.mean_ndcg[(1.0, 0.0)] == pytest.approx(100.0)
    # BM25 reads the query alone by default, as inside the hybrid; told to read the instruction, it loses
    assert tune_weights(["bm25", "bm25:output"], tasks, depth=8, use_instruction=True,
                        grid=[(1.0, 0.0)]).mean_ndcg == bare.mean_ndcg
    read = tune_weights(["bm25", "bm25:output"], tasks, depth=8, use_instruction=True, grid=[(1.0, 0.0)],
                        read_instruction=[True, False])
    assert read.mean_ndcg[(1.0, 0.0)] < 100.0
    one = tune_weight("bm25", tasks, second="random", depth=8, use_instruction=True, read_instruction=[True, False])
    assert one.mean_ndcg[1.0] == pytest.approx(read.mean_ndcg[(1.0, 0.0)])
    # one spec twice, reading the instructed and the bare query: indexed once per task, each share its own reading
    import taskret.retrieval as retrieval

    built = []
    original = retrieval.make_retriever
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retrieval, "make_retriever", lambda spec, **kw: built.append(spec) or original(spec, **kw))
        twice = tune_weight("bm25", tasks, second="bm25", depth=8, use_instruction=True,
                            read_instruction=[True, False])
    assert built == ["bm25"]
    assert twice.mean_ndcg[1.0] == pytest.approx(read.mean_ndcg[(1.0, 0.0)]) and twice.mean_ndcg[0.0] == 100.0
    with pytest.raises(ValueError, match="one switch per component"):
        tune_weights(["bm25", "random"], tasks, read_instruction=[True])
    with pytest.raises(ValueError, match="use_instruction=True"):
        tune_weights(["bm25", "random"], tasks, read_instruction=[True, False])
    with pytest.raises(ValueError, match="give it with second"):
        tune_weight("bm25", tasks, reranker=WordOverlap(), read_instruction=[True])


def test_dev_overlap_names_each_trained_model_whose_training_tasks_include_a_dev_task(tmp_path):
    distilled = tmp_path / "distilled" / "distil"
    (distilled / "model").mkdir(parents=True)
    (distilled / "tart_distil_config.json").write_text(json.dumps({"train_tasks": {"a": 3, "z": 1}}))
    piped = tmp_path / "piped"  # an older pipeline run: only its train_stats.json says what it trained on
    (piped / "dual" / "model").mkdir(parents=True)
    (piped / "dual" / "tart_dual_config.json").write_text(json.dumps({"steps": 2}))
    (piped / "train_stats.json").write_text(json.dumps({"per_task": {"b": 2}}))
    (tmp_path / "plain").mkdir()
    assert training_tasks(distilled / "model") == {"a", "z"} and training_tasks(distilled) == {"a", "z"}
    assert training_tasks(piped / "dual" / "model") == {"b"} and training_tasks(tmp_path / "plain") is None
    assert training_tasks("minilm-l6") is None

    tasks = [_task("a", 0), _task("b", 1), _task("c", 2)]
    hybrid = f"hybrid:bm25+dense:{distilled / 'model'}+dense:{piped / 'dual' / 'model'}?fusion=convex&weights=.2,.4,.4"
    assert dev_overlap([hybrid, None], tasks) == {str(distilled / "model"): ["a"], str(piped / "dual" / "model"): ["b"]}
    assert dev_overlap([f"dense:minilm-l6?query_encoder={distilled}"], tasks) == {str(distilled): ["a"]}
    assert dev_overlap(["bm25", f"dense:{tmp_path / 'plain'}"], tasks) == {}
    assert dev_overlap([hybrid], [_task("c", 0)]) == {}  # held out of both trainings: nothing to say


def test_tuning_warns_when_a_model_it_weighs_trained_on_a_dev_task(tmp_path, tiny_bert_dir, recwarn):
    from taskret.training.encoders import build_bi_encoder

    run = tmp_path / "run"
    build_bi_encoder(str(tiny_bert_dir), max_seq_length=24).save(str(run / "model"))
    (run / "tart_distil_config.json").write_text(json.dumps({"train_tasks": ["a"]}))
    tasks = [_task("a", 0), _task("b", 1)]
    with pytest.warns(DevOverlapWarning, match=r"run/model was trained on a: .* held out of its training"):
        tune_weights(["bm25", f"dense:{run / 'model'}"], tasks, depth=8)
    with pytest.warns(DevOverlapWarning, match="trained on a"):
        tune_weight("bm25", tasks, second=f"dense:{run / 'model'}", depth=8, grid=[0.0, 1.0])
    recwarn.clear()
    tune_weights(["bm25", f"dense:{run / 'model'}"], [_task("b", 1)], depth=8)  # held out: nothing to say
    assert not [w for w in recwarn if issubclass(w.category, DevOverlapWarning)]
