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


IMPORT_EACH = """
import importlib, sys
failures = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "dyncompress" or m.startswith("dyncompress.")]:
        del sys.modules[loaded]  # torch and the rest stay loaded: only the package starts afresh
    try:
        importlib.import_module("dyncompress." + name)
    except Exception as e:
        failures.append(f"{name}: {type(e).__name__}: {e}")
print("\\n".join(failures))
"""


def test_every_module_imports_on_its_own():
    """Each module first, in a package not yet imported (one fresh process, the package reset between)."""
    r = subprocess.run([sys.executable, "-c", IMPORT_EACH, *MODULES], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", r.stdout
