"""``taskret epr run``: the whole EPR pipeline from one config file, skipping stages whose outputs exist.

Layout of the work folder (every file can be inspected, and each stage can be run alone)::

    candidates.jsonl     BM25 neighbours of each training example
    scoring/             shards/, scoring_meta.json, scores.jsonl (scoring-LM log-probabilities)
    labels.jsonl         positives / hard negatives per example
    retriever/           model/ (sentence-transformers dual encoder), training_log.jsonl, epr_config.json
    index/               FAISS index of the training set (meta.json, index.faiss)
    eval/                predictions.jsonl, summary.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..data import Task, load_task, sample
from ..io import read_json, write_json
from ..progress import progress_bar


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
        from ..io import read_json

        return cls.model_validate(read_json(path))

    # Where the work runs, not what it computes: a finished work folder may be resumed with other values.
    EXECUTION_FIELDS: ClassVar[frozenset] = frozenset({"ray", "ray_workers", "ray_gpus_per_worker", "ray_cpus_per_worker"})

    def load_task(self) -> Task:
        return load_task(self.task, train=self.train, test=self.test, input_field=self.input_field,
                         output_field=self.output_field, id_field=self.id_field, data_dir=self.data_dir)


def run_pipeline(config: EPRConfig, console=None, progress: bool = True, lms: dict | None = None) -> dict:
    """Run every stage whose output is missing. ``lms`` caches loaded LMs by name (the scoring and the
    inference LM are often the same model, and a caller such as the demo may already hold it)."""
    from ..backends.base import LMBackend
    from ..backends.base import load_lm as load_backend
    from ..icl.evaluation import evaluate
    from ..io import write_jsonl
    from ..retrieval import DenseRetriever, Retriever
    from .candidates import mine_candidates, read_candidates, write_candidates
    from .labels import bm25_labels, cbr_labels, lm_labels
    from .scoring import read_scores, score_candidates
    from .training import TrainingConfig, train_dual_encoder

    lms = {} if lms is None else lms

    def load_lm(name: str, options: dict) -> LMBackend:
        key = name if not options else f"{name} {json.dumps(options, sort_keys=True)}"
        if key not in lms:
            lms[key] = load_backend(name, options)
        return lms[key]

    from rich.markup import escape

    say = (lambda text: console.print(escape(text))) if console is not None else (lambda text: None)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    # Stages are skipped when their outputs exist, so outputs made under another config must not be reused.
    used_path = work / "pipeline_config.json"
    if used_path.exists():
        used = EPRConfig.model_validate(read_json(used_path))
        changed = sorted(k for k in type(config).model_fields
                         if k not in config.EXECUTION_FIELDS and getattr(used, k) != getattr(config, k))
        if changed:
            raise ValueError(f"{work} was made with another config (changed: {', '.join(changed)}); "
                             f"use a new work_dir or delete the old one")
    else:
        write_json(used_path, config.model_dump())
    task = config.load_task()
    examples = {e.id: e for e in task.train}
    queries = sample(task.train, config.max_train_examples, seed=config.seed)

    cand_path = work / "candidates.jsonl"
    if cand_path.exists():
        say(f"candidates: {cand_path} exists, skipped")
    else:
        # Candidates come from the whole training set; only the labelled queries are a sample.
        rows = mine_candidates(task.train, n=config.n_candidates, field=config.candidate_field)
        wanted = {e.id for e in queries}
        write_candidates(cand_path, [r for r in rows if r["id"] in wanted])
        say(f"candidates: {len(wanted)} examples x {config.n_candidates} -> {cand_path}")
    cand_rows = read_candidates(cand_path, known_ids=set(examples))

    labels_path = work / "labels.jsonl"
    if labels_path.exists():
        say(f"labels: {labels_path} exists, skipped")
    else:
        if config.labels == "lm":
            n_pairs = sum(len(r["candidates"]) for r in cand_rows)
            if config.ray is not None:
                from .distributed import RayScoring

                with RayScoring(config.scoring_lm, config.scoring_lm_options, address=config.ray,
                                workers=config.ray_workers, gpus_per_worker=config.ray_gpus_per_worker,
                                cpus_per_worker=config.ray_cpus_per_worker) as runner:
                    say(f"scoring on Ray: {len(runner.actors)} workers")
                    with progress_bar(n_pairs, "scoring", unit="pairs", enabled=progress) as advance:
                        scores_path = score_candidates(cand_rows, examples, runner.lm_name, work / "scoring",
                                                       fmt=task.output_format, shard_size=config.shard_size,
                                                       progress=advance, shard_runner=runner)
            else:
                lm = load_lm(config.scoring_lm, config.scoring_lm_options)
                with progress_bar(n_pairs, "scoring", unit="pairs", enabled=progress) as advance:
                    scores_path = score_candidates(cand_rows, examples, lm, work / "scoring", fmt=task.output_format,
                                                   shard_size=config.shard_size, progress=advance)
            label_rows = lm_labels(read_scores(scores_path), k=config.k)
        elif config.labels == "bm25":
            label_rows = bm25_labels(cand_rows, k=config.k)
        elif config.labels == "cbr":
            label_rows = cbr_labels(cand_rows, examples, k=config.k)
        else:
            raise ValueError(f"unknown labels '{config.labels}'; expected lm, bm25 or cbr")
        write_jsonl(labels_path, label_rows)
        say(f"labels: {len(label_rows)} rows ({config.labels}) -> {labels_path}")

    retriever_dir = work / "retriever"
    training = TrainingConfig(**{"seed": config.seed, **config.training})
    if (retriever_dir / "model").exists():
        say(f"training: {retriever_dir}/model exists, skipped")
    else:
        train_dual_encoder(task.train, labels_path, retriever_dir, training, progress=progress)
        say(f"training: -> {retriever_dir}/model")

    index_dir = work / "index"
    if (index_dir / "meta.json").exists():
        retriever = Retriever.load(index_dir)
        say(f"index: {index_dir} exists, loaded")
    else:
        retriever = DenseRetriever(encoder=str(retriever_dir / "model"), field=training.field).index(task.train)
        retriever.save(index_dir)
        say(f"index: {len(task.train)} examples -> {index_dir}")

    eval_dir = work / "eval"
    if (eval_dir / "summary.json").exists():
        summary = json.loads((eval_dir / "summary.json").read_text())
        say(f"evaluation: {eval_dir}/summary.json exists, skipped")
    else:
        lm = load_lm(config.inference_lm, config.inference_lm_options)
        test = sample(task.test, config.eval_limit, seed=config.seed)
        with progress_bar(len(test), "evaluating", enabled=progress) as advance:
            summary = evaluate(task, retriever, lm, test, eval_dir, retriever_name=f"epr:{work}",
                               context_window=config.context_window, max_new_tokens=config.max_new_tokens,
                               progress=advance)
    say(f"EPR on {task.name}: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["metrics"].items()))
    return summary
