"""What the package does to the process beside coding: the environment it reads (one list), and
the process-wide settings it touches (torch's thread count) left as the caller had them, with
codings in several threads at once."""

import ast
import sys
import threading
from pathlib import Path

import pytest
import torch

import dyncompress
from conftest import corpus
from dyncompress import compress, decompress, environment

PACKAGE = Path(dyncompress.__file__).resolve().parent
sys.path.insert(0, str(PACKAGE.parent / "tools"))
from payload_hashes import record  # noqa: E402

README = (PACKAGE.parent / "README.md").read_text()


def reads_environment(tree: ast.AST) -> list[int]:
    """Lines that read os.environ or call os.getenv."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
    return lines


def test_only_the_environment_module_reads_the_environment():
    readers = {
        str(p.relative_to(PACKAGE)): reads_environment(ast.parse(p.read_text()))
        for p in PACKAGE.rglob("*.py")
        if p.name != "environment.py"
    }
    assert {k: v for k, v in readers.items() if v} == {}
    assert reads_environment(ast.parse((PACKAGE / "environment.py").read_text()))  # (the finder finds)


def test_every_variable_is_documented_in_the_readme_and_an_unlisted_one_is_refused():
    for name in environment.VARIABLES:
        assert f"`{name}`" in README, name
    with pytest.raises(KeyError):
        environment.get("DYNCOMPRESS_SOMETHING")


def test_two_compressors_in_two_threads_code_what_each_codes_alone_and_leave_torchs_threads():
    texts = [corpus("alice29.txt")[:6000], corpus("enwik4")[:6000]]
    alone = [record(compress(t, model=None, hidden=32, lanes=2, threads=2)) for t in texts]
    outside = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        results = [None, None]

        def code(i: int) -> None:
            results[i] = compress(texts[i], model=None, hidden=32, lanes=2, threads=1 + i)

        workers = [threading.Thread(target=code, args=(i,)) for i in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert torch.get_num_threads() == 3  # the caller's count, not a coding's
        for i in range(2):  # the same settings and payloads as alone
            assert decompress(results[i]) == texts[i]
            assert record(results[i]) == alone[i]
    finally:
        torch.set_num_threads(outside)
