"""The command line, run for real in fresh processes: files, pipes, refusals, exit codes."""

import lzma
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CROSS_CASES, INTERRUPTED, SMALL, corpus, cross_input, interruptible, run_cli
from dyncompress import compress, decompress
from dyncompress.config.levels import FAST_EXPERTS

try:
    import pty
except ImportError:  # not on Windows
    pty = None

KNOBS = ["--online", "--hidden", "32", "--lanes", "8", "--segment-len", "8", "--device", "cpu"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "xargs.1"
    path.write_bytes(corpus("xargs.1"))
    return path


def test_encode_decode_files_keep_refuse_force_rm(text_file):
    original = text_file.read_bytes()
    packed = text_file.with_name("xargs.1.dc")
    r = run_cli("encode", "-v", *KNOBS, text_file)
    assert r.returncode == 0, r.stderr
    assert text_file.exists() and packed.exists()  # source kept
    assert b"bits/byte" in r.stderr and b"kB/s" in r.stderr
    assert packed.read_bytes() == compress(original, **SMALL)  # the CLI and the API agree

    r = run_cli("encode", *KNOBS, text_file)  # refuses to overwrite
    assert r.returncode == 1 and b"already exists" in r.stderr and b"Traceback" not in r.stderr
    r = run_cli("decode", packed)  # refuses to overwrite the source either
    assert r.returncode == 1 and b"already exists" in r.stderr

    text_file.unlink()
    r = run_cli("decode", "--rm", packed)
    assert r.returncode == 0, r.stderr
    assert text_file.read_bytes() == original and not packed.exists()

    r = run_cli("encode", "-f", "--rm", *KNOBS, text_file)
    assert r.returncode == 0 and packed.exists() and not text_file.exists()
    assert list(text_file.parent.iterdir()) == [packed]  # no temporary files left behind


def test_stdin_stdout_and_output_option(tmp_path):
    data = corpus("grammar.lsp")
    r = run_cli("encode", *KNOBS, input=data)  # no file: stdin -> stdout
    assert r.returncode == 0 and decompress(r.stdout) == data
    r2 = run_cli("decode", "-", input=r.stdout)
    assert r2.returncode == 0 and r2.stdout == data
    out = tmp_path / "named.dc"
    r3 = run_cli("encode", *KNOBS, "-o", out, "-", input=data)
    assert r3.returncode == 0 and out.read_bytes() == r.stdout
    r4 = run_cli("decode", "-c", out)
    assert r4.stdout == data and out.exists()


def test_test_and_info_and_damaged_files(tmp_path, text_file):
    assert run_cli("encode", *KNOBS, text_file).returncode == 0
    packed = text_file.with_name("xargs.1.dc")
    r = run_cli("test", packed)
    assert r.returncode == 0 and b"OK" in r.stderr and r.stdout == b""

    r = run_cli("info", packed)
    assert r.returncode == 0 and b"original size   4,227 bytes" in r.stdout and b"hidden=32" in r.stdout
    data = packed.read_bytes()
    r = run_cli("info", "-", input=data)  # from a pipe too: the size is what the frames spanned
    assert r.returncode == 0 and f"compressed size {len(data):,} bytes".encode() in r.stdout, r.stdout
    assert b"adaptation      beta1=0.0" in r.stdout
    experts = rb"experts +classes=7, count_limit=250, experts=orders,word,gap,match,ppm,apm,record,column,.* mixers=2,"
    assert re.search(experts, r.stdout), r.stdout
    assert re.search(rb"tables +\d+ MiB at most", r.stdout), r.stdout

    cut = tmp_path / "cut.dc"
    cut.write_bytes(data[: len(data) // 2])
    bad = tmp_path / "bad.dc"
    bad.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])  # inside the coded block
    # both in one run (each process costs seconds): an error line each, in turn, and no output
    for args in (["decode"], ["decode", "-t"]):
        r = run_cli(*args, cut, bad)
        assert r.returncode == 1 and b"Traceback" not in r.stderr, r.stderr
        lines = r.stderr.decode().splitlines()
        assert len(lines) == 2 and "cut.dc" in lines[0] and "truncated" in lines[0], lines
        assert "bad.dc" in lines[1] and "corrupt" in lines[1], lines
        assert not cut.with_suffix("").exists() and not bad.with_suffix("").exists()  # no half-written output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.dc", "cut.dc", "xargs.1", "xargs.1.dc"]


def test_bad_inputs_give_one_line_errors(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"not compressed")
    cases = [
        (["decode", tmp_path / "missing.dc"], b"no such file"),
        (["decode", plain], b"unknown suffix"),
        (["decode", "-c", plain], b"not a dyncompress file"),
        (["encode", tmp_path], b"is a directory"),
    ]
    for args, message in cases:
        r = run_cli(*args)
        assert r.returncode == 1 and message in r.stderr, (args, r.stderr)
        assert b"Traceback" not in r.stderr
    for usage in (
        ["encode", "--lanes", "0", plain],
        ["decode", "-c", "-o", "x", plain],
        ["encode", "-k", "--rm", plain],
    ):
        r = run_cli(*usage)
        assert r.returncode == 2 and b"Traceback" not in r.stderr, usage  # usage errors


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to simulate a full disk")
def test_disk_full_is_a_clean_error():
    with open("/dev/full", "wb") as full:
        r = subprocess.run(
            [sys.executable, "-m", "dyncompress", "encode", *KNOBS, "-c"],
            input=corpus("grammar.lsp"),
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert r.returncode == 1 and b"No space left" in r.stderr and b"Traceback" not in r.stderr


@pytest.mark.skipif(pty is None, reason="needs pseudo-terminals (the pty module: POSIX)")
def test_never_writes_compressed_data_to_a_terminal(text_file):
    leader, follower = pty.openpty()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "dyncompress", "encode", *KNOBS, "-c", str(text_file)],
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert r.returncode == 1 and b"terminal" in r.stderr


def test_interrupt_leaves_nothing_behind(tmp_path):
    big = tmp_path / "alice29.txt"
    big.write_bytes(corpus("alice29.txt"))
    proc = interruptible(["-m", "dyncompress", "encode", "--online", "--hidden", "256", "--lanes", "1", str(big)])
    deadline = time.time() + 60
    while not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):  # encoding has begun
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in INTERRUPTED, err
    assert err.decode().strip().splitlines()[-1] == "dyncompress: interrupted" and b"Traceback" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["alice29.txt"]


def test_interrupt_while_torch_loads_is_one_line(tmp_path):
    """Ctrl-C while torch imports (when a command first needs it) is the same clean exit, not an
    import traceback.

    `-X importtime` reports every finished import on stderr: the Ctrl-C goes out when the first
    of torch's own modules has loaded, i.e. while `import torch` (about a thousand modules) runs.
    """
    big = tmp_path / "alice29.txt"
    big.write_bytes(corpus("alice29.txt"))
    proc = interruptible(["-X", "importtime", "-m", "dyncompress", "encode", str(big)])
    seen = []
    while not (seen and seen[-1].rsplit("|", 1)[-1].strip().startswith("torch.")):
        line = proc.stderr.readline().decode()
        assert line, f"the process ended before importing torch: {''.join(seen)}"
        seen.append(line)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # (click writes an empty line first, to end the terminal's "^C" echo)
    said = [line for line in err.decode().splitlines() if line and not line.startswith("import time:")]
    assert proc.returncode in INTERRUPTED and said == ["dyncompress: interrupted"], said
    assert [p.name for p in tmp_path.iterdir()] == ["alice29.txt"]


# Ctrl-C inside a finaliser: the KeyboardInterrupt Python would raise there is printed as "Exception
# ignored" and dropped. The child sends itself SIGINT from a __del__ and stays there a moment.
_FINALISER = """
import signal, sys, time
from dyncompress._signals import deliver_interrupts
if sys.argv[1] == "delivered":
    deliver_interrupts()
class Finaliser:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.05)
try:
    Finaliser()
    time.sleep(1)
    print("ran on")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_ctrl_c_in_a_finaliser_or_callback_is_raised_after_it_not_lost():
    """Where numba loaded a kernel (llvmlite's finalisers and callbacks), a Ctrl-C was lost: the
    encode ran on (or died of SIGSEGV). The command line's handler keeps such a Ctrl-C and raises
    it once the main thread is out of it; without the handler Python drops it (the control)."""
    said = {}
    for mode in ("delivered", "python's default"):
        r = subprocess.run(
            [sys.executable, "-c", _FINALISER, mode],
            capture_output=True,
            timeout=60,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        said[mode] = (r.stdout.decode().strip(), b"Exception ignored" in r.stderr)
    assert said == {"delivered": ("interrupted", False), "python's default": ("ran on", True)}, said
    from dyncompress import _signals

    def callback():  # code named as llvmlite's, as C calls it back while numba loads a kernel
        return sys._getframe()

    llvmlite = os.sep.join(["", "site-packages", "llvmlite", "binding", "executionengine.py"])
    named = compile("def call_back(f):\n    return f()\n", llvmlite, "exec")
    scope = {}
    exec(named, scope)
    assert _signals.inside_callback(scope["call_back"](callback))
    assert not _signals.inside_callback(callback())


@pytest.mark.parametrize("threads", [1, 2])
def test_any_thread_count_decodes_exactly(tmp_path, threads):
    """`-T N` is recorded (the decoder's default), and any other count decodes the same bytes."""
    data = corpus("enwik4")[:3000]
    src = tmp_path / "enwik"
    src.write_bytes(data)
    r = run_cli("encode", "--online", "--hidden", "256", "--lanes", "16", "-T", threads, src)
    assert r.returncode == 0, r.stderr
    assert f"threads={threads}".encode() in run_cli("info", f"{src}.dc").stdout
    # decoded with the other count (-T), under an environment that names the encoder's: the codec sets
    # its own count (codec.py), so the flag decides and the environment must change nothing
    other, env = str(3 - threads), {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    r = run_cli("decode", "-T", other, "-c", f"{src}.dc", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == data


@pytest.mark.parametrize("engine", ["bits", "bytes"])
def test_fast_codes_without_a_network_and_refuses_what_contradicts_it(tmp_path, engine):
    """--fast: no network, no model; the bitwise engine in one lane (--engine bits, the default), or the
    byte statistics and their mixer in many (--engine bytes). Real text, object code and an empty file
    round-trip; the file says so; it codes text smaller than xz -9e; network knobs, levels and models
    are usage errors."""
    text = corpus("alice29.txt")[:60000]
    chosen = [] if engine == "bits" else ["--engine", "bytes"]
    for name, data in (("text", text), ("obj", corpus("calgary_obj1")), ("empty", b"")):
        src = tmp_path / name
        src.write_bytes(data)
        r = run_cli("encode", "--fast", *chosen, src)
        assert r.returncode == 0, r.stderr
        r = run_cli("decode", "-c", f"{src}.dc")
        assert r.returncode == 0 and r.stdout == data, r.stderr
    info = run_cli("info", tmp_path / "text.dc").stdout.decode()
    assert "network         none" in info and "model           none" in info and f"engine={engine}" in info, info
    assert "adaptation      none (no network)" in info, info
    if engine == "bytes":
        assert "lanes=7," in info, info
        assert f"experts={FAST_EXPERTS}," in info and "apm" not in FAST_EXPERTS, info  # the APM halves its speed
    else:
        assert "lanes=1," in info and "engine          bits: 2^" in info and "experts" not in info, info
    assert (tmp_path / "text.dc").stat().st_size < 0.9 * len(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME))
    for args, says in (
        (["-9"], "a level of its own"),
        (["--online"], "a level of its own"),
        (["--model", "enwiki-h256"], "a level of its own"),
        (["--lr", "0.1"], "--lr does not apply"),
        (["--hidden", "64"], "--hidden does not apply"),
    ):
        r = run_cli("encode", "--fast", *args, "-c", tmp_path / "text")
        assert r.returncode == 2 and says in r.stderr.decode() and not r.stdout, (args, r.stderr)


def test_module_and_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith(b"dyncompress")


# Every case one way; the two cheapest the other way too (each run is two fresh processes).
CROSS_RUNS = [("portable -> best", case) for case in CROSS_CASES] + [
    ("best -> portable", case) for case in ("model, -T 2", "online, rms-decay", "model, LoRA + TLM")
]


@pytest.mark.parametrize("direction,case", CROSS_RUNS)
def test_files_decode_exactly_under_other_cpu_kernels_and_thread_counts(tmp_path, case, direction, portable_kernels):
    """Encoded with ATen's generic kernels, MKL limited to SSE4.2 and the experts compiled for a
    generic CPU, decoded with the machine's best kernels (AVX2 / AVX-512) and one thread, and the
    reverse: the same bytes."""
    data = cross_input(case)
    src = tmp_path / "alice"
    src.write_bytes(data)
    enc_env, dec_env = (portable_kernels, {}) if direction.startswith("portable") else ({}, portable_kernels)
    r = run_cli("encode", *CROSS_CASES[case], "-c", src, env=enc_env)
    assert r.returncode == 0, r.stderr
    packed = tmp_path / "alice.dc"
    packed.write_bytes(r.stdout)
    r = run_cli("decode", "-T", "1", "-c", packed, env=dec_env)
    assert r.returncode == 0 and r.stdout == data, r.stderr


def test_the_first_load_freezes_the_imports_out_of_the_collector_and_later_ones_do_not():
    """`loading()` freezes what exists after a command's first imports (they live as long as the
    process: exit skips collecting them), once: an object made later, such as a worker pool with its
    semaphore, stays collectable through a second `loading()`."""
    import gc

    from dyncompress.cli import base as cli_base

    gc.unfreeze()  # this process as a command starts: nothing frozen
    try:
        with cli_base.loading():
            pass
        frozen = gc.get_freeze_count()
        assert frozen > 0
        later = [[] for _ in range(1000)]  # made after the first load: 1,001 objects the collector tracks
        with cli_base.loading():
            pass
        assert gc.get_freeze_count() == frozen, len(later)  # a second freeze would have taken them
    finally:
        gc.unfreeze()


def test_fast_speed_is_said_in_the_same_words_in_help_and_readme():
    from dyncompress.cli.main import FAST_SPEED, encode

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    fast = next(p for p in encode.params if p.name == "fast")
    assert FAST_SPEED in fast.help and FAST_SPEED in " ".join(readme.split())
    assert "about 15 times faster" in encode.help
