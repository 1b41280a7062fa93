"""``benchmarks/studies/tart/hybrid_instruction.py`` on a tiny BEIR folder: every ``read_instruction`` assignment is ranked
through the library's hybrid, and an instruction whose words match another document costs only the components
that read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..tart.builders import write_beir

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "benchmarks" / "studies" / "tart"  # the TART study's scripts


def test_each_assignment_of_read_instruction_is_measured(tmp_path):
    folder = write_beir(tmp_path / "facts")
    # the instruction names the coffee document's words: read by BM25, it pulls every claim towards that document
    (folder / "instructions.json").write_text(json.dumps(["coffee consumption sleep quality adults"]))
    out = tmp_path / "result.json"

    def run(spec: str, *more: str) -> dict:
        done = subprocess.run([sys.executable, str(STUDY / "hybrid_instruction.py"), "--task",
                               str(folder), "--spec", spec, "--out", str(out), *more],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr
        return json.loads(out.read_text())

    result = run("hybrid:bm25+bm25?fusion=convex&weight=0.5")
    entry = result["specs"]["hybrid:bm25+bm25?fusion=convex&weight=0.5"]
    assert entry["default"] == "0,0" and set(entry["instruction"]) == {"0,0", "0,1", "1,0", "1,1"}
    assert entry["instruction"]["0,0"] == entry["no_instruction"]  # nothing read: the bare claims' ranking
    assert entry["instruction"]["1,1"] < entry["no_instruction"]
    assert result["n_queries"] == 2 and result["instruction"] == "coffee consumption sleep quality adults"
    assert len(result["commands"]) == 1 and "hybrid_instruction.py" in result["commands"][0]
    # --merge adds a spec and keeps the earlier one; a spec given twice is one index read two ways
    merged = run("hybrid:bm25+bm25:output?fusion=convex&weight=0.5", "--merge")
    assert list(merged["specs"]) == ["hybrid:bm25+bm25?fusion=convex&weight=0.5",
                                     "hybrid:bm25+bm25:output?fusion=convex&weight=0.5"]
    assert merged["specs"]["hybrid:bm25+bm25?fusion=convex&weight=0.5"] == entry and entry["machine"]["cores"] >= 1
    assert len(merged["commands"]) == 2 and "--merge" in merged["commands"][1]
