"""Tests of the benchmark scripts' bookkeeping. A script imports its siblings as top-level modules (its own folder is
on ``sys.path`` when it runs): :func:`import_script` imports one that way."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def import_script(folder: str, name: str):
    """The module ``name`` of ``ROOT/folder`` (e.g. ``benchmarks/epr``, ``epr_ladder``), imported with that folder on
    ``sys.path`` while it is imported."""
    path = str(ROOT / folder)
    sys.path.insert(0, path)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(path)
