"""The first run after an install compiles numba's kernels in a child process, not in the command.

numba compiles the kernels (`experts`, `network.step_kernels`, `network.update_kernels`) on their
first call and keeps them in its cache. Compiling costs memory that the process keeps afterwards
(LLVM's modules stay alive with the functions they made, and the heap it freed is not given back).
So `encode`, `decode` and `test` first look for a stamp that says this installation's kernels are compiled for
the way they code (KINDS: the default model, online mode, the fast level's two engines; `decode` and `test` read
it in the files' headers). Where there is none they run `main` in a child process (`CHILD`), before
they load torch or allocate a table: it codes a tiny input that way (`codec.fingerprint` with
small tables, in as many lanes as a large input has, at the command's thread count), numba compiles
every kernel that path calls and writes it to its cache, and the child's memory goes back when it
exits. The command then loads the kernels from the cache.

The stamp is a hint, never a promise: it names the Python, numba, llvmlite and numpy versions,
the kernels' sources (their SHA-256, `kernel_cache.sources_stamp`, the key of numba's cache of them)
and numba's CPU settings, and lives in numba's cache folder (`NUMBA_CACHE_DIR`, else the
package's `__pycache__`, else the user's cache folder). Where the cache misses a kernel after all
(another CPU; a path the child did not run, such as one lane: a small input, small tables), the
command compiles it itself, as it did before this module; so it does after a child that failed,
whose stamp stays all the same (`compile_ahead`). Ctrl-C stops the child too and leaves no stamp.
`DYNCOMPRESS_COMPILE_AHEAD=0` starts no child (the command compiles, as before; the test suite sets
it outside test_warm). Nothing here touches what is coded.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys

from dyncompress import environment, kernel_cache

KINDS = ("model", "online", "fast", "bits")  # the ways of coding whose kernels a child compiles
SMALL_TABLES = dict(table_bits=12, history_bits=12, match_bits=12)
# The child imports this very package, the one whose cache the stamp speaks for: not another copy
# that its working directory would put first on sys.path (a source tree beside an installed copy)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_PACKAGE)
CHILD = "import sys; sys.path.insert(0, {root!r}); import dyncompress.coding.warm as w; w.main({kind!r}, {threads!r})"
NOTICE = "dyncompress: compiling the kernels for this machine (once after an install; 20 ... 60 s)"


def _folder() -> str | None:
    """Where the stamp goes: numba's cache folder, as numba picks it (None: nowhere writable)."""
    given = environment.get("NUMBA_CACHE_DIR")
    home = environment.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in [given] if given else [os.path.join(_PACKAGE, "__pycache__"), os.path.join(home, "dyncompress")]:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def stamp_path(kind: str, threads: int | None = None) -> str | None:
    """The stamp that says this installation's kernels for `kind` at `threads` (None: the default
    count; a stamp names the count a command codes with, whichever way it was given) are compiled
    (None: no place for one)."""
    from dyncompress.config.levels import default_threads

    folder = _folder()
    if folder is None:
        return None
    import llvmlite
    import numba
    import numpy

    from dyncompress import __version__

    # (the modules' own versions: importlib.metadata would search the installed distributions)
    parts = [sys.version, __version__] + [m.__version__ for m in (numba, llvmlite, numpy)]
    parts += [environment.get(name) for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT")]
    parts.append(kernel_cache.sources_stamp().hex())  # the key numba's cache of the kernels has
    key = hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:16]
    return os.path.join(folder, f"dyncompress-kernels-{key}-{kind}-T{threads or default_threads()}.compiled")


def compile_ahead(kind: str, notice: bool, threads: int | None = None) -> str:
    """Compile the kernels for `kind` at `threads` (the command's --threads, None: the default count;
    several threads call the split kernels, one does not) in a child process unless the stamp says
    it was done (`notice`: say so on stderr while it runs): "compiled", "failed" (the command
    compiles what it needs, as without this module) or "skipped". Ctrl-C stops the child too, and
    leaves no stamp; a child that failed otherwise leaves one all the same, so that a failure that
    would repeat (a machine short of memory, a missing default model) does not cost every later
    command a child's start."""
    if environment.get("NUMBA_DISABLE_JIT", "0") not in ("", "0") or not sys.executable:
        return "skipped"
    if environment.get("DYNCOMPRESS_COMPILE_AHEAD", "1") == "0":  # (no child: the command compiles, as before)
        return "skipped"
    try:
        stamp = stamp_path(kind, threads)
    except OSError:
        return "skipped"
    if stamp is None or os.path.exists(stamp):
        return "skipped"
    if notice:
        print(NOTICE, file=sys.stderr, flush=True)
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD.format(root=_ROOT, kind=kind, threads=threads)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return "failed"
    try:
        code = child.wait()
    finally:
        if child.poll() is None:  # interrupted: the child goes too
            child.kill()
            child.wait()
    if code in (-signal.SIGINT, 130):  # a Ctrl-C that reached the child first (a terminal's goes to both)
        raise KeyboardInterrupt
    try:
        with open(stamp, "x"):
            pass
    except OSError:  # another command wrote it first, or the folder went away: only a hint
        pass
    return "compiled" if code == 0 else "failed"


def file_kind(path: str) -> str | None:
    """The way a .dc file was coded (one of KINDS), from its header; None where that cannot be read
    (the decode that follows says why)."""
    from dyncompress.errors import DyncompressError
    from dyncompress.format.container import read_frames

    try:
        with open(path, "rb") as f:
            meta = next(read_frames(f.read)).meta  # (the header: the first 64 kB read, more only if it is longer)
        if meta["settings"].get("engine") == "bits":
            return "bits"
        if meta["settings"]["hidden"] == 0:
            return "fast"
        return "model" if meta["model"] else "online"
    except (OSError, ValueError, KeyError, TypeError, DyncompressError):
        return None


def compile_kernels(kind: str, threads: int | None = None) -> None:
    """Call every compiled kernel that one way of coding (KINDS) at `threads` (None: the default count)
    calls: tiny runs of the real code path."""
    from dyncompress.coding.codec import fingerprint
    from dyncompress.config.levels import DEFAULT_MODEL, default_threads, make_settings
    from dyncompress.config.model import find

    model = find(DEFAULT_MODEL) if kind == "model" else None
    knobs = {"online": {}, "fast": {"hidden": 0, "engine": "bytes"}, "bits": {"hidden": 0}}.get(kind, {"model": model})
    fingerprint(make_settings(threads=threads or default_threads(), **knobs, **SMALL_TABLES), model)


def main(kind: str, threads: int | None = None) -> None:
    if kind not in KINDS:
        sys.exit(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")
    compile_kernels(kind, threads)
