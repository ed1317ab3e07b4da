"""The file handling every command shares, in the conventions of zstd / xz: inputs and outputs
(`-` for stdin / stdout), output to a temporary file renamed into place only on success
(`AtomicOutput`), one line per failed file and a non-zero exit (`each_file`), the common options."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import click

from dyncompress.cli.base import (
    EXIT_ERROR,
    Failure,
)
from dyncompress.errors import DyncompressError

SUFFIX = ".dc"
CHUNK = 1 << 16


@dataclass
class Options:
    output: str | None
    stdout: bool
    force: bool
    remove: bool
    verbosity: int  # 0 quiet, 1 normal, 2 verbose

    def say(self, message: str, level: int = 2) -> None:
        if self.verbosity >= level:
            click.echo(message, err=True)


# --- output handling ----------------------------------------------------------------


class AtomicOutput:
    """A temporary file beside the target, renamed over it only on success."""

    def __init__(self, target: str, force: bool) -> None:
        if os.path.exists(target) and not force:
            raise Failure(f"{target} already exists; use -f to overwrite")
        directory = os.path.dirname(os.path.abspath(target))
        fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory)
        self.file = os.fdopen(fd, "wb")
        self.target = target

    def commit(self, like: str | None) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        if like is not None:  # keep the source's permissions and times, as gzip does
            st = os.stat(like)
            os.chmod(self.tmp, st.st_mode & 0o7777)
            os.utime(self.tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(self.tmp, self.target)

    def discard(self) -> None:
        self.file.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


class _Counting:
    """A reader or writer that counts the bytes passing through it."""

    def __init__(self, stream) -> None:
        self.stream, self.total = stream, 0

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        self.total += len(data)
        return data

    def write(self, data: bytes) -> None:
        self.stream.write(data)
        self.total += len(data)


def run_file(path: str, opts: Options, target: str | None, work: Callable, reading_compressed: bool) -> tuple[int, int]:
    """Open input and output for one file, run `work(reader, writer, size)`, commit or clean up.

    target: a path, "-" for stdout, or None to write nothing (test). Returns (bytes in, bytes out).
    """
    stdin = path == "-"
    if stdin and reading_compressed and sys.stdin.isatty():
        raise Failure("refusing to read compressed data from a terminal")
    if target == "-" and not reading_compressed and sys.stdout.isatty():
        raise Failure("refusing to write compressed data to a terminal (use -o FILE or redirect)")
    reader, source = (sys.stdin.buffer, None) if stdin else open_input(path, slices=not reading_compressed)
    if source is not None:
        if opts.remove:
            reader.close()
            raise Failure("--rm does not apply to a slice of a file")
        size = source.size
    else:
        st = None if stdin else os.fstat(reader.fileno())
        size = st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None  # pipes: unknown
    src, out = _Counting(reader), None
    try:
        if target is None or target == "-":
            dst = _Counting(sys.stdout.buffer if target == "-" else _Discard())
            work(src, dst, size)
            dst.stream.flush()
            return src.total, dst.total
        out = AtomicOutput(target, opts.force)
        dst = _Counting(out.file)
        work(src, dst, size)
        out.commit(None if stdin or source is not None else path)
        out = None
    finally:
        if out is not None:
            out.discard()
        if not stdin:
            reader.close()
    if opts.remove and not stdin:
        os.unlink(path)
    return src.total, dst.total


def open_input(path: str, slices: bool = False):
    """(reader, None) for a file; with `slices`, (reader, Source) for FILE:START:END or a corpus split."""
    if os.path.isdir(path):
        raise Failure(f"{path} is a directory -- ignored")
    if slices and not os.path.exists(path):
        from dyncompress.training.corpus import parse_source

        source = parse_source(path)
        return source.open(), source
    try:
        return open(path, "rb"), None
    except FileNotFoundError:
        raise Failure(f"{path}: no such file") from None


class _Discard:
    def write(self, b: bytes) -> int:
        return len(b)

    def flush(self) -> None:
        pass


def summary_line(name: str, n_in: int, n_out: int, seconds: float, encoding: bool) -> str:
    original, compressed = (n_in, n_out) if encoding else (n_out, n_in)
    bpb = 8 * compressed / original if original else 0.0
    rate = original / max(seconds, 1e-9) / 1e3
    return f"{name}: {n_in:,} -> {n_out:,} bytes, {bpb:.3f} bits/byte, {seconds:.1f} s, {rate:.1f} kB/s"


def each_file(files: tuple[str, ...], opts: Options, one: Callable[[str], None]) -> None:
    """Run `one` on every file; report failures one line each; exit non-zero if any failed."""
    files = files or ("-",)
    if opts.output and len(files) > 1:
        raise click.UsageError("-o takes a single input file")
    failed = False
    for path in files:
        try:
            one(path)
        except (Failure, DyncompressError) as e:
            message = str(e) if str(e).startswith(path) else f"{shown_name(path)}: {e}"
            click.echo(f"dyncompress: {message}", err=True)
            failed = True
        except OSError as e:
            detail = e.strerror or str(e)
            where = e.filename or shown_name(path)
            click.echo(f"dyncompress: {where}: {detail}", err=True)
            failed = True
    if failed:
        sys.exit(EXIT_ERROR)


def shown_name(path: str) -> str:
    return "(stdin)" if path == "-" else path


def output_target(path: str, opts: Options, make_name: Callable[[str], str]) -> str:
    """Where one input goes: a path, or "-" for stdout."""
    if opts.stdout or path == "-" and not opts.output:
        return "-"
    return opts.output or make_name(path)


common = [
    click.option("-o", "--output", metavar="FILE", help="Write to FILE ('-' for stdout); one input only."),
    click.option("-c", "--stdout", "to_stdout", is_flag=True, help="Write to stdout; keep the input."),
    click.option("-f", "--force", is_flag=True, help="Overwrite existing output files."),
    click.option("-k", "--keep", is_flag=True, help="Keep the input file (the default)."),
    click.option("--rm", "remove", is_flag=True, help="Remove the input file after success."),
    click.option("-q", "--quiet", count=True, help="No progress bar."),
    click.option("-v", "--verbose", count=True, help="Print a summary per file."),
]


def with_common(f):
    for option in reversed(common):
        f = option(f)
    return f


def make_options(output, to_stdout, force, keep, remove, quiet, verbose) -> Options:
    if keep and remove:
        raise click.UsageError("-k and --rm contradict each other")
    if to_stdout and output not in (None, "-"):
        raise click.UsageError("-c and -o contradict each other")
    if output == "-":
        to_stdout, output = True, None
    if remove and to_stdout:
        raise click.UsageError("--rm cannot be used when writing to stdout")
    return Options(output, to_stdout, force, remove, max(0, 1 + verbose - quiet))
