"""The first run after an install compiles the kernels in a child process (`warm`), real processes
with a numba cache of their own (an empty folder: as after an install)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from numba.core import caching

from conftest import cached_kernels, corpus, run_cli
from dyncompress.coding import warm
from dyncompress.config.levels import default_threads


def _stamps(cache) -> list[str]:
    return sorted(p.name for p in cache.glob("dyncompress-kernels-*.compiled"))


def _cached_kernels(cache) -> list[str]:
    return sorted(p.name for p in cache.rglob("*.nbi"))


ROOT = Path(warm.__file__).resolve().parent.parent.parent  # the folder the package is in


def _command(*args, cwd, env) -> subprocess.CompletedProcess:
    """`dyncompress ARGS` as the console script runs it: this package, whatever the working directory holds."""
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['dyncompress'] + {list(map(str, args))!r}; "
    code += "from dyncompress._entry import run; run()"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=dict(os.environ, **env), capture_output=True)


@pytest.fixture(autouse=True)
def compile_ahead(monkeypatch):
    """The child on, here and in the commands these tests start (conftest turns it off for the rest)."""
    monkeypatch.setenv("DYNCOMPRESS_COMPILE_AHEAD", "1")


def test_the_first_encode_compiles_in_a_child_and_later_runs_find_the_kernels(tmp_path):
    cache = tmp_path / "numba"
    env = {"NUMBA_CACHE_DIR": str(cache)}
    # numba's cache holds what this session compiled but `step.contexts` (a small kernel the
    # command calls, at one thread): the child must compile it, and loads the rest (the suite need
    # not repeat a whole build)
    for source, cached in cached_kernels():
        if not cached.name.startswith("step.contexts"):
            folder = cache / caching._CacheLocator.get_suitable_cache_subpath(str(source))
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, folder / cached.name)
    assert not any(name.startswith("step.contexts") for name in _cached_kernels(cache))
    src = tmp_path / "xargs.1"
    src.write_bytes(corpus("xargs.1"))
    # a source tree in the working directory, as beside an installed copy: the child must not import it
    (tmp_path / "dyncompress").mkdir()
    (tmp_path / "dyncompress" / "__init__.py").write_text("")
    (tmp_path / "dyncompress" / "warm.py").write_text("open('DECOY', 'w')\ndef main(kind): pass\n")
    # (the child's lanes; -T 1: the child compiles for the command's thread count, and one thread
    # needs none of the split kernels)
    r = _command("encode", "--fast", "--engine", "bytes", "--lanes", "64", "-T", "1", src, cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert not (tmp_path / "DECOY").exists()
    # the child compiled the fast level's kernels into numba's cache and left the stamp
    assert [s.endswith("-fast-T1.compiled") for s in _stamps(cache)] == [True]
    compiled = _cached_kernels(cache)
    assert any(name.startswith("step.contexts") for name in compiled), compiled
    (tmp_path / "xargs.1").rename(tmp_path / "original")
    # the decode reads the way the file was coded in its header: the fast level's, compiled
    r = run_cli("decode", "-T", "1", tmp_path / "xargs.1.dc", env=env)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert (tmp_path / "xargs.1").read_bytes() == corpus("xargs.1")
    assert [s.endswith("-fast-T1.compiled") for s in _stamps(cache)] == [True]
    assert _cached_kernels(cache) == compiled  # nothing left to compile


def test_a_child_that_fails_is_not_started_again(tmp_path, monkeypatch):
    """A failure that would repeat (here: the child's usage error) costs one child, not one a command."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert warm.compile_ahead("no-such-kind", notice=False) == "failed"
    assert _stamps(tmp_path) == [os.path.basename(warm.stamp_path("no-such-kind"))]
    assert warm.compile_ahead("no-such-kind", notice=False) == "skipped"


def test_dyncompress_compile_ahead_0_starts_no_child(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DYNCOMPRESS_COMPILE_AHEAD", "0")
    assert warm.compile_ahead("no-such-kind", notice=False) == "skipped" and _stamps(tmp_path) == []


def test_the_stamp_names_the_kind_the_thread_count_and_the_cpu_numba_compiles_for(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    fast, model = warm.stamp_path("fast"), warm.stamp_path("model")
    assert os.path.dirname(fast) == str(tmp_path) and fast != model
    # the count a command codes with, given by -T or by default
    assert warm.stamp_path("fast", 1) != warm.stamp_path("fast", 2)
    assert fast == warm.stamp_path("fast", default_threads()) and fast.endswith(f"-fast-T{default_threads()}.compiled")
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    assert warm.stamp_path("fast") != fast


def test_the_kind_of_a_file_is_read_from_its_header(tmp_path, model):
    from dyncompress import compress

    data = corpus("xargs.1")[:3000]
    for name, knobs, kind in [
        ("fast", dict(model=None, hidden=0, engine="bytes"), "fast"),
        ("bits", dict(model=None, hidden=0), "bits"),
        ("online", dict(model=None, hidden=32, lanes=2), "online"),
        ("model", dict(model=model, lanes=2), "model"),
    ]:
        (tmp_path / name).write_bytes(compress(data, **knobs))
        assert warm.file_kind(str(tmp_path / name)) == kind
    (tmp_path / "text").write_bytes(data)
    assert warm.file_kind(str(tmp_path / "text")) is None  # not a .dc file: the decode says so
    assert warm.file_kind(str(tmp_path / "missing")) is None


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"), reason="Linux /proc")
@pytest.mark.parametrize("to", ["the command", "the process group"])
def test_ctrl_c_while_the_child_compiles_stops_both_and_leaves_nothing(tmp_path, to):
    """Sent to the command alone (it stops the child), or to both, as a terminal sends it."""
    src = tmp_path / "xargs.1"
    src.write_bytes(corpus("xargs.1"))
    cache = tmp_path / "numba"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dyncompress", "encode", "--fast", str(src)],
        stderr=subprocess.PIPE,
        env=dict(os.environ, NUMBA_CACHE_DIR=str(cache)),
        preexec_fn=lambda: (os.setpgrp(), signal.signal(signal.SIGINT, signal.SIG_DFL)),
    )
    deadline, child = time.time() + 60, None
    while child is None:
        assert time.time() < deadline and proc.poll() is None
        for kid in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split():
            if b"dyncompress.coding.warm" in open(f"/proc/{kid}/cmdline", "rb").read():
                child = int(kid)
        time.sleep(0.05)
    time.sleep(1)  # the child at work
    if to == "the command":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT), err
    assert err.decode().strip().splitlines()[-1] == "dyncompress: interrupted" and b"Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numba", "xargs.1"]
    assert _stamps(cache) == []
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"
