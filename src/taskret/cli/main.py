"""The ``taskret`` command line: a thin layer over the Python API."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..data import BUILTIN_TASKS, load_task, sample
from .common import (
    App,
    DataDir,
    Device,
    Dtype,
    FormatName,
    IdField,
    InputField,
    LMOptions,
    LMSpec,
    MemoryBudgetGib,
    MissingExtra,
    OutputField,
    RayAddress,
    RayCpus,
    RayGpus,
    RayWorkers,
    RerankWeight,
    TaskName,
    TestFile,
    TrainFile,
    console,
    index_pool,
    load_task_from_options,
    memory_budget,
    ray_for_index,
    ray_options,
    say,
    write_ranked,
)

app = App(help="taskret: learned, task-aware retrieval (EPR prompt retrieval, TART instruction retrieval).")

# --select's settings, as `taskret evaluate` and `taskret serve` take them (taskret.icl.selection.Selection)
SelectWeight = Annotated[Optional[float], typer.Option(
    "--select-weight", min=0.0, max=1.0, help="with --select: relevance's share (0-1; 1 is the retriever's order); "
    "default: dpp 0.909 (CEIL's scale factor 0.1), mmr 0.7")]
SelectCandidates = Annotated[int, typer.Option(
    "--select-candidates", min=1, help="with --select: how many of the retriever's results to choose from")]


def _register_subcommands() -> None:
    from .data import app as data_app
    from .epr import app as epr_app
    from .tart import app as tart_app
    from .tart import search as tart_search

    app.add_typer(epr_app, name="epr")
    app.add_typer(tart_app, name="tart")
    app.add_typer(data_app, name="data")
    # `taskret search`: the same command as `taskret tart search` (a thin layer over taskret.tart.search).
    app.command("search", help="Search an index folder (any taskret index command's) with an instruction, "
                "optionally reranked by TART-full (--rerank DIR); the same as `taskret tart search`.")(tart_search)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # taskret never fetches from a model hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # our own bars show progress; theirs is noise


@app.command()
def evaluate(
    task: TaskName = None,
    train: TrainFile = None,
    test: TestFile = None,
    input_field: InputField = None,
    output_field: OutputField = None,
    id_field: IdField = None,
    fmt: FormatName = None,
    data_dir: DataDir = None,
    retriever: str = typer.Option("bm25", help="random, bm25[:input|output|both], sbert, dense:ENCODER, epr:DIR, an "
                                  "index dir; or a test-time method: bm25-oracle, lm-oracle, bruteforce"),
    lm: LMSpec = "smollm2-135m",
    lm_option: LMOptions = None,
    scoring_lm: Optional[str] = typer.Option(None, help="scoring LM of lm-oracle and bruteforce (default: --lm)"),
    scoring_lm_option: Optional[list[str]] = typer.Option(None, "--scoring-lm-option",
                                                          help="backend option of --scoring-lm, KEY=VALUE"),
    limit: Optional[int] = typer.Option(None, min=1, help="evaluate a fixed seeded sample of N test examples"),
    seed: int = typer.Option(0, help="seed of the test sample and of the random retriever"),
    k: Optional[int] = typer.Option(None, min=1, help="at most k demonstrations (k=1: one-shot); default: fill the "
                                    "budget"),
    context_window: int = typer.Option(2048, min=2, help="LM context in tokens; the prompt gets this minus "
                                       "--max-new-tokens. Inference time grows with it: on 2 CPU cores with "
                                       "SmolLM2-135M, 2048 fits ~46 MTOP demonstrations and runs ~0.19 inputs/s; "
                                       "640 (what the benchmarks use, ~15 demonstrations) is ~2.5x faster"),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="room left for the answer (default: the tokens "
                                                 "99% of the training outputs fit in, + 16, so an LM that loops stops "
                                                 "soon after a real answer would have ended)"),
    device: Device = None,
    dtype: Dtype = "auto",
    out: Path = typer.Option(Path("runs/evaluate"), help="output folder: predictions.jsonl and summary.json"),
    metric: Optional[list[str]] = typer.Option(None, "--metric", help="a graded metric to report beside exact match, "
                                               "repeatable: chrf (sacrebleu's chrF; on by default for the berri-lite "
                                               "generation tasks)"),
    select: Optional[str] = typer.Option(None, "--select", help="choose each prompt's demonstrations as a set from "
                                         "the retriever's top --select-candidates: dpp (greedy MAP of CEIL's kernel) "
                                         "or mmr; default: the ranking's top (an epr:DIR trained with set_training: "
                                         "its DPP); none: the ranking's top always"),
    select_weight: SelectWeight = None,
    select_candidates: SelectCandidates = 50,
    select_encoder: str = typer.Option("minilm-l6", "--select-encoder",
                                       help="with --select: the encoder whose vectors compare examples when the "
                                       "retriever has none of its own (a dense retriever's own are used)"),
    tune_weights: Optional[str] = typer.Option(None, "--tune-weights", help="with --select: choose --select-weight "
                                               "among these (comma-separated, e.g. 0.5,0.7,0.9) on --tune-n held-out "
                                               "training examples first (never the test set); costs one evaluation "
                                               "of --tune-n inputs per weight"),
    tune_n: int = typer.Option(100, "--tune-n", min=1, help="with --tune-weights: held-out training examples"),
    instruction: Optional[str] = typer.Option(None, "--instruction", help="a task instruction in front of every "
                                              "query, '{instruction} [SEP] {input}': what a multi-task EPR "
                                              "retriever (`taskret epr multitask`) reads"),
):
    """Evaluate in-context learning with retrieved demonstrations; writes predictions.jsonl and summary.json."""
    from ..backends.base import generation_spec, load_lm, parse_options
    from ..epr.methods import TEST_TIME_METHODS, rank_test_examples
    from ..icl.evaluation import check_match_metrics, choose_selection_weight, graded_metrics_for
    from ..icl.evaluation import evaluate as run_evaluation
    from ..icl.selection import Selection
    from ..progress import progress_bar
    from ..retrieval import make_retriever

    if instruction is not None and (retriever in TEST_TIME_METHODS or not instruction.strip()):
        raise ValueError("--instruction needs a retriever that reads queries (not a test-time method) and a "
                         "non-empty text")
    if max_new_tokens is not None and context_window <= max_new_tokens:
        raise ValueError(f"--context-window {context_window} leaves no room for the prompt: it must exceed "
                         f"--max-new-tokens ({max_new_tokens})")
    if select in (None, "none") and (select_weight is not None or tune_weights):
        raise ValueError("--select-weight and --tune-weights need --select dpp or --select mmr")
    selection = Selection(select, select_weight, select_candidates, select_encoder) if select not in (None, "none") \
        else None
    if select is None:
        from ..icl.selection import trained_for

        selection = trained_for(retriever)  # a CEIL run is meant to be used with its DPP
        if selection is not None:
            say(f"{retriever} was trained for its DPP (set_training): selecting with dpp at weight "
                f"{selection.weight:.4f} over the top {selection.n_candidates} (--select none: the ranking's top)")
    weights = _weights(tune_weights) if tune_weights else None
    if weights is not None and retriever in TEST_TIME_METHODS:
        raise ValueError(f"--tune-weights needs a retriever to rank held-out training examples; {retriever} ranks "
                         f"with the test outputs or the scoring LM: give --select-weight")
    loaded = load_task_from_options(task, train=train, test=test, input_field=input_field, output_field=output_field,
                                    id_field=id_field, fmt=fmt, data_dir=data_dir)
    try:
        graded_metrics_for(loaded, metric or ())
    except ImportError as err:
        raise MissingExtra(str(err)) from None
    check_match_metrics(loaded)  # LF-EM's extra and WordNet, before any model loads (MissingDependency: one line)
    examples = sample(loaded.test, limit, seed=seed)
    generator = generation_spec(lm, parse_options(lm_option), device=device, dtype=dtype)
    with console.status(f"loading {generator}"):
        model = load_lm(generator, parse_options(lm_option), device=device, dtype=dtype)
    ret, retrieved = None, None
    if retriever in TEST_TIME_METHODS:
        # the scoring LM as named: generation's engine choice is not scoring's (generation_spec)
        same = scoring_lm in (None, lm) and not scoring_lm_option and generator == lm
        scorer = model if same or retriever == "bm25-oracle" else load_lm(
            scoring_lm or lm, parse_options(scoring_lm_option), device=device, dtype=dtype)
        with progress_bar(len(examples), f"ranking with {retriever}") as advance:
            retrieved = rank_test_examples(retriever, loaded, examples, scorer, seed=seed)
            advance(len(examples))
    else:
        ret = make_retriever(retriever, seed=seed, device=device)
        if not ret.ids:
            with console.status(f"indexing {len(loaded.train)} examples with {retriever}"):
                index_pool(ret, loaded, train)
        if instruction is not None and not ret.reads_instruction:
            say(f"warning: {retriever} reads the query alone, not --instruction: its ranking is the same without it")
        if instruction is not None:
            from ..retrieval.instructed import InstructedRetriever

            ret = InstructedRetriever(ret, instruction)
    if max_new_tokens is None:  # after indexing: a pool that cannot be indexed fails first
        max_new_tokens = _answer_room(loaded, model, context_window)
    extra = None
    if selection is not None and weights is not None:
        tuning_metric = next(iter(graded_metrics_for(loaded, metric or ())), "em")
        with progress_bar(len(weights) * min(tune_n, len(loaded.train)), f"tuning --select-weight on {tune_n} "
                          f"training examples") as advance:
            best, scores = choose_selection_weight(loaded, ret, model, selection, weights, n=tune_n, seed=seed,
                                                   metric=tuning_metric, context_window=context_window,
                                                   max_new_tokens=max_new_tokens, max_demos=k, progress=advance)
        say(f"--select-weight {best} ({tuning_metric} on {tune_n} held-out training examples: "
            + ", ".join(f"{w}: {v:.1f}" for w, v in scores.items()) + ")")
        selection = Selection(selection.method, best, selection.n_candidates, selection.encoder)
        extra = {"selection_tuning": {"metric": tuning_metric, "n": min(tune_n, len(loaded.train)), "seed": seed,
                                      "scores": {str(w): v for w, v in scores.items()}, "chosen": best}}
    if instruction is not None:
        extra = {**(extra or {}), "instruction": instruction}
    label = f"{retriever}+{selection.method}" if selection is not None else retriever
    with progress_bar(len(examples), f"{loaded.name} / {label}") as advance:
        summary = run_evaluation(loaded, ret, model, examples, out, retriever_name=retriever,
                                 context_window=context_window, max_new_tokens=max_new_tokens, max_demos=k,
                                 progress=advance, retrieved=retrieved, metrics=metric or (), selection=selection,
                                 extra=extra)
    metrics = ", ".join(f"{name} {value:.1f}" for name, value in summary["metrics"].items())
    console.print(f"{loaded.name} / {label}: {metrics} (N={summary['n']}, {summary['wall_time_s']:.0f}s) -> {out}")


def _answer_room(task, model, context_window: int) -> int:
    """``--max-new-tokens`` when not given: the training outputs' longest plus a margin (at most half the window)."""
    from ..icl.prompt import OUTPUT_MARGIN, OUTPUT_QUANTILE, max_new_tokens_for

    room, length = max_new_tokens_for([task.prompt_output(e) for e in task.train], model.count_tokens)
    room = min(room, context_window // 2)
    say(f"--max-new-tokens {room}: {OUTPUT_QUANTILE:.0%} of the training outputs fit in {length} tokens, + "
        f"{OUTPUT_MARGIN}" + (f", at most half of --context-window {context_window}"
                              if room < length + OUTPUT_MARGIN else ""))
    return room


def _weights(text: str) -> list[float]:
    """``--tune-weights 0.5,0.7,0.9``: weights in [0, 1]; the option is named in the error."""
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--tune-weights: expected comma-separated numbers in [0, 1], got '{text}'") from None
    if not weights or any(not 0 <= w <= 1 for w in weights):
        raise ValueError(f"--tune-weights: expected comma-separated numbers in [0, 1], got '{text}'")
    return weights


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="an evaluation folder (predictions.jsonl, summary.json): `taskret evaluate "
                                 "--out`, an EPR run's eval/ or baseline/"),
    run_b: Path = typer.Argument(..., help="another, on the same test inputs"),
    name_a: Optional[str] = typer.Option(None, "--name-a", help="RUN_A's name in the line (default: its retriever)"),
    name_b: Optional[str] = typer.Option(None, "--name-b", help="RUN_B's name in the line (default: its retriever)"),
    as_json: bool = typer.Option(False, "--json", help="the comparison as JSON on stdout"),
):
    """Pair two evaluation runs on the same test inputs: EM with McNemar's test, each graded metric both report
    (chrf) with a Wilcoxon signed-rank test; one line, as the demo and `taskret epr run` end with."""
    import json

    from ..icl.compare import compare_runs, comparison_line

    comparison = compare_runs(run_a, run_b, name_a, name_b)
    if as_json:
        print(json.dumps(comparison.to_dict(), indent=1))
        return
    console.print(comparison_line(comparison), soft_wrap=True, markup=False)


@app.command()
def index(
    task: Optional[str] = typer.Option(None, "--task", help="built-in task whose training set to index, or a file"),
    train: Optional[Path] = typer.Option(None, help="training pool file, instead of --task"),
    input_field: InputField = None,
    output_field: OutputField = None,
    id_field: IdField = None,
    data_dir: DataDir = None,
    retriever: str = typer.Option("examples-bm25", "--setup", "--retriever", help="a named setup (examples-bm25, "
                                  "examples-epr:DIR) or a retriever spec: random, bm25[:input|output|both], sbert, "
                                  "dense:ENCODER, epr:DIR"),
    lm: Optional[str] = typer.Option(None, help="the LM whose tokenizer `taskret serve` counts prompt tokens with "
                                     "(default: whitespace-separated words)"),
    out: Path = typer.Option(..., help="index directory to write"),
    shard_size: Optional[int] = typer.Option(None, min=1, help="examples per shard of encoded vectors (OUT/.shards/, "
                                             "kept until the index is complete: a killed run started again resumes "
                                             "from them; default 10,000)"),
    ray: RayAddress = None, ray_workers: RayWorkers = None, ray_gpus_per_worker: RayGpus = None,
    ray_cpus_per_worker: RayCpus = 1.0, memory_budget_gib: MemoryBudgetGib = 8.0,
):
    """Index a training pool and save the index, with the examples' texts, to a directory (written atomically). A
    dense encoder's vectors are encoded in shards, here or on Ray (--ray), so a killed run resumes;
    --memory-budget bounds the dense index's type and BM25's segments."""
    from ..data import read_examples
    from ..models import resolve_model
    from ..progress import reporting
    from ..retrieval import make_retriever
    from ..retrieval.index import index_examples, output_format_name, run_prompt_settings
    from ..setups import resolve_setup

    if task is not None and train is None and task not in (*BUILTIN_TASKS, "demo") and Path(task).is_file():
        task, train = None, Path(task)
    if train is not None:
        examples, name, fmt = read_examples(train, input_field or "input", output_field or "output", id_field), \
            train.stem, "plain"
    else:
        loaded = load_task(task, data_dir=data_dir)
        examples, name, fmt = loaded.train, loaded.name, output_format_name(loaded.output_format)
    if lm is not None:
        resolve_model(lm)  # an unknown LM fails now, not when the index is served
    setup = resolve_setup(retriever)
    if setup is not None:
        if setup.kind != "examples":
            raise ValueError(f"setup '{setup.name}' retrieves documents: index a corpus with `taskret tart index "
                             f"--setup {setup.name}`")
        console.print(f"setup {setup.describe()}", soft_wrap=True)
        retriever = setup.retriever
    ret = make_retriever(retriever)
    on_ray = ray_for_index(ray_options(ray, ray_workers, ray_gpus_per_worker, ray_cpus_per_worker), ret, retriever,
                           "examples")
    recorded = run_prompt_settings(retriever)  # an EPR run's context window: `taskret serve` builds its prompts
    with reporting():  # each stage's progress, rate and ETA on stderr (a status spinner would share its line)
        index_examples(out, ret, examples, task=name, retriever_spec=retriever, output_format=fmt, lm=lm,
                       extra=recorded, ray=on_ray, memory_budget=memory_budget(memory_budget_gib),
                       **({"shard_size": shard_size} if shard_size else {}))
    console.print(f"indexed {len(examples)} examples with {retriever}{' on Ray' if on_ray else ''} -> {out}"
                  + (f" (its run's prompts: {_settings(recorded)})" if recorded else ""))


def _settings(recorded: dict) -> str:
    return ", ".join(f"{key} {_selection_text(value) if key == 'selection' else value}"
                     for key, value in recorded.items())


def _selection_text(record: dict) -> str:
    return f"{record['method']} at weight {record['weight']:.4f} over the top {record['n_candidates']}"


@app.command()
def serve(
    index_dir: Optional[Path] = typer.Option(None, "--index", help="an index directory written by `taskret index`, "
                                             "`taskret epr index` or `taskret tart index`"),
    shards: Optional[Path] = typer.Option(None, "--shards", help="instead of --index: a shards config (JSON: shard "
                                          "name -> index folder, and ray, allow_partial, timeout_s), every shard "
                                          "searched and their top k merged (taskret.retrieval.sharded_index)"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (loopback by default)"),
    port: int = typer.Option(8000, help="port to listen on"),
    lm: Optional[str] = typer.Option(None, help="count /prompt tokens with this LM's tokenizer (default: the index's "
                                     "LM, else whitespace-separated words)"),
    token_budget: Optional[int] = typer.Option(None, min=1, help="default /prompt token budget (default: --context-window "
                                               "minus --max-new-tokens, capped by the LM's context)"),
    context_window: Optional[int] = typer.Option(None, min=2, help="LM context in tokens, as `taskret evaluate "
                                                 "--context-window` (default: the index's, which an index of an EPR "
                                                 "run records from the run, else 2048)"),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="room left for the answer, as `taskret evaluate "
                                                 "--max-new-tokens` (default: the index's, else 128)"),
    log_level: str = typer.Option("warning", help="uvicorn log level"),
    access_log: bool = typer.Option(False, "--access-log/--no-access-log", help="log every request"),
    query_encoder: Optional[str] = typer.Option(None, help="encode the queries with this model: one distilled with "
                                                "frozen documents from the index's encoder (`taskret tart distil "
                                                "--freeze-documents`), so the corpus is not encoded again"),
    rerank: Optional[str] = typer.Option(None, help="rerank /retrieve's first stage with a TART-full folder (or any "
                                         "CrossEncoder folder) or upr:LM, as `taskret tart evaluate --rerank` (default: "
                                         "the reranker the index's setup records)"),
    no_rerank: bool = typer.Option(False, "--no-rerank", help="skip the reranker the index records"),
    rerank_depth: Optional[int] = typer.Option(None, "--rerank-depth", min=1, help="how many first-stage results the "
                                               "reranker reorders (default: the index's, else 100)"),
    rerank_weight: RerankWeight = None,
    generate: bool = typer.Option(False, "--generate", help="load the LM (--lm, else the index's) and answer POST "
                                  "/generate: the prompt /prompt builds and the LM's greedy answer (a button on the "
                                  "page at /)"),
    generate_timeout: float = typer.Option(60.0, min=0.1, help="seconds a /generate request may take (504 after)"),
    workers: Optional[int] = typer.Option(None, min=1, help="worker processes, each with the index memory-mapped "
                                          "(default: one per core)"),
    select: Optional[str] = typer.Option(None, "--select", help="how /prompt and /generate choose the "
                                         "demonstrations, as `taskret evaluate --select`: dpp or mmr over the top "
                                         "--select-candidates; none: the ranking's top; default: the selection the "
                                         "index records (an EPR run trained with set_training: its DPP), else none"),
    select_weight: SelectWeight = None,
    select_candidates: SelectCandidates = 50,
    telemetry: bool = typer.Option(False, "--telemetry/--no-telemetry", help="keep FastAPI's native OpenTelemetry "
                                   "instrumentation (FastAPI >= 0.165): off by default, as it costs every request"),
):
    """Serve an index over HTTP: POST /retrieve, POST /prompt, POST /generate (with --generate), GET /health, a page
    to try them at / and the API docs at /docs (OpenAPI schema at /openapi.json)."""
    try:
        from ..serve.app import create_app
    except ImportError as err:
        raise MissingExtra(f"taskret serve needs FastAPI and uvicorn: pip install 'taskret[serve]' ({err})") from err
    import uvicorn

    from ..icl.selection import RECORDED as SELECT_RECORDED
    from ..icl.selection import Selection
    from ..serve.workers import default_workers, serve_workers
    from ..tart.search import RECORDED

    if rerank is not None and no_rerank:
        raise ValueError("give --rerank or --no-rerank, not both")
    if (index_dir is None) == (shards is None):
        raise ValueError("give --index FOLDER or --shards CONFIG (one of them)")
    if shards is not None:
        from ..pipeline import read_config
        from ..retrieval.sharded_index import ShardsConfig

        if read_config(ShardsConfig, shards).ray is not None:
            # one front: its Ray actors search the shards, and each worker would start a set of its own
            if workers not in (None, 1):
                raise ValueError("--shards with Ray: one worker (the shards' actors do the searching), not --workers "
                                 f"{workers}")
            workers = 1
        index_dir = shards
    if select not in (None, "none", "dpp", "mmr"):
        raise ValueError(f"--select: dpp, mmr or none (got {select!r})")
    if select in (None, "none") and select_weight is not None:
        raise ValueError("--select-weight needs --select dpp or --select mmr")
    chosen = Selection(select, select_weight, select_candidates).record() if select in ("dpp", "mmr") else \
        (select or SELECT_RECORDED)  # JSON: each worker builds its app from these settings
    settings = dict(lm=lm, token_budget=token_budget, context_window=context_window, max_new_tokens=max_new_tokens,
                    query_encoder=query_encoder, rerank=None if no_rerank else (rerank or RECORDED),
                    rerank_depth=rerank_depth, rerank_weight=rerank_weight, generate=generate,
                    generate_timeout_s=generate_timeout, select=chosen, telemetry=telemetry)
    workers = workers or default_workers()
    urls = (f"serving {index_dir} on http://{host}:{port} (the page: http://{host}:{port}/, docs: "
            f"http://{host}:{port}/docs)")
    if workers > 1:  # each worker builds its own app from these settings (taskret.serve.workers)
        console.print(f"{urls}, {workers} workers")
        serve_workers({"index_dir": str(index_dir), **settings}, workers, host=host, port=port, log_level=log_level,
                      access_log=access_log)
        return
    with console.status(f"loading {index_dir}"):
        service = create_app(index_dir, **settings)
    console.print(urls)
    uvicorn.run(service, host=host, port=port, log_level=log_level, access_log=access_log)


@app.command()
def retrieve(
    index_dir: Path = typer.Option(..., "--index", help="an index directory written by `taskret index`, `taskret "
                                   "epr index` or `taskret tart index` (or a bare saved retriever)"),
    query: list[str] = typer.Argument(..., help="one or more query texts"),
    top_k: int = typer.Option(5, "--top-k", "--k", min=1, help="how many results"),
    as_json: bool = typer.Option(False, "--json", help="JSONL on stdout instead of text: query, ids, scores and "
                                 "snippets"),
):
    """Print the top-k examples for queries: rank, id, score and the example (input -> output) or document
    (title | text); --json for JSONL."""
    from ..retrieval.index import load_index

    # A bare retriever (the EPR pipeline's index/) has ids and scores to print, if no texts.
    index = load_index(index_dir, texts_required=False)
    if index.kind == "retriever":
        say(f"{index_dir} holds a retriever without the examples' texts: ids and scores only (`taskret index` or "
            f"`taskret epr index` write an index with them)")
    result = index.retriever.retrieve(query, k=top_k)
    for text, ids, scores in zip(query, result.ids, result.scores):
        write_ranked(text, ids, scores, index.records, as_json)


@app.command()
def models():
    """List the models taskret knows by name and whether their packages are installed."""
    from rich.table import Table

    from ..models import MODELS, is_installed

    table = Table("name", "kind", "installed", "install with", "description")
    for entry in MODELS.values():
        table.add_row(entry.name, entry.kind, "yes" if is_installed(entry.name) else "no", entry.install,
                      entry.description)
    Console().print(table)


@app.command("serve-lm")
def serve_lm(
    lm: str = typer.Option("smollm2-135m", help="the model to serve: a registered name or a local folder"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(8000, help="port to listen on"),
    served_model_name: Optional[str] = typer.Option(None, help="the model's name in the API (default: --lm)"),
    device: Device = None,
    dtype: Dtype = "auto",
    max_batch_tokens: int = typer.Option(8192, help="tokens per forward pass (concurrent requests are batched)"),
):
    """Serve an LM over the OpenAI completions API (scoring with echo+logprobs, greedy generation), for
    jobs elsewhere: --lm openai:http://HOST:PORT/v1#NAME."""
    from ..backends.lm_server import serve_lm

    serve_lm(lm, host=host, port=port, model_name=served_model_name, device=device, dtype=dtype,
             max_batch_tokens=max_batch_tokens,
             ready=lambda app: console.print(f"serving {app.state.model_name} on http://{host}:{port}/v1"))


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), help="output folder"),
    lm: str = typer.Option("smollm2-135m", help="inference LM"),
    methods: str = typer.Option("bm25,epr", help="comma-separated methods to compare: bm25, epr, random, sbert"),
    dtype: str = typer.Option("auto", "--dtype", help="the LM's dtype: auto (bfloat16 on a CPU with native bf16, "
                              "else float32), float32 or bfloat16; the EM numbers depend on it"),
):
    """EPR (trained here, every stage run) against BM25 on the MTOP slice shipped with taskret: EM, time, McNemar."""
    from ..demo import DemoSettings, run_demo

    run_demo(out, lm=lm, methods=[m.strip() for m in methods.split(",") if m.strip()],
             settings=DemoSettings(dtype=dtype), console=Console())


_register_subcommands()


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
