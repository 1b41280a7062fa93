"""Scoring: the scoring LM's log P(y | candidate, x) for every (training example, candidate) pair.

The expensive stage, so it is resumable: pairs are scored in shards of whole examples, each shard
written atomically to ``shards/`` when done. A job killed at any moment and started again skips the
finished shards; since a shard's batches depend only on its own pairs, the merged ``scores.jsonl``
equals an uninterrupted run's, with no lost or duplicated pairs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .. import formats
from ..backends.base import LMBackend, TargetScore
from ..data import Example
from ..formats import OutputFormat
from ..io import DataError, iter_records, read_json, read_jsonl, write_json, write_jsonl
from ..progress import report_resumed

logger = logging.getLogger(__name__)

# A pending shard: (number, candidate rows, path of the shard file to write).
PendingShard = tuple[int, list, Path]
ShardRunner = Callable[[Sequence[PendingShard], Mapping[str, Example], OutputFormat, "Callable[[int], None] | None"], None]

SCORES_FILE = "scores.jsonl"
META_FILE = "scoring_meta.json"
#: one line per scoring call that scored shards: which shards, how many pairs, wall seconds, where (the machine and
#: the LM's engine and precision). A job that resumes over several sessions or machines adds a line per session, so
#: its scoring time is the sum of what was measured, never a rate times a count.
TIMES_FILE = "scoring_times.jsonl"


def scoring_pair(candidate: Example, example: Example, fmt: OutputFormat = OutputFormat()) -> tuple[str, str]:
    """``("{cand_input}\\t{cand_output}\\n{input}\\t", "{output}")`` (:func:`taskret.formats.scoring_pair`):
    only the output's tokens are scored."""
    return formats.scoring_pair(candidate.input, fmt.to_prompt(candidate.output), example.input,
                                fmt.to_prompt(example.output))


def demonstration_prefix(candidate: Example, fmt: OutputFormat = OutputFormat()) -> str:
    """The start of every scoring prompt that uses ``candidate``: computed once per candidate by LMs that share
    prefixes (:meth:`~taskret.backends.base.LMBackend.score_shared`)."""
    return formats.demonstration(candidate.input, fmt.to_prompt(candidate.output))


def _fingerprint(candidate_rows: Sequence[dict]) -> str:
    digest = hashlib.sha256()
    for row in candidate_rows:
        digest.update(json.dumps([row["id"], row["candidates"]]).encode())
    return digest.hexdigest()[:16]


def shard_pairs(rows: Sequence[dict], examples: Mapping[str, Example], fmt: OutputFormat = OutputFormat()
                ) -> tuple[list[str], list[str], list[str]]:
    """The (prefix, prompt, target) of every pair of ``rows``, example by example, candidates in the file's
    order; the prefix is the candidate's demonstration, shared by every example that has the candidate."""
    prefixes, prompts, targets = [], [], []
    for row in rows:
        example = examples[row["id"]]
        for cand_id in row["candidates"]:
            prompt, target = scoring_pair(examples[cand_id], example, fmt)
            prefixes.append(demonstration_prefix(examples[cand_id], fmt))
            prompts.append(prompt)
            targets.append(target)
    return prefixes, prompts, targets


def order_shards(candidate_rows: Sequence[dict], examples: Mapping[str, Example], shard_size: int,
                 shard_order: str = "output") -> list[list[dict]]:
    """The shards :func:`score_candidates` cuts: ``shard_size`` rows each, the rows sorted by their example's
    output (then id) for ``"output"``, in the file's order for ``"file"``."""
    if shard_order not in ("output", "file"):
        raise ValueError(f"shard_order must be 'output' or 'file', not {shard_order!r}")
    if shard_size < 1:
        raise ValueError("shard_size must be at least 1")
    ordered = list(candidate_rows)
    if shard_order == "output":
        ordered.sort(key=lambda row: (examples[row["id"]].output, row["id"]))
    return [ordered[i: i + shard_size] for i in range(0, len(ordered), shard_size)]


def score_shard(rows: Sequence[dict], examples: Mapping[str, Example], lm: LMBackend, fmt: OutputFormat,
                progress: Callable[[int], None] | None = None) -> list[dict]:
    """Score every (example, candidate) pair of ``rows``; one output row per example."""
    prefixes, prompts, targets = shard_pairs(rows, examples, fmt)
    return shard_rows(rows, lm.score_shared(prefixes, prompts, targets, progress=progress))


def shard_rows(rows: Sequence[dict], scores: Sequence[TargetScore]) -> list[dict]:
    """The shard file's rows from the scores of ``shard_pairs(rows, ...)``, in that order."""
    if len(scores) != sum(len(r["candidates"]) for r in rows):
        raise ValueError(f"{len(scores)} scores for {sum(len(r['candidates']) for r in rows)} pairs")
    scores = iter(scores)
    out = []
    for row in rows:
        cands = []
        for cand_id in row["candidates"]:
            s = next(scores)
            cands.append({"id": cand_id, "logprob": round(s.logprob, 5), "n_tokens": s.n_tokens})
        out.append({"id": row["id"], "candidates": cands})
    return out


def score_candidates(candidate_rows: Sequence[dict], examples: Mapping[str, Example], lm: LMBackend | str,
                     out_dir: str | os.PathLike, fmt: OutputFormat = OutputFormat(), shard_size: int = 32,
                     progress: Callable[[int], None] | None = None,
                     shard_runner: ShardRunner | None = None, shard_order: str = "output") -> Path:
    """Score all pairs into ``out_dir/scores.jsonl``, resuming from finished shards.

    ``progress`` is called with the number of pairs done; the pairs of finished shards are reported once, at
    the start, through :func:`taskret.progress.report_resumed` (not counted in the rate).
    ``shard_order="output"`` fills shards with examples sorted by output, so that examples with similar outputs,
    which share many BM25 candidates, are scored together and an LM that shares prefixes computes each
    candidate's demonstration once for several of them (MTOP, 25 examples x 50 candidates: each candidate
    recurs 5.6 times per shard, against 1.8 in file order); ``"file"`` keeps the file's order. Either way
    ``scores.jsonl`` lists the examples in the file's order.
    ``shard_runner`` (optional) scores the pending shards elsewhere (e.g. ``epr.distributed.RayScoring``
    on Ray workers) as ``shard_runner(pending, examples, fmt, progress)``, writing each shard with
    ``io.write_jsonl`` when it is done; ``lm`` may then be just the scoring LM's name (for the meta file).
    """
    if isinstance(lm, str) and shard_runner is None:
        raise ValueError("score_candidates needs a loaded LM (or a shard_runner that holds one)")
    lm_name = lm if isinstance(lm, str) else lm.name
    out_dir = Path(out_dir)
    shard_dir = out_dir / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    # A job killed while writing a file leaves its temporary (io.atomic_path: ".NAME.*.tmp") behind.
    for stale in [*shard_dir.glob(".shard-*.tmp"), *out_dir.glob(f".{SCORES_FILE}.*.tmp"),
                  *out_dir.glob(f".{META_FILE}.*.tmp")]:
        stale.unlink(missing_ok=True)
    if shard_order not in ("output", "file"):
        raise ValueError(f"shard_order must be 'output' or 'file', not {shard_order!r}")
    meta = {"lm": lm_name, "candidates": _fingerprint(candidate_rows), "shard_size": shard_size,
            "n_examples": len(candidate_rows), "n_pairs": sum(len(r["candidates"]) for r in candidate_rows),
            "shard_order": shard_order}
    where = _where(lm, shard_runner)
    meta_path = out_dir / META_FILE
    if meta_path.exists():
        previous = read_json(meta_path)
        previous.setdefault("shard_order", "file")  # jobs started before shard_order existed
        same_job = ("lm", "candidates", "shard_size", "n_examples", "n_pairs")
        if {k: previous.get(k) for k in same_job} != {k: meta[k] for k in same_job}:
            raise ValueError(f"{out_dir} holds scores of another job ({previous}); use a new output folder")
        # A resumed job keeps the shard order it started with: its finished shards were cut that way.
        shard_order = previous["shard_order"]
        started_in = previous.get("dtype")
    else:
        # where the job started: its dtype and machine (each session's own are in scoring_times.jsonl)
        write_json(meta_path, {**meta, "dtype": where.get("dtype"), "machine": where})
        started_in = where.get("dtype")
    shards = order_shards(candidate_rows, examples, shard_size, shard_order)
    pending, resumed = [], 0
    for number, rows in enumerate(shards):
        path = shard_dir / f"shard-{number:05d}.jsonl"
        if path.exists():
            resumed += sum(len(r["candidates"]) for r in rows)
        else:
            pending.append((number, rows, path))
    report_resumed(progress, resumed)  # done before this run: counted, but not in the rate
    if pending and started_in and where.get("dtype") and started_in != where["dtype"]:
        # auto picks bfloat16 on a CPU with native bf16 and float32 elsewhere: a job that moves between such machines
        # would label from scores of two precisions, which no single run gives
        logger.warning("%s: started with the LM in %s, resumed here in %s: its new shards' scores differ in precision "
                       "from the first ones (pin one with the LM option dtype, e.g. scoring_lm_options "
                       "{\"dtype\": \"%s\"})", out_dir, started_in, where["dtype"], started_in)
    if pending:
        start = time.perf_counter()
        if shard_runner is not None:  # the runner's shards finish out of order: one line for the whole call
            shard_runner(pending, examples, fmt, progress)
            missing = [path.name for _, _, path in pending if not path.exists()]
            if missing:
                raise RuntimeError(f"the shard runner left {len(missing)} shard(s) unscored (e.g. {missing[0]})")
            _record_time(out_dir, [n for n, _, _ in pending], sum(len(r["candidates"]) for _, rows, _ in pending
                                                                   for r in rows), start, where)
        else:
            for number, rows, path in pending:
                write_jsonl(path, score_shard(rows, examples, lm, fmt, progress=progress))
                _record_time(out_dir, [number], sum(len(r["candidates"]) for r in rows), start, where)
                start = time.perf_counter()
    scored = {}
    for number in range(len(shards)):
        scored.update((row["id"], row) for row in read_jsonl(shard_dir / f"shard-{number:05d}.jsonl"))
    write_jsonl(out_dir / SCORES_FILE, [scored[row["id"]] for row in candidate_rows])
    return out_dir / SCORES_FILE


def _where(lm: LMBackend | str, shard_runner: ShardRunner | None) -> dict:
    """The machine and the LM's engine and precision (``dtype``) the shards are scored with here; a shard runner's
    LMs run elsewhere, so only it can say (``runtime()``, when it has one)."""
    from ..models import machine_info

    if shard_runner is not None:
        runtime = getattr(shard_runner, "runtime", None)
        return {**machine_info(), **(runtime() if callable(runtime) else {}), "runner": type(shard_runner).__name__}
    return {**machine_info(), **lm.runtime()}


def _record_time(out_dir: Path, shards: list[int], pairs: int, start: float, where: dict) -> None:
    """One line of :data:`TIMES_FILE`, written after the shards it times (a job killed between the two loses the
    line: its time is then missing from the sum, never counted twice)."""
    line = {"shards": shards, "pairs": pairs, "wall_s": round(time.perf_counter() - start, 2),
            "cpu": where.get("cpu"), "cores": where.get("cores"), "engine": where.get("engine"),
            "dtype": where.get("dtype"), "device": where.get("device"), "load_average": [round(x, 2) for x in
                                                                                     os.getloadavg()]}
    with open(out_dir / TIMES_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def scoring_seconds(out_dir: str | os.PathLike) -> float | None:
    """The measured wall seconds of a scoring job (every session's, summed from :data:`TIMES_FILE`); None when
    nothing was timed (a job scored before the file existed)."""
    path = Path(out_dir) / TIMES_FILE
    if not path.exists():
        return None
    return round(sum(row["wall_s"] for row in read_jsonl(path)), 2)


def read_scores(path: str | os.PathLike) -> list[dict]:
    """Read and check a ``scores.jsonl``: per line an ``id`` and ``candidates``, a list of
    ``{id, logprob (number), n_tokens (integer >= 0)}``; a DataError names the file, line and field."""
    path = Path(path)
    rows = []
    for line, row in iter_records(path):
        if not isinstance(row.get("id"), str):
            raise DataError(path, line, "id", "missing or not a string")
        cands = row.get("candidates")
        if not isinstance(cands, list):
            raise DataError(path, line, "candidates", "missing or not a list")
        for n, cand in enumerate(cands):
            where = f"candidates[{n}]"
            if not isinstance(cand, dict) or not isinstance(cand.get("id"), str):
                raise DataError(path, line, where, "expected an object with a string id")
            value = cand.get("logprob")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise DataError(path, line, f"{where}.logprob", f"expected a number, got {value!r:.40}")
            count = cand.get("n_tokens")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise DataError(path, line, f"{where}.n_tokens", f"expected a non-negative integer, got {count!r:.40}")
        rows.append(row)
    if not rows:
        raise DataError(path, None, None, "no score rows in file")
    return rows
