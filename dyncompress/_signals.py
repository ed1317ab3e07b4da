"""Ctrl-C, raised only where Python code can act on it.

A KeyboardInterrupt is raised in whatever Python code the main thread runs when the signal lands.
Two places lose it:

- an import (torch loads ~800 modules on first use of some features): the imported library can
  swallow it, or CPython's "unhandled interrupt" flag stays set and kills the process with SIGINT
  at exit. Inside `held_interrupts()` a Ctrl-C is only recorded, and raised as KeyboardInterrupt
  as soon as the block ends, in our own code.
- a finaliser (`__del__`, a weakref's callback) or a C library's callback into Python: the
  exception is printed as "Exception ignored" and dropped. numba runs llvmlite's callbacks and
  finalisers while it loads or compiles a kernel: a Ctrl-C there went unseen (the encode ran on,
  seen in CI), or the callback handed LLVM no answer and the process died of SIGSEGV after its
  clean message. With `deliver_interrupts()` (the command line's) a Ctrl-C that lands in
  llvmlite's code is kept, and one dropped anywhere else (`sys.unraisablehook`) is taken back;
  both are raised a few milliseconds later (a timer, SIGALRM), in ordinary code.
"""

import os
import signal
import sys
import threading
from contextlib import contextmanager

RETRY_S = 0.01  # how soon a kept Ctrl-C is tried again
_CALLBACK_CODE = os.sep + "llvmlite" + os.sep  # code that C calls back into (numba's LLVM layer)

_held = 0  # depth of `held_interrupts` blocks
_pending = False  # a Ctrl-C received and not yet raised
_terminated = False  # the interrupt came as SIGTERM (`terminate_as_interrupt`)


def inside_callback(frame) -> bool:
    """Whether `frame` or a caller is llvmlite's code, which C calls back into: an exception there
    is lost, and its C caller is left without an answer."""
    while frame is not None:
        if _CALLBACK_CODE in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _on_interrupt(signum, frame) -> None:
    global _pending
    if _held or inside_callback(frame):
        _keep()
        return
    _pending = False
    raise KeyboardInterrupt


def _keep() -> None:
    """Raise the Ctrl-C later: at the end of the hold, or by the timer."""
    global _pending
    _pending = True
    if not _held and signal.getsignal(signal.SIGALRM) is _retry:
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def _retry(signum, frame) -> None:
    if _pending:
        _on_interrupt(signal.SIGINT, frame)


def _unraisable(unraisable, _previous=sys.unraisablehook) -> None:
    if unraisable.exc_type is KeyboardInterrupt:  # a Ctrl-C a finaliser or callback would drop
        _keep()
    else:
        _previous(unraisable)


def _ours_to_handle() -> bool:
    return threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_interrupt)
    )


def _on_terminate(signum, frame) -> None:
    global _terminated
    _terminated = True
    _on_interrupt(signum, frame)


@contextmanager
def terminate_as_interrupt():
    """Within the block a SIGTERM (`kill`, a job scheduler's stop) is a Ctrl-C: raised as
    KeyboardInterrupt, held like one by `held_interrupts`, and `terminated()` then says it came as
    SIGTERM. So a long run that saves its state on Ctrl-C saves it on SIGTERM too, also where
    Ctrl-C is ignored (a background job, nohup). Main thread only; elsewhere the block changes nothing."""
    global _terminated
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _terminated = False
    previous = signal.signal(signal.SIGTERM, _on_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminated() -> bool:
    """Whether the last interrupt in a `terminate_as_interrupt` block was a SIGTERM."""
    return _terminated


def deliver_interrupts() -> None:
    """From now on in this process, a Ctrl-C that lands in a finaliser or callback is raised just
    after it, in the main thread. Only where Ctrl-C is Python's to raise (not ignored, as under
    nohup or in a background job) and a timer exists (POSIX)."""
    if hasattr(signal, "setitimer") and _ours_to_handle():
        signal.signal(signal.SIGALRM, _retry)
        signal.signal(signal.SIGINT, _on_interrupt)
        sys.unraisablehook = _unraisable


@contextmanager
def held_interrupts():
    global _held, _pending
    ours = _ours_to_handle()  # (SIGINT's; else SIGTERM's where `terminate_as_interrupt` made it ours)
    term = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _on_terminate
    if not (ours or term):
        yield  # someone else's handler, or not the main thread: leave it alone
        return
    previous = signal.signal(signal.SIGINT, _on_interrupt) if ours else None
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if ours:
            signal.signal(signal.SIGINT, previous)
    if _pending and not _held:
        _pending = False
        raise KeyboardInterrupt
