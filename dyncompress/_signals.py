"""Holding Ctrl-C while torch imports lazily.

A KeyboardInterrupt raised inside an import can be swallowed by the imported library, or leave
CPython's "unhandled interrupt" flag set (it then kills the process with SIGINT at exit) — and
torch imports ~800 modules on first use of some features. Inside `held_interrupts()` a Ctrl-C is
only recorded, and raised as KeyboardInterrupt as soon as the block ends, in our own code.
"""

import signal
import threading
from contextlib import contextmanager


@contextmanager
def held_interrupts():
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield  # someone else's handler, or not the main thread: leave it alone
        return
    hit: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: hit.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit:
        raise KeyboardInterrupt
