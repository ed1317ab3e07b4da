"""A step's lanes split over threads: the network's step and backward and the mixer run each run
of lanes on a core of its own (`step_kernels.forward_parts`, `backward_parts`,
`experts.step.mix_parts`), through numba's OpenMP threading layer.

The threads of a split meet at a barrier several times every byte position. That pays only while
every one of them has a core: on a machine where other work runs, a thread waits (spinning, as
OpenMP's threads do by default) for one that is descheduled, and two threads beside one busy
process code several times slower than one thread. So whether a split runs is not decided once
but measured as the coding goes (`Chooser`): the coding loop times windows of segments split and
whole, keeps the faster, and tries the other again from time to time, sooner when the speed it has
drops. Where the split does not pay (few lanes, a busy machine) it stops running, and its threads
fall asleep (torch's count for the block's matrix products follows the same choice).

Every lane's arithmetic is its own and the same in any thread, so the bits do not depend on the
split: a file coded with `-T 2` decodes with `-T 1` and back. What learns across lanes (the shared
tables, the mixer's weights, the weights' gradients) stays in one thread, in its fixed order.

Where the split cannot run safely or fast, the kernels run whole in the calling thread:
- without an OpenMP (or TBB) layer for numba: its fallback (`workqueue`) costs more a launch than
  a step's split saves, and may not be entered from two threads at once;
- in a child forked from a process that has coded (`os.fork`, multiprocessing's "fork"): GNU
  OpenMP, under torch's threads and numba's, does not survive a fork once its threads have
  started, and coding starts them (torch's calls on the weights, at torch's own thread count,
  come even before the coding loop). Such a child would hang in its first parallel torch call
  (it did, before this module) or be ended by numba. So it runs every thread count as one
  (`threads_allowed`), torch's included. (Our own worker processes are spawned, not forked: each
  starts afresh; a child forked before any coding is a fresh process in this respect.)
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from dyncompress import environment

_started_by: int | None = None  # the process that started numba's threads for us (None: none yet)
_usable: bool | None = None  # whether the layer it got splits well (None: not tried)
FAST_LAYERS = ("omp", "tbb")
_coded = False  # this process has coded (OpenMP's threads may have started)
_forked = False  # this process was forked from one that had: one thread


def coding_here() -> None:
    """Note that this process codes (`codec.Codec`): a child forked from it runs on one thread."""
    global _coded
    _coded = True


def _after_fork_in_child() -> None:
    global _forked
    if not (_coded or _forked):
        return
    _forked = True
    torch = sys.modules.get("torch")
    if torch is not None:  # (torch's calls outside the coding loop use its global count)
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_after_fork_in_child)


def threads_allowed(threads: int) -> int:
    """The threads a run may use: as asked, or one in a child forked after coding (above)."""
    return 1 if _forked else threads


def _layer_usable() -> bool:
    """Start numba's threading layer in this process if nobody has (OpenMP, unless the environment
    names one), and say whether the split may use it here."""
    global _started_by, _usable
    if _started_by is not None:
        return _usable and _started_by == os.getpid()
    import numba
    from numba.np.ufunc import parallel

    # (numba's private state: where a later numba lacks it, nothing is split, nothing breaks)
    if getattr(parallel, "_is_initialized", True):  # started before us: perhaps in a parent before a fork
        return False
    if not environment.given("NUMBA_THREADING_LAYER"):
        numba.config.THREADING_LAYER = "omp"
    torch = sys.modules.get("torch")
    outside = torch.get_num_threads() if torch is not None else None
    try:
        parallel._launch_threads()
        _usable = numba.threading_layer() in FAST_LAYERS
    except (ValueError, OSError, ImportError, AttributeError):  # no such layer here
        _usable = False
    finally:  # numba's OpenMP start sets OpenMP's thread count, which torch shares: the caller's again
        if outside is not None:
            torch.set_num_threads(outside)
    _started_by = os.getpid()
    return _usable


def parts_for(threads: int, lanes: int) -> int:
    """Into how many runs of lanes a step is split: one per thread, at most one per lane and no
    more than numba's threads; 1 (no split) where the split cannot run (above)."""
    if threads_allowed(threads) <= 1 or lanes <= 1 or not _layer_usable():
        return 1
    import numba

    return max(1, min(threads, lanes, numba.config.NUMBA_NUM_THREADS))


_torch_lock = threading.Lock()
_torch_users = 0  # codings in this process that set torch's thread count now
_torch_outside: int | None = None  # torch's count before the first of them set it


@contextlib.contextmanager
def torch_threads() -> Iterator[Callable[[int], None]]:
    """torch's thread count (one for the whole process) is the coding's while any coding runs, and
    the caller's again once the last one ends, however codings in several threads overlap. Yields
    the setter a coding calls (speed only: the bits do not depend on it)."""
    global _torch_users, _torch_outside
    import torch

    with _torch_lock:
        if _torch_users == 0:
            _torch_outside = torch.get_num_threads()
        _torch_users += 1
    try:
        yield torch.set_num_threads
    finally:
        with _torch_lock:
            _torch_users -= 1
            if _torch_users == 0:
                torch.set_num_threads(_torch_outside)


@contextlib.contextmanager
def threads_for(parts: int) -> Iterator[None]:
    """numba's thread count in this thread set to `parts` for the block (the team each split
    launches; by default one thread per core, most of them idle), restored after."""
    if parts <= 1:
        yield
        return
    import numba

    outside = numba.get_num_threads()
    numba.set_num_threads(parts)
    try:
        yield
    finally:
        numba.set_num_threads(outside)


FIRST_WAIT = 4  # windows before the first trial of the other way (`Chooser`)


class Chooser:
    """How the next segments run: on `threads` threads (their lanes in `parts` runs, torch's matrix
    products on `threads`) or on one, chosen by measuring.

    The coding loop asks `way` before each segment and reports the segment's steps and seconds
    (`measured`). Time is counted in windows of at least `window_s` seconds and two segments, each
    in one way; a window's seconds per step is that way's speed now. The way in use (first: the
    threads) is kept while it is the faster; the other is tried for one window after 4 windows,
    then after 4 times as many each time the threads win (2 times as many while one thread wins:
    the threads pay again as soon as the other work ends), up to `max_wait`, and at once when the
    way in use slows down by half (another process started): the trials' share of the time falls
    as a run goes on. With one thread nothing is measured. The choice changes speed only, never a
    bit: every lane's arithmetic is its own in any thread, and so is every matrix product's
    (exact arithmetic).
    """

    def __init__(self, threads: int, parts: int, window_s: float = 0.05, max_wait: int = 128,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        self.ways = ((parts, threads), (1, 1)) if threads > 1 else ((1, 1),)  # (parts, torch's threads)
        self.window_s, self.max_wait, self.clock = window_s, max_wait, clock
        self.using = 0  # index into ways: the way kept
        self.trying = 0  # the way this window runs
        self.speed: list[float | None] = [None] * len(self.ways)  # seconds per step, the last window of each
        self.wait = self.countdown = FIRST_WAIT  # windows before the other way is tried again
        self._seconds = 0.0
        self._steps = self._segments = 0

    @property
    def way(self) -> tuple[int, int]:
        """(runs of lanes, torch's threads) for the next segment."""
        return self.ways[self.trying]

    def measured(self, steps: int, seconds: float) -> None:
        """A segment of `steps` steps took `seconds`, run the way `way` said."""
        if len(self.ways) == 1:
            return
        self._steps += steps
        self._seconds += seconds
        self._segments += 1
        if self._seconds < self.window_s or self._segments < 2:
            return
        rate, way = self._seconds / self._steps, self.trying
        self._seconds, self._steps, self._segments = 0.0, 0, 0
        before, self.speed[way] = self.speed[way], rate
        if way != self.using:  # a trial of the other way: it takes over if faster now
            if rate < self.speed[self.using]:
                self.using, self.wait = way, FIRST_WAIT
            else:
                self.wait = min((4 if self.using == 0 else 2) * self.wait, self.max_wait)
            self.trying, self.countdown = self.using, self.wait
            return
        if before is not None and rate > 1.5 * before:  # slowed down: the other way may be faster now
            self.wait, self.countdown = FIRST_WAIT, 0
        self.countdown -= 1
        if self.countdown <= 0:
            self.trying = 1 - self.using
