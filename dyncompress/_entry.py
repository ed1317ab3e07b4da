"""The console entry point: loads the command line with Ctrl-C held (torch comes later, when a
command needs it, under `cli_base.loading`: the same hold), and a Ctrl-C that lands in a finaliser
or a callback raised just after it (`_signals`)."""

import sys

from dyncompress._signals import deliver_interrupts, held_interrupts


def run() -> None:
    deliver_interrupts()
    try:
        with held_interrupts():
            from dyncompress.cli.main import run as cli_run
    except KeyboardInterrupt:  # interrupted while torch was loading: no traceback
        sys.stderr.write("dyncompress: interrupted\n")
        sys.exit(130)
    cli_run()
