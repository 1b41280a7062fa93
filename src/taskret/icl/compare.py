"""Two evaluation runs on the same test inputs, paired: who solves what, and whether the gap is more than chance.

An evaluation folder (``taskret evaluate --out``, ``taskret epr run``'s ``eval/`` and ``baseline/``, the demo's
``<method>/``) holds ``predictions.jsonl``, one row per test input with its ``correct`` field and a sentence score per
graded metric (``chrf``), and ``summary.json``. Two of them compare example by example:

* exact match with McNemar's exact test on the inputs only one run solves (:func:`~taskret.icl.evaluation.mcnemar`);
* each graded metric both runs report with a Wilcoxon signed-rank test on the per-input sentence scores (the
  summary's corpus score is the one shown; the test is over the inputs);

and :func:`comparison_line` says it in one sentence, as the demo does (``taskret compare RUN_A RUN_B``; the last line
of ``taskret epr run``). The benchmarks report a pair with :func:`paired_comparison` (verdicts: McNemar) or
:func:`paired_graded_comparison` (scores: Wilcoxon), each with the paired bootstrap's interval of the difference and
the smallest difference the number of inputs detects.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..io import read_json, read_jsonl
from .evaluation import GRADED_METRICS, PairedTest, mcnemar

PREDICTIONS = "predictions.jsonl"
SUMMARY = "summary.json"


def wilcoxon(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired per-example scores (the same ids in both; zero
    differences split between the signs, as Pratt's and Wilcoxon's variants disagree on them); 1.0 when no
    example differs."""
    if a.keys() != b.keys():
        raise ValueError(f"paired test needs the same examples: {len(a.keys() - b.keys())} ids only in a, "
                         f"{len(b.keys() - a.keys())} only in b")
    differences = [a[k] - b[k] for k in a]
    if not any(differences):
        return 1.0
    from scipy.stats import wilcoxon as signed_rank

    return float(signed_rank(differences, zero_method="zsplit").pvalue)


def verdict(name_a: str, name_b: str, em_a: float, em_b: float, paired: PairedTest, n: int) -> str:
    """One sentence on what exact match shows of two runs: the paired count, McNemar's p and the verdict."""
    gap = em_a - em_b
    head = (f"{name_a} solves {paired.only_a} test inputs {name_b} misses and misses {paired.only_b} {name_b} "
            f"solves (McNemar p={paired.p_value:.2g})")
    if gap > 0 and paired.p_value < 0.05:
        tail = (f"{name_a} beats {name_b} by {gap:.1f} EM points on these {n} test inputs, more than chance "
                f"explains")
    elif gap > 0:
        tail = f"{name_a} is {gap:.1f} EM points ahead of {name_b} on these {n} test inputs, within chance"
    elif gap < 0:
        tail = f"{name_a} is {-gap:.1f} EM points behind {name_b} on these {n} test inputs"
    else:
        tail = f"{name_a} and {name_b} are level on these {n} test inputs"
    return f"{head}: {tail}."


@dataclass(frozen=True)
class GradedPair:
    """One graded metric of two runs: each run's score (the summary's corpus score, else the mean of the sentence
    scores), on how many inputs each scored higher, and the Wilcoxon p-value of the per-input scores."""

    a: float
    b: float
    higher_a: int
    higher_b: int
    p_value: float


@dataclass(frozen=True)
class Comparison:
    name_a: str
    name_b: str
    n: int
    em_a: float
    em_b: float
    paired: PairedTest
    graded: dict[str, GradedPair] = field(default_factory=dict)

    def to_dict(self) -> dict:
        row = asdict(self)
        row["paired"] = self.paired._asdict()
        return row


def compare_rows(rows_a: Sequence[dict], rows_b: Sequence[dict], name_a: str = "A", name_b: str = "B",
                 corpus_a: Mapping[str, float] | None = None, corpus_b: Mapping[str, float] | None = None,
                 ) -> Comparison:
    """Pair two runs' prediction rows (``id``, ``correct``, and a sentence score per graded metric) by id: EM with
    McNemar and every graded metric both report with Wilcoxon. ``corpus_a`` / ``corpus_b``: the summaries' metrics,
    whose corpus scores are shown for the graded metrics. Both runs must hold the same ids."""
    by_a, by_b = {r["id"]: r for r in rows_a}, {r["id"]: r for r in rows_b}
    if by_a.keys() != by_b.keys():
        raise ValueError(f"{name_a} and {name_b} were not run on the same test inputs: {len(by_a.keys() - by_b.keys())} "
                         f"ids only in {name_a}, {len(by_b.keys() - by_a.keys())} only in {name_b} (evaluate both "
                         f"with the same --limit and --seed)")
    if not by_a:
        raise ValueError(f"{name_a} and {name_b} hold no predictions to compare")
    ids = list(by_a)
    correct_a = {i: bool(by_a[i]["correct"]) for i in ids}
    correct_b = {i: bool(by_b[i]["correct"]) for i in ids}
    graded = {}
    for name in GRADED_METRICS:
        if not all(name in by_a[i] and name in by_b[i] for i in ids):
            continue
        scores_a = {i: float(by_a[i][name]) for i in ids}
        scores_b = {i: float(by_b[i][name]) for i in ids}
        graded[name] = GradedPair(
            a=float((corpus_a or {}).get(name, sum(scores_a.values()) / len(ids))),
            b=float((corpus_b or {}).get(name, sum(scores_b.values()) / len(ids))),
            higher_a=sum(scores_a[i] > scores_b[i] for i in ids), higher_b=sum(scores_b[i] > scores_a[i] for i in ids),
            p_value=wilcoxon(scores_a, scores_b))
    return Comparison(name_a, name_b, len(ids), 100.0 * sum(correct_a.values()) / len(ids),
                      100.0 * sum(correct_b.values()) / len(ids), mcnemar(correct_a, correct_b), graded)


def read_run(folder: str | Path) -> tuple[list[dict], dict]:
    """An evaluation folder's prediction rows and summary (``{}`` when it has no summary.json)."""
    folder = Path(folder)
    if not (folder / PREDICTIONS).is_file():
        raise FileNotFoundError(f"{folder} is not an evaluation folder: it has no {PREDICTIONS} (`taskret evaluate "
                                f"--out DIR` writes one)")
    summary = read_json(folder / SUMMARY) if (folder / SUMMARY).is_file() else {}
    return read_jsonl(folder / PREDICTIONS), summary


def compare_runs(run_a: str | Path, run_b: str | Path, name_a: str | None = None,
                 name_b: str | None = None) -> Comparison:
    """Pair two evaluation folders (each with predictions.jsonl and summary.json) on their common test inputs;
    each is named by its summary's retriever unless ``name_a`` / ``name_b`` are given."""
    rows_a, summary_a = read_run(run_a)
    rows_b, summary_b = read_run(run_b)
    name_a = name_a or summary_a.get("retriever") or str(run_a)
    name_b = name_b or summary_b.get("retriever") or str(run_b)
    if name_a == name_b:
        name_a, name_b = str(run_a), str(run_b)
    return compare_rows(rows_a, rows_b, name_a, name_b, summary_a.get("metrics"), summary_b.get("metrics"))


def comparison_line(comparison: Comparison) -> str:
    """The demo's sentence on exact match (:func:`verdict`), then one clause per graded metric: both scores, on how
    many inputs each is higher, and Wilcoxon's p."""
    c = comparison
    line = verdict(c.name_a, c.name_b, c.em_a, c.em_b, c.paired, c.n)
    for name, g in c.graded.items():
        line += (f" {name}: {c.name_a} {g.a:.1f}, {c.name_b} {g.b:.1f}; higher for {c.name_a} on {g.higher_a} inputs, "
                 f"for {c.name_b} on {g.higher_b} (Wilcoxon p={g.p_value:.2g}).")
    return line


def bootstrap_interval(correct_a: Mapping[str, float], correct_b: Mapping[str, float], n_resamples: int = 10_000,
                       seed: int = 0, level: float = 0.95, scale: float = 100.0) -> tuple[float, float]:
    """The paired bootstrap's ``level`` interval of the mean difference a - b in points: the test inputs resampled
    with replacement, both runs' values kept together (percentile interval). ``scale``: points per unit of a value,
    100 for verdicts (``True`` / ``False``: the EM difference), 1 for scores already in points (a sentence chrF)."""
    import numpy as np

    ids = sorted(correct_a)
    if set(ids) != set(correct_b):
        raise ValueError("a paired interval needs the same test inputs in both runs")
    differences = np.array([float(correct_a[i]) - float(correct_b[i]) for i in ids])
    rng = np.random.default_rng(seed)
    # Resamples drawn a block at a time (the same draws as one at a time: the generator's stream is the same).
    block = max(1, 2_000_000 // max(len(ids), 1))
    means = np.concatenate([differences[rng.integers(0, len(ids), (min(block, n_resamples - start), len(ids)))]
                            .mean(axis=1) for start in range(0, n_resamples, block)])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail]) * scale
    return round(float(low), 2), round(float(high), 2)


def min_detectable_difference(n: int, discordant: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest EM difference (points) McNemar's test finds at ``alpha`` (two-sided) with ``power``, given
    ``discordant`` of ``n`` inputs solved by one run only (the observed discordance): Connor's (1987) sample size
    ``n = (z_a sqrt(p) + z_b sqrt(p - d^2))^2 / d^2`` solved for ``d``, ``p`` the discordant share. None when no
    input is discordant."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    if discordant <= 0 or n <= 0:
        return None
    share = discordant / n
    z_a, z_b = norm.ppf(1 - alpha / 2), norm.ppf(power)

    def needed(d: float) -> float:
        return (z_a * share ** 0.5 + z_b * max(share - d * d, 0.0) ** 0.5) ** 2 / (d * d) - n

    high = min(share ** 0.5, share) - 1e-9
    if needed(high) > 0:  # even the largest possible difference is not detectable at this n
        return round(100 * share, 2)
    return round(100 * brentq(needed, 1e-6, high), 2)


def paired_comparison(correct_a: Mapping[str, bool], correct_b: Mapping[str, bool]) -> dict:
    """Run a against run b on the same inputs, as the benchmarks report it: how many only each solves (``only_a``,
    ``only_b``), McNemar's ``p``, the paired bootstrap's 95% interval of the EM difference a - b (``diff_ci95``,
    points) and the smallest difference this N detects at 80% power given the discordance
    (``min_detectable_diff``)."""
    test = mcnemar(correct_a, correct_b)
    return {"only_a": test.only_a, "only_b": test.only_b, "p": round(test.p_value, 4),
            "diff_ci95": list(bootstrap_interval(correct_a, correct_b)),
            "min_detectable_diff": min_detectable_difference(len(correct_a), test.only_a + test.only_b)}


def holm_adjusted(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's (1979) step-down adjustment of a family of p-values, ``{name: adjusted p}``: the i-th smallest of m is
    multiplied by m - i (i from 0), capped at 1 and never below the one before it. Rejecting where the adjusted p is
    under alpha keeps the chance of any false rejection in the family at alpha, whatever the tests' dependence (as
    when every rung of a ladder is compared with the same best rung on the same inputs)."""
    order = sorted(p_values, key=lambda name: p_values[name])
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * float(p_values[name])))
        adjusted[name] = running
    return adjusted


def min_detectable_mean_difference(differences: Sequence[float], alpha: float = 0.05,
                                   power: float = 0.8) -> float | None:
    """The smallest mean paired difference (in the scores' units) a two-sided test at ``alpha`` finds with ``power``,
    given the spread of the observed per-input ``differences``: ``(z_a + z_b) sd / sqrt(n)``, the paired t-test's
    normal approximation (the signed-rank test is nearly as efficient: 0.955 of it for normal differences). None for
    fewer than two inputs or no spread."""
    import statistics

    from scipy.stats import norm

    if len(differences) < 2:
        return None
    spread = statistics.stdev(differences)
    if spread == 0:
        return None
    return round((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * spread / len(differences) ** 0.5, 2)


def paired_graded_comparison(scores_a: Mapping[str, float], scores_b: Mapping[str, float]) -> dict:
    """Run a against run b on a graded metric (per-input scores in points, e.g. sentence chrF), as the benchmarks
    report it: on how many inputs each scores higher (``higher_a``, ``higher_b``), the Wilcoxon signed-rank ``p``,
    the paired bootstrap's 95% interval of the mean difference a - b (``diff_ci95``, points) and the smallest mean
    difference this N detects at 80% power given the differences' spread (``min_detectable_diff``)."""
    p = wilcoxon(scores_a, scores_b)  # refuses runs on other inputs
    differences = [float(scores_a[i]) - float(scores_b[i]) for i in sorted(scores_a)]
    return {"higher_a": sum(d > 0 for d in differences), "higher_b": sum(d < 0 for d in differences), "p": round(p, 4),
            "diff_ci95": list(bootstrap_interval(scores_a, scores_b, scale=1.0)),
            "min_detectable_diff": min_detectable_mean_difference(differences)}
