"""The package's layers hold and no module imports itself back: the contracts of ``[tool.importlinter]`` in
pyproject.toml (``make lint`` runs them too) and, below them, no import cycle between any two modules.

The layers contract (``cli`` at the top, ``io`` at the bottom) forbids a lower layer importing a higher one;
the ``acyclic_siblings`` contract forbids cycles between the children of each package. Neither sees a cycle
between a package's ``__init__`` and one of its own modules, so :func:`test_no_module_imports_itself_back` walks
the whole module graph. Imports inside functions count: moving an import into a function hides a cycle from
Python's import order, not from the design.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="import-linter (the test extra) brings grimp")

ROOT = Path(__file__).resolve().parents[1]


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("taskret")
    cycles = _cycles(graph)
    detail = []
    for component in cycles:
        members = set(component)
        edges = [f"  {a} -> {b} (l.{', '.join(str(d['line_number']) for d in graph.get_import_details(importer=a, imported=b))})"
                 for a in component for b in sorted(graph.find_modules_directly_imported_by(a)) if b in members]
        detail.append("\n".join(edges))
    assert not cycles, "import cycles (move what both sides need down a layer):\n" + "\n\n".join(detail)


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_the_layer_contracts_hold():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint_imports is None:
        pytest.skip("lint-imports (import-linter, the test extra) is not installed")
    done = subprocess.run([lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
