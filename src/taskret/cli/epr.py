"""``taskret epr ...``: each EPR stage from files on disk, and ``run`` for the whole pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..data import load_task
from ..io import DataError
from ..models import ModelNotInstalled

app = typer.Typer(help="EPR: learn a prompt retriever from language-model scores.", no_args_is_help=True)
console = Console(stderr=True)
ERRORS = (DataError, ModelNotInstalled, ValueError, FileNotFoundError)

TaskOpt = typer.Option(None, "--task", help="mtop, break, smcalflow, demo; or --train FILE with field options")


def _fail(err: Exception) -> None:
    from rich.markup import escape

    # escape: paths, ids and pydantic's "[type=...]" hold square brackets that rich would read as markup.
    console.print(f"[bold red]error:[/] {escape(str(err))}")
    raise typer.Exit(2)


def _task(task, train, input_field, output_field, id_field, data_dir):
    if train is not None and task is None:
        # A training pool alone is enough for the training stages; it doubles as the test file.
        return load_task(None, train=train, test=train, input_field=input_field, output_field=output_field,
                         id_field=id_field)
    return load_task(task, train=train, input_field=input_field, output_field=output_field, id_field=id_field,
                     data_dir=data_dir)


@app.command()
def candidates(
    task: Optional[str] = TaskOpt,
    train: Optional[Path] = typer.Option(None), input_field: Optional[str] = typer.Option(None),
    output_field: Optional[str] = typer.Option(None), id_field: Optional[str] = typer.Option(None),
    data_dir: Optional[Path] = typer.Option(None),
    n: int = typer.Option(50, help="candidates per training example"),
    field: str = typer.Option("output", help="search BM25 by output, input or both"),
    limit: Optional[int] = typer.Option(None, help="only a seeded sample of N training examples as queries"),
    seed: int = typer.Option(0),
    out: Path = typer.Option(..., help="candidates JSONL to write"),
):
    """Top-N BM25 neighbours of every training example (itself excluded) -> JSONL."""
    from ..data import sample
    from ..epr.candidates import mine_candidates, write_candidates

    try:
        loaded = _task(task, train, input_field, output_field, id_field, data_dir)
        wanted = {e.id for e in sample(loaded.train, limit, seed=seed)}
        rows = [r for r in mine_candidates(loaded.train, n=n, field=field) if r["id"] in wanted]
        write_candidates(out, rows)
    except ERRORS as err:
        _fail(err)
    console.print(f"{len(rows)} examples x {n} candidates -> {out}")


LM_HELP = ("a registered name or local folder (transformers, in process), openai:URL#MODEL (an OpenAI-compatible "
           "completions server), or vllm:NAME_OR_FOLDER (GPU)")
LMOptionOpt = typer.Option(None, "--lm-option", help="backend option KEY=VALUE, repeatable (e.g. concurrency=16, "
                           "timeout=60, max_retries=5, api_key_env=MY_KEY, tokenizer=smollm2-135m, "
                           "tensor_parallel_size=2)")


@app.command()
def score(
    candidates_file: Path = typer.Option(..., "--candidates", help="candidates JSONL"),
    task: Optional[str] = TaskOpt,
    train: Optional[Path] = typer.Option(None), input_field: Optional[str] = typer.Option(None),
    output_field: Optional[str] = typer.Option(None), id_field: Optional[str] = typer.Option(None),
    data_dir: Optional[Path] = typer.Option(None),
    lm: str = typer.Option("smollm2-135m", help=f"scoring LM: {LM_HELP}"),
    lm_option: Optional[list[str]] = LMOptionOpt,
    shard_size: int = typer.Option(32, help="examples per resumable shard"),
    device: Optional[str] = typer.Option(None), dtype: str = typer.Option("auto"),
    ray: Optional[str] = typer.Option(None, "--ray", help="score the shards on a Ray cluster: auto (the running "
                                      "cluster), local (start one here), HOST:PORT or ray://HOST:PORT"),
    ray_workers: Optional[int] = typer.Option(None, help="Ray actors, each holding one LM (default: one per GPU, "
                                              "else one per --ray-cpus-per-worker CPUs)"),
    ray_gpus_per_worker: Optional[float] = typer.Option(None, help="GPUs per actor (default: 1 if the cluster has "
                                                        "GPUs, else 0)"),
    ray_cpus_per_worker: float = typer.Option(1.0, help="CPUs per actor (its torch threads on a CPU)"),
    out: Path = typer.Option(..., help="scoring folder (resumes if it exists)"),
):
    """log P(y | candidate, x) for every pair, in resumable shards -> OUT/scores.jsonl."""
    from ..backends.base import BackendError, load_lm, parse_options
    from ..epr.candidates import read_candidates
    from ..epr.scoring import score_candidates
    from ..progress import progress_bar

    try:
        loaded = _task(task, train, input_field, output_field, id_field, data_dir)
        examples = {e.id: e for e in loaded.train}
        rows = read_candidates(candidates_file, known_ids=set(examples))
        options = parse_options(lm_option)
        n_pairs = sum(len(r["candidates"]) for r in rows)
        if ray is not None:
            from ..backends.base import backend_options, parse_spec
            from ..epr.distributed import RayScoring

            kind, _ = parse_spec(lm)
            known = backend_options(kind)
            common = {k: v for k, v in {"device": device, "dtype": dtype}.items() if k in known and v is not None}
            with RayScoring(lm, {**common, **options}, address=ray, workers=ray_workers,
                            gpus_per_worker=ray_gpus_per_worker, cpus_per_worker=ray_cpus_per_worker) as runner:
                console.print(f"Ray: {len(runner.actors)} workers x {runner.lm_name}")
                with progress_bar(n_pairs, "scoring", unit="pairs") as advance:
                    path = score_candidates(rows, examples, runner.lm_name, out, fmt=loaded.output_format,
                                            shard_size=shard_size, progress=advance, shard_runner=runner)
        else:
            model = load_lm(lm, options, device=device, dtype=dtype)
            try:
                with progress_bar(n_pairs, "scoring", unit="pairs") as advance:
                    path = score_candidates(rows, examples, model, out, fmt=loaded.output_format,
                                            shard_size=shard_size, progress=advance)
            finally:
                model.close()
    except (*ERRORS, BackendError) as err:
        _fail(err)
    console.print(f"scores -> {path}")


@app.command()
def label(
    scores: Optional[Path] = typer.Option(None, help="scores.jsonl (EPR labels)"),
    candidates_file: Optional[Path] = typer.Option(None, "--candidates", help="candidates JSONL (bm25/cbr labels)"),
    method: str = typer.Option("lm", help="lm (EPR), bm25 (DR-BM25) or cbr"),
    task: Optional[str] = TaskOpt,
    train: Optional[Path] = typer.Option(None), input_field: Optional[str] = typer.Option(None),
    output_field: Optional[str] = typer.Option(None), id_field: Optional[str] = typer.Option(None),
    data_dir: Optional[Path] = typer.Option(None),
    k: int = typer.Option(5, help="positives and hard negatives per example"),
    out: Path = typer.Option(..., help="labels JSONL to write"),
):
    """Top-k positives and bottom-k hard negatives per example -> JSONL."""
    from ..epr.candidates import read_candidates
    from ..epr.labels import bm25_labels, cbr_labels, lm_labels
    from ..io import write_jsonl

    try:
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
                loaded = _task(task, train, input_field, output_field, id_field, data_dir)
                examples = {e.id: e for e in loaded.train}
                cands = read_candidates(candidates_file, known_ids=set(examples))
                rows = cbr_labels(cands, examples, k=k)
        else:
            raise ValueError(f"unknown method '{method}'; expected lm, bm25 or cbr")
        write_jsonl(out, rows)
    except ERRORS as err:
        _fail(err)
    console.print(f"{len(rows)} label rows -> {out}")


@app.command()
def train(
    labels: Path = typer.Option(..., help="labels JSONL"),
    task: Optional[str] = TaskOpt,
    train_file: Optional[Path] = typer.Option(None, "--train"), input_field: Optional[str] = typer.Option(None),
    output_field: Optional[str] = typer.Option(None), id_field: Optional[str] = typer.Option(None),
    data_dir: Optional[Path] = typer.Option(None),
    base_model: str = typer.Option("minilm-l6"),
    shared_encoder: bool = typer.Option(False, help="one encoder for inputs and examples"),
    epochs: int = typer.Option(3), batch_size: int = typer.Option(120), mini_batch_size: int = typer.Option(16),
    learning_rate: float = typer.Option(2e-5), seed: int = typer.Option(0),
    out: Path = typer.Option(..., help="output folder: model/, training_log.jsonl, epr_config.json"),
):
    """Train the dual encoder with the DPR loss (in-batch + hard negatives, cached for large batches)."""
    from ..epr.training import TrainingConfig, train_dual_encoder

    try:
        loaded = _task(task, train_file, input_field, output_field, id_field, data_dir)
        config = TrainingConfig(base_model=base_model, shared_encoder=shared_encoder, epochs=epochs,
                                batch_size=batch_size, mini_batch_size=mini_batch_size, learning_rate=learning_rate,
                                seed=seed)
        path = train_dual_encoder(loaded.train, labels, out, config)
    except ERRORS as err:
        _fail(err)
    console.print(f"trained retriever -> {path}")


@app.command()
def index(
    model: Path = typer.Option(..., help="a training output folder (with model/)"),
    task: Optional[str] = TaskOpt,
    train: Optional[Path] = typer.Option(None), input_field: Optional[str] = typer.Option(None),
    output_field: Optional[str] = typer.Option(None), id_field: Optional[str] = typer.Option(None),
    data_dir: Optional[Path] = typer.Option(None),
    lm: Optional[str] = typer.Option(None, help="the LM whose tokenizer `taskret serve` counts prompt tokens with "
                                     "(default: whitespace-separated words)"),
    out: Path = typer.Option(..., help="index folder to write"),
):
    """Encode the training set with the example encoder into a FAISS index, saved with the examples' texts
    (servable by `taskret serve`, written atomically)."""
    from ..models import resolve_model
    from ..retrieval import make_retriever
    from ..retrieval.index import output_format_name, save_index

    try:
        loaded = _task(task, train, input_field, output_field, id_field, data_dir)
        if lm is not None:
            resolve_model(lm)  # an unknown LM fails now, not when the index is served
        retriever = make_retriever(f"epr:{model}")
        retriever.index(loaded.train)
        save_index(out, retriever, loaded.train, task=loaded.name, retriever_spec=f"epr:{model}",
                   output_format=output_format_name(loaded.output_format), lm=lm)
    except ERRORS as err:
        _fail(err)
    console.print(f"indexed {len(loaded.train)} examples -> {out}")


@app.command()
def run(config: Path = typer.Argument(..., help="EPR config (JSON); see taskret.epr.pipeline.EPRConfig")):
    """The whole pipeline from one config file, skipping stages whose outputs exist."""
    from pydantic import ValidationError

    from ..epr.pipeline import EPRConfig, run_pipeline

    try:
        cfg = EPRConfig.from_file(config)
        run_pipeline(cfg, console=console)
    except ValidationError as err:
        _fail(ValueError(f"{config}: {err}"))
    except ERRORS as err:
        _fail(err)
