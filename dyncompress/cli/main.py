"""Command line in the conventions of zstd / xz.

    dyncompress encode FILE        -> FILE.dc, source kept
    dyncompress decode FILE.dc     -> FILE
    dyncompress test FILE.dc       decode and verify, write nothing
    dyncompress info FILE.dc       what the header and frames say

`-` or no file means stdin -> stdout. Output goes to a temporary file renamed
into place only on success. Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import click

from dyncompress import __version__
from dyncompress.cli import measure as cli_measure
from dyncompress.cli.base import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXPERTS_HELP,
    ExpertsParam,
    Failure,
    Fatal,
    SizeParam,
    cluster_option,
    fast_knobs,
    frame_executor,
    knob,
    level_options,
    loading,
    parse_range,
    setting,
    torch_threads,
    workers_option,
)
from dyncompress.config.settings import (
    AUTO_MODEL,
    DEFAULT_LEVEL,
    DEFAULT_MODEL,
    FOREIGN_MODEL,
    MODEL_DEFAULTS,
    MODEL_LEVELS,
    RULES,
    AdaptSettings,
    Settings,
    TrainConfig,
    make_settings,
)
from dyncompress.errors import DyncompressError
from dyncompress.format.container import MAX_BLOCK_SIZE
from dyncompress.progress import ProgressLine

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


def _run(path: str, opts: Options, target: str | None, work: Callable, reading_compressed: bool) -> tuple[int, int]:
    """Open input and output for one file, run `work(reader, writer, size)`, commit or clean up.

    target: a path, "-" for stdout, or None to write nothing (test). Returns (bytes in, bytes out).
    """
    stdin = path == "-"
    if stdin and reading_compressed and sys.stdin.isatty():
        raise Failure("refusing to read compressed data from a terminal")
    if target == "-" and not reading_compressed and sys.stdout.isatty():
        raise Failure("refusing to write compressed data to a terminal (use -o FILE or redirect)")
    reader, source = (sys.stdin.buffer, None) if stdin else _open_input(path, slices=not reading_compressed)
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


def _open_input(path: str, slices: bool = False):
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


def _summary(name: str, n_in: int, n_out: int, seconds: float, encoding: bool) -> str:
    original, compressed = (n_in, n_out) if encoding else (n_out, n_in)
    bpb = 8 * compressed / original if original else 0.0
    rate = original / max(seconds, 1e-9) / 1e3
    return f"{name}: {n_in:,} -> {n_out:,} bytes, {bpb:.3f} bits/byte, {seconds:.1f} s, {rate:.1f} kB/s"


def describe(name: str, reader) -> str:
    """`info`: the header's record and a walk over the frames (checksums checked, nothing decoded)."""
    from dyncompress.format.container import Block, FrameReader, Header, Index, read_frames

    stream = FrameReader()
    meta, blocks, original, frames = {}, 0, 0, ()
    for frame in read_frames(reader.read, CHUNK, stream):
        if isinstance(frame, Header):
            meta = frame.meta
        elif isinstance(frame, Block):
            blocks += 1
            original += frame.orig_len
        elif isinstance(frame, Index):
            frames = frame.frames
    compressed = stream.offset
    settings = dict(meta.get("settings", {}))
    nested = {k: settings.pop(k) for k in list(settings) if isinstance(settings[k], dict)}  # parts' own configs
    network = ("hidden", "seed")
    lines = [
        f"{name}:",
        f"  original size   {original:,} bytes in {blocks} block(s)",
    ]
    bpb = 8 * compressed / original if original else 0.0
    lines.append(f"  compressed size {compressed:,} bytes ({bpb:.3f} bits/byte)")
    no_network = settings.get("hidden") == 0  # --fast: the statistics alone
    lines += [
        f"  model           {'none' if no_network else _model_line(meta.get('model'))}",
        "  network         "
        + (
            "none (--fast: the byte statistics alone)"
            if no_network
            else ", ".join(f"{k}={settings[k]}" for k in network if k in settings)
        ),
        "  coding          " + ", ".join(f"{k}={v}" for k, v in settings.items() if k not in network),
        *(
            f"  {_PARTS.get(part, part):<15} "
            + ("none (no network)" if no_network and part == "adapt" else _part_line(part, c))
            for part, c in nested.items()
        ),
        *_tables_line(meta.get("settings", {})),
        *_frames_lines(frames, settings.get("frame_size")),
        f"  fingerprint     {meta.get('fingerprint')}",
        "  encoded with    " + ", ".join(f"{k} {v}" for k, v in meta.get("platform", {}).items()),
    ]
    return "\n".join(lines)


_PARTS = {"adapt": "adaptation", "mix": "experts"}  # how `info` titles a nested config (default: its key)


def _part_line(part: str, config: dict) -> str:
    if part == "mix" and not config.get("experts"):
        return "none (the network alone)"
    if part == "mix":  # the mixer's start: a prior's name, or none (the hand-set weights)
        config = {**config, "prior": config.get("prior") or "none"}
    return ", ".join(f"{k}={v}" for k, v in config.items())


MAX_FRAME_LINES = 32


def _frames_lines(frames: tuple[tuple[int, int], ...], frame_size) -> list[str]:
    """The frame index: how many, and where each starts (each decodes alone: decode --range)."""
    if not frames:
        return []
    size = f"at most {frame_size:,} bytes each" if frame_size else "one frame: the whole stream"
    lines = [f"  frames          {len(frames)} ({size})"]
    if len(frames) > 1:
        start = 0
        for i, (orig, packed) in enumerate(frames[:MAX_FRAME_LINES]):
            bpb = 8 * packed / orig
            lines.append(f"    {i + 1:>5}  bytes {start:,} ... {start + orig:,} -> {packed:,} ({bpb:.3f} bits/byte)")
            start += orig
        if len(frames) > MAX_FRAME_LINES:
            lines.append(f"    ... and {len(frames) - MAX_FRAME_LINES} more")
    return lines


def _tables_line(settings: dict) -> list[str]:
    """The memory the experts' tables need to decode (none for the network alone)."""
    from dyncompress.config.settings import MixSettings
    from dyncompress.experts.mix import table_bytes

    try:
        size = table_bytes(MixSettings(**settings["mix"]), int(settings["lanes"]))
    except (KeyError, TypeError, ValueError):
        return []
    return [f"  tables          {size / 2**20:,.0f} MiB at most"] if size else []


def _start_line(name: str, model, probe: float) -> str:
    """What `encode -v` says of the start the probe chose (`auto`)."""
    from dyncompress.auto import ONLINE_ABOVE, PROBE_BYTES

    what = f"model {model.name}" if model else "online mode"
    return (
        f"{name}: {what}: the model codes the first {PROBE_BYTES // 1024} kB at {probe:.2f} bits/byte "
        f"(online above {ONLINE_ABOVE})"
    )


def _model_line(model) -> str:
    if not model:
        return "online (seeded random start)"
    if isinstance(model, dict):
        return f"{model.get('name')} (sha256 {str(model.get('sha256'))[:16]})"
    return str(model)


# --- the commands -------------------------------------------------------------------


def _each(files: tuple[str, ...], opts: Options, one: Callable[[str], None]) -> None:
    """Run `one` on every file; report failures one line each; exit non-zero if any failed."""
    files = files or ("-",)
    if opts.output and len(files) > 1:
        raise click.UsageError("-o takes a single input file")
    failed = False
    for path in files:
        try:
            one(path)
        except (Failure, DyncompressError) as e:
            message = str(e) if str(e).startswith(path) else f"{_name(path)}: {e}"
            click.echo(f"dyncompress: {message}", err=True)
            failed = True
        except OSError as e:
            detail = e.strerror or str(e)
            where = e.filename or _name(path)
            click.echo(f"dyncompress: {where}: {detail}", err=True)
            failed = True
    if failed:
        sys.exit(EXIT_ERROR)


def _name(path: str) -> str:
    return "(stdin)" if path == "-" else path


def _output_target(path: str, opts: Options, make_name: Callable[[str], str]) -> str:
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


def _options(output, to_stdout, force, keep, remove, quiet, verbose) -> Options:
    if keep and remove:
        raise click.UsageError("-k and --rm contradict each other")
    if to_stdout and output not in (None, "-"):
        raise click.UsageError("-c and -o contradict each other")
    if output == "-":
        to_stdout, output = True, None
    if remove and to_stdout:
        raise click.UsageError("--rm cannot be used when writing to stdout")
    return Options(output, to_stdout, force, remove, max(0, 1 + verbose - quiet))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="dyncompress")
def main() -> None:
    """Lossless compression with a byte-level mLSTM that learns the text while it codes it.

    Every segment of coded bytes, encoder and decoder take the same gradient step,
    so the model adapts to the file. The coding computes in exact integer-valued
    arithmetic: a file made on one machine decodes on any other (another CPU, a
    GPU, any thread count). A self-test checks that up front, and every block is
    checksummed.
    """


# --fast's speed, the same words in --help and README.md (test_cli checks): BENCHMARKS.md, bench/speed.py
FAST_SPEED = "about 5 times the default level's speed (enwik6 from the command line on 2 cores: 95-110 kB/s)"
D = Settings()
TRAIN = TrainConfig()
MODEL_HELP = (
    "The model file to decode with, when the one the file names is not installed here "
    "(its sha256 must match the one recorded)."
)


@main.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@with_common
@level_options
@knob("--hidden", click.IntRange(1), f"mLSTM hidden units of online mode [-6: {D.hidden}; a model has its own].")
@knob(
    "--lanes",
    click.IntRange(1),
    "Parallel streams per block, coded as one batch (more: faster, larger output) "
    f"[-6: {MODEL_LEVELS[DEFAULT_LEVEL]['lanes']}, online {D.lanes}; fewer for a small input or a frame].",
)
@knob(
    "--segment-len",
    click.IntRange(1),
    "Bytes per lane between two gradient steps "
    f"[-6: {MODEL_LEVELS[DEFAULT_LEVEL]['segment_len']}, online {D.segment_len}].",
)
@knob(
    "--block-size",
    click.IntRange(1, MAX_BLOCK_SIZE),
    f"Bytes per block (bounds memory; adaptation carries across blocks) [{D.block_size}].",
)
@knob(
    "--frame-size",
    SizeParam(),
    f"Bytes per independent frame: each starts from the model afresh, so frames code in parallel (-j) and "
    f"decode alone (decode --range); 0: one frame [{D.frame_size // 2**20}MiB].",
)
@click.option(
    "-m",
    "--model",
    metavar="NAME|PATH",
    default=None,
    help=f"Pretrained model to start from: an installed name (see `dyncompress models`) or a "
    f".dcm file [{DEFAULT_MODEL}; {FOREIGN_MODEL} for other European languages; online mode where "
    "neither fits the input].",
)
@click.option(
    "--online",
    is_flag=True,
    help="No pretrained model: a seeded random start that learns from "
    "the input alone (the network size then follows the level or --hidden).",
)
@click.option(
    "--fast",
    is_flag=True,
    help=f"No network: the byte statistics and their mixer alone, {FAST_SPEED}, smaller than xz -9e and PPMd on "
    "text. A level of its own.",
)
@knob(
    "--rule",
    click.Choice(RULES),
    "Update rule. static: none (the model as trained). sgd: plain gradient steps. rms: steps "
    "divided by the RMS of the gradients (from the model's calibration, else gathered on the "
    "stream). rms-decay: rms plus decay toward the pretrained weights "
    "[with a model: rms-decay; online: rms].",
)
@knob("--lr", click.FloatRange(0), "Learning rate [the model's, or the level's when online].")
@knob("--decay", click.FloatRange(0), f"Decay toward the starting weights, rms-decay's lambda [{D.adapt.decay}].")
@knob("--beta1", click.FloatRange(0, 1, max_open=True), f"Momentum of the rms rule, 0 = RMSprop [{D.adapt.beta1}].")
@knob("--beta2", click.FloatRange(0, 1, max_open=True), f"Decay of the mean squared gradients [{D.adapt.beta2}].")
@knob("--eps", click.FloatRange(0, min_open=True), f"Added to the RMS [{D.adapt.eps}].")
@knob("--clip", click.FloatRange(0), f"Max gradient norm per step, 0 = none [{D.adapt.clip}].")
@knob(
    "--sparse",
    click.IntRange(0, 1024),
    "Sparse dynamic evaluation: freeze the network and adapt only a K x K matrix M on the first K hidden "
    "units (h' = h + M h, zero at the start), with statistics from the stream; 0 = adapt the whole network "
    "[0].",
)
@knob(
    "--lora",
    click.IntRange(0, 64),
    "LoRA: freeze the network and adapt rank-R factors A B added to W_mh, W_m and W_out (B zero at the "
    "start), with statistics from the stream; 0 = adapt the whole network [0].",
)
@knob("--lora-on", click.STRING, "The matrices LoRA adapts, comma separated: w_mh, w_m, w_out [all three].")
@knob(
    "--tlm-bits",
    click.FloatRange(0, 8),
    "TLM weighting: scale each segment's update by lambda * PPL / P0 when it cost more than log2 P0 = BITS "
    "bits per byte, and skip its backward pass when not (faster); 0 = off [0].",
)
@knob(
    "--tlm-relative",
    click.FloatRange(0, 4),
    "TLM against the stream's own cost: the threshold is R times the running mean cost per byte of the "
    "segments before (R = 1 skips about half of them); instead of --tlm-bits; 0 = off.",
)
@knob("--tlm-lambda", click.FloatRange(0, 64, min_open=True), "TLM's lambda, with a TLM threshold [1].")
@knob("--seed", click.IntRange(0, 2**63 - 1), f"Seed of the starting weights [{D.seed}].")
@knob("--experts", ExpertsParam(), EXPERTS_HELP)
@knob(
    "-T",
    click.IntRange(1, 256),
    "CPU threads while coding, at most [the usable cores, at most 4]: the coding measures as it goes whether "
    "they pay, and runs on one where they do not (few lanes, a busy machine). Any number gives the same bytes.",
    "--threads",
)
@knob(
    "--device",
    click.Choice(["cpu", "cuda"]),
    "Where the model runs [cuda when available, else cpu]. Any device decodes the file.",
)
@workers_option
@cluster_option
def encode(
    files, output, to_stdout, force, keep, remove, quiet, verbose, level, model, online, fast, workers, cluster, **knobs
):
    """Compress FILES (each to FILE.dc; '-' or none: stdin to stdout).

    By default the shipped pretrained model starts the coding and adapts to
    each file, unless the input is unlike anything it learned (the model codes
    its first 4 kB at more than 6.25 bits per byte: Chinese, Japanese, images,
    object code). Such an input of 16 kB or more is coded in online mode with
    a network of 128 units, which codes it smaller, at levels -3 ... -9; text
    in other European languages (accented letters or Cyrillic) starts from the
    model fine-tuned on them, multi-h256 (-v says which start was chosen;
    --model or --online decides it).

    A level (-1 ... -9) picks the lanes and what the network adapts; any
    setting given explicitly overrides the level's:

    \b
    -1, -2   the model as trained, no adaptation (32, 16 lanes): fastest
    -3 ... -9  rank-32 LoRA factors on the output matrix adapt after every
             segment, the network as trained: 16 lanes (segments of 64,
             then 32 bytes), 8 lanes (64, then 32: -6, the default),
             then 4, 2 and 1 lane: smallest, slowest
    --rule R adapts the whole network instead (on some texts, such as old
    English verse, that codes smaller, at about half the speed).

    A small input gets fewer lanes (one per 40 kB), and the frames of a longer
    input three quarters of the level's. With --online the level picks the
    network's size instead. --fast codes without a network: the
    byte statistics and their mixer alone, about 5 times faster.
    """
    opts = _options(output, to_stdout, force, keep, remove, quiet, verbose)
    knobs = {k: v for k, v in knobs.items() if v is not None}
    if online and model:
        raise click.UsageError("--online and --model contradict each other")
    if fast:
        fast_knobs(level, model, online, knobs)
        online = True  # no model
    elif not online and "hidden" in knobs and not model:
        raise click.UsageError("--hidden sets the network of online mode; add --online")
    _compile_ahead(opts, ["fast" if fast else "online" if online else "model"])
    with loading():
        from dyncompress.api import Compressor, resolve_model

    auto = not online and not model  # the shipped model, or online mode where it does not fit (`auto`)
    try:
        model = None if online else resolve_model(model or DEFAULT_MODEL)
        make_settings(level=level, model=model, **knobs)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except DyncompressError as e:
        raise Fatal(str(e) + ("" if online or model else "; encode --online works without a model")) from None

    start = AUTO_MODEL if auto else model

    def one(path: str, workers, ahead) -> None:
        ready = _take(ahead, path)  # coded in the pool already (many files), else None
        if path != "-" and path.endswith(SUFFIX) and not opts.force:
            raise Failure(f"already has {SUFFIX} suffix -- ignored (use -f to compress anyway)")
        target = _output_target(path, opts, _encoded_name)
        started, took = time.monotonic(), []

        def work(reader, writer, size):
            first = _use_ready(ready, reader, writer, took)
            if first is None:
                return
            if first:
                size = None  # changed since: code what it holds now
            progress = ProgressLine(_name(path), size, opts.verbosity >= 1)
            comp = None
            try:
                comp = Compressor(level=level, model=start, size_hint=size, progress=progress, workers=workers, **knobs)
                while chunk := first or reader.read(CHUNK):
                    first = b""
                    writer.write(comp.compress(chunk))
                writer.write(comp.flush())
                if comp.probe is not None:
                    opts.say(_start_line(_name(path), comp.model, comp.probe))
            finally:
                if comp is not None:
                    comp.close()
                progress.close()

        n_in, n_out = _run(path, opts, target, work, reading_compressed=False)
        opts.say(_summary(_name(path), n_in, n_out, took[0] if took else time.monotonic() - started, True))

    def plan():
        from dyncompress.cli.batch import encode_plan

        return encode_plan(level, start, knobs, lambda p: p.endswith(SUFFIX) and not opts.force)

    _each_with_workers(files, opts, one, cluster, workers, knobs.get("device"), plan)


def _each_with_workers(files, opts: Options, one: Callable, cluster, workers, device, plan: Callable | None) -> None:
    """`_each` with the frame workers (-j) or the cluster's executor; with several files, a shared
    pool that codes ahead every file `plan()` accepts (`batch.Ahead`). `one(path, workers, ahead)`."""
    workers, client = frame_executor(cluster, workers, device)
    ahead = None
    try:
        with loading():
            from dyncompress.cli.batch import Ahead, pool_workers
        if plan is not None and (pool := pool_workers(workers, files)):
            ahead = Ahead(files, pool, plan())
        _each(files, opts, lambda path: one(path, workers, ahead))
    except BaseException:
        if ahead is not None:
            ahead.kill()
        raise
    else:
        if ahead is not None:
            ahead.close()
    finally:
        if client is not None:
            client.close()


def _use_ready(ready, reader, writer, took: list) -> bytes | None:
    """A file's result from the pool, written if the input still holds the bytes it was made from
    (then None); else the input's bytes read so far (b"": none), for the ordinary path."""
    if ready is None:
        return b""
    result, seconds, source = ready
    first = reader.read(len(source) + 1)
    if first != source:
        return first
    writer.write(result)
    took.append(seconds)
    return None


def _take(ahead, path: str):
    """The next file's result from the pool (`batch.Ahead`), if it was coded there. A worker that
    died ends the run (the pool is broken); a job that failed is that file's failure."""
    if ahead is None:
        return None
    from dyncompress.coding.parallel import WorkerDied

    try:
        return ahead.take(path)
    except WorkerDied as e:
        raise Fatal(str(e)) from None


def _encoded_name(path: str) -> str:
    """FILE.dc beside FILE; for a slice, its range in the name (f.100-200.dc, ./enwik8.test.dc)."""
    if os.path.exists(path):
        return path + SUFFIX
    from dyncompress.training.corpus import parse_source

    return parse_source(path).stem + SUFFIX


def _compile_ahead(opts: Options, kinds) -> None:
    """The kernels for these ways of coding (`warm.KINDS`) compiled in a child process on the first
    run after an install, before this process loads torch: its peak memory stays that of a run with
    the kernels cached."""
    from dyncompress.coding.warm import compile_ahead

    for kind in kinds:
        compile_ahead(kind, notice=opts.verbosity >= 1 and sys.stderr.isatty())


def _decode_files(
    files,
    opts: Options,
    testing: bool,
    model: str | None,
    device=None,
    threads=None,
    workers=1,
    span=None,
    cluster=None,
) -> None:
    from dyncompress.coding.warm import file_kind

    _compile_ahead(opts, sorted({file_kind(p) for p in files if os.path.isfile(p)} - {None}))
    if model is not None:
        with loading():
            from dyncompress.api import resolve_model
        try:
            model = resolve_model(model)
        except DyncompressError as e:
            raise Fatal(str(e)) from None

    def strip(p: str) -> str:
        if not p.endswith(SUFFIX) or os.path.basename(p) == SUFFIX:
            raise Failure(f"unknown suffix (expected {SUFFIX}) -- ignored; use -o NAME or -c")
        return p[: -len(SUFFIX)]

    def one(path: str, workers, ahead) -> None:
        ready = _take(ahead, path)  # decoded in the pool already (many small files), else None
        target = None if testing else _output_target(path, opts, strip)
        started, took = time.monotonic(), []

        def work(reader, writer, size):
            with loading():
                from dyncompress.api import iter_decompress
            first = _use_ready(ready, reader, writer, took)
            if first is None:
                return
            if first:
                reader = _Prefixed(first, reader)  # changed since: decode what it holds now
            progress = ProgressLine(_name(path), None, opts.verbosity >= 1)
            try:
                if span is not None:
                    writer.write(_read_range(reader, span, model, device, threads, workers, progress))
                    return
                for piece in iter_decompress(reader.read, progress, CHUNK, model, device, threads, workers):
                    writer.write(piece)
            finally:
                progress.close()

        n_in, n_out = _run(path, opts, target, work, reading_compressed=True)
        if testing:
            opts.say(f"{_name(path)}: OK", level=2)
        else:
            opts.say(_summary(_name(path), n_in, n_out, took[0] if took else time.monotonic() - started, False))

    def plan():
        from dyncompress.cli.batch import decode_plan

        return decode_plan(model, device, lambda p: not p.endswith(SUFFIX) or os.path.basename(p) == SUFFIX)

    _each_with_workers(files, opts, one, cluster, workers, device, plan if span is None else None)


class _Prefixed:
    """A reader that gives `head` first, then the rest of `reader`."""

    def __init__(self, head: bytes, reader) -> None:
        self._head, self._reader = head, reader

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._reader.read(n)
        if n < 0:
            out, self._head = self._head + self._reader.read(), b""
            return out
        out, self._head = self._head[:n], self._head[n:]
        return out


@main.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@with_common
@click.option("-t", "--test", "testing", is_flag=True, help="Decode and verify; write nothing.")
@click.option("-m", "--model", metavar="NAME|PATH", help=MODEL_HELP)
@click.option(
    "-T",
    "--threads",
    type=click.IntRange(1, 256),
    help="CPU threads, at most [the usable cores, at most 4]: used where they pay (measured as it goes). "
    "Any number gives the same bytes.",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), help="Where to decode [cuda when available, else cpu].")
@workers_option
@cluster_option
@click.option(
    "--range",
    "span",
    metavar="START:END",
    help="Only bytes START (counted from 0) up to END (not included) of the original, decoding just the frames "
    "that hold them; to stdout unless -o. 1M:1.5M, 1000: (to the end).",
)
def decode(
    files,
    output,
    to_stdout,
    force,
    keep,
    remove,
    quiet,
    verbose,
    testing,
    model,
    threads,
    device,
    workers,
    cluster,
    span,
):
    """Decompress FILES.dc (each to FILE; '-' or none: stdin to stdout).

    A file decodes on any machine: other CPU, GPU, thread count or torch version.
    """
    opts = _options(output, to_stdout, force, keep, remove, quiet, verbose)
    if testing:
        opts.stdout, opts.remove = False, False
    if span is not None:
        span = parse_range(span)
        if testing or remove or len(files) != 1 or files[0] == "-":
            raise click.UsageError("--range takes one .dc file (not stdin: it seeks), and no -t or --rm")
        opts.stdout = opts.stdout or not opts.output
    _decode_files(files, opts, testing, model, device, threads, workers, span, cluster)


def _read_range(reader, span, model, device, threads, workers, progress) -> bytes:
    with loading():
        from dyncompress.api import read_range
    f = reader.stream  # the file under the byte counter
    if not f.seekable():
        raise Failure("--range needs a file it can seek in, not a pipe")
    return read_range(f, *span, model=model, device=device, threads=threads, workers=workers, progress=progress)


@main.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@click.option("-q", "--quiet", count=True, help="Print nothing; the exit code tells.")
@click.option("-v", "--verbose", count=True, help="Print FILE: OK per good file (the default).")
@click.option("-m", "--model", metavar="NAME|PATH", help=MODEL_HELP)
@workers_option
def test(files, quiet, verbose, model, workers):
    """Decode FILES and verify them against their checksums, writing nothing."""
    opts = _options(None, False, False, False, False, quiet, verbose + 1)
    _decode_files(files, opts, True, model, workers=workers)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
def info(files):
    """Print what the header and frames of FILES say (no decoding)."""
    opts = Options(None, False, False, False, 1)

    def one(path: str) -> None:
        reader = sys.stdin.buffer if path == "-" else _open_input(path)[0]
        try:
            click.echo(describe(_name(path), reader))
        finally:
            if path != "-":
                reader.close()

    _each(files, opts, one)


def compute_options(f):
    """Where `train` and `calibrate` compute (neither needs the codec's recorded thread count)."""
    f = click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)(f)
    return click.option(
        "-T", "--threads", type=click.IntRange(1, 256), default=None, help="CPU threads [torch's default]."
    )(f)


@main.command()
@click.argument("files", nargs=-1, required=True, metavar="SOURCE...")
@click.option("-o", "--output", metavar="MODEL.dcm", required=True, help="Model file to write (and checkpoint into).")
@click.option("--name", help="Model name recorded in the file [the output's base name].")
@setting("--hidden", click.IntRange(1), TRAIN.hidden, "mLSTM hidden units.")
@setting("--batch", click.IntRange(1), TRAIN.batch, "Streams per batch.")
@setting("--bptt", click.IntRange(1), TRAIN.bptt, "Bytes per truncated-BPTT step.")
@setting("--steps", click.IntRange(1), TRAIN.steps, "Optimizer steps.")
@setting("--minutes", click.FloatRange(0), TRAIN.minutes, "Time budget, 0 = none (the schedule then runs on time).")
@setting("--lr", click.FloatRange(0, min_open=True), TRAIN.lr, "Peak Adam rate (2e-3 diverged at batch 128).")
@setting("--min-lr", click.FloatRange(0), TRAIN.min_lr, "Final rate of the cosine.")
@setting("--warmup", click.IntRange(0), TRAIN.warmup, "Linear warm-up steps.")
@setting("--clip", click.FloatRange(0), TRAIN.clip, "Max gradient norm, 0 = none.")
@setting("--valid-bytes", click.IntRange(1), TRAIN.valid_bytes, "Held out: each file's tail, in proportion to size.")
@setting("--eval-every", click.IntRange(1), TRAIN.eval_every, "Validate and write a checkpoint every this many steps.")
@setting("--seed", click.IntRange(0), TRAIN.seed, "Seed of the initial weights.")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint at --output.")
@click.option("--init", metavar="MODEL", help="Start from this model's weights (a name or a .dcm file): fine-tune it.")
@compute_options
@click.option("-q", "--quiet", is_flag=True, help="Print only validation lines.")
def train(files, output, name, resume, init, threads, device, quiet, **config):
    """Train a model on text (each source's tail is held out for validation).

    SOURCE: FILE, FILE:START:END (bytes; 2.5M = 2,500,000), or a fetched corpus's split such as
    enwik8:train.
    """
    with loading():
        from dyncompress.config.model import find as find_model
        from dyncompress.training.train import Trainer

    torch_threads(threads)
    name = name or os.path.basename(output).removesuffix(".dcm")
    command = "dyncompress train " + " ".join(sys.argv[2:])
    if os.path.exists(output) and not resume:
        raise Fatal(f"{output} already exists (use --resume to continue it, or another -o)")
    try:
        start = find_model(init) if init else None
        trainer = Trainer(TrainConfig(**config), list(files), device, start)
        if resume:
            trainer.resume(output)
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    tty = sys.stderr.isatty() and not quiet
    click.echo(
        f"training {name}: {trainer.shape.num_params:,} parameters, {len(trainer.train_data):,} training bytes, "
        f"{len(trainer.valid_data):,} held out",
        err=True,
    )

    def report(line: str, milestone: bool) -> None:
        if milestone:
            click.echo(("\r\x1b[K" if tty else "") + line, err=True)
        elif tty:
            sys.stderr.write("\r" + line + "\x1b[K")
            sys.stderr.flush()

    model = trainer.run(output, name, command, report)
    click.echo(f"wrote {output}: {model.summary}", err=True)


@main.command()
@click.argument("model_path", metavar="MODEL.dcm", type=click.Path(exists=True, dir_okay=False))
@click.argument("files", nargs=-1, required=True, metavar="SOURCE...")
@click.option("-o", "--output", metavar="FILE", help="Write the calibrated model here [update MODEL in place].")
@setting(
    "--bytes", click.IntRange(1), 1_000_000, "Text to calibrate on, an equal share from each file's start.", "budget"
)
@setting(
    "--lanes",
    click.IntRange(1),
    MODEL_DEFAULTS["lanes"],
    "Lanes, as the codec will run (stored as the model's default).",
)
@setting(
    "--segment-len", click.IntRange(1), MODEL_DEFAULTS["segment_len"], "Bytes per lane per gradient, n (stored too)."
)
@setting("--clip", click.FloatRange(0), AdaptSettings().clip, "Max gradient norm, as the codec clips.")
@click.option("--lr", type=click.FloatRange(0), help="Store as the model's default learning rate.")
@click.option("--decay", type=click.FloatRange(0), help="Store as the model's default rms-decay lambda.")
@click.option("--eps", type=click.FloatRange(0, min_open=True), help="Store as the model's default eps.")
@compute_options
def calibrate(model_path, files, output, budget, lanes, segment_len, clip, lr, decay, eps, threads, device):
    """Collect MS_g (mean squared gradients per segment) of MODEL over text and store them in it.

    SOURCE: FILE, FILE:START:END, or a fetched corpus's split (an equal share from the start of each).

    The rms and rms-decay rules then use RMS_g = sqrt(MS_g) from the training text,
    as in Krause et al. (2018), instead of statistics gathered on the stream.
    """
    from dyncompress.training.corpus import parse_source

    with loading():
        from dyncompress.config.model import load, save
        from dyncompress.training.train import calibrate as collect

    torch_threads(threads)
    try:
        model = load(model_path)
        share = budget // len(files)
        text = b""
        for spec in files:
            with parse_source(spec).open() as f:
                text += f.read(share)
        progress = ProgressLine("calibrate", len(text), True)
        started = time.monotonic()
        try:
            model.ms = collect(model, text, lanes, segment_len, clip, device, progress)
        finally:
            progress.close()
        defaults = dict(model.info.get("defaults", {}), lanes=lanes, segment_len=segment_len, clip=clip)
        defaults.update({k: v for k, v in (("lr", lr), ("decay", decay), ("eps", eps)) if v is not None})
        model.info["defaults"] = defaults
        model.info["calibration"] = {
            "files": [os.path.basename(p) for p in files],  # as given: a slice keeps its range
            "bytes": len(text),
            "lanes": lanes,
            "segment_len": segment_len,
            "seconds": round(time.monotonic() - started, 1),
        }
        sha = save(model, output or model_path)
    except OSError as e:
        raise Fatal(f"{e.filename or model_path}: {e.strerror or e}") from None
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    rms = model.ms.sqrt()
    click.echo(
        f"wrote {output or model_path} (sha256 {sha[:16]}): MS_g over {len(text):,} bytes; "
        f"RMS_g mean {float(rms.mean()):.3g}, max {float(rms.max()):.3g}",
        err=True,
    )


@main.command()
@click.option("-v", "--verbose", is_flag=True, help="Also print where each model is and its training record.")
def models(verbose):
    """List the installed models (and those in $DYNCOMPRESS_MODELS) with their card's summary."""
    with loading():
        from dyncompress.config.model import card_summary, installed, load

    paths = installed()
    if not paths:
        click.echo("no models installed (encode --online works without one)")
        return
    roles = {DEFAULT_MODEL: " (default)", FOREIGN_MODEL: " (the default for other European languages)"}
    for path in paths:
        try:
            m = load(path)
        except DyncompressError as e:
            click.echo(f"{os.path.basename(path)}: unreadable ({e})")
            continue
        mark = roles.get(m.name, "")
        calibrated = "calibrated" if m.ms is not None else "not calibrated"
        click.echo(
            f"{m.name}{mark}: mLSTM hidden {m.shape.hidden}, {m.shape.num_params:,} parameters, "
            f"{os.path.getsize(path) / 1e6:.1f} MB, {calibrated}, sha256 {m.sha256[:16]}"
        )
        summary = card_summary(path) or m.summary
        if summary:
            click.echo(f"    {summary}")
        if verbose:
            click.echo(f"    file: {path}")
            training = m.info.get("training", {})
            if training:
                click.echo(f"    trained: {training.get('command', '')}")


for command in (cli_measure.corpus, cli_measure.eval_, cli_measure.tune, cli_measure.bench):
    main.add_command(command)


def run() -> None:
    """Entry point: one-line errors, exit 130 on Ctrl-C, quiet on a closed pipe."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("dyncompress: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("dyncompress: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(EXIT_ERROR)
