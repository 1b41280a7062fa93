"""Scoring: the scoring LM's log P(y | candidate, x) for every (training example, candidate) pair.

The expensive stage, so it is resumable: pairs are scored in shards of whole examples, each shard
written atomically to ``shards/`` when done. A job killed at any moment and started again skips the
finished shards; since a shard's batches depend only on its own pairs, the merged ``scores.jsonl``
equals an uninterrupted run's, with no lost or duplicated pairs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..data import Example, OutputFormat
from ..io import read_json, read_jsonl, write_json, write_jsonl
from ..lm import CausalLM

SCORES_FILE = "scores.jsonl"
META_FILE = "scoring_meta.json"


def scoring_pair(candidate: Example, example: Example, fmt: OutputFormat = OutputFormat()) -> tuple[str, str]:
    """``("{cand_input}\\t{cand_output}\\n{input}\\t", "{output}")``: only the output's tokens are scored."""
    prompt = f"{candidate.input}\t{fmt.to_prompt(candidate.output)}\n{example.input}\t"
    return prompt, fmt.to_prompt(example.output)


def _fingerprint(candidate_rows: Sequence[dict]) -> str:
    digest = hashlib.sha256()
    for row in candidate_rows:
        digest.update(json.dumps([row["id"], row["candidates"]]).encode())
    return digest.hexdigest()[:16]


def score_shard(rows: Sequence[dict], examples: Mapping[str, Example], lm: CausalLM, fmt: OutputFormat,
                progress: Callable[[int], None] | None = None) -> list[dict]:
    """Score every (example, candidate) pair of ``rows``; one output row per example."""
    prompts, targets = [], []
    for row in rows:
        example = examples[row["id"]]
        for cand_id in row["candidates"]:
            prompt, target = scoring_pair(examples[cand_id], example, fmt)
            prompts.append(prompt)
            targets.append(target)
    scores = iter(lm.score(prompts, targets, progress=progress))
    out = []
    for row in rows:
        cands = []
        for cand_id in row["candidates"]:
            s = next(scores)
            cands.append({"id": cand_id, "logprob": round(s.logprob, 5), "n_tokens": s.n_tokens})
        out.append({"id": row["id"], "candidates": cands})
    return out


def score_candidates(candidate_rows: Sequence[dict], examples: Mapping[str, Example], lm: CausalLM,
                     out_dir: str | os.PathLike, fmt: OutputFormat = OutputFormat(), shard_size: int = 32,
                     progress: Callable[[int], None] | None = None,
                     shard_runner: Callable | None = None) -> Path:
    """Score all pairs into ``out_dir/scores.jsonl``, resuming from finished shards.

    ``progress`` is called with the number of pairs done (finished shards count at once on resume).
    ``shard_runner`` (optional) scores a list of pending shards elsewhere (e.g. on Ray workers).
    """
    out_dir = Path(out_dir)
    shard_dir = out_dir / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    # A job killed while writing a file leaves its temporary (io.atomic_path: ".NAME.*.tmp") behind.
    for stale in [*shard_dir.glob(".shard-*.tmp"), *out_dir.glob(f".{SCORES_FILE}.*.tmp"),
                  *out_dir.glob(f".{META_FILE}.*.tmp")]:
        stale.unlink(missing_ok=True)
    meta = {"lm": lm.name, "candidates": _fingerprint(candidate_rows), "shard_size": shard_size,
            "n_examples": len(candidate_rows), "n_pairs": sum(len(r["candidates"]) for r in candidate_rows)}
    meta_path = out_dir / META_FILE
    if meta_path.exists():
        previous = read_json(meta_path)
        if {k: previous.get(k) for k in meta} != meta:
            raise ValueError(f"{out_dir} holds scores of another job ({previous}); use a new output folder")
    else:
        write_json(meta_path, meta)
    shards = [list(candidate_rows[i: i + shard_size]) for i in range(0, len(candidate_rows), shard_size)]
    pending = []
    for number, rows in enumerate(shards):
        path = shard_dir / f"shard-{number:05d}.jsonl"
        if path.exists():
            if progress:
                progress(sum(len(r["candidates"]) for r in rows))
        else:
            pending.append((number, rows, path))
    if shard_runner is not None:
        shard_runner(pending, progress)
    else:
        for _, rows, path in pending:
            write_jsonl(path, score_shard(rows, examples, lm, fmt, progress=progress))
    merged = []
    for number in range(len(shards)):
        merged.extend(read_jsonl(shard_dir / f"shard-{number:05d}.jsonl"))
    write_jsonl(out_dir / SCORES_FILE, merged)
    return out_dir / SCORES_FILE
