"""``taskret epr run``: the whole EPR pipeline from one config file, skipping stages whose outputs exist.

Layout of the work folder (every file can be inspected, and each stage can be run alone)::

    candidates.jsonl     BM25 neighbours of each training example
    scoring/             shards/, scoring_meta.json, scores.jsonl (scoring-LM log-probabilities)
    labels.jsonl         positives / hard negatives per example
    retriever/           model/ (sentence-transformers dual encoder), training_log.jsonl, epr_config.json
    index/               FAISS index of the training set (meta.json, index.faiss)
    eval/                predictions.jsonl, summary.json
    logs/run.log         the libraries' logs and warnings, the trainer's log dicts (appended by every run)
    pipeline_config.json the config the folder was made with; a run with another is refused, except for where
                         the work runs (work_dir, ray*): a work folder copied elsewhere resumes
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..data import Task, load_task, sample
from ..pipeline import Stage, guard_config, read_config

LOG_FILE = "logs/run.log"

if TYPE_CHECKING:
    from .distributed import RayOptions


class EPRConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
    training: dict = Field(default_factory=dict, description="TrainingConfig fields")
    inference_lm: str = Field("smollm2-135m", description="LM spec, as scoring_lm")
    inference_lm_options: dict = Field(default_factory=dict, description="backend options of the inference LM")
    eval_limit: Optional[int] = 300
    context_window: int = 2048
    max_new_tokens: int = 128
    seed: int = 0

    @classmethod
    def from_file(cls, path: str | Path) -> "EPRConfig":
        return read_config(cls, path)

    # Where the work runs, not what it computes: a finished work folder may be resumed with other values (a work
    # folder copied or moved elsewhere, or scored on another cluster).
    EXECUTION_FIELDS: ClassVar[frozenset] = frozenset({"work_dir", "ray", "ray_workers", "ray_gpus_per_worker",
                                                       "ray_cpus_per_worker"})

    def load_task(self) -> Task:
        return load_task(self.task, train=self.train, test=self.test, input_field=self.input_field,
                         output_field=self.output_field, id_field=self.id_field, data_dir=self.data_dir)

    def ray_options(self) -> "RayOptions | None":
        from .distributed import RayOptions

        if self.ray is None:
            return None
        return RayOptions(self.ray, self.ray_workers, self.ray_gpus_per_worker, self.ray_cpus_per_worker)


def run_pipeline(config: EPRConfig, console=None, progress: bool = True, lms: dict | None = None) -> dict:
    """Run every stage whose output is missing. ``lms`` caches loaded LMs by name (the scoring and the
    inference LM are often the same model, and a caller such as the demo may already hold it).

    ``console`` gets one line per stage and ``progress`` shows taskret's own bars; the libraries' logs, warnings
    and the trainer's log dicts go to ``work_dir/logs/run.log`` (:func:`~taskret.training.logs.library_logs`)."""
    from rich.markup import escape

    from ..training.logs import library_logs

    lms = {} if lms is None else lms
    say = (lambda text: console.print(escape(text))) if console is not None else (lambda text: None)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    guard_config(work / "pipeline_config.json", config, ignore=config.EXECUTION_FIELDS)
    with library_logs(work / LOG_FILE) as log:
        return _run_stages(config, work, say, progress, lms, log)


def _run_stages(config: EPRConfig, work: Path, say, progress: bool, lms: dict, log: Path) -> dict:
    from ..backends.base import LMBackend
    from ..backends.base import load_lm as load_backend
    from ..icl.evaluation import evaluate
    from ..io import read_json, write_jsonl
    from ..progress import progress_bar
    from ..retrieval import DenseRetriever, Retriever
    from ..training.logs import trained
    from .candidates import mine_candidates, read_candidates, write_candidates
    from .distributed import run_scoring
    from .labels import bm25_labels, cbr_labels, lm_labels
    from .scoring import read_scores
    from .training import CONFIG_FILE, TrainingConfig, train_dual_encoder

    def load_lm(name: str, options: dict) -> LMBackend:
        key = name if not options else f"{name} {json.dumps(options, sort_keys=True)}"
        if key not in lms:
            lms[key] = load_backend(name, options)
        return lms[key]

    task = config.load_task()
    examples = {e.id: e for e in task.train}
    queries = sample(task.train, config.max_train_examples, seed=config.seed)

    def mine(out: Path) -> str:
        # Candidates come from the whole training set; only the labelled queries are a sample.
        wanted = {e.id for e in queries}
        rows = mine_candidates(task.train, n=config.n_candidates, field=config.candidate_field)
        write_candidates(out, [r for r in rows if r["id"] in wanted])
        return f"{len(wanted)} examples x {config.n_candidates}"

    candidates = Stage("candidates", work / "candidates.jsonl", say=say)
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

    labels = Stage("labels", work / "labels.jsonl", say=say)
    labels.run(label)

    training = TrainingConfig(**{"seed": config.seed, **config.training})
    retriever_dir = work / "retriever"

    def train(out: Path) -> str:
        train_dual_encoder(task.train, labels.output, out, training, progress=progress)
        return trained(out / CONFIG_FILE, log)

    Stage("training", retriever_dir, marker=retriever_dir / "model", say=say).run(train)

    def build_index(out: Path) -> str:
        DenseRetriever(encoder=str(retriever_dir / "model"), field=training.field).index(task.train).save(out)
        return f"{len(task.train)} examples"

    index = Stage("index", work / "index", marker=work / "index" / "meta.json", say=say)
    index.run(build_index, reused="loaded")
    retriever = Retriever.load(index.output)

    def run_evaluation(out: Path) -> str:
        lm = load_lm(config.inference_lm, config.inference_lm_options)
        test = sample(task.test, config.eval_limit, seed=config.seed)
        with progress_bar(len(test), "evaluating", enabled=progress) as advance:
            evaluate(task, retriever, lm, test, out, retriever_name=f"epr:{work}", context_window=config.context_window,
                     max_new_tokens=config.max_new_tokens, progress=advance)
        return f"{len(test)} test examples"

    evaluation = Stage("evaluation", work / "eval", marker=work / "eval" / "summary.json", say=say)
    evaluation.run(run_evaluation)
    summary = read_json(evaluation.marker)
    say(f"EPR on {task.name}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()))
    return summary
