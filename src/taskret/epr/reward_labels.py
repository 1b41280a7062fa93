"""Later mining rounds labelled without the scoring LM: a reward model (:mod:`taskret.epr.reward`, LLM-R's), trained
on round 1's LM scores, rates each new pair instead, so a round after the first costs no LM call (the ladder's
rung g; config key ``round_labeller``).

A label is a rank among one input's candidates, and those candidates mix pairs the LM scored in round 1 with the new
ones. The reward model's logits and the LM's log-probabilities are on different scales, so the new pairs are put on
the LM's by a least-squares map fitted on the pairs both scored: the reward model rates every candidate of each
input, old and new; one slope shared by every input, one intercept per input (a fixed-effects fit: an input's
log-probabilities share an offset set by its own output, which a per-pair rating cannot know). Fitted on the mean
log-probability per token (the scale the reward model learnt), mapped back to the sum with the input's token count.
An old pair keeps the LM's own score.

The reward model's logits are computed in shards of inputs (``shards/NNNNN.jsonl``, the raw logits), so a stopped
round resumes; the map is fitted once every shard exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..data import Task
from ..io import read_jsonl, write_json, write_jsonl
from .labels import mean_logprob

__all__ = ["lm_scale_map", "reward_labelled_rows", "LABELLER"]

#: What a reward-labelled candidate's ``labeller`` says (an LM-scored one has none).
LABELLER = "reward_model"


def lm_scale_map(pairs: dict[str, Sequence[tuple[float, float]]]) -> tuple[float, dict[str, float]]:
    """The least-squares map ``mean log-probability ~ slope x reward + intercept[input]`` over ``pairs`` (input id
    -> (reward logit, the LM's mean log-probability per token) of each candidate both scored): one slope for every
    input, one intercept per input. Returns the slope and the intercepts."""
    num = den = 0.0
    means = {}
    for key, values in pairs.items():
        rewards = np.array([v[0] for v in values], dtype=np.float64)
        lm = np.array([v[1] for v in values], dtype=np.float64)
        if not len(rewards):
            continue
        means[key] = (float(rewards.mean()), float(lm.mean()))
        num += float(((rewards - rewards.mean()) * (lm - lm.mean())).sum())
        den += float(((rewards - rewards.mean()) ** 2).sum())
    if den == 0:
        raise ValueError("the reward model rates every candidate of each input alike: no map onto the LM's scale "
                         "can be fitted")
    slope = num / den
    if slope <= 0:
        raise ValueError(f"the reward model ranks the LM-scored pairs against the LM (slope {slope:.4g}): its labels "
                         "would invert the LM's; train it longer or label with the LM")
    return slope, {key: lm - slope * reward for key, (reward, lm) in means.items()}


def reward_labelled_rows(model_dir: str | os.PathLike, task: Task, fresh: Sequence[dict], known: Sequence[dict],
                         work: str | os.PathLike, shard_size: int = 200,
                         progress: Callable[[int], None] | None = None) -> tuple[list[dict], dict]:
    """Score rows for ``fresh`` (input id -> new candidate ids, as :func:`~taskret.epr.candidates.unscored` gives
    them) with the reward model in ``model_dir``, on the LM's scale (module docstring). ``known``: every earlier
    round's LM score rows (one or several per input). Inputs that the LM never scored get no row: nothing to map
    them with. Returns the rows (``{id, logprob, n_tokens, reward, labeller}`` a candidate) and the fit."""
    from .candidates import merge_scores
    from .reward import reward_scores

    work = Path(work)
    shards = work / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    scored = {row["id"]: row["candidates"] for row in merge_scores(known)}
    wanted = [row for row in fresh if scored.get(row["id"])]
    pool = {e.id: e for e in task.train}
    for start in range(0, len(wanted), shard_size):
        path = shards / f"{start // shard_size:05d}.jsonl"
        part = wanted[start:start + shard_size]
        if path.exists():
            if progress is not None:
                progress(len(part))
            continue
        ids = [[c["id"] for c in scored[row["id"]]] + list(row["candidates"]) for row in part]
        logits = reward_scores(model_dir, task, [pool[row["id"]] for row in part], ids, progress=progress)
        tmp = path.with_suffix(".tmp")
        write_jsonl(tmp, [{"id": row["id"], "rewards": dict(zip(names, np.round(values, 5).tolist()))}
                          for row, names, values in zip(part, ids, logits)])
        os.replace(tmp, path)
    rewards = {row["id"]: row["rewards"] for path in sorted(shards.glob("*.jsonl")) for row in read_jsonl(path)}
    slope, intercepts = lm_scale_map({key: [(rewards[key][c["id"]], mean_logprob(c)) for c in scored[key]]
                                      for key in rewards})
    rows = []
    for row in wanted:
        n_tokens = max(int(scored[row["id"]][0].get("n_tokens", 1)), 1)
        rows.append({"id": row["id"], "candidates": [
            {"id": c, "logprob": round((slope * rewards[row["id"]][c] + intercepts[row["id"]]) * n_tokens, 5),
             "n_tokens": n_tokens, "reward": rewards[row["id"]][c], "labeller": LABELLER}
            for c in row["candidates"]]})
    residual = spread = 0.0  # the share of the LM's within-input spread the map explains, where it was fitted
    for key in rewards:
        lm = np.array([mean_logprob(c) for c in scored[key]])
        fitted = np.array([slope * rewards[key][c["id"]] + intercepts[key] for c in scored[key]])
        residual += float(((lm - fitted) ** 2).sum())
        spread += float(((lm - lm.mean()) ** 2).sum())
    fit = {"slope": round(slope, 6), "inputs": len(rows), "pairs_labelled": sum(len(r["candidates"]) for r in rows),
           "pairs_fitted_on": sum(len(scored[key]) for key in rewards),
           "r2_within_inputs": round(1 - residual / spread, 4) if spread else None}
    write_json(work / "fit.json", fit)
    return rows, fit
