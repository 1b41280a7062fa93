"""What every ``taskret`` command shares: how errors are reported, the options several commands take, and
loading a task from them.

Errors: every command of an :class:`App` runs under :func:`report_errors`. A known user error (bad input
file, unknown model or option, missing file, an LM backend that fails) prints ``error: <message>`` on
stderr and exits with code 2, without a traceback; any other exception is a bug and keeps its traceback.
Ctrl-C prints ``interrupted`` and exits with 130.
``TASKRET_DEBUG=1`` shows the traceback of user errors too.

Options are ``Annotated`` types, so a command declares ``task: TaskName = None`` and gets the same flag,
help and type as every other command.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar

import typer
from rich.console import Console

from ..backends.base import BackendError
from ..models import MissingDependency, ModelNotInstalled

#: Messages for the user (progress, results, errors) go to stderr; stdout carries only data (JSONL, tables).
#: soft_wrap: a message is never broken at the console's width (80 columns where stderr is a file or a pipe), so a
#: path or a command in it stays on one line, to be copied or grepped from a log; a terminal wraps it itself.
console = Console(stderr=True, soft_wrap=True)


class MissingExtra(RuntimeError):
    """A command needs an optional dependency that is not installed (``pip install 'taskret[EXTRA]'``)."""


#: The errors a user can cause and fix: bad input (``ValueError``, which includes ``DataError``, an invalid
#: index and pydantic's ``ValidationError``), a missing or unreadable path, an output that exists and may not be
#: overwritten, an unknown or uninstalled model, an LM backend that fails (server down, Ray cluster unreachable),
#: a missing optional dependency.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError,
    ModelNotInstalled, MissingDependency, BackendError, MissingExtra,
)

Command = TypeVar("Command", bound=Callable[..., Any])


def say(text: str) -> None:
    """Print a progress line on stderr, as plain text (not rich markup)."""
    from rich.markup import escape

    console.print(escape(text), soft_wrap=True)


def fail(message: str) -> None:
    """Print ``error: message`` on stderr and exit with code 2."""
    from rich.markup import escape

    # escape: paths, ids and pydantic's "[type=...]" hold square brackets that rich would read as markup;
    # soft_wrap: a long path stays on one line, to be copied.
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _message(err: BaseException) -> str:
    """What the user reads of ``err``: pydantic's findings as :func:`~taskret.pipeline.explain_validation_error`
    words them (a config dict checked when a stage reads it: ``training``, ``reward_model``), else its text."""
    from pydantic import ValidationError

    if isinstance(err, ValidationError):
        from ..pipeline import explain_validation_error

        return f"{err.title}: {explain_validation_error(err)}"
    return str(err)


def report_errors(command: Command) -> Command:
    """Run ``command`` so that a user error (:data:`USER_ERRORS`) ends it with :func:`fail`."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as err:
            if os.environ.get("TASKRET_DEBUG"):
                raise
            fail(_message(err))
        except KeyboardInterrupt:
            # A word, not a traceback; 130 as a shell reports SIGINT. What the work left (an index's shards, a
            # pipeline's stages) was said by the work itself, and the same command goes on from it.
            console.print("interrupted")
            raise typer.Exit(130) from None

    return run  # type: ignore[return-value]


class App(typer.Typer):
    """A ``typer.Typer`` whose every command runs under :func:`report_errors` (the decorated function itself
    is returned unchanged, so it can be registered again elsewhere, as ``taskret search`` is)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**{"no_args_is_help": True, "add_completion": False, "pretty_exceptions_enable": False,
                            **kwargs})

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Command], Command]:
        register = super().command(*args, **kwargs)

        def decorator(func: Command) -> Command:
            register(report_errors(func))
            return func

        return decorator


# -- options shared by several commands --------------------------------------------------------------------

TaskName = Annotated[Optional[str], typer.Option(
    "--task", help="built-in task: mtop, break, smcalflow, demo, a berri-lite generation task (berri-lite/nl2bash, ...) "
    "or a public benchmark task (geoquery, atis, sst2, sst5, trec); or give --train (and --test) files")]
TrainFile = Annotated[Optional[Path], typer.Option("--train", help="training pool file (.jsonl/.csv/.tsv)")]
TestFile = Annotated[Optional[Path], typer.Option("--test", help="test file (.jsonl/.csv/.tsv)")]
InputField = Annotated[Optional[str], typer.Option("--input-field", help="field holding the input")]
OutputField = Annotated[Optional[str], typer.Option("--output-field", help="field holding the output")]
IdField = Annotated[Optional[str], typer.Option("--id-field",
                                                help="field holding a unique id (default: file name and line)")]
FormatName = Annotated[Optional[str], typer.Option(
    "--format", help="field names of a known layout (mtop, break, smcalflow), for fields not given")]
RerankWeight = Annotated[Optional[float], typer.Option(
    "--rerank-weight", min=0.0, max=1.0,
    help="with --rerank: interpolate the reranking with its first stage, this being the first stage's share of "
    "min-max normalised scores (0-1; choose it on dev data with `taskret tart tune-weight --rerank`); default: the "
    "reranker's order alone")]

DataDir = Annotated[Optional[Path], typer.Option(
    "--data-dir", help="folder of the built-in tasks' data (default: $TASKRET_DATA_DIR, else ../shared/data if it "
    "exists, else where `taskret data download` puts it)")]

MINI_BATCH_HELP = "sequences embedded at a time (GradCache; bounds memory); 0: the whole batch at once"

LM_SPECS = ("a registered name or local folder (transformers, in process), openai:URL#MODEL (an OpenAI-compatible "
            "completions server), or vllm:NAME_OR_FOLDER (GPU)")
LMSpec = Annotated[str, typer.Option("--lm", help=f"the LM: {LM_SPECS}")]
LMOptions = Annotated[Optional[list[str]], typer.Option(
    "--lm-option", help="backend option of --lm, KEY=VALUE, repeatable (e.g. concurrency=16, timeout=60, "
    "max_retries=5, api_key_env=MY_KEY, tokenizer=smollm2-135m, tensor_parallel_size=2)")]
Device = Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: cuda when available)")]
Dtype = Annotated[str, typer.Option("--dtype", help="auto, float32 or bfloat16")]
RayAddress = Annotated[Optional[str], typer.Option(
    "--ray", help="spread the shards over a Ray cluster: auto (the running cluster), local (start one here), "
    "HOST:PORT or ray://HOST:PORT")]
RayWorkers = Annotated[Optional[int], typer.Option(
    "--ray-workers", min=1, help="Ray actors, each holding one model (default: one per GPU, else one per "
    "--ray-cpus-per-worker CPUs)")]
RayGpus = Annotated[Optional[float], typer.Option("--ray-gpus-per-worker", help="GPUs per actor (default: 1 if the "
                                                  "cluster has GPUs, else 0)")]
RayCpus = Annotated[float, typer.Option("--ray-cpus-per-worker", help="CPUs per actor (its torch threads on a CPU)")]
MemoryBudgetGib = Annotated[float, typer.Option(
    "--memory-budget", min=0.25, help="GiB the build's corpus-sized parts may hold: past what HNSW fits in it, "
    "index_type auto builds a compressed IVF-PQ index (8 GiB: about 2M MiniLM vectors), and BM25's segments are cut "
    "to it")]


def memory_budget(gib: float):
    """The :class:`~taskret.retrieval.budget.MemoryBudget` of ``--memory-budget``."""
    from ..retrieval.budget import MemoryBudget

    return MemoryBudget(gib)


def ray_options(address: str | None, workers: int | None, gpus: float | None, cpus: float):
    """The :class:`~taskret.epr.distributed.RayOptions` of the ``--ray*`` options, None without ``--ray``."""
    if address is None:
        return None
    from ..epr.distributed import RayOptions

    return RayOptions(address, workers, gpus, cpus)


def ray_for_index(on_ray, retriever, spec: str, items: str):
    """``on_ray`` (:func:`ray_options`) for an ``index`` command, or None, with a warning that the index is built
    here, when ``retriever`` (spec ``spec``) has no dense encoder for Ray to run; ``items``: what it indexes."""
    from ..retrieval import DenseRetriever

    if on_ray is not None and not any(isinstance(part, DenseRetriever)
                                      for part in getattr(retriever, "components", [retriever])):
        say(f"warning: --ray encodes a dense index's {items}, and {spec} has no dense encoder: it is built here")
        return None
    return on_ray


def load_task_from_options(task: str | None, *, train: Path | None = None, test: Path | None = None,
                           input_field: str | None = None, output_field: str | None = None,
                           id_field: str | None = None, fmt: str | None = None, data_dir: Path | None = None,
                           pool_only: bool = False):
    """The :class:`~taskret.data.Task` the task options name. ``--format`` fills in the field names not given.
    ``pool_only``: the command uses only the training pool (the EPR stages), so a ``--train`` file alone
    is enough (it stands in for the test file)."""
    from ..data import FORMAT_FIELDS, load_task

    if fmt is not None:
        if fmt not in FORMAT_FIELDS:
            raise ValueError(f"unknown format '{fmt}'; known: {', '.join(FORMAT_FIELDS)}")
        default_input, default_output, default_id = FORMAT_FIELDS[fmt]
        input_field, output_field = input_field or default_input, output_field or default_output
        id_field = id_field or default_id
    if pool_only and train is not None and task is None and test is None:
        test = train
    return load_task(task, train=train, test=test, input_field=input_field, output_field=output_field,
                     id_field=id_field, data_dir=data_dir)


def index_pool(retriever, task, train: Path | None = None) -> None:
    """Index ``task``'s training pool, naming the pool (the ``--train`` file, else the task) in an error."""
    try:
        retriever.index(task.train)
    except ValueError as err:
        source = str(train) if train is not None else f"task '{task.name}'"
        raise ValueError(f"{source}: {err}") from err


def write_ranked(query: str, ids: list[str], scores, records: dict, as_json: bool) -> None:
    """Print one query's ranked results on stdout: ``rank. id<TAB>score<TAB>snippet`` lines under ``query: ...``
    (an example's snippet is ``input -> output``, a document's ``title | text``), or with ``as_json`` one JSON line
    with ``query``, ``ids``, ``scores`` and ``snippets``. ``records`` maps ids to the index's
    :class:`~taskret.retrieval.index.IndexRecord` (empty for a bare retriever: no snippets)."""
    import json
    import sys

    from ..tart.search import snippet

    scores = [round(float(s), 4) for s in scores[: len(ids)]]
    snippets = [snippet(records[i]) if i in records else "" for i in ids]
    if as_json:
        row = {"query": query, "ids": ids, "scores": scores, **({"snippets": snippets} if records else {})}
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    sys.stdout.write(f"query: {query}\n")
    for rank, (item_id, score, shown) in enumerate(zip(ids, scores, snippets), start=1):
        sys.stdout.write(f"{rank:3d}. {item_id}\t{score:.4f}\t{shown}".rstrip("\t") + "\n")
