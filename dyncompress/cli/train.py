"""`dyncompress train` and `dyncompress calibrate`: a model from text sources, and its
dynamic-evaluation statistics (MS_g)."""

from __future__ import annotations

import os
import sys
import time

import click

from dyncompress._signals import terminate_as_interrupt, terminated
from dyncompress.cli.base import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Fatal,
    loading,
    setting,
    torch_threads,
)
from dyncompress.config.levels import MODEL_DEFAULTS
from dyncompress.config.settings import AdaptSettings, TrainConfig
from dyncompress.errors import DyncompressError
from dyncompress.progress import ProgressLine

TRAIN = TrainConfig()


def compute_options(f):
    """Where `train` and `calibrate` compute (neither needs the codec's recorded thread count)."""
    f = click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)(f)
    return click.option(
        "-T", "--threads", type=click.IntRange(1, 256), default=None, help="CPU threads [torch's default]."
    )(f)


@click.command()
@click.argument("files", nargs=-1, metavar="SOURCE...")
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
@click.option(
    "--resume",
    is_flag=True,
    help="Continue from the checkpoint at --output (its sources and settings unless given again).",
)
@click.option(
    "--stop-after",
    type=click.FloatRange(0, min_open=True),
    metavar="MINUTES",
    help="End this run after MINUTES with a checkpoint; --resume continues the schedule (training in pieces).",
)
@click.option("--init", metavar="MODEL", help="Start from this model's weights (a name or a .dcm file): fine-tune it.")
@compute_options
@click.option("-q", "--quiet", is_flag=True, help="Print only validation lines.")
def train(files, output, name, resume, stop_after, init, threads, device, quiet, **config):
    """Train a model on text (each source's tail is held out for validation).

    SOURCE: FILE, FILE:START:END (bytes; 2.5M = 2,500,000), or a fetched corpus's split such as
    enwik8:train. With --resume the sources and settings default to the checkpoint's; given sources
    must hold the same bytes (they may be copies under other names). Ctrl-C writes a checkpoint
    after the step it lands in.
    """
    with loading():
        from dyncompress.config.model import find as find_model
        from dyncompress.training.train import Trainer, read_state

    torch_threads(threads)
    command = "dyncompress train " + " ".join(sys.argv[2:])
    if os.path.exists(output) and not resume:
        raise Fatal(f"{output} already exists (use --resume to continue it, or another -o)")
    if not files and not resume:
        raise Fatal("no SOURCE to train on")
    try:
        if resume:
            state = read_state(output)
            files, config = resumed_settings(state, files, config)
            name = name or state.get("name")
        name = name or os.path.basename(output).removesuffix(".dcm")
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

    try:  # a Ctrl-C or SIGTERM lands between steps, and that step's state is written
        with terminate_as_interrupt():
            model = trainer.run(output, name, command, report, None if stop_after is None else 60 * stop_after)
    except KeyboardInterrupt:
        how = "terminated" if terminated() else "interrupted"
        click.echo(
            ("\n" if tty else "")
            + f"dyncompress: {how} at step {trainer.step:,}; {output}.state holds it (--resume continues)",
            err=True,
        )
        raise SystemExit(EXIT_TERMINATED if terminated() else EXIT_INTERRUPTED) from None
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    left = "" if trainer.finished else f"; stopped at step {trainer.step:,} of {trainer.c.steps:,} (--resume continues)"
    click.echo(f"wrote {output}: {model.summary}{left}", err=True)


def resumed_settings(state: dict, files: tuple, given: dict) -> tuple[list[str], dict]:
    """The sources and training settings of a resumed run: the checkpoint's, except those given
    on the command line (a setting counts as given when it is not its option's default)."""
    ctx = click.get_current_context()
    config = dict(given)
    for key, value in state["config"].items():
        if key in config and ctx.get_parameter_source(key) is click.core.ParameterSource.DEFAULT:
            config[key] = value
    if not files:
        if "sources" not in state:
            raise Fatal("the checkpoint does not record its sources: give them again")
        files = state["sources"]
    return list(files), config


@click.command()
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
