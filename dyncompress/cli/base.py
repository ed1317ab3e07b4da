"""What the command line's modules share: errors, exit codes, option helpers.

`cli` (the codec's commands) and `cli_measure` (corpus, eval, tune, bench) both import
from here; `cli` registers the measuring commands on its group, so neither imports the other's
commands at import time and there is no circle.

The command line imports no torch until a command needs it (`--help`, `--version`, usage
errors, `info`, `corpus` answer at once): commands import what brings torch in (~1 s, about a
thousand modules) inside `loading()`, which holds Ctrl-C until the imports are done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import click

from dyncompress._signals import held_interrupts

EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 130, 143  # (128 + SIGINT, SIGTERM)


@contextmanager
def loading() -> Iterator[None]:
    """Ctrl-C held while torch and the codec import. After the first such block, what exists is
    frozen out of the garbage collector (`gc.freeze`): modules that live as long as the process, so
    the collector need not walk them during the run, nor at exit, where collecting them cost a
    second per command. Only while nothing is frozen yet: later blocks may follow objects of ours
    (a worker pool, its semaphore) that must still be collected when they are done with."""
    with held_interrupts():
        yield
    if not gc.get_freeze_count():
        gc.freeze()


class Failure(Exception):
    """A one-line problem with one file; the run goes on to the next file."""


class Fatal(click.ClickException):
    """A one-line error that ends the command (exit 1), printed like every other error."""

    def show(self, file=None) -> None:
        click.echo(f"dyncompress: {self.format_message()}", err=True)


def knob(name: str, kind, help: str, *more_names: str):
    """An encoder setting; unset means: as the level says."""
    return click.option(name, *more_names, type=kind, default=None, help=help)


def setting(name: str, kind, default, help: str, *more_names: str):
    """An option with a default of its own, shown in --help."""
    return click.option(name, *more_names, type=kind, default=default, show_default=True, help=help)


class ExpertsParam(click.ParamType):
    """--experts: 'all', 'none', or names from settings.EXPERTS joined by commas."""

    name = "LIST"

    def convert(self, value, param, ctx):
        from dyncompress.config.settings import EXPERTS

        if value == "all":
            return ",".join(EXPERTS)
        if value == "none":
            return ""
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in EXPERTS]
        if unknown or not names:
            self.fail(f"{value!r}: choose 'all', 'none' or from {', '.join(EXPERTS)}", param, ctx)
        return ",".join(n for n in EXPERTS if n in names)  # one spelling per set


class SizeParam(click.ParamType):
    """A byte count: 4194304, 4MiB, 256KiB (binary units) or 1M, 250k (decimal, as elsewhere here)."""

    name = "SIZE"
    _BINARY = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from dyncompress.training.corpus import parse_offset

        text = value.strip()
        unit = text[-3:] if text[-3:] in self._BINARY else ""
        try:
            return parse_offset(text[: len(text) - len(unit)]) * self._BINARY.get(unit, 1)
        except ValueError:
            self.fail(f"{value!r}: a size in bytes, such as 4MiB, 256KiB, 1M or 0", param, ctx)


def parse_range(text: str) -> tuple[int, int | None]:
    """'START:END' in bytes ('2.5M', '64k', either side empty) -> (start, end or None)."""
    from dyncompress.training.corpus import parse_offset

    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError("expected START:END")
        first = parse_offset(start) if start.strip() else 0
        last = parse_offset(end) if end.strip() else None
    except ValueError as e:
        raise click.BadParameter(f"{text!r}: {e} (START:END in bytes, e.g. 1M:1.5M or 1000:)") from None
    if last is not None and last < first:
        raise click.BadParameter(f"{text!r}: the end comes before the start")
    return first, last


def workers_option(f):
    """-j/--workers: frames in parallel processes."""
    return click.option(
        "-j",
        "--workers",
        type=click.IntRange(0, 1024),
        default=1,
        show_default=True,
        help="Code the independent frames in N processes (0: one per core), one CPU thread each unless -T "
        "says otherwise. Speed only: any N gives the same bytes.",
    )(f)


def cluster_option(f):
    return click.option(
        "--cluster",
        metavar="ADDRESS",
        help="Run the frames on a Dask cluster: its scheduler's address (tcp://host:8786) or scheduler file "
        "(needs pip install 'dyncompress[cluster]'). Instead of -j.",
    )(f)


def frame_executor(cluster: str | None, workers: int, device: str | None):
    """(workers for the API, client to close): -j's count, or the cluster's executor."""
    if cluster is None:
        return workers, None
    if workers != 1:
        raise click.UsageError("--cluster and -j contradict each other (the cluster's workers do the work)")
    from dyncompress.cluster import connect, executor
    from dyncompress.errors import DyncompressError

    try:
        client = connect(cluster)
    except DyncompressError as e:
        raise Fatal(str(e)) from None
    try:
        return executor(client, device or "cpu"), client
    except DyncompressError as e:
        client.close()
        raise Fatal(str(e)) from None


EXPERTS_HELP = (
    "Byte statistics mixed with the network: 'all', 'none' (the network alone), or a list of "
    "orders (order-1...6 and 8 contexts), word (word contexts), gap (the two bytes before the last), match "
    "(long repeats), ppm (the orders read as PPM), apm (a final refinement), record (fixed-length records), "
    "column (the column and the byte above it), wrap (the column and the kinds of the last two bytes) [all]."
)


def level_options(f):
    """-1 ... -9 into `level` (None: the default, -6)."""
    for n in range(9, 0, -1):
        help = "Level -1 (fastest) ... -9 (smallest), default -6." if n == 1 else None
        f = click.option(f"-{n}", "level", flag_value=n, help=help, hidden=n > 1)(f)
    return f


def torch_threads(n: int | None) -> None:
    """Set torch's CPU threads (commands that compute outside the codec, which sets its own)."""
    if n:
        import torch

        torch.set_num_threads(n)


NETWORK_KNOBS = (
    "hidden", "rule", "lr", "decay", "beta1", "beta2", "eps", "clip", "sparse", "lora", "lora_on", "tlm_bits",
    "tlm_relative", "tlm_lambda", "seed",
)  # fmt: skip


def fast_knobs(level, model, online, knobs: dict) -> None:
    """--fast's settings into `knobs` (no network: hidden 0), or a usage error for what contradicts it."""
    if level is not None or model or online:
        raise click.UsageError("--fast is a level of its own, without a model: no -1 ... -9, --model or --online")
    given = [k for k in NETWORK_KNOBS if k in knobs]
    if given:
        raise click.UsageError(f"--fast codes without a network: --{given[0].replace('_', '-')} does not apply")
    knobs["hidden"] = 0
