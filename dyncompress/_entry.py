"""The console entry point: loads the command line with Ctrl-C held (torch comes later, when a
command needs it, under `cli_base.loading`: the same hold)."""

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
