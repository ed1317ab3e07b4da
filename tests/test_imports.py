"""The package's modules import on their own, and no two import each other, not even lazily."""

import ast
import subprocess
import sys
from pathlib import Path

import dyncompress

PACKAGE = Path(dyncompress.__file__).resolve().parent
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__") or "__init__"
    for p in PACKAGE.rglob("*.py")
    if p.stem != "__main__"
)


def module_path(module: str) -> Path:
    path = PACKAGE.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imported(module: str) -> set[str]:
    """The package's modules that `module` imports anywhere: at its top, inside functions (lazy
    imports), under `if TYPE_CHECKING:`. A circle through any of them is a circle of the design,
    whether or not Python happens to survive it at import time."""
    tree = ast.parse(module_path(module).read_text())
    here = module.split(".") if module_path(module).name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "dyncompress":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [".".join([*target, a.name]) for a in node.names]
            found.update(n for n in names if n in MODULES)  # from . import a: the module a
            found.add(".".join(target) or "__init__")
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("dyncompress.") for a in node.names if a.name.startswith("dyncompress."))
    return {m for m in found if m in MODULES and m != module and m != "__init__"}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as one circle's path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in sorted(graph[m]):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = []
            while True:
                n = stack.pop()
                group.append(n)
                if n == m:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return found


def test_the_circle_finder_sees_lazy_and_type_checking_imports():
    graph = {m: imported(m) for m in MODULES}
    assert {"cli.measure", "cli.base"} <= graph["cli.main"]  # top-level imports
    assert "coding.measure" in graph["auto"]  # an import inside a function
    assert "config.model" in graph["config.levels"]  # under TYPE_CHECKING
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    graph = {m: imported(m) for m in MODULES}
    assert circles(graph) == []


# The layers of `dyncompress/__init__.py`'s docstring, bottom first: a module imports only from its own
# layer or those before it
LAYERS = [
    {"errors", "environment", "progress", "_signals", "kernel_cache"},
    {"format"},
    {"config"},
    {"network"},
    {"experts"},
    {"bitwise"},
    {"coding"},
    {"training"},
    {"api", "auto", "cluster"},
    {"cli", "_entry", "__main__", "__init__"},
]


def layer(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_module_imports_only_from_its_layer_or_those_below():
    assert {m.split(".")[0] for m in MODULES} <= set().union(*LAYERS)  # every module has a layer
    upward = [(m, n) for m in MODULES for n in sorted(imported(m)) if layer(n) > layer(m)]
    assert upward == []
    described = (PACKAGE / "__init__.py").read_text()
    for names in LAYERS[1:8]:  # the folders, as the package's docstring lists them
        assert f"    {next(iter(names))}/ " in described


IMPORT_EACH = """
import importlib, sys
failures = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "dyncompress" or m.startswith("dyncompress.")]:
        del sys.modules[loaded]  # torch and the rest stay loaded: only the package starts afresh
    try:
        importlib.import_module("dyncompress" + ("" if name == "__init__" else "." + name))
    except Exception as e:
        failures.append(f"{name}: {type(e).__name__}: {e}")
print("\\n".join(failures))
"""


def test_every_module_imports_on_its_own():
    """Each module first, in a package not yet imported (one fresh process, the package reset between)."""
    r = subprocess.run([sys.executable, "-c", IMPORT_EACH, *MODULES], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", r.stdout
