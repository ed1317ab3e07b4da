import os
import subprocess
import sys
from pathlib import Path

import pytest

from dyncompress.model import Model, load, save
from dyncompress.train import TrainConfig, Trainer, calibrate

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


TINY = TrainConfig(hidden=24, batch=8, bptt=32, steps=60, lr=1e-2, warmup=5, valid_bytes=8000, eval_every=30)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, Model]:
    """A tiny model trained briefly on Alice and calibrated on it; the file and the loaded model."""
    path = tmp_path_factory.mktemp("models") / "tiny.dcm"
    trainer = Trainer(TINY, [str(CORPORA / "alice29.txt")])
    model = trainer.run(str(path), "tiny")
    model.ms = calibrate(model, corpus("alice29.txt")[:20000], lanes=4, segment_len=8, clip=1.0)
    model.info["defaults"] = {"lanes": 4, "segment_len": 8, "lr": 3e-3, "decay": 1e-3}
    save(model, str(path))
    return path, load(str(path))
