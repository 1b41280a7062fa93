"""What every renderer shares: where the results are, reading one (a result not there yet is None: its table is
left out, never made up), the machine line, McNemar's p as the tables print it, and the table helper."""

from __future__ import annotations

import json
from pathlib import Path

from taskret.icl.evaluation import read_correct

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
README = BENCHMARKS.parent / "README.md"

# the earlier runs (EPR, the first TART tables) had AVX2 only; the TART runs from the 256-token students on had
# AVX512-BF16 (float32 encoders either way): the CPU times of the two are not comparable step for step; so had the
# beyond-MTOP row's nl2bash cell (its LM in bfloat16 there; TREC's and GeoQuery's on AVX2 in float32)
MACHINE = ("x86_64 AMD EPYC, 2 cores (AVX2 for the earlier runs, AVX512-BF16 for the TART runs from the 256-token "
           "students on and for nl2bash beyond MTOP, its LM in bfloat16), 24 GiB, no GPU, Python 3.11, torch 2.13 CPU")


def simd_kind(info: dict) -> str:
    """The widest of the CPU's features that set the LM's speed and precision (an LM's outputs differ between them),
    or "" where the machine record has no flags."""
    flags = set(info.get("cpu_flags") or ())
    return next((name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx2", "AVX2"))
                 if flag in flags), "")


def prefixed(separator: str, text: str) -> str:
    """``text`` after ``separator``, or nothing where there is no text (an optional part of a cell)."""
    return f"{separator}{text}" if text else ""


def built_on(row: dict) -> str:
    """Where an end-to-end rung's index was built, where that is recorded: the CPU, its kind and the scoring LM's
    precision (its hours are that machine's, beside rows whose scoring ran elsewhere)."""
    built = row.get("built_on")
    if not built:
        return ""
    kind = simd_kind(built)
    return f" on {built.get('cpu', '?')}{prefixed(' ', kind)}, LM scoring in {built.get('dtype', '?')}"


def load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def correct(path: Path) -> dict[str, bool] | None:
    return read_correct(path) if path.exists() else None


def p_text(p: float, digits: int = 2) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.{digits}f}"


MTOP_TEST_INPUTS = 859  # MTOP's test file here: the successors' comparison runs on all of it


def instruction_pair(cols: dict) -> str:
    return " / ".join(f"{cols[c]:.1f}" if c in cols else "not run" for c in ("no_instruction", "instruction"))


def load_text(run: dict | None) -> str:
    """A result's load average at its start, as the scale tables print it."""
    load_average = (run or {}).get("machine", {}).get("load_average")
    return f"load average {load_average[0]} at the start" if load_average else "load not recorded"


def header(*columns: str) -> list[str]:
    """A Markdown table's first two lines: the column names, then the alignment row."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
