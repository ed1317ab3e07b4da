import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dyncompress.config.model import Model, load, save
from dyncompress.format.container import (
    END_SIZE,
    FrameReader,
    pack_end,
    pack_header,
    parse_end,
    parse_header,
    read_frames,
)
from dyncompress.training.train import TrainConfig, Trainer, calibrate

CORPORA = Path(__file__).resolve().parent.parent / "corpora"

# The commands these tests run compile what they need themselves, as without `warm`'s child (a child
# per way of coding and per numba cache would add about half a minute to the suite); test_warm runs
# the child with its own cache
os.environ["DYNCOMPRESS_COMPILE_AHEAD"] = "0"
# The processes the tests start import the package from cached bytecode, as an installed copy does
# (with PYTHONDONTWRITEBYTECODE set, every one of them would compile every module from source)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# A small network: the tests check exactness and behaviour, not ratio, and must be quick.
NET = dict(hidden=32, lanes=8, segment_len=8, device="cpu")
SMALL = dict(NET, model=None)  # online mode: no pretrained model


def corpus(name: str) -> bytes:
    return (CORPORA / name).read_bytes()


@pytest.fixture(scope="session")
def model():
    """The shipped model (`settings.DEFAULT_MODEL`)."""
    from dyncompress.api import resolve_model
    from dyncompress.config.levels import DEFAULT_MODEL

    return resolve_model(DEFAULT_MODEL)


def split_started() -> None:
    """Start numba's threading layer through `split`, as a codec does, before a test calls the split
    kernels itself: a layer started elsewhere makes `split` refuse to split in this process from
    then on, and a later test of the split (`test_api`'s forks) would fail for the order alone."""
    from dyncompress.coding import split

    split.parts_for(2, 2)


def needs_split() -> None:
    """Skip, saying why, where a step's lanes are never split over two threads: numba has no OpenMP
    or TBB threading layer here, or fewer than two threads."""
    from dyncompress.coding import split

    split_started()
    if split.parts_for(2, 4) != 2:
        pytest.skip("the lanes are never split here: numba has no OpenMP or TBB layer, or fewer than two threads")


def rewrite_header(packed: bytes, edit) -> bytes:
    """The stream with its header edited (and its end marker's stream length set to match)."""
    meta, end = parse_header(packed)
    del meta["format"]
    edit(meta)
    body = pack_header(meta) + packed[end:-END_SIZE]
    marker = parse_end(packed[-END_SIZE:])
    return body + pack_end(marker.total_len, marker.blocks, marker.digest, marker.frames, len(body))


def cached_kernels() -> list[tuple[Path, Path]]:
    """(a kernel module's file, one of the files of numba's cache of its kernels) for every kernel
    this tree has compiled so far. The cache is keyed on the SHA-256 of every kernel source
    (`kernel_cache`), not on paths: another copy of these sources, or another cache folder, given
    these files loads them instead of compiling them again."""
    import importlib

    from numba.core.dispatcher import Dispatcher

    from dyncompress import kernel_cache

    root = Path(kernel_cache.__file__).resolve().parent.parent
    found = []
    for path in map(Path, kernel_cache.kernel_files()):
        module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
        kernel = next(v for v in vars(module).values() if isinstance(v, Dispatcher) and v._cache is not None)
        found += [(path, cached) for cached in Path(kernel._cache._cache_path).glob(f"{path.stem}.*.nb[ic]")]
    return found


def run_cli(*args, input: bytes | None = None, cwd=None, env=None, **kw) -> subprocess.CompletedProcess:
    """The real command line in a fresh process: `python -m dyncompress ARGS`, or (the same code,
    the same pipes, ~2 s sooner) a fork of a process that has already imported it (see `_Zygote`).
    An environment that changes how torch, numba or Python start gets a process of its own."""
    full_env = dict(os.environ, **(env or {}))
    if kw or _IMPORT_TIME_ENV.intersection(env or ()) or any(k.startswith(_IMPORT_TIME_PREFIXES) for k in env or ()):
        return subprocess.run(
            [sys.executable, "-m", "dyncompress", *map(str, args)],
            input=input,
            capture_output=True,
            cwd=cwd,
            env=full_env,
            timeout=300,
            **kw,
        )
    return _Zygote.get().run([str(a) for a in args], input, str(cwd or os.getcwd()), full_env, timeout=300)


_IMPORT_TIME_ENV = {"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "LD_PRELOAD", "LD_LIBRARY_PATH"}
_IMPORT_TIME_PREFIXES = ("ATEN_", "MKL_", "OMP_", "OPENBLAS_", "NUMBA_", "TORCH_", "KMP_", "GOMP_")

_ZYGOTE = r"""
import atexit, json, os, runpy, socket, sys, threading, traceback
import dyncompress.api, dyncompress.cli.main  # torch, numpy and numba: what every fresh process imports first
import numpy as np
from dyncompress.experts.mix import Experts
from dyncompress.config.settings import MixSettings
experts = Experts(MixSettings(table_bits=10, history_bits=12), 2)  # numba loads its compiled kernels
freqs, used = experts.mix(np.zeros((2, 256)))  # (float64 logits, as the network gives them)
experts.learn(used, freqs, np.zeros(2, dtype=np.int64), 2)
from dyncompress.network import update_kernels as uk
w = np.zeros(1)
uk.stream_step(w, w.copy(), w.copy(), w.copy(), w.copy(), 1.0, 0.5, 0.5, 0.5, 0.5, True, 1.0, 1.0)
uk.rate_step(w, w, w.astype(np.float32), 1.0, w, w.astype(np.float32), True, 1.0)  # (R and D as float32)
uk.gradient_stats(w)
uk.rounded_squares(w, 1.0)
uk.settle(w, w, w, True, 1.0)
del experts, freqs, used, w
sock = socket.socket(fileno=int(sys.argv[1]))
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    except (ConnectionError, OSError):
        break
    if not msg:
        break
    req = json.loads(msg)
    pid = os.fork()
    if pid == 0:  # the command: what `python -m dyncompress ARGS` does after its imports
        sock.close()
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [sys.executable] + req["args"]
        code = 1
        try:
            runpy.run_module("dyncompress", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        try:  # an interpreter's exit, in its order: threads joined (and their exit hooks, such as
            # concurrent.futures' joining its pool's manager thread) before the atexit handlers.
            # Without it, about one -j 2 run in four ended with the resource tracker warning on
            # stderr of a leaked semaphore it then found unlinked (a real process never did; the
            # manager thread cut off mid-cleanup is the likely cause, not traced further)
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"pid": pid}).encode())
    sock.send(json.dumps({"status": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}).encode())
"""


class _Zygote:
    """One process per test session that imports dyncompress (torch, numpy, numba) and loads the
    experts' compiled kernels (~2.3 s of the ~3.7 s every command costs), then forks a child per
    command line. It runs no torch operation, so no thread pool exists when it forks. The child
    gets the test's own pipes as stdin, stdout and stderr (not files: seekability and EOF are a
    pipe's), its working directory and environment, and runs `python -m dyncompress` as runpy
    does; its exit status comes back as subprocess's would (negative for a signal). Tests of
    start-up itself (Ctrl-C while torch loads, an installed copy, other kernels) start real
    processes."""

    _one: "_Zygote | None" = None

    @classmethod
    def get(cls) -> "_Zygote":
        if cls._one is None or cls._one.proc.poll() is not None:
            cls._one = cls()
        return cls._one

    def __init__(self) -> None:
        import socket

        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()

    def run(self, args: list[str], input: bytes | None, cwd: str, env: dict, timeout: float):
        import json
        import socket
        import threading

        ends = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [ends[0][0], ends[1][1], ends[2][1]]
        try:
            socket.send_fds(self.sock, [json.dumps({"args": args, "cwd": cwd, "env": env}).encode()], theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        got: dict[int, bytes] = {}

        def drain(fd: int) -> None:
            with os.fdopen(fd, "rb") as f:
                got[fd] = f.read()

        def feed(fd: int) -> None:
            with os.fdopen(fd, "wb") as f:
                try:
                    f.write(input or b"")
                except BrokenPipeError:
                    pass

        threads = [threading.Thread(target=drain, args=(ends[i][0],)) for i in (1, 2)]
        threads.append(threading.Thread(target=feed, args=(ends[0][1],)))
        for t in threads:
            t.start()
        self.sock.settimeout(timeout)
        pid = json.loads(self.sock.recv(256))["pid"]
        try:
            status = json.loads(self.sock.recv(256))["status"]
        except TimeoutError:
            os.kill(pid, 9)
            self.sock.recv(256)
            raise subprocess.TimeoutExpired(["dyncompress", *args], timeout) from None
        for t in threads:
            t.join()
        return subprocess.CompletedProcess(["dyncompress", *args], status, got[ends[1][0]], got[ends[2][0]])


@pytest.fixture
def small():
    return dict(SMALL)


# Other kernels than the machine's best: torch's generic ones, MKL at SSE4.2, and the experts' compiled
# code for a generic x86-64 (numba), with a numba cache of this session's own. The portability tests
# code under them (test_cli), each case of CROSS_CASES (every shipped model's shape among them) one way
# or both (the golden files are re-encoded under other kernels in test_golden).
PORTABLE_CACHE = tempfile.mkdtemp(prefix="dyncompress-generic-")
PORTABLE_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "NUMBA_CPU_NAME": "generic",
    "NUMBA_CACHE_DIR": PORTABLE_CACHE,
}
CROSS_CASES = {
    "online -9": ["--online", "-9"],
    "model, -T 2": ["--lanes", "3", "-T", "2"],
    "online, rms-decay": ["--online", "--hidden", "64", "--rule", "rms-decay", "--lanes", "4"],
    "model, sparse + TLM": ["--model", "multi-h256", "--lanes", "3", "--sparse", "64", "--tlm-bits", "2.0"],
    "model, LoRA + TLM": ["--model", "cjk-h128", "--lanes", "3", "--lora", "8", "--tlm-bits", "2.0"],
    "large model -9, -T 2": ["--model", "enwiki-h512", "-9", "-T", "2"],
    "fast (bits engine)": ["--fast"],
    "fast, bytes engine, -T 2": ["--fast", "--engine", "bytes", "-T", "2"],
}


def region_edges(packed: bytes) -> list[int]:
    """First, middle and last byte of every part of a stream (header, each frame, end marker).
    test_container checks every byte of the format; the tests that use these go through the API."""
    reader, edges, start = FrameReader(), [], 0
    for _ in read_frames(io.BytesIO(packed).read, reader=reader):
        edges += [start, (start + reader.offset - 1) // 2, reader.offset - 1]
        start = reader.offset
    return sorted(set(edges))


def cross_input(case: str) -> bytes:
    """What a portability test codes in `case` (-9: the largest network, the shortest text)."""
    return corpus("alice29.txt")[20000 : 20700 if "-9" in case else 22500]


# The generic kernels are compiled by a process that the session starts when it will run a
# portability test (`portable_kernels`): it codes every case of CROSS_CASES both ways under them,
# into their cache, on the other core while the first tests compile the machine's own kernels. It
# runs at Linux's idle priority (SCHED_IDLE), on what the tests leave free: its codings split their
# lanes over two threads, as the tests' do, and two such processes on two cores each wait at their
# barriers for a thread the other has descheduled. The
# tests then decode under kernels compiled for a generic CPU all the same; a kernel the warm-up
# missed (or a warm-up that failed: its log is in the cache folder) they compile themselves.
_WARM_UP = r"""
import json, os, sys, tempfile
try:  # (before numba's and torch's threads start: they inherit it)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):  # not Linux, or not allowed here: the normal priority
    pass
from dyncompress.cli.main import main
folder = tempfile.mkdtemp(dir=sys.argv[1])
for i, (args, data) in enumerate(json.loads(sys.stdin.read())):
    src, packed, out = (os.path.join(folder, f"{i}.{ext}") for ext in ("txt", "dc", "out"))
    with open(src, "wb") as f:
        f.write(data.encode("latin-1"))
    for command in (["encode", *args, "-f", "-o", packed, src], ["decode", "-T", "1", "-f", "-o", out, packed]):
        try:
            main(command, standalone_mode=False)
        except BaseException as e:
            print(command, repr(e), file=sys.stderr, flush=True)
"""


class _PortableWarmUp:
    proc: "subprocess.Popen | None" = None

    @classmethod
    def start(cls) -> None:
        cases = [(args, cross_input(case).decode("latin-1")) for case, args in CROSS_CASES.items()]
        with open(os.path.join(PORTABLE_CACHE, "warm-up.log"), "wb") as log:
            cls.proc = subprocess.Popen(
                [sys.executable, "-c", _WARM_UP, PORTABLE_CACHE],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=dict(os.environ, **PORTABLE_KERNELS),
            )
        cls.proc.stdin.write(json.dumps(cases).encode())
        cls.proc.stdin.close()

    @classmethod
    def wait(cls) -> None:
        if cls.proc is not None:
            try:
                cls.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                cls.proc.kill()

    @classmethod
    def stop(cls) -> None:
        if cls.proc is not None and cls.proc.poll() is None:
            cls.proc.kill()
            cls.proc.wait()


@pytest.fixture
def portable_kernels() -> dict[str, str]:
    """PORTABLE_KERNELS, once the session's warm-up under them has ended."""
    _PortableWarmUp.wait()
    return dict(PORTABLE_KERNELS)


def pytest_collection_modifyitems(session, config, items) -> None:
    if any("portable_kernels" in getattr(item, "fixturenames", ()) for item in items):
        _PortableWarmUp.start()


def pytest_unconfigure(config) -> None:
    _PortableWarmUp.stop()
    shutil.rmtree(PORTABLE_CACHE, ignore_errors=True)


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


# 130, or killed by SIGINT (what a shell also reports as 130): CPython re-raises SIGINT at exit
# when a KeyboardInterrupt passed through code a library ran with PyRun_* (torch's lazy imports),
# even if dyncompress caught it. Seen once in CI, when Ctrl-C landed in the ~800 modules torch
# imported for the optimizer object online mode then built (it builds none now: adapt.FusedAdam);
# the start-up holds Ctrl-C (`_signals`), after which 40 interrupts at random times all gave 130.
INTERRUPTED = (130, -signal.SIGINT)


def interruptible(args: list, sigint=signal.SIG_DFL, **kw) -> subprocess.Popen:
    """A child with SIGINT at its default, as from a terminal, even when this test run was started
    with SIGINT ignored (a background job of a non-interactive shell, nohup): the child would
    inherit the ignored signal and never see the Ctrl-C these tests send. (`sigint`: SIG_IGN for a
    child started as a background job.)"""
    return subprocess.Popen(
        [sys.executable, *args],
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        stderr=subprocess.PIPE,
        **kw,
    )
