"""What the EPR benchmarks that pair methods on all test inputs share (epr_ladder.py, epr_beyond.py, epr_tasks.py): a
method's ranking of the test inputs, read back in their order from wherever it is kept; the LM-Oracle's rankings,
ranked in resumable chunks; what a trained run cost, from the files its work folder keeps; and the instruction each task's queries carry in
a multi-task retriever.

Scripts import it as a top-level module (their own folder, ``benchmarks/epr/``, is on ``sys.path``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from taskret.data import Example
from taskret.io import read_json, read_jsonl, write_json, write_jsonl
from taskret.models import machine_info
from taskret.progress import progress_bar
from taskret.retrieval import RetrievalResult, Retriever

ORACLE_CHUNK = 25  # test inputs the LM-Oracle ranks at a time, each chunk kept (a stopped ranking resumes)
#: The task instruction in front of every query of the multi-task retriever: what the task asks of the LM.
INSTRUCTIONS = {
    "mtop": "Parse the request to a task-oriented assistant into its intent and slots",
    "break": "Decompose the question into a sequence of simpler steps",
    "berri-lite/nl2bash": "Write the Bash command that does what the description says",
    "berri-lite/conala": "Write the Python code that implements the intent",
    "berri-lite/asset_simplification": "Rewrite the sentence in simpler English",
    "geoquery": "Translate the question about US geography into an SQL query",
    "atis": "Translate the flight-booking request into an SQL query",
    "sst2": "Tell whether the movie review is positive or negative",
    "sst5": "Grade the movie review's sentiment from terrible to great",
    "trec": "Tell what type of answer the question asks for",
}


def ranking(source: str, test: Sequence[Example]) -> RetrievalResult:
    """A method's top 100 for each test input, in ``test``'s order, from its ``source`` (``KIND:PATH``): ``index``
    (a built EPR index, queried now), ``file`` (a ``rankings.jsonl`` :func:`write_rankings` wrote), ``committed`` (an
    evaluation folder: its ``predictions.jsonl`` records each input's ranking) or ``oracle`` (the LM-Oracle's
    chunks, :func:`lm_oracle`)."""
    kind, _, where = source.partition(":")
    if kind == "index":
        return Retriever.load(Path(where) / "index").retrieve([e.input for e in test], k=100)
    if kind == "file":
        rows = {r["id"]: (r["ids"], r["scores"]) for r in read_jsonl(Path(where))}
    elif kind == "committed":
        rows = {r["id"]: (r["retrieved_ids"], r["retrieved_scores"]) for r in read_jsonl(Path(where) / "predictions.jsonl")}
    elif kind == "oracle":
        rows = {}
        for chunk in sorted(Path(where).glob("*.json")):
            done = read_json(chunk)
            rows.update(zip(done["inputs"], zip(done["ids"], done["scores"])))
    else:
        raise ValueError(f"unknown ranking source '{source}'")
    missing = [e.id for e in test if e.id not in rows]
    if missing:
        raise SystemExit(f"{source}: no ranking for {len(missing)} test inputs, e.g. '{missing[0]}'")
    return RetrievalResult.from_rows([rows[e.id][0] for e in test], [rows[e.id][1] for e in test])


def write_rankings(path: Path, test: Sequence[Example], ranked: RetrievalResult) -> None:
    """``ranked`` (in ``test``'s order) as ``rankings.jsonl``, one row per input: ``{"id", "ids", "scores"}``."""
    write_jsonl(path, [{"id": e.id, "ids": ids, "scores": [round(float(v), 5) for v in row[: len(ids)]]}
                       for e, ids, row in zip(test, ranked.ids, ranked.scores)])


def lm_oracle(task, examples: Sequence[Example], lm, folder: Path) -> RetrievalResult:
    """LM-Oracle's rankings (taskret.epr.methods.lm_oracle: BM25-Oracle's top 50 reranked by the LM's
    ``log P(gold | e, x)``, filled to 100 with BM25-Oracle's order), ORACLE_CHUNK test inputs at a time, each
    chunk written to ``folder`` as it is done: a stopped ranking resumes at the first missing chunk. A chunk the LM
    ranked on another engine, device or precision (a session on another kind of machine) is ranked again: one
    ranking, one precision."""
    import numpy as np

    from taskret.epr.methods import rank_test_examples

    folder.mkdir(parents=True, exist_ok=True)
    ids, scores = [], []
    with progress_bar(len(examples), f"{task.name}/lm-oracle: ranking", unit="inputs") as advance:
        for number, start in enumerate(range(0, len(examples), ORACLE_CHUNK)):
            chunk, path = examples[start: start + ORACLE_CHUNK], folder / f"{number:05d}.json"
            done = read_json(path) if path.exists() else None
            if done is None or done["inputs"] != [e.id for e in chunk] or done.get("runtime") != lm.runtime():
                start = time.perf_counter()
                ranked = rank_test_examples("lm-oracle", task, chunk, lm, n_candidates=50, fill_to=100)
                done = {"inputs": [e.id for e in chunk], "ids": ranked.ids,
                        "scores": [[None if np.isnan(v) else float(v) for v in row] for row in ranked.scores],
                        # what the ranking cost here: the pairs the LM scored (50 per input, or the whole pool)
                        "pairs": len(chunk) * min(50, len(task.train)),
                        "seconds": round(time.perf_counter() - start, 2), "runtime": lm.runtime(),
                        # the seconds hold only on this CPU kind (a resumed ranking's chunks may come from several)
                        "machine": {k: v for k, v in machine_info().items() if k in ("cpu", "cpu_flags")}}
                write_json(path, done)
            ids += done["ids"]
            scores += done["scores"]
            advance(len(chunk))
    return RetrievalResult.from_rows(ids, scores)


def distinct_pairs(score_files: Sequence[Path]) -> int:
    """The (input, candidate) pairs the LM scored across ``score_files`` (scores.jsonl), each counted once."""
    return len({(row["id"], c["id"]) for path in score_files for row in read_jsonl(path) for c in row["candidates"]})


def stage_seconds(row: dict) -> float:
    """A stage's whole wall time: this run's and, for a training resumed from a checkpoint, the earlier sessions' that
    reached it (``earlier_s``)."""
    return round(row["wall_s"] + row.get("earlier_s", 0.0), 1)


def stage_times(folder: Path) -> tuple[dict[str, dict], set[str]]:
    """The stages a run's folder records (``stage_times.jsonl``: name -> its last row) and those of them that ran on
    a GPU machine, the folder then copied back (``stage_times_gpu.jsonl``); empty where the files are not there."""
    times = {r["stage"]: r for r in read_jsonl(folder / "stage_times.jsonl")} \
        if (folder / "stage_times.jsonl").exists() else {}
    gpu = {r["stage"] for r in read_jsonl(folder / "stage_times_gpu.jsonl")} \
        if (folder / "stage_times_gpu.jsonl").exists() else set()
    return times, gpu
