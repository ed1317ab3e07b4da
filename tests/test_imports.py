"""The package's modules import on their own, and no two import each other at import time."""

import ast
import subprocess
import sys
from pathlib import Path

import dyncompress

PACKAGE = Path(dyncompress.__file__).resolve().parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__main__")


def import_time_edges(module: str) -> set[str]:
    """Sibling modules that `module` imports at import time (its top-level statements)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    edges = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                edges.add(node.module.split(".")[0])
            else:  # from . import a, b
                edges.update(alias.name for alias in node.names)
    return edges & set(MODULES)


def test_no_import_circle():
    graph = {m: import_time_edges(m) for m in MODULES}
    assert graph["cli"] >= {"cli_measure", "cli_base"}  # the graph is really read
    state: dict[str, str] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in sorted(graph[m]):
            assert state.get(n) != "open", "import circle: " + " -> ".join([*path, m, n])
            if n not in state:
                visit(n, [*path, m])
        state[m] = "done"

    for m in MODULES:
        if m not in state:
            visit(m, [])


def test_every_module_imports_on_its_own():
    """Each in a fresh interpreter (two at a time: two cores)."""
    failures = []
    for i in range(0, len(MODULES), 2):
        procs = [
            (m, subprocess.Popen([sys.executable, "-c", f"import dyncompress.{m}"], stderr=subprocess.PIPE))
            for m in MODULES[i : i + 2]
        ]
        for m, p in procs:
            _, err = p.communicate(timeout=120)
            if p.returncode:
                failures.append(f"{m}: {err.decode().strip().splitlines()[-1]}")
    assert not failures, failures
