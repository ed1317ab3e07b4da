"""Command line in the conventions of zstd / xz.

    dyncompress encode FILE        -> FILE.dc, source kept
    dyncompress decode FILE.dc     -> FILE
    dyncompress test FILE.dc       decode and verify, write nothing
    dyncompress info FILE.dc       what the header and frames say

`-` or no file means stdin -> stdout. Output goes to a temporary file renamed
into place only on success. Errors are one line on stderr and a non-zero exit.

This module holds the group and the file commands (encode, decode, test, info, models); the
shared file handling is `files`, what `info` prints `describe`, the model commands `train`, the
measuring commands `measure`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import click

from dyncompress import __version__
from dyncompress.cli import measure as cli_measure
from dyncompress.cli import train as cli_train
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
    workers_option,
)
from dyncompress.cli.describe import describe, start_line
from dyncompress.cli.files import (
    CHUNK,
    SUFFIX,
    Options,
    each_file,
    make_options,
    open_input,
    output_target,
    run_file,
    shown_name,
    summary_line,
    with_common,
)
from dyncompress.config.levels import (
    AUTO_MODEL,
    CJK_MODEL,
    DEFAULT_LEVEL,
    DEFAULT_MODEL,
    FOREIGN_LARGE,
    FOREIGN_MODEL,
    LARGE_LEVELS,
    LARGE_MIN,
    LARGE_MODEL,
    MODEL_LEVELS,
    make_settings,
)
from dyncompress.config.settings import ENGINES, RULES, Settings
from dyncompress.errors import DyncompressError
from dyncompress.format.container import MAX_BLOCK_SIZE
from dyncompress.progress import ProgressLine


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


# --fast's speed, the same words in --help and README.md (test_cli checks): bench/report.py, bench/speed.py
FAST_SPEED = "about 15 times the default level's speed (enwik6 from the command line: 239 kB/s on one core)"
D = Settings()
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
    f".dcm file [{LARGE_MODEL} ({DEFAULT_MODEL} below -{min(LARGE_LEVELS)} or {LARGE_MIN // 1024} kB); "
    f"{FOREIGN_LARGE} ({FOREIGN_MODEL} below -{min(LARGE_LEVELS)}) for other European "
    f"languages, {CJK_MODEL} for the Chinese and Japanese it knows; online mode where none fits the input].",
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
    help=f"No network: the bitwise context-mixing engine alone (--engine bytes: the byte statistics), {FAST_SPEED}, "
    "smaller than xz -9e and PPMd on "
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
    "--engine",
    click.Choice(ENGINES),
    "With --fast, what codes: bits, the bitwise context-mixing engine (a bit at a time, one thread per "
    "frame); bytes, the byte statistics and their mixer (--fast's engine of format 5: slower, larger) "
    "[bits].",
)
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

    By default a shipped pretrained model starts the coding and adapts to each
    file: enwiki-h512 for English (at -1 ... -5, and for inputs under 8 kB,
    enwiki-h256: half the units, faster, larger files), multi-h512 for other
    European languages (accented letters or Cyrillic; multi-h256 at -3 ... -5),
    cjk-h128 for the Chinese and Japanese manuals and documentation it knows.
    An input of 16 kB or more unlike what the model
    learned (it codes the first 4 kB at more than 6.25 bits per byte: images,
    object code; Chinese and Japanese above 2.5 with cjk-h128, such as novels)
    is coded in online mode with a network of 128 units, which codes it
    smaller, at levels -3 ... -9 (-v says which start was chosen; --model or
    --online decides it).

    A level (-1 ... -9) picks the lanes and what the network adapts; any
    setting given explicitly overrides the level's:

    \b
    -1, -2   the model as trained, no adaptation (32, 16 lanes): fastest
    -3 ... -9  rank-32 LoRA factors on the output matrix adapt after every
             segment, the network as trained: -3 ... -5 the smaller model
             in 16 lanes (segments of 64, then 32 bytes), then 8 lanes
             (64); -6, the default, the larger model (English) in 8 lanes
             of segments of 32; -7 ... -9 it in 4, 2 and 1 lane: smallest,
             slowest
    --rule R adapts the whole network instead (on some texts, such as old
    English verse, that codes smaller, at a fifth of the speed with the
    larger model, half with the smaller).

    A small input gets fewer lanes (one per 40 kB), and the frames of a longer
    input three quarters of the level's. With --online the level picks the
    network's size instead. --fast codes without a network: the
    bitwise context-mixing engine alone, about 15 times faster.
    """
    opts = make_options(output, to_stdout, force, keep, remove, quiet, verbose)
    knobs = {k: v for k, v in knobs.items() if v is not None}
    if online and model:
        raise click.UsageError("--online and --model contradict each other")
    if fast:
        fast_knobs(level, model, online, knobs)
        online = True  # no model
    elif not online and "hidden" in knobs and not model:
        raise click.UsageError("--hidden sets the network of online mode; add --online")
    if "engine" in knobs and not fast:
        raise click.UsageError("--engine chooses --fast's engine (the network's levels code bytes): add --fast")
    bits = fast and knobs.get("engine", "bits") == "bits"
    _compile_ahead(
        opts, ["bits" if bits else "fast" if fast else "online" if online else "model"], knobs.get("threads")
    )
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
        target = output_target(path, opts, _encoded_name)
        started, took = time.monotonic(), []

        def work(reader, writer, size):
            first = _use_ready(ready, reader, writer, took)
            if first is None:
                return
            if first:
                size = None  # changed since: code what it holds now
            progress = ProgressLine(shown_name(path), size, opts.verbosity >= 1)
            comp = None
            try:
                comp = Compressor(level=level, model=start, size_hint=size, progress=progress, workers=workers, **knobs)
                while chunk := first or reader.read(CHUNK):
                    first = b""
                    writer.write(comp.compress(chunk))
                writer.write(comp.flush())
                if comp.probe is not None:
                    opts.say(start_line(shown_name(path), comp.model, comp.probe))
            finally:
                if comp is not None:
                    comp.close()
                progress.close()

        n_in, n_out = run_file(path, opts, target, work, reading_compressed=False)
        opts.say(summary_line(shown_name(path), n_in, n_out, took[0] if took else time.monotonic() - started, True))

    def plan():
        from dyncompress.cli.batch import encode_plan

        return encode_plan(level, start, knobs, lambda p: p.endswith(SUFFIX) and not opts.force)

    _each_with_workers(files, opts, one, cluster, workers, knobs.get("device"), plan)


def _each_with_workers(files, opts: Options, one: Callable, cluster, workers, device, plan: Callable | None) -> None:
    """`each_file` with the frame workers (-j) or the cluster's executor; with several files, a shared
    pool that codes ahead every file `plan()` accepts (`batch.Ahead`). `one(path, workers, ahead)`."""
    workers, client = frame_executor(cluster, workers, device)
    ahead = None
    try:
        with loading():
            from dyncompress.cli.batch import Ahead, pool_workers
        if plan is not None and (pool := pool_workers(workers, files)):
            ahead = Ahead(files, pool, plan())
        each_file(files, opts, lambda path: one(path, workers, ahead))
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


def _compile_ahead(opts: Options, kinds, threads: int | None) -> None:
    """The kernels for these ways of coding (`warm.KINDS`) at `threads` (--threads; None: the default)
    compiled in a child process on the first run after an install, before this process loads torch:
    its peak memory stays that of a run with the kernels cached."""
    from dyncompress.coding.warm import compile_ahead

    for kind in kinds:
        compile_ahead(kind, notice=opts.verbosity >= 1 and sys.stderr.isatty(), threads=threads)


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

    _compile_ahead(opts, sorted({file_kind(p) for p in files if os.path.isfile(p)} - {None}), threads)
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
        target = None if testing else output_target(path, opts, strip)
        started, took = time.monotonic(), []

        def work(reader, writer, size):
            with loading():
                from dyncompress.api import iter_decompress
            first = _use_ready(ready, reader, writer, took)
            if first is None:
                return
            if first:
                reader = _Prefixed(first, reader)  # changed since: decode what it holds now
            progress = ProgressLine(shown_name(path), None, opts.verbosity >= 1)
            try:
                if span is not None:
                    writer.write(_read_range(reader, span, model, device, threads, workers, progress))
                    return
                for piece in iter_decompress(reader.read, progress, CHUNK, model, device, threads, workers):
                    writer.write(piece)
            finally:
                progress.close()

        n_in, n_out = run_file(path, opts, target, work, reading_compressed=True)
        if testing:
            opts.say(f"{shown_name(path)}: OK", level=2)
        else:
            opts.say(
                summary_line(shown_name(path), n_in, n_out, took[0] if took else time.monotonic() - started, False)
            )

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
    opts = make_options(output, to_stdout, force, keep, remove, quiet, verbose)
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
    opts = make_options(None, False, False, False, False, quiet, verbose + 1)
    _decode_files(files, opts, True, model, workers=workers)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
def info(files):
    """Print what the header and frames of FILES say (no decoding)."""
    opts = Options(None, False, False, False, 1)

    def one(path: str) -> None:
        reader = sys.stdin.buffer if path == "-" else open_input(path)[0]
        try:
            click.echo(describe(shown_name(path), reader))
        finally:
            if path != "-":
                reader.close()

    each_file(files, opts, one)


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
    roles = {
        DEFAULT_MODEL: f" (default at -1 ... -{min(LARGE_LEVELS) - 1} and for inputs under {LARGE_MIN // 1024} kB)",
        FOREIGN_MODEL: f" (the default for other European languages at -3 ... -{min(LARGE_LEVELS) - 1})",
        FOREIGN_LARGE: f" (the default for other European languages from -{min(LARGE_LEVELS)} on)",
        CJK_MODEL: " (the default for the Chinese and Japanese it knows)",
        LARGE_MODEL: f" (the default for English from -{min(LARGE_LEVELS)} on)",
    }
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


for command in (
    cli_train.train,
    cli_train.calibrate,
    cli_measure.corpus,
    cli_measure.eval_,
    cli_measure.tune,
    cli_measure.bench,
):
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
