"""Print taskret's internal import graph (module -> the taskret modules it imports) and any import cycle.

    python tools/import_graph.py [src/taskret]

An edge from a package to one of its own submodules (``retrieval -> retrieval.bm25``) is not a cycle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """The taskret modules ``module`` imports, anywhere in the file (function-level imports included)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            name = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            for alias in node.names:
                full = f"{name}.{alias.name}"
                if full in known:
                    deps.add(full)
                elif name in known:
                    deps.add(name)
        elif isinstance(node, ast.Import):
            deps.update(alias.name for alias in node.names if alias.name in known)
    deps.discard(module)
    return sorted(deps)


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring package -> own submodule edges."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w.startswith(v + "."):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "src/taskret")
    known = modules(root)
    graph = {m: imported(m, p, known) for m, p in sorted(known.items())}
    for module, deps in graph.items():
        print(module, "->", ", ".join(d.removeprefix("taskret.") for d in deps))
    found = cycles(graph)
    print("CYCLES:", found if found else "none")


if __name__ == "__main__":
    main()
