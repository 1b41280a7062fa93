"""``taskret tart run``: the whole TART pipeline from one config file, skipping stages whose outputs exist.

Stages: build-data -> train-dual -> train-full -> (re-denoise with TART-full) -> (distil) -> evaluate.
``dual`` or ``full`` set to null skips that model; ``distil_teacher`` distils another reranker than TART-full
(e.g. ``fusion:minilm-l6``, BM25 + MiniLM: :mod:`taskret.rerank.fusion`).
Layout of the work folder (every file can be inspected, and each stage can be run alone)::

    pipeline_config.json   the config the folder was made with (a changed config is refused; work_dir may
                           differ: a work folder copied elsewhere resumes)
    logs/run.log           the libraries' logs and warnings, the trainer's log dicts (appended by every run)
    train.jsonl            training rows (instruction, query, positive, negatives); train_stats.json
    dual/                  TART-dual: model/, training_log.jsonl, tart_dual_config.json
    full/                  TART-full: model/ (a CrossEncoder), training_log.jsonl, tart_full_config.json
    train.denoised.jsonl   with ``redenoise``: the rows re-mined with TART-full as the denoiser
    distil/                with ``distil``: TART-full distilled into TART-dual (tart_distil_config.json)
    eval/{system}/         metrics.json and runs/ per evaluated system (dual, full, distil)
    metrics.json           every system's mean metrics, written last

A stage is done when its marker exists (the file, or the config file its run writes last); training
data and evaluations never mix the evaluation split into training: a training task whose data is an
evaluation task's (same file, or same BEIR folder and split) is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from ..io import read_json, write_json
from ..pipeline import Stage, read_config, work_folder

__all__ = ["TartRunConfig", "run_pipeline"]

LOG_FILE = "logs/run.log"
#: Where the work is, not what it computes: a work folder copied or moved elsewhere resumes.
LOCATION_FIELDS = frozenset({"work_dir"})


class TartRunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    work_dir: str = "runs/tart"
    data_dir: Optional[str] = None
    seed: int = 0
    # build-data
    train_tasks: list[str] = Field(default_factory=lambda: ["mtop", "break"],
                                   description="built-in tasks or BEIR folders, each 'name' or 'name:split'")
    train_split: str = "train"
    instructions: dict[str, list[str]] = Field(default_factory=dict,
                                               description="instructions by task name (a BEIR folder has none)")
    max_train_queries: Optional[int] = Field(None, ge=1, description="a seeded sample of N queries per task")
    task_caps: dict[str, PositiveInt] = Field(default_factory=dict, description="per-task query caps (by task name, e.g. "
                                      "'nl2bash', 'mtop') that replace max_train_queries for those tasks")
    first_stage: str = "bm25"
    n_hard: int = Field(5, ge=0)
    n_random: int = Field(2, ge=0)
    n_unfollowing: int = Field(2, ge=0)
    unfollowing_from: Literal["random_tasks", "pooled"] = Field(
        "random_tasks", description="instruction-unfollowing negatives from the other tasks in a random order, or "
        "the first stage's top documents over all other corpora pooled (the ones a pooled search confuses)")
    unfollowing_first_stage: Optional[str] = Field(
        None, description="the retriever that mines the unfollowing negatives (e.g. 'dense:minilm-l6', which matches "
        "a request to a parse of it that shares few words with it); None: first_stage")
    denoiser: Optional[str] = Field(None, description="a CrossEncoder that drops likely false hard negatives")
    denoise_threshold: float = 0.5
    dev_tasks: list[str] = Field(default_factory=list, description="tasks whose dev queries score the models while "
                                 "they train (berri-lite/TASK: its held-out split); [] for none")
    dev_limit: Optional[int] = Field(50, ge=1, description="dev queries per dev task (seeded sample)")
    validate_steps: int = Field(0, ge=0, description="score on the dev tasks every N steps and keep the best "
                                "step's weights; 0: keep the last")
    # training: the fields of TartDualConfig, TartFullConfig and TartDistilConfig (seed defaults to ours)
    dual: Optional[dict] = Field(default_factory=dict, description="TartDualConfig fields; None: no TART-dual "
                                 "(a distillation-only run, whose student then starts from distil's base_model)")
    full: Optional[dict] = Field(default_factory=dict, description="TartFullConfig fields; None: no TART-full "
                                 "(a dual-only run: no re-denoising, distillation or full evaluation)")
    redenoise: bool = Field(False, description="re-mine the rows with TART-full as the denoiser, for distillation")
    distil: Optional[dict] = Field(None, description="TartDistilConfig fields; None: no distillation. Its student "
                                   "starts from TART-dual unless base_model says otherwise")
    distil_teacher: Optional[str] = Field(None, description="the reranker that teaches the student (a spec of "
                                          "load_reranker, e.g. 'fusion:minilm-l6?weight=0.4'); None: TART-full")
    # evaluation
    eval_tasks: list[str] = Field(default_factory=lambda: ["scifact"],
                                  description="evaluated after training; [] for a training-only run")
    eval_split: str = "test"
    eval_limit: Optional[int] = Field(None, ge=1)
    eval_setting: str = "closed"
    eval_instruction: bool = True
    k: int = Field(100, ge=1)
    rerank_first_stage: str = "bm25"
    rerank_top_k: int = Field(100, ge=1)

    @model_validator(mode="after")
    def _full_for_its_users(self) -> "TartRunConfig":
        if self.full is None and (self.redenoise or (self.distil is not None and self.distil_teacher is None)):
            raise ValueError("redenoise, and distil without a distil_teacher, need TART-full: 'full' may not be null "
                             "with them")
        if self.distil_teacher is not None and self.distil is None:
            raise ValueError("distil_teacher is set but distil is null: give distil ({} for the defaults)")
        if self.dual is None and self.full is None and self.distil is None:
            raise ValueError("nothing to train: dual, full and distil are all null")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> "TartRunConfig":
        return read_config(cls, path)

    def dual_config(self):
        from .dual import TartDualConfig

        if self.dual is None:
            return None
        return TartDualConfig.from_dict({"seed": self.seed, **self.dual})

    def full_config(self):
        from .cross_encoder import TartFullConfig

        if self.full is None:
            return None
        return TartFullConfig.from_dict({"seed": self.seed, **self.full})

    def distil_config(self, dual_model: Path):
        from .distil import TartDistilConfig

        student = {"base_model": str(dual_model)} if self.dual is not None else {}
        return TartDistilConfig.from_dict({"seed": self.seed, **student, **(self.distil or {})})


def _check_leakage(config: TartRunConfig) -> None:
    from .tasks import split_task_spec, task_source

    evaluated = {task_source(name, config.eval_split, config.data_dir): name for name in config.eval_tasks}
    # Training on evaluation data leaks it; choosing checkpoints on it tunes on the test set.
    checked = [("training task", spec, config.train_split, "keep evaluation data out of training")
               for spec in config.train_tasks]
    checked += [("dev task", spec, "dev", "choose checkpoints on other data") for spec in config.dev_tasks]
    for role, spec, default_split, advice in checked:
        name, split = split_task_spec(spec, default_split)
        try:
            source = task_source(name, split, config.data_dir)
        except ValueError:
            continue  # a built-in task without the split: skipped when the data is built
        if source in evaluated:
            raise ValueError(f"{role} '{spec}' reads the data of evaluation task '{evaluated[source]}' "
                             f"({config.eval_split}); {advice}")


def _build_rows(config: TartRunConfig, out: Path, stats_path: Path, say, denoiser=None,
                with_instruction: bool = False, progress: bool = False) -> str:
    """Mine the training rows into ``out`` and their counts into ``stats_path``; return the counts in words."""
    from .tasks import load_training_tasks
    from .training_data import build_training_examples, write_training_examples

    tasks, skipped = load_training_tasks(config.train_tasks, config.data_dir, config.train_split,
                                         limit=config.max_train_queries, seed=config.seed,
                                         instructions=config.instructions, task_limits=config.task_caps)
    for message in skipped:
        say(f"build-data: {message}; skipped")
    stats: dict = {}
    rows = build_training_examples(tasks, first_stage=config.first_stage, n_hard=config.n_hard,
                                   n_random=config.n_random, n_unfollowing=config.n_unfollowing, seed=config.seed,
                                   denoiser=denoiser, denoise_threshold=config.denoise_threshold, stats=stats,
                                   denoise_with_instruction=with_instruction,
                                   unfollowing_from=config.unfollowing_from,
                                   unfollowing_first_stage=config.unfollowing_first_stage, progress=progress)
    write_json(stats_path, {k: v for k, v in stats.items() if k != "denoised"})
    write_training_examples(out, rows)
    return (f"{stats['n_rows']} rows ({', '.join(f'{k} {v}' for k, v in stats['per_task'].items())}), "
            f"{stats['n_denoised']} hard negatives dropped by the denoiser")


def run_pipeline(config: TartRunConfig, console=None, progress: bool = True) -> dict:
    """Run every stage whose output is missing; return ``{system: mean metrics}`` (also in ``metrics.json``)."""
    from rich.markup import escape

    from ..training.logs import library_logs

    say = (lambda text: console.print(escape(text))) if console is not None else (lambda text: None)
    work = Path(config.work_dir)
    if config.eval_setting not in ("closed", "pooled", "both"):
        raise ValueError(f"unknown eval_setting '{config.eval_setting}'; expected closed, pooled or both")
    # Every training config is checked before anything runs.
    dual_config, full_config = config.dual_config(), config.full_config()
    distil_config = config.distil_config(work / "dual" / "model") if config.distil is not None else None
    _check_leakage(config)
    with work_folder(work, config, ignore=LOCATION_FIELDS), library_logs(work / LOG_FILE) as log:
        return _run_stages(config, work, say, progress, log, dual_config, full_config, distil_config)


def _run_stages(config: TartRunConfig, work: Path, say, progress: bool, log: Path, dual_config, full_config,
                distil_config) -> dict:
    from ..rerank import load_reranker, make_denoiser
    from ..training.logs import trained
    from .cross_encoder import CONFIG_FILE as FULL_FILE
    from .cross_encoder import train_tart_full
    from .distil import CONFIG_FILE as DISTIL_FILE
    from .distil import train_tart_distil
    from .dual import CONFIG_FILE as DUAL_FILE
    from .dual import train_tart_dual
    from .evaluation import evaluate_retriever
    from .tasks import load_retrieval_task, split_task_spec
    from .training_data import read_training_examples
    from .validation import dual_validator, full_validator


    data = Stage("build-data", work / "train.jsonl", say=say)
    data.run(lambda out: _build_rows(config, out, work / "train_stats.json", say, progress=progress))
    rows = read_training_examples(data.output)

    dev = [load_retrieval_task(name, config.data_dir, split).sample(config.dev_limit, seed=config.seed)
           for name, split in (split_task_spec(spec, "dev") for spec in config.dev_tasks)
           ] if config.validate_steps and config.dev_tasks else []

    def train_dual(out: Path) -> str:
        validate = dual_validator(dev, use_instruction=dual_config.use_instruction) if dev else None
        train_tart_dual(rows, out, dual_config, progress=progress, source=str(data.output), validate=validate,
                        validate_steps=config.validate_steps)
        return trained(out / DUAL_FILE, log)

    def train_full(out: Path) -> str:
        validate = full_validator(dev, first_stage=config.rerank_first_stage, top_k=min(config.rerank_top_k, 20),
                                  use_instruction=full_config.use_instruction) if dev else None
        train_tart_full(rows, out, full_config, progress=progress, source=str(data.output), validate=validate,
                        validate_steps=config.validate_steps)
        return trained(out / FULL_FILE, log)

    if dual_config is not None:
        Stage("train-dual", work / "dual", marker=work / "dual" / DUAL_FILE, say=say).run(train_dual)
    if full_config is not None:
        Stage("train-full", work / "full", marker=work / "full" / FULL_FILE, say=say).run(train_full)

    distil_data = data
    if config.redenoise:
        def redenoise(out: Path) -> str:
            denoiser, with_instruction = make_denoiser(work / "full")
            return _build_rows(config, out, work / "train.denoised_stats.json", say, denoiser=denoiser,
                               with_instruction=with_instruction, progress=progress)

        distil_data = Stage("re-denoise", work / "train.denoised.jsonl", say=say)
        distil_data.run(redenoise)
    if distil_config is not None:
        def distil(out: Path) -> str:
            teacher = config.distil_teacher or work / "full"
            train_tart_distil(read_training_examples(distil_data.output), teacher, out, distil_config,
                              progress=progress, source=str(distil_data.output))
            return trained(out / DISTIL_FILE, log)

        Stage("distil", work / "distil", marker=work / "distil" / DISTIL_FILE, say=say).run(distil)

    if not config.eval_tasks:  # a training-only run (benchmarks/documents/tart_trained.py evaluates its own grid)
        say("evaluate: no eval_tasks, skipped")
        return {}
    tasks = [load_retrieval_task(name, config.data_dir, config.eval_split).sample(config.eval_limit, seed=config.seed)
             for name in config.eval_tasks]
    systems = {"dual": (f"dense:{work / 'dual' / 'model'}", None)} if dual_config is not None else {}
    if full_config is not None:
        systems["full"] = (config.rerank_first_stage, work / "full")
    if distil_config is not None:
        systems["distil"] = (f"dense:{work / 'distil' / 'model'}", None)
    summary: dict = {}
    indexes: dict = {}
    for system, (retriever, rerank) in systems.items():
        eval_dir = work / "eval" / system

        def evaluate(out: Path, retriever=retriever, rerank=rerank, eval_dir=eval_dir, system=system) -> None:
            result = evaluate_retriever(retriever, tasks, setting=config.eval_setting,
                                        use_instruction=config.eval_instruction, k=config.k, run_dir=eval_dir / "runs",
                                        indexes=indexes, reranker=load_reranker(rerank) if rerank else None,
                                        rerank_top_k=config.rerank_top_k)
            result.update({"system": system, "split": config.eval_split, "limit": config.eval_limit})
            write_json(out, result)

        stage = Stage(f"evaluate {system}", eval_dir / "metrics.json", say=say)
        stage.run(evaluate)
        result = read_json(stage.output)
        summary[system] = result["mean"]
        say(f"{system} ({retriever}{' + rerank' if rerank else ''}): " + "; ".join(
            f"{setting} " + ", ".join(f"{m} {v:.1f}" for m, v in metrics.items())
            for setting, metrics in result["mean"].items()))
    write_json(work / "metrics.json", summary)
    return summary
