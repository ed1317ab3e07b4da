import os
import subprocess
import sys
from pathlib import Path

import pytest

CORPORA = Path(__file__).resolve().parent.parent / "corpora"

# A small network: the tests check exactness and behaviour, not ratio, and must be quick.
NET = dict(hidden=32, lanes=8, segment_len=8, device="cpu")
SMALL = dict(NET, model=None)  # online mode: no pretrained model


def corpus(name: str) -> bytes:
    return (CORPORA / name).read_bytes()


def run_cli(*args, input: bytes | None = None, cwd=None, env=None, **kw) -> subprocess.CompletedProcess:
    """The real command line in a fresh process."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "dyncompress", *map(str, args)],
        input=input,
        capture_output=True,
        cwd=cwd,
        env=full_env,
        timeout=300,
        **kw,
    )


@pytest.fixture
def small():
    return dict(SMALL)
