"""``taskret tart ...``: evaluate retrievers with and without instructions (optionally reranked by
TART-full); index a task's corpus and search it with an instruction; build TART training data, train
TART-dual and TART-full, distil TART-full into TART-dual, and ``run`` the whole pipeline from one config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console

from .common import (
    MINI_BATCH_HELP,
    App,
    DataDir,
    MemoryBudgetGib,
    RayAddress,
    RayCpus,
    RayGpus,
    RayWorkers,
    RerankWeight,
    console,
    memory_budget,
    ray_for_index,
    ray_options,
    say,
    write_ranked,
)

app = App(help="TART: instruction-following retrieval (evaluate, index, search, tune-weight, build-data, ict, "
          "train-dual, train-full, distil, soup, run).")


INSTRUCTION_TEXT_OPT = typer.Option(None, "--instruction-text",
                                    help="use this instruction for every task (instead of the tasks' own; a BEIR "
                                    "folder's come from its instructions.json)")


def _with_instruction(task, text: Optional[str]):
    """The task with ``text`` as its only instruction, when given."""
    if text is not None and not text.strip():
        raise ValueError("--instruction-text is empty")
    return task.with_instructions([text.strip()]) if text is not None else task


def _first_stage_reads_instruction(spec: str) -> bool:
    """Whether any part of a retriever spec reads the instruction, as the built retriever's switches say: BM25
    reads the query alone unless told (``bm25?read_instruction=1``), and so do a hybrid's BM25 components."""
    if spec.partition(":")[0].partition("?")[0] not in ("bm25", "hybrid"):
        return True
    from ..retrieval import make_retriever

    switches = make_retriever(spec).read_instruction  # un-indexed: no model is loaded to read its switches
    return any(switches) if isinstance(switches, list) else switches


def _task_names(tasks: str) -> list[str]:
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise ValueError("--tasks is empty; give built-in tasks (scifact, mtop, mtop-similar, break, ambigqa) or BEIR folders")
    return names


@app.command()
def evaluate(
    tasks: str = typer.Option("scifact", "--tasks", help="comma-separated: scifact, mtop, mtop-similar, break, ambigqa, "
                              "berri-lite/TASK, or paths of folders in the BEIR layout"),
    retriever: str = typer.Option("bm25", "--retriever", "--setup", help="a named setup (docs-fast, docs-rerank: "
                                  "its reranker too), bm25 (reads the query alone; bm25?read_instruction=1 gives it "
                                  "the instruction), dense:ENCODER (e.g. dense:minilm-l6), hybrid:SPEC+SPEC (e.g. "
                                  "hybrid:bm25+dense:minilm-l6; its BM25 reads the query without the instruction, "
                                  "?read_instruction=0,1 says it per component), sbert, random"),
    setting: str = typer.Option("closed", help="closed (each task's own corpus), pooled (all corpora merged) or both"),
    instruction: bool = typer.Option(True, "--instruction/--no-instruction",
                                     help="prepend each task's instruction to its queries ('{instruction} [SEP] {query}')"),
    instruction_text: Optional[str] = INSTRUCTION_TEXT_OPT,
    split: str = typer.Option("test", help="which split of each task"),
    limit: Optional[int] = typer.Option(None, help="a fixed seeded sample of N queries per task (the corpus stays whole)"),
    seed: int = typer.Option(0, help="seed of the query sample"),
    k: int = typer.Option(100, help="documents retrieved per query"),
    rerank: Optional[str] = typer.Option(None, help="rerank with a TART-full folder (`taskret tart train-full`), any "
                                         "CrossEncoder folder, or upr:LM (zero-shot query likelihood, e.g. "
                                         "upr:smollm2-135m; options after ?: max_doc_tokens=N, "
                                         "ensemble_bare=true)"),
    rerank_top_k: Optional[int] = typer.Option(None, "--rerank-depth", "--rerank-top-k", min=1,
                                               help="how many first-stage documents per query the reranker reorders "
                                               "(default: the setup's, else 100)"),
    first_stage_instruction: Optional[bool] = typer.Option(
        None, "--first-stage-instruction/--no-first-stage-instruction",
        help="with --rerank: whether the first stage reads the instruction too (default: as --instruction)"),
    rerank_weight: RerankWeight = None,
    index_dir: Optional[Path] = typer.Option(None, "--index", help="evaluate this saved index (`taskret tart index` of "
                                             "the task's corpus) instead of encoding the corpus again: its retriever, "
                                             "and its setup's reranker unless --rerank is given; one task, closed"),
    data_dir: DataDir = None,
    out: Path = typer.Option(Path("runs/tart-evaluate"), help="output folder: metrics.json and runs/{setting}/{task}.jsonl"),
):
    """NDCG@10, Recall@100 and MRR@10 per task; writes metrics.json and the retrieved documents per query."""
    import time

    from ..io import write_json
    from ..tart.evaluation import METRICS, evaluate_retriever
    from ..tart.tasks import load_retrieval_task

    if setting not in ("closed", "pooled", "both"):
        raise ValueError(f"unknown setting '{setting}'; expected closed, pooled or both")
    if limit is not None and limit < 1:
        raise ValueError("--limit must be at least 1")
    if k < 1:
        raise ValueError("--k must be at least 1")
    names, setup, index = _task_names(tasks), None, None
    if index_dir is not None:
        from ..retrieval.index import load_index
        from ..tart.search import recorded_rerank

        if setting != "closed" or len(names) != 1:
            raise ValueError("--index evaluates one task's corpus as it was indexed: give one task in --tasks and "
                             "--setting closed")
        index = load_index(index_dir)
        if index.kind != "documents":
            raise ValueError(f"{index_dir} holds {index.kind}, not documents: `taskret tart index --corpus` writes "
                             f"a document index")
        retriever = index.info.get("retriever") or index.retriever.name
        recorded = recorded_rerank(index)
        if rerank is None and recorded["rerank"]:
            rerank, rerank_top_k = recorded["rerank"], rerank_top_k or recorded["rerank_depth"]
            rerank_weight = recorded["rerank_weight"] if rerank_weight is None else rerank_weight
        console.print(f"evaluating the index {index_dir} ({retriever}{', reranked by ' + rerank if rerank else ''}"
                      f"; {len(index.retriever.ids)} documents, not encoded again)", soft_wrap=True)
    else:
        retriever, setup = _resolve_setup(retriever)
    if setup is not None and setup.kind != "documents":
        raise ValueError(f"setup '{setup.name}' retrieves examples for prompts: evaluate it with `taskret evaluate`")
    if setup is not None and setup.rerank is not None and rerank is None:
        rerank, rerank_weight = setup.rerank, setup.rerank_weight if rerank_weight is None else rerank_weight
        rerank_top_k = setup.rerank_depth if rerank_top_k is None else rerank_top_k
    rerank_top_k = 100 if rerank_top_k is None else rerank_top_k
    loaded = [_with_instruction(load_retrieval_task(name, data_dir, split), instruction_text).sample(limit, seed=seed)
              for name in names]
    indexed = {loaded[0].name: index.retriever} if index is not None else None  # searched, not built again
    if instruction:
        for task in loaded:
            console.print(f"{task.name}: instruction " + (f"'{task.instruction}'" if task.instruction else
                          "none (the task has no instructions: give --instruction-text, or an instructions.json "
                          "in its folder); its queries are used alone"))
        # Of a retriever that reads the query alone, said only where there is an instruction that it leaves out.
        if any(task.instruction for task in loaded) and not (
                index.retriever.reads_instruction if index is not None else _first_stage_reads_instruction(retriever)):
            console.print(f"{retriever} reads the query alone" + (", the instruction goes to the reranker" if rerank
                          else ": the instruction changes nothing here") + " (bm25?read_instruction=1, or a hybrid's "
                          "read_instruction=1,..., gives it to BM25)")
    start = time.perf_counter()
    reranker = None
    if rerank is not None:
        from ..rerank import load_reranker

        with console.status(f"loading the reranker {rerank}"):
            reranker = load_reranker(rerank)
    # A line, not a status spinner: the stages' progress bars would share its line on a terminal.
    console.print(f"evaluating {retriever}{' + ' + str(rerank) if rerank else ''} on "
                  f"{', '.join(t.name for t in loaded)}")
    result = evaluate_retriever(retriever, loaded, setting=setting, use_instruction=instruction, k=k,
                                run_dir=out / "runs", reranker=reranker, rerank_top_k=rerank_top_k,
                                first_stage_instruction=first_stage_instruction, rerank_weight=rerank_weight,
                                progress=True, indexed=indexed)
    result.update({"split": split, "limit": limit, "seed": seed, "wall_time_s": round(time.perf_counter() - start, 2)})
    write_json(out / "metrics.json", result)
    from rich.table import Table

    name = f"{retriever} + rerank top {rerank_top_k} by {rerank}" if rerank else retriever
    used = sum(bool(task.instruction) for task in loaded) if instruction else 0
    title = "without instructions" if not used else (
        "with instructions" if used == len(loaded) else f"with instructions for {used} of {len(loaded)} tasks")
    table = Table("setting", "task", "N queries", "N docs", *METRICS, title=f"{name}, {title}")
    for name, per_task in result["settings"].items():
        for task_name, entry in per_task.items():
            table.add_row(name, task_name, str(entry["n_queries"]), str(entry["n_docs"]),
                          *(f"{entry['metrics'][m]:.1f}" for m in METRICS))
        table.add_row(name, "mean", "", "", *(f"{result['mean'][name][m]:.1f}" for m in METRICS))
    if "gap_mean" in result:
        table.add_row("pooled-closed", "mean", "", "", *(f"{result['gap_mean'][m]:+.1f}" for m in METRICS))
    Console().print(table)
    console.print(f"-> {out / 'metrics.json'}")


SETUP_HELP = ("a named setup (docs-fast: BM25 + MiniLM, no LM; docs-rerank: the same + SmolLM2 rerank of the top 10, "
              "the instruction at the reranker only) or any retriever spec: bm25, dense:ENCODER, hybrid:SPEC+SPEC")


def _resolve_setup(spec: Optional[str], default: Optional[str] = None):
    """(retriever spec, Setup or None) of ``--setup``/``--retriever``; prints the full spec a setup stands for."""
    from ..setups import SETUPS, resolve_setup

    if spec is None:
        spec = default
        console.print(f"no --setup given: using {SETUPS[default].describe()}", soft_wrap=True)
        return SETUPS[default].retriever, SETUPS[default]
    setup = resolve_setup(spec)
    if setup is not None:
        console.print(f"setup {setup.describe()}", soft_wrap=True)
        return setup.retriever, setup
    return spec, None


@app.command()
def index(
    corpus: str = typer.Option(..., "--corpus", "--task", help="the documents: a folder with corpus.jsonl (BEIR "
                               "layout; queries and qrels optional), a corpus file (JSONL, CSV or TSV; see "
                               "--text-field), a built-in task (scifact, mtop, ...) or berri-lite/TASK"),
    retriever: Optional[str] = typer.Option(None, "--setup", "--retriever", help=SETUP_HELP + " (default: docs-fast)"),
    text_field: str = typer.Option("text", help="a corpus file's field (column) holding each document's text"),
    title_field: Optional[str] = typer.Option("title", help="its field holding the title, if any"),
    id_field: Optional[str] = typer.Option(None, help="its field holding the id (default: _id, else id, else the "
                                           "line number)"),
    split: str = typer.Option("test", help="built-in tasks: which split's corpus (it differs only for mtop and break)"),
    instruction_text: Optional[str] = INSTRUCTION_TEXT_OPT,
    data_dir: DataDir = None,
    out: Path = typer.Option(..., help="index folder to write (self-contained: it can be moved or copied)"),
    shard_size: Optional[int] = typer.Option(None, min=1, help="documents per shard of encoded vectors (OUT/.shards/, "
                                             "kept until the index is complete: a killed run started again resumes "
                                             "from them; default 10,000)"),
    ray: RayAddress = None, ray_workers: RayWorkers = None, ray_gpus_per_worker: RayGpus = None,
    ray_cpus_per_worker: RayCpus = 1.0, memory_budget_gib: MemoryBudgetGib = 8.0,
):
    """Index a corpus with the documents' texts, its instruction and the setup's reranking, for `taskret tart
    search` and `taskret serve` (written atomically). The corpus is read in passes and its vectors encoded in
    shards, here or on Ray (--ray), so memory holds the index and not the corpus, and a killed run resumes;
    --memory-budget bounds the rest (the dense index's type, BM25's segments)."""
    from ..progress import reporting
    from ..retrieval import make_retriever
    from ..retrieval.index import index_documents
    from ..tart.tasks import open_corpus

    spec, setup = _resolve_setup(retriever, default="docs-fast")
    if setup is not None and setup.kind != "documents":
        raise ValueError(f"setup '{setup.name}' retrieves examples for prompts; index documents with docs-fast or "
                         f"docs-rerank (examples: `taskret index --setup {setup.name}`)")
    if setup is not None and setup.rerank is not None:
        from ..rerank import load_reranker

        load_reranker(setup.rerank)  # an LM that is not installed fails now, not at the first search
    if instruction_text is not None and not instruction_text.strip():
        raise ValueError("--instruction-text is empty")
    documents = open_corpus(corpus, data_dir, split, id_field=id_field, text_field=text_field,
                            title_field=title_field)
    instructions = [instruction_text.strip()] if instruction_text is not None else documents.instructions
    built = make_retriever(spec)
    on_ray = ray_for_index(ray_options(ray, ray_workers, ray_gpus_per_worker, ray_cpus_per_worker), built, spec,
                           "documents")
    with reporting():  # each stage's progress, rate and ETA on stderr (a status spinner would share its line)
        index_documents(out, built, documents, retriever_spec=spec,
                        instruction=instructions[0] if instructions else None,
                        extra={"split": split, "instructions": instructions,
                               **(setup.search_settings() if setup is not None else {})},
                        ray=on_ray, memory_budget=memory_budget(memory_budget_gib),
                        **({"shard_size": shard_size} if shard_size else {}))
    n = json.loads((out / "index_info.json").read_text())["n"]
    console.print(f"indexed {n} documents of {documents.name}{' on Ray' if on_ray else ''} -> {out}; search it "
                  f"with `taskret tart search --index {out} \"QUERY\"`" + (
                      f" (reranked by {setup.rerank}, as the setup says)" if setup is not None and setup.rerank
                      else ""))


@app.command("index-shards")
def index_shards(
    parts: list[str] = typer.Option(..., "--part", help="one part of the corpus (a corpus file: JSONL, CSV or TSV, "
                                    "or a folder with corpus.jsonl), one shard each; repeat it in the corpus's order"),
    retriever: str = typer.Option("bm25", "--setup", "--retriever", help="bm25 (every part scored with the whole "
                                  "corpus's counts: the merged top k is one index's) or dense:ENCODER"),
    text_field: str = typer.Option("text", help="a corpus file's field (column) holding each document's text"),
    title_field: Optional[str] = typer.Option("title", help="its field holding the title, if any"),
    id_field: Optional[str] = typer.Option(None, help="its field holding the id (default: _id, else id, else the "
                                           "line number)"),
    out: Path = typer.Option(..., help="folder of the shards (OUT/shard-N) and their config, OUT/shards.json"),
    ray: Optional[str] = typer.Option(None, "--ray", help="each part a Ray task: auto (the running cluster), local "
                                      "(start one here), HOST:PORT or ray://HOST:PORT; every node must reach the "
                                      "parts and OUT"),
    memory_budget_gib: MemoryBudgetGib = 8.0,
):
    """Index a corpus held as parts, one shard each, for `taskret serve --shards OUT/shards.json`: on one machine, or
    spread over a Ray cluster (--ray). A stopped run started again indexes only the shards not yet there."""
    from contextlib import nullcontext

    from ..progress import reporting
    from ..retrieval.sharded_index import index_corpus_shards
    from ..tart.tasks import open_corpus

    for path in parts:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such corpus part")
    streams = [open_corpus(path, id_field=id_field, text_field=text_field, title_field=title_field) for path in parts]
    session = nullcontext()
    if ray is not None:
        from ..backends.ray_pool import connected

        session = connected(ray)
    with session, reporting():
        config = index_corpus_shards(streams, out, retriever, on_ray=ray is not None,
                                     memory_budget=memory_budget(memory_budget_gib))
    console.print(f"indexed {len(parts)} shards{' on Ray' if ray else ''} -> {out}; serve them with `taskret serve "
                  f"--shards {config}`")


@app.command()
def search(
    query: list[str] = typer.Argument(..., help="one or more queries"),
    index_dir: Path = typer.Option(..., "--index", help="a folder written by `taskret tart index` (or any taskret "
                                   "index command)"),
    instruction: Optional[str] = typer.Option(None, help="what to find, e.g. 'Retrieve scientific evidence to "
                                              "verify this claim' (default: the index's, else the query alone); "
                                              "the setups give it to the reranker only: where no stage reads it "
                                              "(BM25, docs-fast) a warning says so and the query is searched alone"),
    top_k: int = typer.Option(5, "--top-k", "--k", min=1, help="how many documents"),
    rerank: Optional[str] = typer.Option(None, help="rerank with a TART-full folder (or any CrossEncoder folder), or "
                                         "upr:LM (default: the reranker the index's setup records)"),
    no_rerank: bool = typer.Option(False, "--no-rerank", help="skip the reranker the index records"),
    rerank_depth: Optional[int] = typer.Option(None, "--rerank-depth", "--rerank-top-k", min=1,
                                               help="how many first-stage documents the reranker reorders (default: "
                                               "the index's, else 100)"),
    rerank_weight: RerankWeight = None,
    query_encoder: Optional[str] = typer.Option(None, help="encode the queries with this model: one distilled with "
                                                "--freeze-documents from the dense index's encoder, so the index "
                                                "serves it as it is (checked on the first document)"),
    as_json: bool = typer.Option(False, "--json", help="JSONL on stdout instead of text"),
):
    """Search an index with an instruction: prints rank, document id, score and the document's title / first 200
    chars; an index built from a setup is reranked as the setup says."""
    from ..progress import reporting
    from ..retrieval.index import load_index
    from ..tart.search import RECORDED, instruction_read, recorded_rerank, search_index

    if rerank is not None and no_rerank:
        raise ValueError("give --rerank or --no-rerank, not both")
    index = load_index(index_dir)
    reranker = None if no_rerank else (rerank or RECORDED)
    read = instruction_read(index, reranker)
    if instruction is not None and not read:
        say(f"warning: no stage of this search reads --instruction ({index.info.get('setup') or index.retriever.name}"
            f"'s first stage reads the query alone, and no reranker runs): searching with the query alone")
    if instruction is None and index.instruction and read:
        instruction = index.instruction
        console.print(f"instruction (the index's): '{instruction}'")
    recorded = recorded_rerank(index)["rerank"]
    if reranker == RECORDED and recorded:
        console.print(f"reranking with {recorded} ({index.info.get('setup') or 'as the index records'}; "
                      f"--no-rerank skips it)")
    with reporting():  # a reranking's progress on stderr (stdout carries the results)
        texts, result = search_index(index, query, instruction=instruction, top_k=top_k, reranker=reranker,
                                     rerank_depth=rerank_depth, rerank_weight=rerank_weight,
                                     query_encoder=query_encoder)
    for text, ids, scores in zip(texts, result.ids, result.scores):
        write_ranked(text, ids, scores, index.records, as_json)


@app.command("tune-weight")
def tune_weight(
    tasks: str = typer.Option(..., "--tasks", help="DEV tasks, comma-separated (berri-lite/TASK, a BEIR folder, ...): "
                              "never the task you will evaluate, or the weight is an upper bound"),
    first: str = typer.Option(..., "--first", help="the first retriever spec, e.g. bm25 or a hybrid"),
    second: Optional[list[str]] = typer.Option(None, "--second", help="a retriever to fuse with --first, e.g. "
                                               "dense:minilm-l6: tunes the hybrid's weight; repeat it for a hybrid "
                                               "of three or more (tunes its weights)"),
    rerank: Optional[str] = typer.Option(None, help="a reranker reordering --first's top --rerank-depth (upr:LM, a "
                                         "TART-full or CrossEncoder folder): tunes --rerank-weight"),
    rerank_depth: int = typer.Option(10, "--rerank-depth", help="first-stage documents the reranker reorders"),
    confidence: Optional[float] = typer.Option(
        None, min=0.0, max=1.0,
        help="with --rerank: the reranker gets a share only if its best weight beats the first stage alone in this "
        "share of bootstrap resamples of the dev queries, else the weight is 1 (default 0.95; 0: take the best "
        "weight however small its gain)"),
    instruction: bool = typer.Option(False, "--instruction/--no-instruction",
                                     help="tune on instructed queries ('{instruction} [SEP] {query}')"),
    instruction_text: Optional[str] = INSTRUCTION_TEXT_OPT,
    read_instruction: Optional[str] = typer.Option(
        None, "--read-instruction", help="with --second and --instruction: which components read the instruction, "
        "in order (--first, then each --second), e.g. 0,1,0; default: all but BM25, as the hybrid gives it"),
    split: str = typer.Option("test", help="which split of each task (berri-lite: test reads its dev qrels)"),
    limit: Optional[int] = typer.Option(25, help="a fixed seeded sample of N queries per task"),
    seed: int = typer.Option(0, help="seed of the query sample"),
    depth: int = typer.Option(100, help="documents each retriever ranks per query"),
    data_dir: DataDir = None,
    out: Optional[Path] = typer.Option(None, help="write the weight and every weight's NDCG@10 here (JSON)"),
):
    """Choose a fusion weight on dev tasks: a hybrid's weight (--second) or a reranker's --rerank-weight (--rerank)."""
    import warnings

    from rich.markup import escape
    from rich.table import Table

    from ..io import write_json
    from ..retrieval.hybrid import parse_switches, reads_instruction
    from ..tart.fusion import DEFAULT_CONFIDENCE, DevOverlapWarning, dev_overlap, tune_weights
    from ..tart.fusion import tune_weight as tune
    from ..tart.tasks import load_retrieval_task

    if (not second) == (rerank is None):
        raise ValueError("give exactly one of --second (a retriever to fuse with --first) or --rerank")
    if limit is not None and limit < 1:
        raise ValueError("--limit must be at least 1")
    if confidence is not None and not rerank:
        raise ValueError("--confidence guards a reranker's weight: give it with --rerank")
    confidence = DEFAULT_CONFIDENCE if confidence is None else confidence
    reads = None
    if read_instruction is not None:
        if not second or not instruction:
            raise ValueError("--read-instruction says which of a hybrid's components read the instruction: give it "
                             "with --second and --instruction")
        try:
            reads = parse_switches(read_instruction)
        except ValueError:
            raise ValueError(f"--read-instruction: expected 0 or 1 per component, comma-separated (e.g. 0,1,0), "
                             f"got {read_instruction!r}") from None
        if len(reads) != 1 + len(second):
            raise ValueError(f"--read-instruction: one switch per component ({1 + len(second)}: --first and each "
                             f"--second), got {len(reads)}")
    # the spec's option, where the switches differ from the hybrid's default; the output records the effective ones
    default_reads = [reads_instruction(s) for s in [first, *(second or [])]]
    read_option = ("" if reads is None or reads == default_reads
                   else "&read_instruction=" + ",".join(str(int(r)) for r in reads))
    if instruction and second and reads is None:
        reads = default_reads
    loaded = [_with_instruction(load_retrieval_task(name, data_dir, split), instruction_text).sample(limit, seed=seed)
              for name in _task_names(tasks)]
    overlap = dev_overlap([first, *(second or []), rerank], loaded)
    for folder, shared in overlap.items():
        console.print(f"[yellow]warning:[/] {escape(folder)} was trained on {', '.join(shared)}: its scores on those "
                      "dev tasks are in-domain, so the weights favour it; choose them on tasks held out of its training")
    if second and len(second) > 1:
        specs = [first, *second]
        with console.status(f"ranking {', '.join(t.name for t in loaded)} once per component, then every share"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", DevOverlapWarning)  # said above, in the console's words
            choice = tune_weights(specs, loaded, depth=depth, use_instruction=instruction, read_instruction=reads)
        _report_weights(specs, loaded, choice, out, {"use_instruction": instruction, "read_instruction": reads,
                                                     "limit": limit, "seed": seed, "dev_overlap": overlap},
                        read_option)
        return
    second = second[0] if second else None
    with console.status(f"ranking {', '.join(t.name for t in loaded)} once per component, then every weight"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", DevOverlapWarning)
        choice = tune(first, loaded, second=second, reranker=rerank, rerank_depth=rerank_depth, depth=depth,
                      use_instruction=instruction, confidence=confidence, read_instruction=reads)
    table = Table("weight of --first", *(t.name for t in loaded), "mean NDCG@10",
                  title=f"{first} vs {second or 'its reranking by ' + str(rerank)}")
    for weight, mean in choice.mean_ndcg.items():
        mark = " <- chosen" if weight == choice.weight else ""
        table.add_row(f"{weight:g}", *(f"{choice.per_task[weight][t.name]:.1f}" for t in loaded), f"{mean:.2f}{mark}")
    Console().print(table)
    if choice.confidence is not None and choice.best != 1.0:
        gain = choice.mean_ndcg[choice.best] - choice.mean_ndcg[1.0]
        held = (f"the best weight {choice.best:g} gains {gain:+.2f} NDCG@10 over the first stage alone on the dev "
                f"queries, a gain that holds in {choice.confidence:.0%} of their bootstrap resamples")
        console.print(held + (f", under --confidence {confidence:g}: the first stage keeps its order (weight 1)"
                              if choice.weight != choice.best else ""))
    use = (f"--retriever 'hybrid:{first}+{second}?fusion=convex&weight={choice.weight:g}{read_option}'"
           if second is not None else
           f"--retriever '{first}' --rerank {rerank} --rerank-depth {rerank_depth} --rerank-weight {choice.weight:g}")
    console.print(f"use: {use}")
    if out is not None:
        write_json(out, {"weight": choice.weight, "best": choice.best, "confidence": choice.confidence,
                         "confidence_required": confidence if rerank else None,
                         "first": first, "second": second, "rerank": rerank,
                         "rerank_depth": rerank_depth if rerank else None, "use_instruction": instruction,
                         "read_instruction": reads,
                         "tasks": [t.name for t in loaded], "limit": limit, "seed": seed, "dev_overlap": overlap,
                         "mean_ndcg": {f"{w:g}": round(v, 2) for w, v in choice.mean_ndcg.items()},
                         "per_task": {f"{w:g}": {t: round(v, 2) for t, v in per.items()}
                                      for w, per in choice.per_task.items()}})
        console.print(f"-> {out}")


def _report_weights(specs: list[str], tasks, choice, out: Optional[Path], settings: dict, read_option: str) -> None:
    """The shares tune-weight chose for a hybrid of three or more, as a table (best 10), a spec (``read_option``
    appended to its options) and JSON."""
    from rich.table import Table

    from ..io import write_json

    ranked = sorted(choice.mean_ndcg, key=lambda w: -choice.mean_ndcg[w])[:10]
    table = Table(*specs, *(t.name for t in tasks), "mean NDCG@10", title="the 10 best shares, of "
                  f"{len(choice.mean_ndcg)} tried")
    for weights in ranked:
        mark = " <- chosen" if weights == choice.weights else ""
        table.add_row(*(f"{w:g}" for w in weights), *(f"{choice.per_task[weights][t.name]:.1f}" for t in tasks),
                      f"{choice.mean_ndcg[weights]:.2f}{mark}")
    Console().print(table)

    def key(weights) -> str:  # the shares as the spec writes them
        return ",".join(f"{w:g}" for w in weights)

    console.print(f"use: --retriever 'hybrid:{'+'.join(specs)}?fusion=convex&weights={key(choice.weights)}"
                  f"{read_option}'")
    if out is not None:
        write_json(out, {"weights": list(choice.weights), "specs": specs, **settings, "tasks": [t.name for t in tasks],
                         "mean_ndcg": {key(w): round(v, 2) for w, v in choice.mean_ndcg.items()},
                         "per_task": {key(w): {t: round(v, 2) for t, v in per.items()}
                                      for w, per in choice.per_task.items()}})
        console.print(f"-> {out}")


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
    unfollowing_from: str = typer.Option("random_tasks", help="where unfollowing negatives come from: random_tasks "
                                         "(the other tasks in a seeded random order) or pooled (the first stage's "
                                         "top documents over all other corpora pooled)"),
    unfollowing_first_stage: Optional[str] = typer.Option(
        None, help="retriever that mines the unfollowing negatives (e.g. dense:minilm-l6); default: --first-stage"),
    denoiser: Optional[str] = typer.Option(None, help="a TART-full folder (`taskret tart train-full`) or any "
                                           "sentence-transformers CrossEncoder (name or folder) that drops hard "
                                           "negatives it scores above --denoise-threshold"),
    denoise_threshold: float = typer.Option(0.5, help="denoiser score (a probability for TART-full) above which a hard "
                                            "negative is dropped"),
    denoise_instruction: Optional[bool] = typer.Option(
        None, "--denoise-instruction/--no-denoise-instruction",
        help="give the denoiser '{instruction} [SEP] {query}' (default: yes for a TART-full folder trained with "
        "instructions, else the query alone)"),
    limit: Optional[int] = typer.Option(None, help="a fixed seeded sample of N queries per task (the corpus stays whole)"),
    seed: int = typer.Option(0, help="seed of the instructions, positives, random negatives and query sample"),
    instruction_text: Optional[str] = INSTRUCTION_TEXT_OPT,
    data_dir: DataDir = None,
):
    """Mine TART training rows (instruction, query, positive, hard/random/unfollowing negatives) to JSONL."""
    import time

    from ..tart.tasks import load_training_tasks
    from ..tart.training_data import build_training_examples, write_training_examples

    if limit is not None and limit < 1:
        raise ValueError("--limit must be at least 1")
    loaded, skipped = load_training_tasks(_task_names(tasks), data_dir, split, limit=limit, seed=seed)
    loaded = [_with_instruction(task, instruction_text) for task in loaded]
    for message in skipped:
        console.print(f"[yellow]warning:[/] {message}; skipped")
    score, with_instruction = None, False
    if denoiser is not None:
        from ..rerank import make_denoiser

        score, with_instruction = make_denoiser(denoiser)
        with_instruction = with_instruction if denoise_instruction is None else denoise_instruction
    stats: dict = {}
    start = time.perf_counter()
    with console.status(f"mining negatives for {', '.join(t.name for t in loaded)}"):
        rows = build_training_examples(loaded, first_stage=first_stage, n_hard=n_hard, n_random=n_random,
                                       n_unfollowing=n_unfollowing, seed=seed, denoiser=score,
                                       denoise_threshold=denoise_threshold, stats=stats,
                                       denoise_with_instruction=with_instruction, unfollowing_from=unfollowing_from,
                                       unfollowing_first_stage=unfollowing_first_stage)
    write_training_examples(out, rows)
    negatives = ", ".join(f"{n} {kind}" for kind, n in stats["n_negatives"].items())
    per_task = ", ".join(f"{name} {n}" for name, n in stats["per_task"].items())
    console.print(f"{stats['n_rows']} rows ({per_task}; {stats['n_skipped']} queries without a relevant document "
                  f"skipped), negatives: {negatives}" + (f", {stats['n_denoised']} hard negatives dropped by the "
                  f"denoiser" if denoiser else "") + f" in {time.perf_counter() - start:.1f}s -> {out}")


# Options shared by the training commands.
DATA_OPT = typer.Option(..., "--data", help="training rows written by `taskret tart build-data`")
INSTRUCTION_OPT = typer.Option(True, "--instruction/--no-instruction",
                               help="queries as '{instruction} [SEP] {query}' (off: the query alone, the "
                               "no-instruction ablation)")
EPOCHS_OPT = typer.Option(1, help="passes over the rows (new negatives are drawn per row per epoch)")
LR_OPT = typer.Option(2e-5, help="peak learning rate (linear schedule, 10% warm-up)")
NEGATIVES_OPT = typer.Option("random,hard,unfollowing", help="kinds of negatives to draw from")
SEED_OPT = typer.Option(0, help="seed of the negatives, batches and initialisation")
PROGRESS_OPT = typer.Option(True, "--progress/--quiet", help="show the trainer's progress bar")
EXCLUDE_INSTRUCTION_OPT = typer.Option(False, "--exclude-instruction-from-pooling",
                                       help="the query vector averages the query's tokens, not its instruction's "
                                       "(INSTRUCTOR-style; saved as Pooling(include_prompt=False))")


def _kinds(negatives: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in negatives.split(",") if k.strip())


def _train(data: Path, out: Path, config_file: str, train: Callable[[list[dict]], Path], use: str) -> None:
    """Read and check the rows, train, and report the run's summary (``out/config_file``)."""
    from ..tart.training_data import read_training_examples

    rows = read_training_examples(data)
    folder = train(rows)
    summary = json.loads((out / config_file).read_text(encoding="utf-8"))
    console.print(f"trained on {summary['n_used']} rows ({summary['n_skipped']} skipped), {summary['steps']} steps, "
                  f"mean loss {summary['mean_loss']:.4f}, {summary['wall_time_s']:.1f}s -> {folder} "
                  f"({use.format(folder=folder, out=out)})")


@app.command()
def ict(
    source: str = typer.Argument(..., help="the corpus to draw from: berri-lite/TASK, a built-in task, a BEIR folder "
                                 "or a corpus.jsonl"),
    out: Path = typer.Option(..., help="new folder for the task (BEIR layout with instructions.json), written whole"),
    queries: Optional[int] = typer.Option(None, help="training queries to keep (default: every usable document)"),
    dev_queries: int = typer.Option(50, help="held-out queries (qrels/dev.tsv), drawn first"),
    keep_sentence: float = typer.Option(0.1, help="chance that a query's sentence stays in its document"),
    min_words: int = typer.Option(8, help="shortest sentence (words) that may be a query"),
    max_words: int = typer.Option(60, help="longest sentence (words) that may be a query"),
    seed: int = typer.Option(0, help="seed of the draw (one per document, so one document's query never "
                             "depends on the others)"),
    instruction_text: Optional[list[str]] = typer.Option(
        None, "--instruction-text", help="the task's instructions (repeat for several; the first is the evaluation "
        "one; default: generic 'sentence -> its source' instructions)"),
    data_dir: DataDir = None,
):
    """Turn an unlabelled corpus into a retrieval task (inverse cloze task): each query is a sentence of a
    document, whose relevant document is the rest of it. Train on it as a BEIR folder, or as ict:SOURCE in a
    config."""
    from ..tart.ict import ICT_INSTRUCTIONS, IctSettings, draw_ict, source_corpus, write_ict_folder

    instructions = [t.strip() for t in instruction_text or ICT_INSTRUCTIONS]
    if not all(instructions):
        raise ValueError("--instruction-text is empty")
    settings = IctSettings(n_train=queries, n_dev=dev_queries, keep_sentence=keep_sentence, min_words=min_words,
                           max_words=max_words, seed=seed)
    name, corpus = source_corpus(source, data_dir)
    draw = draw_ict(corpus, settings)
    folder = write_ict_folder(draw, out, instructions=instructions)
    console.print(f"{name}: {len(corpus)} documents -> {len(draw.splits['train'])} train and "
                  f"{len(draw.splits['dev'])} dev queries in {folder}; train on it with --tasks {folder}")


def _batch_groups(text: Optional[str]):
    """``--batch-groups``: a named grouping, or groups of comma-separated task names separated by ';'."""
    from ..tart.training_data import BATCH_GROUPINGS

    if text is None or text in BATCH_GROUPINGS:
        return text
    return [[task.strip() for task in group.split(",") if task.strip()] for group in text.split(";") if group.strip()]


@app.command("train-dual")
def train_dual(
    data: Path = DATA_OPT,
    out: Path = typer.Option(..., help="output folder: model/, tart_dual_config.json, training_log.jsonl"),
    instruction: bool = INSTRUCTION_OPT,
    base_model: str = typer.Option("minilm-l6", help="sentence-transformers base model (name or folder)"),
    epochs: int = EPOCHS_OPT,
    batch_size: int = typer.Option(64, help="triplets per optimiser step (in-batch negatives)"),
    mini_batch_size: int = typer.Option(16, help=MINI_BATCH_HELP),
    learning_rate: float = LR_OPT,
    negatives: str = NEGATIVES_OPT,
    seed: int = SEED_OPT,
    exclude_instruction_from_pooling: bool = EXCLUDE_INSTRUCTION_OPT,
    instruction_dropout: float = typer.Option(0.0, help="share of anchors trained on the bare query"),
    unfollowing_needs_instruction: bool = typer.Option(
        False, help="never give an anchor left bare by --instruction-dropout an instruction-unfollowing negative"),
    batch_groups: Optional[str] = typer.Option(
        None, help="tasks that share batches: 'siblings' (pairs found from the unfollowing negatives), 'tasks' "
        "(each task alone) or explicit groups, e.g. 'mtop,mtop-similar;conala,nl2bash'; default: mixed batches"),
    keep_instruction_in_groups: bool = typer.Option(
        False, help="anchors of tasks in a --batch-groups group always read their instruction (no dropout)"),
    progress: bool = PROGRESS_OPT,
):
    """Train TART-dual: one shared encoder for instructed queries and documents; use it as dense:OUT/model."""
    from ..tart.dual import CONFIG_FILE, TartDualConfig, train_tart_dual

    def train(rows):
        config = TartDualConfig(base_model=base_model, epochs=epochs, batch_size=batch_size,
                                mini_batch_size=mini_batch_size, learning_rate=learning_rate, seed=seed,
                                use_instruction=instruction, negative_kinds=_kinds(negatives),
                                exclude_instruction_from_pooling=exclude_instruction_from_pooling,
                                instruction_dropout=instruction_dropout,
                                unfollowing_needs_instruction=unfollowing_needs_instruction,
                                batch_groups=_batch_groups(batch_groups),
                                keep_instruction_in_groups=keep_instruction_in_groups)
        return train_tart_dual(rows, out, config, progress=progress, source=str(data))

    _train(data, out, CONFIG_FILE, train, "use --retriever dense:{folder}")


@app.command("train-full")
def train_full(
    data: Path = DATA_OPT,
    out: Path = typer.Option(..., help="output folder: model/ (a CrossEncoder), tart_full_config.json, "
                             "training_log.jsonl"),
    instruction: bool = INSTRUCTION_OPT,
    base_model: str = typer.Option("minilm-l6", help="encoder to start from (name or folder; a new 1-logit head "
                                   "is added), or a causal LM (smollm2-135m, gemma3-270m) scored by its yes/no log-odds"),
    epochs: int = EPOCHS_OPT,
    batch_size: int = typer.Option(32, help="(query, document) pairs per optimiser step"),
    n_negatives: int = typer.Option(4, help="negatives per positive (binary cross-entropy, 1:4 as in the paper)"),
    max_length: int = typer.Option(256, help="tokens of query and document together"),
    objective: str = typer.Option("relevance", help="relevance (binary cross-entropy on a relevance logit) or "
                                  "query_likelihood (a causal LM fine-tuned to write the query from its instruction and "
                                  "document, scored as upr:LM is; --batch-size then counts rows)"),
    ranking_weight: float = typer.Option(1.0, help="query_likelihood: weight of the listwise term over each row's "
                                         "positive and negatives (0: the LM objective alone)"),
    instruction_dropout: float = typer.Option(0.0, help="query_likelihood: share of rows read without instruction"),
    unfollowing_needs_instruction: bool = typer.Option(
        False, help="query_likelihood: never give a row left bare by --instruction-dropout an instruction-unfollowing "
        "negative"),
    learning_rate: float = LR_OPT,
    negatives: str = NEGATIVES_OPT,
    seed: int = SEED_OPT,
    progress: bool = PROGRESS_OPT,
):
    """Train TART-full: a cross-encoder over '{instruction} [SEP] {query}' and a document (or a causal LM's query
    likelihood, --objective query_likelihood); rerank with --rerank OUT."""
    from ..tart.cross_encoder import CONFIG_FILE, TartFullConfig, train_tart_full

    def train(rows):
        config = TartFullConfig(base_model=base_model, epochs=epochs, batch_size=batch_size, n_negatives=n_negatives,
                                max_length=max_length, learning_rate=learning_rate, seed=seed,
                                use_instruction=instruction, negative_kinds=_kinds(negatives), objective=objective,
                                ranking_weight=ranking_weight, instruction_dropout=instruction_dropout,
                                unfollowing_needs_instruction=unfollowing_needs_instruction)
        return train_tart_full(rows, out, config, progress=progress, source=str(data))

    _train(data, out, CONFIG_FILE, train, "use --rerank {out}")


@app.command()
def distil(
    data: Path = DATA_OPT,
    teacher: str = typer.Option(..., help="a TART-full folder (`taskret tart train-full`), or a reranker spec: "
                                "fusion:minilm-l6?weight=0.4 (BM25 + MiniLM over each row's candidates; several encoders: "
                                "fusion:minilm-l6+e5-small?weights=0.2,0.3,0.5), upr:LM"),
    out: Path = typer.Option(..., help="output folder: model/, tart_distil_config.json, training_log.jsonl"),
    base_model: str = typer.Option("minilm-l6", help="the student to start from: a TART-dual folder, or a "
                                   "sentence-transformers model (name or folder)"),
    instruction: bool = INSTRUCTION_OPT,
    epochs: int = EPOCHS_OPT,
    batch_size: int = typer.Option(32, help="rows (1 positive + n negatives each) per optimiser step"),
    n_negatives: int = typer.Option(4, help="negatives per row whose teacher scores the student learns"),
    temperature: float = typer.Option(1.0, help="the teacher's logits are divided by this before the softmax"),
    instruction_dropout: float = typer.Option(0.0, help="share of anchors the student reads without instruction"),
    learning_rate: float = LR_OPT,
    negatives: str = NEGATIVES_OPT,
    seed: int = SEED_OPT,
    exclude_instruction_from_pooling: bool = EXCLUDE_INSTRUCTION_OPT,
    freeze_documents: bool = typer.Option(False, "--freeze-documents",
                                          help="train the query encoder only: documents keep the base's vectors, "
                                          "so an index built with the base serves the student as it is"),
    progress: bool = PROGRESS_OPT,
):
    """Distil TART-full (or another reranker) into a dual encoder (KL between the teacher's and the student's scores of each row's
    positive and negatives); use the result as dense:OUT/model."""
    from ..tart.distil import CONFIG_FILE, TartDistilConfig, train_tart_distil

    def train(rows):
        config = TartDistilConfig(base_model=base_model, epochs=epochs, batch_size=batch_size, n_negatives=n_negatives,
                                  temperature=temperature, learning_rate=learning_rate, seed=seed,
                                  use_instruction=instruction, negative_kinds=_kinds(negatives),
                                  instruction_dropout=instruction_dropout,
                                  exclude_instruction_from_pooling=exclude_instruction_from_pooling,
                                  freeze_documents=freeze_documents)
        return train_tart_distil(rows, teacher, out, config, progress=progress, source=str(data))

    _train(data, out, CONFIG_FILE, train, "use --retriever dense:{folder}")


@app.command()
def soup(
    models: list[Path] = typer.Argument(..., help="model folders fine-tuned from the same base (2 or more): TART-dual "
                                        "or distilled students (OUT/model), or TART-full cross-encoders"),
    out: Path = typer.Option(..., help="the averaged model's folder (written whole or not at all), with soup.json"),
    weights: Optional[str] = typer.Option(None, help="comma-separated weight per model (default: equal; "
                                          "normalised to sum to 1)"),
):
    """Average models fine-tuned from one base into one (a model soup): as fast as each, often better than any;
    soup.json records the sources, weights and the union of their training tasks."""
    from ..tart.fusion import training_tasks
    from ..training.soup import average_models

    shares = None
    if weights is not None:
        try:
            shares = [float(w) for w in weights.split(",")]
        except ValueError:
            raise ValueError(f"--weights must be comma-separated numbers, got '{weights}'") from None
    tasks = {str(model): training_tasks(model) for model in models}
    unknown = [name for name, found in tasks.items() if found is None]
    union = sorted(set().union(*(found for found in tasks.values() if found)))
    record = {"train_tasks": union, "train_tasks_unknown_for": unknown}
    folder = average_models(models, out, weights=shares, record=record)
    used = json.loads((folder / "soup.json").read_text(encoding="utf-8"))["weights"]
    console.print(f"averaged {len(models)} models (weights {', '.join(f'{w:.3g}' for w in used)}) -> {folder}; "
                  f"trained on {len(union)} tasks" + (f" ({len(unknown)} sources without records)" if unknown else "")
                  + f"; use --retriever dense:{folder}")


@app.command()
def run(config: Path = typer.Argument(..., help="TART config (JSON); see taskret.tart.pipeline.TartRunConfig")):
    """build-data -> train-dual -> train-full -> (distil) -> evaluate from one config file, skipping stages whose
    outputs exist."""
    from ..tart.pipeline import TartRunConfig, run_pipeline

    cfg = TartRunConfig.from_file(config)
    run_pipeline(cfg, console=console)
