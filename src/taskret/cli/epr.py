"""``taskret epr ...``: each EPR stage from files on disk, and ``run`` for the whole pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from .common import (
    MINI_BATCH_HELP,
    App,
    DataDir,
    Device,
    Dtype,
    FormatName,
    IdField,
    InputField,
    LMOptions,
    LMSpec,
    OutputField,
    RayAddress,
    RayCpus,
    RayGpus,
    RayWorkers,
    TaskName,
    TrainFile,
    console,
    load_task_from_options,
    ray_options,
    say,
)

app = App(help="EPR: learn a prompt retriever from language-model scores.")


ConfigFile = Annotated[Optional[Path], typer.Option(
    "--config", help="an EPR config (`taskret epr run`'s, or WORK/pipeline_config.json): its task, train, "
    "input_field, output_field, id_field and data_dir stand in for those options when they are not given")]


def _pool(task, train, input_field, output_field, id_field, fmt, data_dir, config=None):
    """The task whose training pool the stages use (a --train file alone is enough); ``config``, an EPR config
    file, gives the task options not given on the command line."""
    if config is not None:
        from ..epr.pipeline import EPRConfig

        cfg = EPRConfig.from_file(config)
        if task is None and train is None:
            task, train = cfg.task, Path(cfg.train) if cfg.train else None
        input_field, output_field = input_field or cfg.input_field, output_field or cfg.output_field
        id_field = id_field or cfg.id_field
        data_dir = data_dir or (Path(cfg.data_dir) if cfg.data_dir else None)
    return load_task_from_options(task, train=train, input_field=input_field, output_field=output_field,
                                  id_field=id_field, fmt=fmt, data_dir=data_dir, pool_only=True)


@app.command()
def candidates(
    task: TaskName = None, train: TrainFile = None, input_field: InputField = None,
    output_field: OutputField = None, id_field: IdField = None, fmt: FormatName = None, data_dir: DataDir = None,
    config: ConfigFile = None,
    n: int = typer.Option(50, min=1, help="candidates per training example"),
    field: str = typer.Option("output", help="search BM25 by output, input or both"),
    limit: Optional[int] = typer.Option(None, min=1, help="only a seeded sample of N training examples as queries"),
    seed: int = typer.Option(0),
    out: Path = typer.Option(..., help="candidates JSONL to write"),
):
    """Top-N BM25 neighbours of every training example (itself excluded) -> JSONL."""
    from ..data import sample
    from ..epr.candidates import mine_candidates, write_candidates

    loaded = _pool(task, train, input_field, output_field, id_field, fmt, data_dir, config)
    wanted = {e.id for e in sample(loaded.train, limit, seed=seed)}
    rows = [r for r in mine_candidates(loaded.train, n=n, field=field) if r["id"] in wanted]
    write_candidates(out, rows)
    console.print(f"{len(rows)} examples x {n} candidates -> {out}")


@app.command()
def score(
    candidates_file: Path = typer.Option(..., "--candidates", help="candidates JSONL"),
    task: TaskName = None, train: TrainFile = None, input_field: InputField = None,
    output_field: OutputField = None, id_field: IdField = None, fmt: FormatName = None, data_dir: DataDir = None,
    config: ConfigFile = None,
    lm: LMSpec = "smollm2-135m",
    lm_option: LMOptions = None,
    shard_size: int = typer.Option(32, min=1, help="examples per resumable shard"),
    device: Device = None, dtype: Dtype = "auto",
    ray: RayAddress = None, ray_workers: RayWorkers = None, ray_gpus_per_worker: RayGpus = None,
    ray_cpus_per_worker: RayCpus = 1.0,
    out: Path = typer.Option(..., help="scoring folder (resumes if it exists)"),
):
    """log P(y | candidate, x) for every pair, in resumable shards -> OUT/scores.jsonl."""
    from ..backends.base import parse_options
    from ..epr.candidates import read_candidates
    from ..epr.distributed import run_scoring

    loaded = _pool(task, train, input_field, output_field, id_field, fmt, data_dir, config)
    examples = {e.id: e for e in loaded.train}
    rows = read_candidates(candidates_file, known_ids=set(examples))
    on_ray = ray_options(ray, ray_workers, ray_gpus_per_worker, ray_cpus_per_worker)
    path = run_scoring(rows, examples, lm, out, lm_options=parse_options(lm_option), fmt=loaded.output_format,
                       shard_size=shard_size, ray=on_ray, device=device, dtype=dtype, say=say)
    console.print(f"scores -> {path}")


@app.command()
def label(
    scores: Optional[Path] = typer.Option(None, help="scores.jsonl (EPR labels)"),
    candidates_file: Optional[Path] = typer.Option(None, "--candidates", help="candidates JSONL (bm25/cbr labels)"),
    method: str = typer.Option("lm", help="lm (EPR), bm25 (DR-BM25) or cbr"),
    task: TaskName = None, train: TrainFile = None, input_field: InputField = None,
    output_field: OutputField = None, id_field: IdField = None, fmt: FormatName = None, data_dir: DataDir = None,
    config: ConfigFile = None,
    k: int = typer.Option(5, min=1, help="positives and hard negatives per example"),
    out: Path = typer.Option(..., help="labels JSONL to write"),
):
    """Top-k positives and bottom-k hard negatives per example -> JSONL."""
    from ..epr.candidates import read_candidates
    from ..epr.labels import bm25_labels, cbr_labels, lm_labels
    from ..io import write_jsonl

    if method == "lm":
        if scores is None:
            raise ValueError("--method lm needs --scores")
        from ..epr.scoring import read_scores

        rows = lm_labels(read_scores(scores), k=k)
    elif method in ("bm25", "cbr"):
        if candidates_file is None:
            raise ValueError(f"--method {method} needs --candidates")
        if method == "bm25":
            cands = read_candidates(candidates_file)
            missing = [r["id"] for r in cands if not isinstance(r.get("bm25"), list)
                       or len(r["bm25"]) != len(r["candidates"])]
            if missing:
                raise ValueError(f"{candidates_file}: row '{missing[0]}' has no list of bm25 scores, one per "
                                 f"candidate (as `taskret epr candidates` writes)")
            rows = bm25_labels(cands, k=k)
        else:
            loaded = _pool(task, train, input_field, output_field, id_field, fmt, data_dir, config)
            examples = {e.id: e for e in loaded.train}
            cands = read_candidates(candidates_file, known_ids=set(examples))
            rows = cbr_labels(cands, examples, k=k)
    else:
        raise ValueError(f"unknown method '{method}'; expected lm, bm25 or cbr")
    write_jsonl(out, rows)
    console.print(f"{len(rows)} label rows -> {out}")


@app.command()
def train(
    labels: Path = typer.Option(..., help="labels JSONL"),
    task: TaskName = None, train_file: TrainFile = None, input_field: InputField = None,
    output_field: OutputField = None, id_field: IdField = None, fmt: FormatName = None, data_dir: DataDir = None,
    config: ConfigFile = None,
    base_model: str = typer.Option("minilm-l6"),
    shared_encoder: bool = typer.Option(False, help="one encoder for inputs and examples"),
    field: str = typer.Option("both", help="what the example encoder reads of a demonstration: input, output or "
                              "both ('{input}\\t{output}', EPR's code's setup_type=qa)"),
    epochs: int = typer.Option(3, min=1), batch_size: int = typer.Option(120, min=1),
    mini_batch_size: int = typer.Option(16, min=0, help=MINI_BATCH_HELP),
    learning_rate: float = typer.Option(2e-5), seed: int = typer.Option(0),
    out: Path = typer.Option(..., help="output folder: model/, training_log.jsonl, epr_config.json"),
):
    """Train the dual encoder with the DPR loss (in-batch + hard negatives, cached for large batches)."""
    from ..epr.training import CONFIG_FILE, TrainingConfig, train_dual_encoder
    from ..training.logs import library_logs, trained

    loaded = _pool(task, train_file, input_field, output_field, id_field, fmt, data_dir, config)
    settings = TrainingConfig(base_model=base_model, shared_encoder=shared_encoder, field=field, epochs=epochs,
                              batch_size=batch_size, mini_batch_size=mini_batch_size, learning_rate=learning_rate,
                              seed=seed)
    with library_logs(out / "logs" / "train.log") as log:
        path = train_dual_encoder(loaded.train, labels, out, settings)
    say(f"trained retriever: {trained(out / CONFIG_FILE, log)} -> {path}")


@app.command()
def multitask(
    run: list[Path] = typer.Option(..., "--run", help="an EPR work folder (`taskret epr run`'s: its "
                                   "pipeline_config.json and labels.jsonl), repeatable"),
    instruction: list[str] = typer.Option(..., "--instruction", help="each --run's task instruction, in the same "
                                          "order, e.g. 'Parse the request into its intent and slots'"),
    base_model: str = typer.Option("minilm-l6"),
    epochs: int = typer.Option(5, min=1), batch_size: int = typer.Option(64, min=1),
    mini_batch_size: int = typer.Option(16, min=0, help=MINI_BATCH_HELP),
    learning_rate: float = typer.Option(5e-5), seed: int = typer.Option(0),
    listwise: bool = typer.Option(False, help="UDR's objective: learn each run's LM order over sampled lists of 8 "
                                  "(its scoring/scores.jsonl) with UDR's settings; the options above but "
                                  "--base-model and --seed are then not read"),
    out: Path = typer.Option(..., help="output folder: model/, labels.jsonl, tasks.json, training_log.jsonl"),
):
    """One retriever for several tasks (UDR): each run's labels, each query written with its task's instruction
    in front. Retrieve for any task, a new one too, with `taskret evaluate --retriever epr:OUT --instruction TEXT`."""
    from ..epr.multitask import LabelledTask, train_multitask
    from ..epr.pipeline import EPRConfig
    from ..epr.training import CONFIG_FILE, TrainingConfig
    from ..training.logs import library_logs, trained

    if len(run) != len(instruction):
        raise typer.BadParameter(f"{len(run)} --run but {len(instruction)} --instruction: give one instruction "
                                 "per run, in the same order", param_hint="--instruction")
    tasks = []
    for folder, text in zip(run, instruction):
        for needed in ("pipeline_config.json", "labels.jsonl"):
            if not (folder / needed).exists():
                raise typer.BadParameter(f"{folder / needed} is missing: run `taskret epr run` there first "
                                         "(labels from the scoring LM)", param_hint="--run")
        config = EPRConfig.from_file(folder / "pipeline_config.json")
        scores = folder / "scoring" / "scores.jsonl"
        if listwise and not scores.exists():
            raise typer.BadParameter(f"{scores} is missing: --listwise learns from the scoring LM's scores "
                                     "(labels: lm)", param_hint="--run")
        tasks.append(LabelledTask(config.load_task(), folder / "labels.jsonl", text, scores=scores))
    if len({t.task.name for t in tasks}) < len(tasks):  # two pools from files of the same name: the runs name them
        tasks = [LabelledTask(t.task, t.labels, t.instruction, name=str(folder), scores=t.scores)
                 for t, folder in zip(tasks, run)]
    settings = TrainingConfig(base_model=base_model, epochs=epochs, batch_size=batch_size,
                              mini_batch_size=mini_batch_size, learning_rate=learning_rate, seed=seed)
    from ..epr.listwise import ListwiseConfig

    objective = ListwiseConfig(base_model=base_model, seed=seed) if listwise else None
    with library_logs(out / "logs" / "train.log") as log:
        path = train_multitask(tasks, out, settings, listwise=objective)
    say(f"multi-task retriever ({', '.join(t.key for t in tasks)}): {trained(out / CONFIG_FILE, log)} -> {path}")


@app.command()
def index(
    model: Path = typer.Option(..., help="a training output folder (with model/)"),
    task: TaskName = None, train: TrainFile = None, input_field: InputField = None,
    output_field: OutputField = None, id_field: IdField = None, fmt: FormatName = None, data_dir: DataDir = None,
    config: ConfigFile = None,
    lm: Optional[str] = typer.Option(None, help="the LM whose tokenizer `taskret serve` counts prompt tokens with "
                                     "(default: whitespace-separated words)"),
    out: Path = typer.Option(..., help="index folder to write"),
):
    """Encode the training set with the example encoder into a FAISS index, saved with the examples' texts
    (servable by `taskret serve`, written atomically). The vectors are encoded in shards (OUT/.shards/), so a killed
    run started again resumes from them."""
    from ..models import resolve_model
    from ..progress import reporting
    from ..retrieval import make_retriever
    from ..retrieval.index import index_examples, output_format_name, run_prompt_settings

    loaded = _pool(task, train, input_field, output_field, id_field, fmt, data_dir, config)
    if lm is not None:
        resolve_model(lm)  # an unknown LM fails now, not when the index is served
    retriever = make_retriever(f"epr:{model}")
    with reporting():  # each stage's progress, rate and ETA on stderr
        index_examples(out, retriever, loaded.train, task=loaded.name, retriever_spec=f"epr:{model}",
                       output_format=output_format_name(loaded.output_format), lm=lm,
                       extra=run_prompt_settings(f"epr:{model}"))  # the run's context window, for `taskret serve`
    console.print(f"indexed {len(loaded.train)} examples -> {out}")


@app.command()
def run(config: Path = typer.Argument(..., help="EPR config (JSON); see taskret.epr.pipeline.EPRConfig"),
        stop_after: Optional[str] = typer.Option(None, "--stop-after", help="end once this stage is done, named as "
                                                 "its progress line starts (e.g. 'round 3 training'); a later run "
                                                 "of the same config, here or on a copy of the work folder, goes on"),
        work_dir: Optional[Path] = typer.Option(None, "--work-dir", help="the work folder instead of the config's "
                                                "work_dir (the same run elsewhere: a folder you keep or copy)")):
    """The whole pipeline from one config file, skipping stages whose outputs exist."""
    from ..epr.pipeline import EPRConfig, run_pipeline

    cfg = EPRConfig.from_file(config)
    if work_dir is not None:
        cfg = cfg.model_copy(update={"work_dir": str(work_dir)})
    run_pipeline(cfg, console=Console(stderr=True, soft_wrap=True), stop_after=stop_after)  # a stage line with a long path stays one line
