"""The measuring commands: `corpus`, `eval`, `tune`, `bench` (`cli` registers them on its group).

Each takes its input as a source: FILE, FILE:START:END, or a fetched corpus's split (enwik8:test).
"""

from __future__ import annotations

import math
import os
import sys
import time

import click

from dyncompress.cli.base import EXPERTS_HELP, ExpertsParam, Fatal, fast_knobs, knob, level_options, loading
from dyncompress.config.levels import AUTO_MODEL, DEFAULT_MODEL, make_settings
from dyncompress.config.settings import RULES
from dyncompress.errors import DyncompressError
from dyncompress.format.container import MAX_BLOCK_SIZE
from dyncompress.progress import ProgressLine


def _fmt(v) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _model(name: str | None, needed: bool = True):
    if not needed:
        return None
    with loading():
        from dyncompress.api import resolve_model
    try:
        return resolve_model(name or DEFAULT_MODEL)
    except DyncompressError as e:
        raise Fatal(str(e)) from None


def _read(spec: str):
    from dyncompress.training.corpus import read_source

    try:
        return read_source(spec)
    except DyncompressError as e:
        raise Fatal(str(e)) from None


def _progress(label: str, total: int, quiet: bool) -> ProgressLine:
    return ProgressLine(label, total, not quiet)


def _threads(threads: int | None) -> dict:
    return {"threads": threads} if threads else {}


# --- corpus -------------------------------------------------------------------------


@click.group()
def corpus():
    """Public corpora: list the manifests, fetch one into the cache, print a cached path."""


@corpus.command("list")
def corpus_list():
    """Known corpora, their splits, and whether they are fetched."""
    from dyncompress.training.corpus import cache_dir, cached_path, is_cached, manifests

    try:
        known = manifests()
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    for m in known.values():
        state = f"fetched: {cached_path(m)}" if is_cached(m) else "not fetched"
        splits = ", ".join(f"{k} [{a:,}, {b:,})" for k, (a, b) in m.splits.items())
        click.echo(f"{m.name}: {m.size:,} bytes, sha1 {m.sha1}; {state}")
        if splits:
            click.echo(f"    splits: {splits}")
        if m.description:
            click.echo(f"    {m.description}")
        click.echo(f"    from {m.url}" + (f" ({m.licence})" if m.licence else ""))
    click.echo(f"cache: {cache_dir()}")


@corpus.command("fetch")
@click.argument("name")
@click.option(
    "--file",
    "local",
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="Register a local copy (the corpus itself or its archive) instead of downloading.",
)
@click.option("--timeout", type=click.FloatRange(1), default=30.0, show_default=True, help="Network timeout, seconds.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def corpus_fetch(name, local, timeout, quiet):
    """Download corpus NAME (or take --file PATH), verify its checksum, keep it in the cache."""
    from dyncompress.training.corpus import cached_path, fetch, is_cached, manifest

    try:
        m = manifest(name)
        if is_cached(m) and local is None:
            click.echo(f"{m.name}: already fetched: {cached_path(m)}", err=True)
            return
        progress = ProgressLine(f"{m.name}: downloading" if local is None else f"{m.name}: copying", None, not quiet)
        try:
            path = fetch(m, local, progress, timeout)
        finally:
            progress.close()
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    click.echo(f"{m.name}: verified ({m.size:,} bytes, sha1 {m.sha1}): {path}", err=True)


@corpus.command("path")
@click.argument("name")
def corpus_path(name):
    """Print where the fetched corpus NAME is (an error if it is not fetched)."""
    from dyncompress.training.corpus import cached_path, is_cached, manifest

    try:
        m = manifest(name)
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    if not is_cached(m):
        raise Fatal(f"{name} is not fetched yet; run: dyncompress corpus fetch {name}")
    click.echo(cached_path(m))


# --- eval ---------------------------------------------------------------------------


def coding_options(f):
    """Settings shared by eval, tune and bench (the rest come from the model and the level)."""
    options = [
        click.option("-m", "--model", metavar="NAME|PATH", help=f"Pretrained model [{DEFAULT_MODEL}]."),
        level_options,
        knob("--lanes", click.IntRange(1), "Lanes [the level's, fewer for a small input]."),
        knob("--block-size", click.IntRange(1, MAX_BLOCK_SIZE), "Bytes per block [1 MiB]."),
        knob("-T", click.IntRange(1, 256), "CPU threads while coding [the usable cores, at most 4].", "--threads"),
        knob("--device", click.Choice(["cpu", "cuda"]), "Where the model runs [cuda when available]."),
        knob("--experts", ExpertsParam(), EXPERTS_HELP),
        click.option("-q", "--quiet", is_flag=True, help="No progress line."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _knobs(**given) -> dict:
    return {k: v for k, v in given.items() if v is not None}


@click.command("eval")
@click.argument("source", metavar="SOURCE")
@coding_options
@click.option(
    "-r",
    "--rules",
    default="static,level,sgd,rms,rms-decay,online",
    show_default=True,
    help="Rows to measure, comma separated: static, level (what the level adapts, as encode codes it: "
    "levels -3 ... -9 a rank-32 LoRA on W_out), sgd, rms, rms-decay (the whole network), online, and the cheaper "
    "adaptations sparse (rms-decay on a 256 x 256 matrix M on the hidden state, the network frozen), "
    "lora-4 and lora-32 (rms-decay on rank-4 / rank-32 factors added to W_mh, W_m and W_out, the "
    "network frozen), lora-out (rank 32 on W_out alone, in segments of 32: what levels -3 ... -9 adapt), "
    "tlm (rms-decay weighted by TLM, segments under 2.2 bits per byte skipped), "
    "tlm-lanes (TLM per lane, as the paper), sparse-tlm and lora-tlm.",
)
@knob("--segment-len", click.IntRange(1), "Bytes per lane between gradient steps [the model's].")
@knob("--lr", click.FloatRange(0), "Learning rate for every adapting row [each rule's own default].")
@knob("--decay", click.FloatRange(0), "rms-decay's lambda [the model's].")
@click.option(
    "--confirm",
    metavar="RULE",
    help="Also encode (and decode) one row for real and compare its size with the estimate.",
)
@click.option("--plot", metavar="OUT.png", help="Draw cumulative and windowed bits per byte (needs matplotlib).")
@click.option(
    "--window",
    type=click.IntRange(1),
    default=None,
    help="Window of the plot's lower panel, bytes [1/100 of the input, at least 1,000].",
)
def eval_(
    source,
    model,
    level,
    lanes,
    block_size,
    threads,
    device,
    experts,
    quiet,
    rules,
    segment_len,
    lr,
    decay,
    confirm,
    plot,
    window,
):
    """Bits per byte of SOURCE under several rules, without writing a compressed file.

    Runs the codec's own loop and adds up -log2 of the probability the range
    coder would spend on every byte. SOURCE: FILE, FILE:START:END (bytes; 2.5M =
    2,500,000), or a fetched corpus's split such as enwik8:test.
    """
    with loading():
        from dyncompress.cli.peers import confirm as confirm_row
        from dyncompress.coding.measure import ALL_ROWS as ROWS
        from dyncompress.coding.measure import measure, row_settings
        from dyncompress.coding.measure import plot as draw

    rows = [r.strip() for r in rules.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad or not rows:
        raise click.UsageError(f"unknown row(s) {', '.join(bad) or '(none)'}; rows: {', '.join(ROWS)}")
    if confirm is not None and confirm not in rows:
        raise click.UsageError(f"--confirm {confirm}: not one of the rows measured ({', '.join(rows)})")
    if plot is not None:
        try:
            import matplotlib  # noqa: F401  (fail before an hour of measuring, not after)
        except ImportError:
            raise Fatal("--plot needs matplotlib: pip install 'dyncompress[plot]'") from None
    pretrained = _model(model, needed=any(r != "online" for r in rows))
    src, data = _read(source)
    if not data:
        raise Fatal(f"{source}: empty input, nothing to measure")
    knobs = _knobs(
        lanes=lanes, block_size=block_size, device=device, segment_len=segment_len, experts=experts, **_threads(threads)
    )
    adapt = _knobs(lr=lr, decay=decay)
    origin = f"model {pretrained.name}" if pretrained else "online"
    click.echo(f"{source}: {len(data):,} bytes; {origin}")
    header = f"{'rule':<10} {'lr':>8} {'decay':>8} {'lanes×n':>8} {'bits/byte':>10} {'vs static':>9} "
    header += f"{'bytes':>12} {'seconds':>8} {'kB/s':>6} {'skipped':>7} {'MFLOP/B':>7}"
    click.echo(header)
    results, static = [], None
    try:
        for row in rows:
            settings, start = row_settings(row, len(data), pretrained, level, **knobs, **adapt)
            progress = _progress(row, len(data), quiet)
            try:
                m = measure(data, settings, start, row, progress, positions=plot is not None)
            finally:
                progress.close()
            results.append(m)
            static = m if row == "static" else static
            a = settings.adapt
            versus = f"{100 * (m.bits / static.bits - 1):+.1f}%" if static and row != "static" else ""
            click.echo(
                f"{row:<10} {_fmt(None if a.rule == 'static' else a.lr):>8} "
                f"{_fmt(a.decay if a.rule == 'rms-decay' else None):>8} "
                f"{f'{settings.lanes}×{settings.segment_len}':>8} {m.bpb:>10.4f} {versus:>9} "
                f"{m.payload_bytes:>12,} {m.seconds:>8.1f} {m.kbps:>6.1f} "
                f"{f'{100 * m.skip_fraction:.0f}%' if a.tlm else '':>7} {m.flops / 1e6:>7.2f}"
            )
        if confirm is not None:
            m = results[rows.index(confirm)]
            c = confirm_row(data, m, None if confirm == "online" else pretrained)
            click.echo(
                f"confirmed {confirm} by encoding (and decoding: exact): estimate {c['estimate']:,} bytes of "
                f"range-coded payload, range coder wrote {c['payload']:,} ({c['payload'] - c['estimate']:+,}); "
                f"file {c['file']:,} bytes = payload + {c['header']:,} header + {c['framing']:,} frame headers "
                f"and end marker; encode {c['seconds']:.1f} s"
            )
        if plot is not None:
            draw(results, plot, f"{source} ({origin})", window or max(1000, len(data) // 100))
            click.echo(f"wrote {plot}", err=True)
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        raise Fatal(f"{e.filename or plot}: {e.strerror or e}") from None


# --- tune ---------------------------------------------------------------------------


def _values(text: str | None, kind, name: str) -> list | None:
    if text is None:
        return None
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers", param_hint=name) from None
    if not values or any(v < 0 for v in values) or (kind is int and any(v < 1 for v in values)):
        raise click.BadParameter(f"{text!r}: give positive values", param_hint=name)
    return values


@click.command()
@click.argument("source", metavar="SOURCE")
@coding_options
@click.option("--online", is_flag=True, help="Tune online mode (no pretrained model).")
@click.option(
    "--rule",
    type=click.Choice([r for r in RULES if r != "static"]),
    default=None,
    help="The rule to tune [rms-decay with a model, rms online].",
)
@click.option("--lr", "lrs", metavar="LIST", help="Learning rates to try [the default × 1/4, 1/2, 1, 2, 4].")
@click.option("--decay", "decays", metavar="LIST", help="rms-decay lambdas to try [0 and the default × 1/10, 1, 10].")
@click.option("--segment-len", "segments", metavar="LIST", help="Segment lengths to try [8,16,32].")
@click.option("--tlm-bits", "tlm_bits", metavar="LIST", help="TLM thresholds (bits per byte) to try [none: TLM off].")
@click.option(
    "--tlm-relative",
    "tlm_relatives",
    metavar="LIST",
    help="Relative TLM thresholds (times the running cost per byte) to try [none: TLM off].",
)
@click.option("--tlm-lambda", "tlm_lambdas", metavar="LIST", help="TLM lambdas to try, with a TLM threshold [1].")
@knob("--sparse", click.IntRange(0, 1024), "Tune sparse dynamic evaluation with a K x K matrix [0: the whole network].")
@knob("--lora", click.IntRange(0, 64), "Tune LoRA factors of rank R [0: the whole network].")
@knob(
    "--lora-on",
    click.STRING,
    "The matrices --lora adapts, comma separated: w_mh, w_m, w_out [all three; w_out alone is what levels "
    "-3 ... -9 adapt].",
)
@click.option(
    "--search",
    type=click.Choice(["successive", "grid"]),
    default="successive",
    show_default=True,
    help="successive: one knob at a time (lr, then decay, then segment length); grid: every combination.",
)
@click.option(
    "-o",
    "--output",
    metavar="MODEL.dcm",
    help="Write the model with the best point recorded as this rule's defaults "
    "(may be the model's own path: its sha256 then changes).",
)
def tune(
    source,
    model,
    level,
    lanes,
    block_size,
    threads,
    device,
    experts,
    quiet,
    online,
    rule,
    lrs,
    decays,
    segments,
    tlm_bits,
    tlm_relatives,
    tlm_lambdas,
    sparse,
    lora,
    lora_on,
    search,
    output,
):
    """Search learning rate, decay and segment length for the fewest bits on SOURCE (a validation slice).

    Tune on validation, report on test: e.g. tune on enwik8:valid, then `eval enwik8:test`
    with the written model. SOURCE: FILE, FILE:START:END (bytes; 2.5M = 2,500,000), or a
    fetched corpus's split such as enwik8:valid.
    """
    with loading():
        from dyncompress.coding.measure import save_defaults
        from dyncompress.coding.measure import tune as search_grid
        from dyncompress.config.model import save

    if online and (model or output):
        raise click.UsageError("--online tunes online mode; it has no model to read or write")
    rule = rule or ("rms" if online else "rms-decay")
    if (sparse or lora) and output:
        raise click.UsageError("-o records the whole network's defaults; --sparse and --lora tune other weights")
    if lora_on is not None and not lora:
        raise click.UsageError("--lora-on names the matrices of --lora R: give a rank too")
    pretrained = None if online else _model(model)
    src, data = _read(source)
    if not data:
        raise Fatal(f"{source}: empty input, nothing to tune on")
    knobs = _knobs(
        lanes=lanes,
        block_size=block_size,
        device=device,
        experts=experts,
        sparse=sparse,
        lora=lora,
        lora_on=lora_on,
        **_threads(threads),
    )
    try:
        base = make_settings(level=level, size_hint=len(data), model=pretrained, rule=rule, **knobs)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    lr0, decay0 = base.adapt.lr, base.adapt.decay
    grid = {
        "lr": _values(lrs, float, "--lr") or [lr0 * f for f in (0.25, 0.5, 1, 2, 4)],
        "segment_len": _values(segments, int, "--segment-len") or [8, 16, 32],
    }
    if rule == "rms-decay":
        grid["decay"] = _values(decays, float, "--decay") or [0.0, decay0 / 10, decay0, decay0 * 10]
    elif decays is not None:
        raise click.UsageError(f"--decay applies to rms-decay only, not {rule}")
    if tlm_bits is not None and tlm_relatives is not None:
        raise click.UsageError("TLM's threshold is absolute (--tlm-bits) or relative (--tlm-relative): choose one")
    if tlm_bits is not None:
        grid["tlm_bits"] = _values(tlm_bits, float, "--tlm-bits")
    if tlm_relatives is not None:
        grid["tlm_relative"] = _values(tlm_relatives, float, "--tlm-relative")
    if tlm_bits is not None or tlm_relatives is not None:
        grid["tlm_lambda"] = _values(tlm_lambdas, float, "--tlm-lambda") or [1.0]
    elif tlm_lambdas is not None:
        raise click.UsageError("--tlm-lambda needs --tlm-bits or --tlm-relative")
    sizes = [len(v) for v in grid.values()]
    points = sum(sizes) if search == "successive" else math.prod(sizes)
    origin = f"model {pretrained.name}" if pretrained else "online"
    click.echo(f"tuning {rule} ({origin}) on {source}: {len(data):,} bytes, {search} search, up to {points} points")

    def report(point: dict, m) -> None:
        skipped = f"  {100 * m.skip_fraction:3.0f}% skipped" if m.settings.adapt.tlm else ""
        click.echo(f"  {m.label:<40} {m.bpb:.4f} bits/byte  {m.seconds:6.1f} s{skipped}")

    started = time.monotonic()
    try:
        best, results = search_grid(
            data,
            pretrained,
            rule,
            grid,
            search,
            level,
            report,
            progress=lambda label: _progress(label, len(data), quiet),
            **knobs,
        )
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    bpb = min(m.bpb for _, m in results)
    click.echo(
        f"best: {', '.join(f'{k}={v:g}' for k, v in best.items())}: {bpb:.4f} bits/byte "
        f"({len(results)} points, {time.monotonic() - started:.0f} s)"
    )
    if output:
        record = {
            "source": os.path.basename(src.path) + ("" if src.whole else f"[{src.start}:{src.end}]"),
            "bytes": len(data),
            "search": search,
            "bits_per_byte": round(bpb, 5),
            "points": len(results),
        }
        try:
            tuned = save_defaults(pretrained, rule, best, record)
            sha = save(tuned, output)
        except OSError as e:
            raise Fatal(f"{e.filename or output}: {e.strerror or e}") from None
        except DyncompressError as e:
            raise Fatal(str(e)) from None
        click.echo(f"wrote {output} (sha256 {sha[:16]}): {rule} now defaults to these settings", err=True)


# --- bench --------------------------------------------------------------------------


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@coding_options
@click.option("--online", is_flag=True, help="dyncompress in online mode (no pretrained model).")
@click.option("--fast", is_flag=True, help="dyncompress's fast level (no network: encode --fast).")
def bench(sources, model, level, lanes, block_size, threads, device, experts, quiet, online, fast):
    """Bits per byte and speed of dyncompress next to zlib, bz2, lzma (and zstd, brotli if installed).

    Every compressor's output is decoded and compared with the input. Without --model or
    --online, dyncompress starts as `encode` does (the model, or online mode where it does not
    fit). SOURCE: FILE, FILE:START:END (bytes; 2.5M = 2,500,000), or a fetched corpus's split such
    as enwik8:test.
    """
    with loading():
        from dyncompress.cli.peers import PEERS, bench_dyncompress, bench_peer

    if online and model:
        raise click.UsageError("--online and --model contradict each other")
    pretrained = None if online or fast else _model(model)
    start = pretrained if online or model or fast else AUTO_MODEL  # as `encode` starts (`auto`)
    knobs = _knobs(level=level, lanes=lanes, block_size=block_size, device=device, experts=experts, **_threads(threads))
    if fast:
        fast_knobs(level, model, online, knobs)
    ours = "dyncompress --fast" if fast else f"dyncompress -{level or 6}" + (" --online" if online else "")
    for spec in sources:
        src, data = _read(spec)
        click.echo(f"{spec}: {len(data):,} bytes")
        click.echo(f"  {'compressor':<22} {'bytes':>12} {'bits/byte':>10} {'enc kB/s':>10} {'dec kB/s':>10}")
        progress = _progress(ours, 2 * len(data), quiet)
        try:
            rows = [bench_dyncompress(data, ours, start, progress, **knobs)]
            rows += [bench_peer(peer, data) for peer in PEERS]
        except DyncompressError as e:
            raise Fatal(f"{spec}: {e}") from None
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        finally:
            progress.close()
        for r in rows:
            if r.size is None:
                click.echo(f"  {r.name:<22} {r.note}")
                continue
            bpb = 8 * r.size / len(data) if data else 0.0
            enc = len(data) / max(r.encode_s, 1e-9) / 1e3
            dec = len(data) / max(r.decode_s, 1e-9) / 1e3
            click.echo(f"  {r.name:<22} {r.size:>12,} {bpb:>10.3f} {enc:>10.1f} {dec:>10.1f}")
        sys.stdout.flush()
