"""Paired timing runs of search settings, each run a child process of its own (the ABBA design of bm25_pisa.py,
bm25_pisa_depth.py, bm25_pisa_parts.py and ivf_quantizer.py): one uncounted run of each setting first (it warms the
page cache; what it wrote is kept, e.g. its top 10s), then the settings in order and reversed (A B ... B A), so a
drift of the machine through the runs falls on every setting alike. Each query's time is the mean of its counted
runs; :func:`bm25_score_array.compare` pairs two settings' times."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scale import in_child


@dataclass
class SettingRuns:
    """One setting's runs: ``ms`` each query's mean over the counted runs, ``runs`` each counted run's answer (with
    its child's ``peak_rss_gib``), ``first`` what the uncounted run wrote and ``first_answer`` its answer."""

    ms: np.ndarray | None = None
    runs: list[dict] = field(default_factory=list)
    first: dict = field(default_factory=dict)
    first_answer: dict = field(default_factory=dict)


def paired_runs(settings: Sequence[str], child_args: Callable[[str, Path, bool], list[str]], script: str,
                label: str = "") -> dict[str, SettingRuns]:
    """Run ``script`` with ``child_args(setting, out, counted)`` for each setting, uncounted then ABBA. The child
    writes a JSON object with ``ms`` (a time per query) and anything else to ``out``, and answers a JSON object
    (``p50_ms`` printed as it goes)."""
    found = {setting: SettingRuns() for setting in settings}
    times: dict[str, list] = {setting: [] for setting in settings}
    order = [(False, s) for s in settings] + [(True, s) for s in [*settings, *settings[::-1]]]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run.json"
        for counted, setting in order:
            answer, peak = in_child(child_args(setting, out, counted), script)
            written = json.loads(out.read_text())
            if counted:
                times[setting].append(written["ms"])
                found[setting].runs.append({**answer, "peak_rss_gib": round(peak, 3)})
                print(f"  {label}{setting}: p50 {answer.get('p50_ms')} ms", flush=True)
            else:
                found[setting].first, found[setting].first_answer = written, answer
    for setting in settings:
        found[setting].ms = np.mean(np.asarray(times[setting]), axis=0)
    return found


def abba(settings: Sequence[str]) -> list[str]:
    """The counted runs' order, for the results file."""
    return [*settings, *settings[::-1]]
