"""``taskret tart ...``: evaluate retrievers with and without instructions; index a task's corpus and
search it with an instruction; build TART training data and train TART-dual."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..data import DataError
from ..models import ModelNotInstalled

app = typer.Typer(help="TART: instruction-following retrieval (evaluate, index, search, build-data, train-dual).", no_args_is_help=True)
console = Console(stderr=True)
ERRORS = (DataError, ModelNotInstalled, ValueError, FileNotFoundError, RuntimeError)

DOCS_FILE = "docs.jsonl"
TART_META = "tart.json"


def _fail(err: Exception | str) -> None:
    from rich.markup import escape

    # escape: paths and ids hold square brackets that rich would read as markup.
    console.print(f"[bold red]error:[/] {escape(str(err))}")
    raise typer.Exit(2)


def _task_names(tasks: str) -> list[str]:
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise ValueError("--tasks is empty; give built-in tasks (scifact, mtop, break, ambigqa) or BEIR folders")
    return names


@app.command()
def evaluate(
    tasks: str = typer.Option("scifact", "--tasks", help="comma-separated: scifact, mtop, break, ambigqa, or paths "
                              "of folders in the BEIR layout"),
    retriever: str = typer.Option("bm25", help="bm25, dense:ENCODER (e.g. dense:minilm-l6), sbert, random"),
    setting: str = typer.Option("closed", help="closed (each task's own corpus), pooled (all corpora merged) or both"),
    instruction: bool = typer.Option(True, "--instruction/--no-instruction",
                                     help="prepend each task's instruction to its queries ('{instruction} [SEP] {query}')"),
    split: str = typer.Option("test", help="which split of each task"),
    limit: Optional[int] = typer.Option(None, help="a fixed seeded sample of N queries per task (the corpus stays whole)"),
    seed: int = typer.Option(0, help="seed of the query sample"),
    k: int = typer.Option(100, help="documents retrieved per query"),
    data_dir: Optional[Path] = typer.Option(None, help="folder of the built-in tasks' data (default $TASKRET_DATA_DIR "
                                            "or ../shared/data)"),
    out: Path = typer.Option(Path("runs/tart-evaluate"), help="output folder: metrics.json and runs/{setting}/{task}.jsonl"),
):
    """NDCG@10, Recall@100 and MRR@10 per task; writes metrics.json and the retrieved documents per query."""
    import time

    from ..io import write_json
    from .evaluation import METRICS, evaluate_retriever
    from .tasks import load_retrieval_task

    try:
        if setting not in ("closed", "pooled", "both"):
            raise ValueError(f"unknown setting '{setting}'; expected closed, pooled or both")
        if limit is not None and limit < 1:
            raise ValueError("--limit must be at least 1")
        loaded = [load_retrieval_task(name, data_dir, split).sample(limit, seed=seed) for name in _task_names(tasks)]
        start = time.perf_counter()
        with console.status(f"evaluating {retriever} on {', '.join(t.name for t in loaded)}"):
            result = evaluate_retriever(retriever, loaded, setting=setting, use_instruction=instruction, k=k,
                                        run_dir=out / "runs")
        result.update({"split": split, "limit": limit, "seed": seed, "wall_time_s": round(time.perf_counter() - start, 2)})
        write_json(out / "metrics.json", result)
    except ERRORS as err:
        _fail(err)
    from rich.table import Table

    table = Table("setting", "task", "N queries", "N docs", *METRICS, title=f"{retriever}, "
                  f"{'with' if instruction else 'without'} instructions")
    for name, per_task in result["settings"].items():
        for task_name, entry in per_task.items():
            table.add_row(name, task_name, str(entry["n_queries"]), str(entry["n_docs"]),
                          *(f"{entry['metrics'][m]:.1f}" for m in METRICS))
        table.add_row(name, "mean", "", "", *(f"{result['mean'][name][m]:.1f}" for m in METRICS))
    if "gap_mean" in result:
        table.add_row("pooled-closed", "mean", "", "", *(f"{result['gap_mean'][m]:+.1f}" for m in METRICS))
    Console().print(table)
    console.print(f"-> {out / 'metrics.json'}")


@app.command()
def index(
    task: str = typer.Option(..., "--task", help="scifact, mtop, break, ambigqa, or a folder in the BEIR layout"),
    retriever: str = typer.Option("bm25", help="bm25, dense:ENCODER, sbert"),
    split: str = typer.Option("test", help="which split's corpus (it differs only for mtop and break)"),
    data_dir: Optional[Path] = typer.Option(None, help="folder of the built-in tasks' data"),
    out: Path = typer.Option(..., help="index folder to write"),
):
    """Index a task's corpus (with the documents' texts, for `taskret tart search`)."""
    from ..io import write_json, write_jsonl
    from ..retrieval import make_retriever
    from .tasks import load_retrieval_task

    try:
        loaded = load_retrieval_task(task, data_dir, split)
        with console.status(f"indexing {len(loaded.corpus)} documents with {retriever}"):
            ret = make_retriever(retriever).index_texts(*loaded.doc_ids_and_texts())
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / DOCS_FILE, ({"id": d.id, "title": d.title, "text": d.text} for d in loaded.corpus.values()))
        write_json(out / TART_META, {"task": loaded.name, "split": split, "retriever": retriever,
                                     "n_docs": len(loaded.corpus), "instructions": loaded.instructions})
        ret.save(out)  # meta.json last: its presence marks a complete index
    except ERRORS as err:
        _fail(err)
    console.print(f"indexed {len(loaded.corpus)} documents of {loaded.name} with {retriever} -> {out}")


def _read_docs(index_dir: Path) -> dict[str, dict]:
    from ..data import iter_records

    path = index_dir / DOCS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; this folder was not written by `taskret tart index`")
    return {str(r["id"]): r for _, r in iter_records(path)}


def _snippet(doc: dict | None, width: int = 200) -> str:
    if doc is None:
        return "(document text not stored)"
    title = (doc.get("title") or "").strip()
    text = " ".join((doc.get("text") or "").split())
    text = text[:width] + ("..." if len(text) > width else "")
    return f"{title} | {text}" if title else text


@app.command()
def search(
    query: list[str] = typer.Argument(..., help="one or more queries"),
    index_dir: Path = typer.Option(..., "--index", help="a folder written by `taskret tart index`"),
    instruction: Optional[str] = typer.Option(None, help="what to find, e.g. 'Retrieve scientific evidence to "
                                              "verify this claim' (default: the query alone)"),
    k: int = typer.Option(5, help="how many documents"),
    as_json: bool = typer.Option(False, "--json", help="JSONL on stdout instead of text"),
):
    """Search an index with an instruction: prints rank, document id, score and the document's title / first 200 chars."""
    from ..retrieval import Retriever
    from .evaluation import format_query

    try:
        docs = _read_docs(index_dir)
        ret = Retriever.load(index_dir)
        texts = [format_query(instruction, q) for q in query]
        result = ret.retrieve(texts, k=k)
    except ERRORS as err:
        _fail(err)
    for text, ids, scores in zip(texts, result.ids, result.scores):
        if as_json:
            sys.stdout.write(json.dumps({"query": text, "ids": ids, "scores": [round(float(s), 4) for s in scores[: len(ids)]],
                                         "snippets": [_snippet(docs.get(d)) for d in ids]}, ensure_ascii=False) + "\n")
            continue
        sys.stdout.write(f"query: {text}\n")
        for rank, (doc_id, score) in enumerate(zip(ids, scores), start=1):
            sys.stdout.write(f"{rank:3d}. {doc_id}\t{float(score):.4f}\t{_snippet(docs.get(doc_id))}\n")


@app.command("build-data")
def build_data(
    tasks: str = typer.Option("mtop,break,scifact", "--tasks", help="comma-separated built-in tasks or BEIR folders; "
                              "a built-in task without the split (ambigqa has no train split) is skipped with a warning"),
    split: str = typer.Option("train", help="which split of each task"),
    out: Path = typer.Option(..., help="training data to write (JSONL)"),
    first_stage: str = typer.Option("bm25", help="retriever that mines hard and instruction-unfollowing negatives"),
    n_hard: int = typer.Option(5, help="hard negatives per query (top unjudged first-stage documents)"),
    n_random: int = typer.Option(2, help="random negatives per query (the task's own corpus)"),
    n_unfollowing: int = typer.Option(2, help="instruction-unfollowing negatives per query (other tasks' corpora)"),
    denoiser: Optional[str] = typer.Option(None, help="a sentence-transformers CrossEncoder (name or folder) that "
                                           "drops hard negatives it scores above --denoise-threshold"),
    denoise_threshold: float = typer.Option(0.5, help="denoiser score above which a hard negative is dropped"),
    limit: Optional[int] = typer.Option(None, help="a fixed seeded sample of N queries per task (the corpus stays whole)"),
    seed: int = typer.Option(0, help="seed of the instructions, positives, random negatives and query sample"),
    data_dir: Optional[Path] = typer.Option(None, help="folder of the built-in tasks' data"),
):
    """Mine TART training rows (instruction, query, positive, hard/random/unfollowing negatives) to JSONL."""
    import time

    from .tasks import RETRIEVAL_TASKS, load_retrieval_task
    from .training_data import build_training_examples, write_training_examples

    try:
        if limit is not None and limit < 1:
            raise ValueError("--limit must be at least 1")
        loaded = []
        for name in _task_names(tasks):
            if name in RETRIEVAL_TASKS and split not in RETRIEVAL_TASKS[name].splits:
                console.print(f"[yellow]warning:[/] task '{name}' has no split '{split}' "
                              f"(splits: {', '.join(RETRIEVAL_TASKS[name].splits)}); skipped")
                continue
            loaded.append(load_retrieval_task(name, data_dir, split).sample(limit, seed=seed))
        if not loaded:
            raise ValueError(f"no task has a '{split}' split")
        score = None
        if denoiser is not None:
            from sentence_transformers import CrossEncoder

            from ..models import resolve_model

            model = CrossEncoder(str(resolve_model(denoiser)), device="cpu")
            score = lambda pairs: model.predict(pairs, batch_size=64, show_progress_bar=False)  # noqa: E731
        stats: dict = {}
        start = time.perf_counter()
        with console.status(f"mining negatives for {', '.join(t.name for t in loaded)}"):
            rows = build_training_examples(loaded, first_stage=first_stage, n_hard=n_hard, n_random=n_random,
                                           n_unfollowing=n_unfollowing, seed=seed, denoiser=score,
                                           denoise_threshold=denoise_threshold, stats=stats)
        write_training_examples(out, rows)
    except ERRORS as err:
        _fail(err)
    negatives = ", ".join(f"{n} {kind}" for kind, n in stats["n_negatives"].items())
    per_task = ", ".join(f"{name} {n}" for name, n in stats["per_task"].items())
    console.print(f"{stats['n_rows']} rows ({per_task}; {stats['n_skipped']} queries without a relevant document "
                  f"skipped), negatives: {negatives}" + (f", {stats['n_denoised']} hard negatives dropped by the "
                  f"denoiser" if denoiser else "") + f" in {time.perf_counter() - start:.1f}s -> {out}")


@app.command("train-dual")
def train_dual(
    data: Path = typer.Option(..., "--data", help="training rows written by `taskret tart build-data`"),
    out: Path = typer.Option(..., help="output folder: model/, tart_dual_config.json, training_log.jsonl"),
    instruction: bool = typer.Option(True, "--instruction/--no-instruction",
                                     help="encode queries as '{instruction} [SEP] {query}' (off: the query alone, "
                                     "the no-instruction ablation)"),
    base_model: str = typer.Option("minilm-l6", help="sentence-transformers base model (name or folder)"),
    epochs: int = typer.Option(1, help="passes over the rows (a new negative is drawn per row per epoch)"),
    batch_size: int = typer.Option(64, help="triplets per optimiser step (in-batch negatives)"),
    mini_batch_size: int = typer.Option(16, help="sequences embedded at a time (GradCache; bounds memory)"),
    learning_rate: float = typer.Option(2e-5, help="peak learning rate (linear schedule, 10% warm-up)"),
    negatives: str = typer.Option("random,hard,unfollowing", help="kinds of negatives to draw from"),
    seed: int = typer.Option(0, help="seed of the negatives, batches and initialisation"),
    progress: bool = typer.Option(True, "--progress/--quiet", help="show the trainer's progress bar"),
):
    """Train TART-dual: one shared encoder for instructed queries and documents; use it as dense:OUT/model."""
    from .dual import CONFIG_FILE, TartDualConfig, train_tart_dual
    from .training_data import read_training_examples

    try:
        config = TartDualConfig(base_model=base_model, epochs=epochs, batch_size=batch_size,
                                mini_batch_size=mini_batch_size, learning_rate=learning_rate, seed=seed,
                                use_instruction=instruction,
                                negative_kinds=tuple(k.strip() for k in negatives.split(",") if k.strip()))
        rows = read_training_examples(data)
        folder = train_tart_dual(rows, out, config, progress=progress, source=str(data))
    except ERRORS as err:
        _fail(err)
    summary = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8"))
    console.print(f"trained on {summary['n_used']} rows ({summary['n_skipped']} skipped), {summary['steps']} steps, "
                  f"mean loss {summary['mean_loss']:.4f}, {summary['wall_time_s']:.1f}s -> {folder} "
                  f"(use --retriever dense:{folder})")
