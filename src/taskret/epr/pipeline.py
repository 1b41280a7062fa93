"""``taskret epr run``: the whole EPR pipeline from one config file, skipping stages whose outputs exist.

Layout of the work folder (every file can be inspected, and each stage can be run alone)::

    candidates.jsonl     BM25 neighbours of each training example
    scoring/             shards/, scoring_meta.json, scores.jsonl (scoring-LM log-probabilities)
    labels.jsonl         positives / hard negatives per example
    retriever/           model/ (sentence-transformers dual encoder), training_log.jsonl, epr_config.json
    reward/              with ``reward_model`` (LLM-R): model/ (the cross-encoder trained on scoring/'s pairs),
                         retriever/ (the dual encoder taught by it on every training input's top K)
    sets/                with ``set_training`` (CEIL): sets.jsonl, set_scores.jsonl (the LM's log P(y | set, x)),
                         retriever/ (the query encoder fine-tuned for the DPP); evaluation then selects with it
    round2/, round3/ ... with ``rounds`` > 1 (UDR's iterative mining): candidates.jsonl (the previous round's
                         retriever's top L), scoring/ (the new pairs only), labels.jsonl (from every pair scored
                         so far), retriever/ (trained on, starting from the previous round's encoder)
    round_labeller/      with ``round_labeller``: model/ (a reward model trained on round 1's LM scores),
                         reward_config.json, agreement.json; each later round then has reward_labels/ (shards/ of
                         its logits, fit.json, scores.jsonl: the new pairs on the LM's scale) instead of scoring/
    index/               FAISS index of the training set (meta.json, index.faiss)
    eval/                predictions.jsonl, summary.json
    baseline/            predictions.jsonl, summary.json of ``baseline`` (BM25) on the same test inputs; the run ends
                         with one line pairing the two (EM with McNemar, each graded metric with Wilcoxon)
    logs/run.log         the libraries' logs and warnings, the trainer's log dicts (appended by every run)
    stage_times.jsonl    one line per stage run: {"stage", "wall_s", "cpu_s", "made"} (what each stage cost; a
                         training resumed from a checkpoint adds "earlier_s", the earlier sessions' seconds)
    pipeline_config.json the config the folder was made with; a run with another is refused, except for where
                         the work runs (work_dir, ray*): a work folder copied elsewhere resumes
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from ..data import Task, load_task, sample
from ..pipeline import Stage, StoppedAfter, read_config, work_folder
from ..pipeline import stop_after as stop_at

LOG_FILE = "logs/run.log"
TIMES_FILE = "stage_times.jsonl"  # one line per stage that ran: its name, wall seconds and CPU seconds

if TYPE_CHECKING:
    from .distributed import RayOptions


class EPRConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    task: Optional[str] = None
    train: Optional[str] = None
    test: Optional[str] = None
    input_field: Optional[str] = None
    output_field: Optional[str] = None
    id_field: Optional[str] = None
    data_dir: Optional[str] = None
    work_dir: str = "runs/epr"
    max_train_examples: Optional[int] = Field(None, description="label only a seeded sample of the training set")
    n_candidates: int = Field(50, ge=2)
    candidate_field: str = "output"
    scoring_lm: str = Field("smollm2-135m", description="LM spec: a name or folder, openai:URL#MODEL, vllm:MODEL")
    scoring_lm_options: dict = Field(default_factory=dict, description="backend options of the scoring LM")
    shard_size: int = Field(32, ge=1)
    ray: Optional[str] = Field(None, description="score on Ray: auto, local, HOST:PORT or ray://HOST:PORT")
    ray_workers: Optional[int] = Field(None, ge=1, description="Ray actors (default: one per GPU, else per CPU)")
    ray_gpus_per_worker: Optional[float] = Field(None, ge=0)
    ray_cpus_per_worker: float = Field(1.0, gt=0)
    k: int = Field(5, ge=1, description="positives and hard negatives per example")
    labels: str = Field("lm", description="lm (EPR), bm25 (DR-BM25) or cbr")
    reward_model: Optional[dict] = Field(None, description="LLM-R (taskret.epr.reward.RewardConfig fields): a "
                                         "cross-encoder trained on the LM's scores teaches the dual encoder")
    set_training: Optional[dict] = Field(None, description="CEIL (taskret.epr.sets.SetTrainingConfig fields): the "
                                         "scoring LM rates whole sets, the query encoder is fine-tuned for the DPP "
                                         "that then selects each prompt")
    rounds: int = Field(1, ge=1, description="mining rounds (UDR): round r > 1 mines n_candidates with round "
                                             "r-1's retriever, scores the new pairs and trains on from its encoder "
                                             "(with listwise: anew from the base model, on every round's scores)")
    round_budget: Optional[float] = Field(None, gt=0, description="later rounds send the LM new pairs only up to this "
                                          "share of round 1's (0.1: every round together at most 1.1x round 1's "
                                          "calls), the inputs whose previous retriever disagrees most with the LM "
                                          "first; null: every new pair")
    round_labeller: Optional[dict] = Field(None, description="later rounds' new pairs labelled by a reward model "
                                           "(taskret.epr.reward.RewardConfig fields) trained on round 1's LM scores, "
                                           "not by the LM: no LM call after round 1 (the ladder's rung g)")
    listwise: Optional[dict] = Field(None, description="UDR's objective (taskret.epr.listwise.ListwiseConfig "
                                     "fields): every round's retriever learns the LM's order over sampled lists")
    training: dict = Field(default_factory=dict, description="TrainingConfig fields")
    inference_lm: str = Field("smollm2-135m", description="LM spec, as scoring_lm")
    inference_lm_options: dict = Field(default_factory=dict, description="backend options of the inference LM")
    eval_limit: Optional[int] = 300
    context_window: int = 2048
    max_new_tokens: int = 128
    metrics: list[str] = Field(default_factory=list, validation_alias=AliasChoices("metrics", "metric"),
                               description="graded metrics reported beside exact match, as `taskret evaluate "
                               "--metric`: chrf (key `metrics` or `metric`)")
    baseline: Optional[str] = Field("bm25", description="a retriever spec evaluated on the same test inputs, paired "
                                    "with EPR in the run's last line; null: none")
    seed: int = 0

    @model_validator(mode="after")
    def _rounds_need_lm_labels(self) -> "EPRConfig":
        if self.rounds > 1 and self.labels != "lm":
            raise ValueError(f"rounds > 1 re-mines candidates for the scoring LM to label; labels must be 'lm', "
                             f"not '{self.labels}'")
        return self

    @model_validator(mode="after")
    def _listwise_needs_lm_scores(self) -> "EPRConfig":
        if self.listwise is not None and self.labels != "lm":
            raise ValueError(f"the listwise objective learns the scoring LM's order; labels must be 'lm', not "
                             f"'{self.labels}'")
        return self

    @model_validator(mode="after")
    def _reward_needs_lm_labels(self) -> "EPRConfig":
        if self.reward_model is not None and self.labels != "lm":
            raise ValueError(f"a reward model learns from the scoring LM's scores; labels must be 'lm', not "
                             f"'{self.labels}'")
        return self

    @model_validator(mode="after")
    def _round_labeller_needs_rounds(self) -> "EPRConfig":
        if self.round_labeller is not None and (self.rounds < 2 or self.labels != "lm"):
            raise ValueError("round_labeller labels the pairs of rounds after the first and learns from the LM's "
                             f"scores: it needs rounds > 1 and labels 'lm' (rounds {self.rounds}, labels "
                             f"'{self.labels}')")
        if self.round_labeller is not None and self.round_budget is not None:
            raise ValueError("round_labeller sends the LM no pair after round 1; round_budget has nothing to limit")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> "EPRConfig":
        return read_config(cls, path)

    # Where the work runs, not what it computes: a finished work folder may be resumed with other values (a work
    # folder copied or moved elsewhere, or scored on another cluster).
    # ``baseline`` too: it adds a stage of its own and changes no EPR output.
    EXECUTION_FIELDS: ClassVar[frozenset] = frozenset({"work_dir", "ray", "ray_workers", "ray_gpus_per_worker",
                                                       "ray_cpus_per_worker", "baseline"})

    def load_task(self) -> Task:
        return load_task(self.task, train=self.train, test=self.test, input_field=self.input_field,
                         output_field=self.output_field, id_field=self.id_field, data_dir=self.data_dir)

    def ray_options(self) -> "RayOptions | None":
        from .distributed import RayOptions

        if self.ray is None:
            return None
        return RayOptions(self.ray, self.ray_workers, self.ray_gpus_per_worker, self.ray_cpus_per_worker)


def _times(config: EPRConfig) -> Path:
    return Path(config.work_dir) / TIMES_FILE


def run_pipeline(config: EPRConfig, console=None, progress: bool = True, lms: dict | None = None,
                 stop_after: str | None = None) -> dict:
    """Run every stage whose output is missing. ``lms`` caches loaded LMs by name (the scoring and the
    inference LM are often the same model, and a caller such as the demo may already hold it).
    ``stop_after`` (a stage's name, as its progress line starts, e.g. ``"round 3 training"``) ends the run once that
    stage is done and returns ``{"stopped_after": name}``: the rest can run on another machine from a copy of the
    work folder (:func:`taskret.pipeline.stop_after`).

    ``console`` gets one line per stage and ``progress`` shows taskret's own bars; the libraries' logs, warnings
    and the trainer's log dicts go to ``work_dir/logs/run.log`` (:func:`~taskret.training.logs.library_logs`)."""
    from rich.markup import escape

    from ..training.logs import library_logs

    lms = {} if lms is None else lms
    say = (lambda text: console.print(escape(text))) if console is not None else (lambda text: None)
    with work_folder(config.work_dir, config, ignore=config.EXECUTION_FIELDS) as work, \
            library_logs(work / LOG_FILE) as log:
        try:
            with stop_at(stop_after):
                return _run_stages(config, work, say, progress, lms, log)
        except StoppedAfter as stop:
            say(f"stopped after {stop.stage}")
            return {"stopped_after": stop.stage}


def _run_stages(config: EPRConfig, work: Path, say, progress: bool, lms: dict, log: Path) -> dict:
    from ..backends.base import LMBackend, generation_spec
    from ..backends.base import load_lm as load_backend
    from ..icl.evaluation import evaluate
    from ..io import read_json, write_jsonl
    from ..progress import progress_bar
    from ..retrieval import DenseRetriever, Retriever
    from ..training.logs import trained
    from .candidates import mine_candidates, read_candidates, write_candidates
    from .distributed import run_scoring
    from .labels import bm25_labels, cbr_labels, lm_labels
    from .scoring import SCORES_FILE, read_scores
    from .training import CONFIG_FILE, TrainingConfig, train_dual_encoder

    def load_lm(name: str, options: dict) -> LMBackend:
        key = name if not options else f"{name} {json.dumps(options, sort_keys=True)}"
        if key not in lms:
            lms[key] = load_backend(name, options)
        return lms[key]

    task = config.load_task()
    _check_metrics(task, config.metrics)
    examples = {e.id: e for e in task.train}
    queries = sample(task.train, config.max_train_examples, seed=config.seed)

    def mine(out: Path) -> str:
        # Candidates come from the whole training set; only the labelled queries are a sample.
        wanted = {e.id for e in queries}
        rows = mine_candidates(task.train, n=config.n_candidates, field=config.candidate_field)
        write_candidates(out, [r for r in rows if r["id"] in wanted])
        return f"{len(wanted)} examples x {config.n_candidates}"

    candidates = Stage("candidates", work / "candidates.jsonl", say=say, timings=_times(config))
    candidates.run(mine)
    cand_rows = read_candidates(candidates.output, known_ids=set(examples))

    def label(out: Path) -> str:
        if config.labels == "lm":
            scores = run_scoring(cand_rows, examples, config.scoring_lm, work / "scoring",
                                 lm_options=config.scoring_lm_options, fmt=task.output_format,
                                 shard_size=config.shard_size, ray=config.ray_options(), load=load_lm,
                                 progress=progress, say=say)
            rows = lm_labels(read_scores(scores), k=config.k)
        elif config.labels == "bm25":
            rows = bm25_labels(cand_rows, k=config.k)
        elif config.labels == "cbr":
            rows = cbr_labels(cand_rows, examples, k=config.k)
        else:
            raise ValueError(f"unknown labels '{config.labels}'; expected lm, bm25 or cbr")
        write_jsonl(out, rows)
        return f"{len(rows)} rows ({config.labels})"

    labels = Stage("labels", work / "labels.jsonl", say=say, timings=_times(config))
    labels.run(label)

    training = TrainingConfig(**{"seed": config.seed, **config.training})
    retriever_dir = work / "retriever"

    def train(out: Path) -> str:
        if config.listwise is not None:
            _train_listwise(config, task, [work / "scoring" / SCORES_FILE], out, progress)
        else:
            train_dual_encoder(task.train, labels.output, out, training, progress=progress)
        return trained(out / CONFIG_FILE, log)

    _train_round(config, 1, "training", retriever_dir, train, say)

    score_files = [work / "scoring" / SCORES_FILE] if config.labels == "lm" else []
    for round_number in range(2, config.rounds + 1):
        retriever_dir = _next_round(config, task, queries, round_number, retriever_dir, score_files, training,
                                    say, progress, load_lm, log)

    if config.reward_model is not None:
        retriever_dir = _reward_model(config, task, score_files, retriever_dir, say, progress)
    selection = None
    if config.set_training is not None:
        retriever_dir, selection = _set_training(config, task, queries, retriever_dir, say, progress, load_lm)

    def build_index(out: Path) -> str:
        # The field the final retriever was trained to encode (LLM-R's student reads input and output).
        trained_config = retriever_dir / CONFIG_FILE
        field = read_json(trained_config).get("field", training.field) if trained_config.exists() else training.field
        DenseRetriever(encoder=str(retriever_dir / "model"), field=field).index(task.train).save(out)
        return f"{len(task.train)} examples"

    index = Stage("index", work / "index", marker=work / "index" / "meta.json", say=say, timings=_times(config))
    index.run(build_index, reused="loaded")
    retriever = Retriever.load(index.output)

    def run_evaluation(out: Path) -> str:
        lm = load_lm(generation_spec(config.inference_lm, config.inference_lm_options), config.inference_lm_options)
        test = sample(task.test, config.eval_limit, seed=config.seed)
        with progress_bar(len(test), "evaluating", enabled=progress) as advance:
            evaluate(task, retriever, lm, test, out, retriever_name=f"epr:{work}", context_window=config.context_window,
                     max_new_tokens=config.max_new_tokens, progress=advance, selection=selection,
                     metrics=config.metrics)
        return f"{len(test)} test examples"

    evaluation = Stage("evaluation", work / "eval", marker=work / "eval" / "summary.json", say=say, timings=_times(config))
    evaluation.run(run_evaluation)
    summary = read_json(evaluation.marker)
    say(f"EPR on {task.name}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()))
    if config.baseline is not None:
        _baseline(config, task, work, load_lm, say, progress)
    return summary


def _check_metrics(task: Task, metrics: list[str]) -> None:
    """An unknown metric, chrf without sacrebleu, or LF-EM without its extra or WordNet fails before any stage
    runs."""
    from ..icl.evaluation import check_match_metrics, graded_metrics_for

    graded_metrics_for(task, metrics)
    check_match_metrics(task)


def _baseline(config: EPRConfig, task: Task, work: Path, load_lm, say, progress: bool) -> None:
    """``baseline/``: the baseline retriever on EPR's test inputs, with EPR's LM and prompt settings; then the line
    pairing the two (:func:`taskret.icl.compare.comparison_line`)."""
    import shutil

    from ..backends.base import generation_spec
    from ..icl.compare import compare_runs, comparison_line
    from ..icl.evaluation import evaluate
    from ..io import read_json
    from ..progress import progress_bar
    from ..retrieval import make_retriever

    def run_baseline(out: Path) -> str:
        retriever = make_retriever(config.baseline, seed=config.seed)
        if not retriever.ids:
            retriever.index(task.train)
        lm = load_lm(generation_spec(config.inference_lm, config.inference_lm_options), config.inference_lm_options)
        test = sample(task.test, config.eval_limit, seed=config.seed)
        with progress_bar(len(test), f"evaluating {config.baseline}", enabled=progress) as advance:
            evaluate(task, retriever, lm, test, out, retriever_name=config.baseline,
                     context_window=config.context_window, max_new_tokens=config.max_new_tokens, progress=advance,
                     metrics=config.metrics)
        return f"{config.baseline}, {len(test)} test examples"

    stage = Stage("baseline", work / "baseline", marker=work / "baseline" / "summary.json", say=say,
                  timings=_times(config))
    if stage.done and read_json(stage.marker).get("retriever") != config.baseline:  # another baseline's, made earlier
        shutil.rmtree(stage.output)
    stage.run(run_baseline)
    names = ("EPR", "BM25" if config.baseline == "bm25" else config.baseline)
    say(comparison_line(compare_runs(work / "eval", work / "baseline", *names)))


def _next_round(config: EPRConfig, task: Task, queries: list, round_number: int, previous_dir: Path,
                score_files: list[Path], training, say, progress: bool, load_lm, log: Path) -> Path:
    """One UDR round in ``work/round{r}/``: mine with the previous round's retriever, score only the pairs no
    round scored yet, label from all scored pairs, train on from the previous encoder. ``score_files`` (every
    earlier round's scores) gets this round's. Returns this round's retriever folder."""
    from ..io import write_jsonl
    from ..training.logs import trained
    from .candidates import merge_scores, mine_candidates_with, read_candidates, unscored, write_candidates
    from .distributed import run_scoring
    from .labels import lm_labels
    from .scoring import SCORES_FILE, read_scores
    from .training import CONFIG_FILE, load_retriever, train_dual_encoder

    work = Path(config.work_dir) / f"round{round_number}"
    work.mkdir(parents=True, exist_ok=True)
    examples = {e.id: e for e in task.train}
    name = f"round {round_number}"

    def mine(out: Path) -> str:
        retriever = load_retriever(previous_dir)
        retriever.index(task.train)
        write_candidates(out, mine_candidates_with(retriever, task.train, queries, n=config.n_candidates))
        return f"{len(queries)} examples x {config.n_candidates} by {previous_dir}"

    candidates = Stage(f"{name} candidates", work / "candidates.jsonl", say=say, timings=_times(config))
    candidates.run(mine)

    def label(out: Path) -> str:
        # Only here: a resumed round whose labels exist reads no earlier scores at all.
        earlier_by_round = [read_scores(path) for path in score_files]
        earlier = [row for rows in earlier_by_round for row in rows]
        fresh = unscored(read_candidates(candidates.output, known_ids=set(examples)), earlier)
        if config.round_budget is not None:
            fresh = _within_budget(config, fresh, earlier_by_round, previous_dir, examples, work / "budget.json")
        scores = work / "scoring" / SCORES_FILE
        if config.round_labeller is not None:
            new_rows = _reward_labelled(config, task, fresh, earlier_by_round, work / "reward_labels", say, progress)
            write_jsonl(out, lm_labels(merge_scores(earlier, new_rows), k=config.k))
            return (f"{sum(len(r['candidates']) for r in new_rows)} new pairs labelled by the reward model, none by "
                    f"the LM; labels from all rounds")
        if fresh:
            scores = run_scoring(fresh, examples, config.scoring_lm, work / "scoring",
                                 lm_options=config.scoring_lm_options, fmt=task.output_format,
                                 shard_size=config.shard_size, ray=config.ray_options(), load=load_lm,
                                 progress=progress, say=say)
        new_rows = read_scores(scores) if scores.exists() else []
        write_jsonl(out, lm_labels(merge_scores(earlier, new_rows), k=config.k))
        budget = f" (round budget {config.round_budget:g}: {len(fresh)} inputs)" if config.round_budget else ""
        return f"{sum(len(r['candidates']) for r in fresh)} new pairs scored{budget}, labels from all rounds"

    labels = Stage(f"{name} labels", work / "labels.jsonl", say=say, timings=_times(config))
    labels.run(label)
    if (work / "scoring" / SCORES_FILE).exists():
        score_files.append(work / "scoring" / SCORES_FILE)
    if (work / "reward_labels" / SCORES_FILE).exists():  # round_labeller's: the next round and listwise read them
        score_files.append(work / "reward_labels" / SCORES_FILE)
    retriever_dir = work / "retriever"
    continued = training.__class__(**{**training.to_dict(), "base_model": str(previous_dir / "model")})

    def train(out: Path) -> str:
        if config.listwise is not None:  # UDR: each round trains anew from the base, on every round's scores
            _train_listwise(config, task, score_files, out, progress)
        else:
            train_dual_encoder(task.train, labels.output, out, continued, progress=progress)
        return trained(out / CONFIG_FILE, log)

    _train_round(config, round_number, f"{name} training", retriever_dir, train, say)
    return retriever_dir


def _within_budget(config: EPRConfig, fresh: list[dict], earlier_by_round: list[list[dict]], previous_dir: Path,
                   examples: dict, record: Path) -> list[dict]:
    """The rows of ``fresh`` (new pairs by input) the LM scores within ``round_budget``: round 1's pairs x the
    budget, less what earlier later-rounds scored, spent on whole inputs, those whose previous retriever ranks their
    scored candidates least like the LM (Spearman) first. ``earlier_by_round``: each earlier round's score rows, round
    1's first. What was chosen, and why, goes to ``record``."""
    from scipy.stats import spearmanr

    from ..io import write_json
    from .reward import encoder_scores
    from .training import load_retriever

    counted = [sum(len(r["candidates"]) for r in rows) for rows in earlier_by_round]
    budget = int(round(config.round_budget * counted[0])) - sum(counted[1:])
    merged = {}
    for rows in earlier_by_round:
        for row in rows:
            merged.setdefault(row["id"], []).extend(row["candidates"])
    wanted = [{"id": r["id"], "candidates": merged[r["id"]]} for r in fresh if r["id"] in merged]
    retriever_scores = encoder_scores(load_retriever(previous_dir), wanted, examples)
    disagreement = {}
    for row in wanted:
        lm = [c["logprob"] for c in row["candidates"]]
        mine = retriever_scores[row["id"]]
        rho = spearmanr(lm, mine).statistic if len(lm) > 2 and len(set(lm)) > 1 and len(set(mine)) > 1 else 0.0
        disagreement[row["id"]] = float(rho) if rho == rho else 0.0  # NaN (constant ranks): no signal
    chosen, spent = [], 0
    for row in sorted(fresh, key=lambda r: (disagreement.get(r["id"], 0.0), r["id"])):
        if spent + len(row["candidates"]) <= budget:
            chosen.append(row)
            spent += len(row["candidates"])
    order = {r["id"]: n for n, r in enumerate(fresh)}
    chosen.sort(key=lambda r: order[r["id"]])
    write_json(record, {"round_budget": config.round_budget, "round1_pairs": counted[0],
                        "earlier_rounds_pairs": sum(counted[1:]), "budget_pairs": max(budget, 0), "pairs": spent,
                        "inputs": [r["id"] for r in chosen], "inputs_with_new_pairs": len(fresh),
                        "spearman_of_chosen": {r["id"]: round(disagreement.get(r["id"], 0.0), 4) for r in chosen}},
               compact=("inputs", "spearman_of_chosen"))
    return chosen


def _reward_labelled(config: EPRConfig, task: Task, fresh: list[dict], earlier_by_round: list[list[dict]],
                     work: Path, say, progress: bool) -> list[dict]:
    """``round_labeller``'s labels for a later round's new pairs (:mod:`taskret.epr.reward_labels`), in
    ``work/scores.jsonl`` with ``fit.json``. The reward model is trained once, on round 1's LM scores, in the work
    folder's ``round_labeller/`` (model/, reward_config.json, agreement.json: its ranking against the LM's on
    the inputs it held out)."""
    from ..io import read_json, write_json, write_jsonl
    from ..progress import progress_bar
    from .reward import RewardConfig, ranking_agreement, reward_scores, train_reward_model
    from .reward_labels import reward_labelled_rows
    from .scoring import SCORES_FILE, read_scores

    settings = RewardConfig(**{"seed": config.seed, **config.round_labeller})
    root = Path(config.work_dir) / "round_labeller"
    round1 = earlier_by_round[0]

    def train(out: Path) -> str:
        with progress_bar(len(round1) * settings.epochs, "round labeller", unit="inputs", enabled=progress) as step:
            train_reward_model(task, round1, out, settings, progress=step)
        return f"reward model on round 1's LM scores of {len(round1)} inputs"

    Stage("round labeller", root, marker=root / "model", say=say, timings=_times(config)).run(train)

    def agree(out: Path) -> str:
        held = set(read_json(root / "reward_config.json")["held_out_ids"])
        rows = [r for r in round1 if r["id"] in held]
        pool = {e.id: e for e in task.train}
        logits = reward_scores(root / "model", task, [pool[r["id"]] for r in rows],
                               [[c["id"] for c in r["candidates"]] for r in rows])
        agreement = ranking_agreement(rows, {"reward_model": {r["id"]: v.tolist() for r, v in zip(rows, logits)}})
        write_json(out, {"what": "the round labeller's agreement with the scoring LM's ranking of round 1's pairs of "
                                 "the inputs it held out of training", **agreement["reward_model"]})
        return f"Spearman {agreement['reward_model']['spearman']} on {len(rows)} held-out inputs"

    Stage("round labeller agreement", root / "agreement.json", say=say, timings=_times(config)).run(agree)
    scores = work / SCORES_FILE
    if scores.exists():
        return read_scores(scores)
    n = len(fresh)
    with progress_bar(n, "reward labels", unit="inputs", enabled=progress) as advance:
        rows, fit = reward_labelled_rows(root / "model", task, fresh, [r for rows in earlier_by_round for r in rows],
                                         work, progress=advance)
    write_jsonl(scores, rows)
    say(f"reward labels: {fit['pairs_labelled']} pairs of {fit['inputs']} inputs, map slope {fit['slope']}, "
        f"R2 within inputs {fit['r2_within_inputs']}")
    return rows


def _train_round(config: EPRConfig, round_number: int, stage: str, retriever_dir: Path, train, say) -> None:
    """Round ``round_number``'s training stage, unless its retriever is not needed. The last round's serves
    everything after it. An earlier round's mines the next round's candidates and, unless training is listwise
    (UDR: each round trains anew from the base on every round's scores), is the next round's starting point; so with
    listwise training a round whose successor has its candidates already (mined before a stop, or on another
    machine) needs none."""
    following = Path(config.work_dir) / f"round{round_number + 1}" / "candidates.jsonl"
    if config.listwise is not None and round_number < config.rounds and following.exists():
        say(f"{stage}: not needed, round {round_number + 1}'s candidates exist (listwise rounds each train anew "
            "from the base)")
        return
    Stage(stage, retriever_dir, marker=retriever_dir / "model", say=say, timings=_times(config)).run(train)


def _merged_scores(score_files: list[Path]) -> list[dict]:
    """Every round's scored pairs, one row per input (:func:`~taskret.epr.candidates.merge_scores`)."""
    from .candidates import merge_scores
    from .scoring import read_scores

    return merge_scores(*[read_scores(path) for path in score_files])


def _train_listwise(config: EPRConfig, task: Task, score_files: list[Path], out: Path, progress: bool) -> None:
    """UDR's objective (:mod:`taskret.epr.listwise`) on the merged scores of ``score_files``."""
    from ..progress import progress_bar
    from .listwise import ListwiseConfig, train_listwise

    settings = ListwiseConfig(**{"seed": config.seed, **config.listwise})
    rows = _merged_scores(score_files)
    with progress_bar(len(rows) * settings.epochs, "listwise training", unit="inputs", enabled=progress) as advance:
        train_listwise(task.train, rows, out, settings, progress=advance)


def _set_training(config: EPRConfig, task: Task, queries: list, encoder_dir: Path, say, progress: bool, load_lm):
    """CEIL's stages in ``work/sets/`` (:mod:`taskret.epr.sets`): sample sets from the retriever's top K, score each
    with the scoring LM, fine-tune the query encoder. Returns the new retriever folder and the DPP selection that
    matches the training's scale factor."""
    from ..icl.selection import Selection, weight_for_scale_factor
    from ..io import read_jsonl, write_jsonl
    from ..progress import progress_bar
    from .sets import SetTrainingConfig, sample_sets, score_sets_in_shards, train_set_encoder
    from .training import load_retriever

    settings = SetTrainingConfig(**{"seed": config.seed, **config.set_training})
    work = Path(config.work_dir) / "sets"
    work.mkdir(parents=True, exist_ok=True)

    def draw(out: Path) -> str:
        retriever = load_retriever(encoder_dir)
        retriever.index(task.train)
        write_jsonl(out, sample_sets(retriever, task.train, queries, settings))
        return f"{len(queries)} examples x {settings.n_sets} sets of {settings.set_size}"

    sets = Stage("sets", work / "sets.jsonl", say=say, timings=_times(config))
    sets.run(draw)

    def score(out: Path) -> str:
        rows = read_jsonl(sets.output)
        n_sets = sum(len(r["sets"]) for r in rows)
        lm = load_lm(config.scoring_lm, config.scoring_lm_options)
        with progress_bar(n_sets, "set scoring", unit="sets", enabled=progress) as advance:
            write_jsonl(out, score_sets_in_shards(task, rows, lm, work / "set_shards", settings.shard_size,
                                                  progress=advance))
        return f"{n_sets} sets"

    scores = Stage("set scoring", work / "set_scores.jsonl", say=say, timings=_times(config))
    scores.run(score)
    retriever_dir = work / "retriever"

    def train(out: Path) -> str:
        n_rows = len(read_jsonl(scores.output))
        with progress_bar(n_rows * settings.epochs, "set training", unit="inputs", enabled=progress) as advance:
            train_set_encoder(task, encoder_dir / "model", scores.output, out, settings, progress=advance)
        return f"{settings.epochs} epochs over {n_rows} inputs"

    Stage("set training", retriever_dir, marker=retriever_dir / "model", say=say, timings=_times(config)).run(train)
    return retriever_dir, Selection("dpp", weight_for_scale_factor(settings.scale_factor), settings.n_candidates)


def _reward_model(config: EPRConfig, task: Task, score_files: list[Path], encoder_dir: Path, say,
                  progress: bool) -> Path:
    """LLM-R's stages in ``work/reward/`` (:mod:`taskret.epr.reward`): train the reward model on every pair the LM
    scored (but a held-out share of the inputs), have it score every scored pair (``teacher_scores.jsonl``), say
    how well it, the EPR retriever and BM25 agree with the LM on the held-out inputs (``agreement.json``), then
    distil it into a retriever. Returns the distilled retriever's folder."""
    import functools

    from ..io import read_json, read_jsonl, write_json, write_jsonl
    from ..progress import progress_bar
    from .finetune import held_out_ids
    from .reward import RewardConfig, distill_reward, reward_scores, train_reward_model
    from .scoring import read_scores

    settings = RewardConfig(**{"seed": config.seed, **config.reward_model})
    work = Path(config.work_dir) / "reward"
    pool = {e.id: e for e in task.train}

    @functools.cache
    def scored() -> list[dict]:  # read only by a stage that runs: a resumed run reads no scores
        return _merged_scores(score_files)

    def train(out: Path) -> str:
        rows = scored()
        n = (len(rows) - len(held_out_ids(rows, settings.held_out, settings.seed))) * settings.epochs
        with progress_bar(n, "reward model", unit="inputs", enabled=progress) as advance:
            train_reward_model(task, rows, out, settings, progress=advance)
        return f"{sum(len(r['candidates']) for r in rows)} scored pairs"

    teacher_dir = work / "teacher"
    Stage("reward model", teacher_dir, marker=teacher_dir / "model", say=say, timings=_times(config)).run(train)

    def score(out: Path) -> str:
        rows = scored()
        with progress_bar(len(rows), "teacher scores", unit="inputs", enabled=progress) as advance:
            rewards = reward_scores(teacher_dir / "model", task, [pool[r["id"]] for r in rows],
                                    [[c["id"] for c in r["candidates"]] for r in rows], progress=advance)
        teacher = [{"id": r["id"], "candidates": [{"id": c["id"], "reward": round(float(v), 5)}
                                                  for c, v in zip(r["candidates"], values)]}
                   for r, values in zip(rows, rewards)]
        held = set(read_json(teacher_dir / "reward_config.json")["held_out_ids"])
        agreement = _agreement(config, task, [r for r in read_scores(score_files[0]) if r["id"] in held],
                               {r["id"]: {c["id"]: c["reward"] for c in r["candidates"]} for r in teacher}, encoder_dir)
        write_json(work / "agreement.json", agreement)
        write_jsonl(out, teacher)
        shown = ", ".join(f"{name} {v['spearman']}" for name, v in agreement["scorers"].items())
        return f"{len(teacher)} inputs; Spearman with the LM on {agreement['n_inputs']} held-out inputs: {shown}"

    teacher_scores = Stage("teacher scores", work / "teacher_scores.jsonl", say=say, timings=_times(config))
    teacher_scores.run(score)
    retriever_dir = work / "retriever"

    def distill(out: Path) -> str:
        teacher = read_jsonl(teacher_scores.output)
        n = len(teacher) * settings.distill_epochs
        with progress_bar(n, "reward distillation", unit="inputs", enabled=progress) as advance:
            distill_reward(task, teacher, out, settings, progress=advance)
        return f"{len(teacher)} inputs, groups of {settings.distill_group_size}"

    Stage("reward distillation", retriever_dir, marker=retriever_dir / "model", say=say, timings=_times(config)).run(distill)

    def check_student(out: Path) -> str:
        # Did the distillation take? The student on the same held-out inputs, against the LM and its own teacher.
        import numpy as np
        from scipy.stats import spearmanr

        from .reward import encoder_scores, ranking_agreement
        from .training import load_retriever

        held = set(read_json(teacher_dir / "reward_config.json")["held_out_ids"])
        rows = [r for r in read_scores(score_files[0]) if r["id"] in held]
        # By candidate id: with later rounds the teacher scored more candidates than the first round's rows hold.
        teacher = {r["id"]: {c["id"]: c["reward"] for c in r["candidates"]} for r in read_jsonl(teacher_scores.output)}
        student = encoder_scores(load_retriever(retriever_dir), rows, pool)
        agreement = ranking_agreement(rows, {"distilled_retriever": student})["distilled_retriever"]
        with_teacher = [spearmanr(student[r["id"]], [teacher[r["id"]][c["id"]] for c in r["candidates"]]).statistic
                        for r in rows]
        agreement["spearman_vs_teacher"] = round(float(np.nanmean(with_teacher)), 4) if rows else None
        write_json(out, {"what": "the distilled retriever's agreement with the scoring LM's ranking and with its "
                                 "teacher's, on the teacher's held-out inputs (the student trained on them)",
                         "n_inputs": len(rows), "distilled_retriever": agreement})
        return (f"Spearman with the LM {agreement['spearman']}, with the teacher {agreement['spearman_vs_teacher']} "
                f"on {len(rows)} held-out inputs")

    Stage("student agreement", work / "student_agreement.json", say=say, timings=_times(config)).run(check_student)
    return retriever_dir


def _agreement(config: EPRConfig, task: Task, held_rows: list[dict], teacher: dict, encoder_dir: Path) -> dict:
    """``agreement.json``: the reward model's, the EPR retriever's and BM25's agreement with the LM's ranking of the
    held-out inputs' first-round (BM25) candidates (:func:`taskret.epr.reward.ranking_agreement`). The EPR
    retriever was trained on every input's labels, these included: its figure is an in-sample one. ``teacher``: input id -> {candidate id: reward}."""
    from .candidates import read_candidates
    from .reward import encoder_scores, ranking_agreement
    from .training import load_retriever

    pool = {e.id: e for e in task.train}
    bm25 = {r["id"]: dict(zip(r["candidates"], r["bm25"]))
            for r in read_candidates(Path(config.work_dir) / "candidates.jsonl", known_ids=set(pool))}
    retriever = load_retriever(encoder_dir)
    scorers = {"reward_model": {r["id"]: [teacher[r["id"]][c["id"]] for c in r["candidates"]] for r in held_rows},
               "bm25": {r["id"]: [bm25[r["id"]].get(c["id"], 0.0) for c in r["candidates"]] for r in held_rows}}
    if held_rows:
        scorers["epr_retriever"] = encoder_scores(retriever, held_rows, pool)
    return {"what": "agreement with the scoring LM's ranking (mean log-probability per token) of each held-out "
                    "input's scored BM25 candidates; epr_retriever was trained on these inputs' labels",
            "n_inputs": len(held_rows), "scorers": ranking_agreement(held_rows, scorers)}
