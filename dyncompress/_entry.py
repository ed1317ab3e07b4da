"""The console entry point: loads the command line (and torch, ~2 s) with Ctrl-C held."""

import sys

from ._signals import held_interrupts


def run() -> None:
    try:
        with held_interrupts():
            from .cli import run as cli_run
    except KeyboardInterrupt:  # interrupted while torch was loading: no traceback
        sys.stderr.write("dyncompress: interrupted\n")
        sys.exit(130)
    cli_run()
