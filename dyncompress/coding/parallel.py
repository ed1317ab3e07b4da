"""Independent frames coded elsewhere: worker processes, or any `concurrent.futures` executor.

Every frame of a stream starts from the model (or the online seed) afresh (`Settings.frame_size`),
so frames are jobs: `encode_frame` and `decode_frame` take a frame and return its blocks or its
bytes, in a worker process (`Pool(n)`) or on a cluster engine's executor (`Pool(executor)`, see
`cluster`). They run the same code as the serial path in `api`, with the same settings, so a frame
coded in a worker is the frame the serial encoder would have written: the arithmetic is exact, and
the file is the same for any number of workers.

`Pool` keeps the jobs in order and bounded: at most `ahead` frames in flight (their bytes are held
in memory), results handed back in the order submitted. A worker that dies, or any job that fails,
fails the whole run with one line; Ctrl-C (in the main process: workers ignore it) kills them all.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import multiprocessing
import signal
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

from dyncompress.coding.codec import Codec, block_spans, decode_block, encode_block
from dyncompress.config.model import Model
from dyncompress.config.settings import Settings
from dyncompress.errors import DyncompressError
from dyncompress.format.container import Block, block_digest, pack_block
from dyncompress.progress import Progress


class WorkerDied(DyncompressError):
    """A worker process of our own died: the pool is broken, and every job still in it is lost."""


# --- the jobs (also the serial path's building blocks) ------------------------------


def encode_blocks(codec: Codec, data: bytes, progress: Progress | None = None) -> bytes:
    """One block, packed: range-coded, or stored when coding would have expanded it."""
    payload = encode_block(codec, data, progress)
    stored = len(payload) >= len(data)
    return pack_block(data, data if stored else payload, stored)


def decode_one(codec: Codec, block: Block, number: int, progress: Progress | None = None) -> bytes:
    """One block's bytes, checked against its digest; `number` names it in errors (1-based)."""
    if block.stored:  # run the model over it all the same, as the encoder did
        encode_block(codec, block.payload, progress)
        data = block.payload
    else:
        try:
            data = decode_block(codec, block.payload, block.orig_len, progress)
        except AssertionError as e:
            # constriction's range decoder met data its model calls impossible: the models differ
            raise DyncompressError(
                f"block {number}: the decoder diverged from the encoder ({e}); nothing of this block was output"
            ) from None
    if block_digest(data) != block.digest:
        raise DyncompressError(
            f"block {number}: the decoder diverged from the encoder (checksum mismatch); "
            "nothing of this block was output"
        )
    return data


def encode_frame(
    settings: Settings, model: Model | None, data: bytes, progress: Progress | None = None
) -> tuple[bytes, float]:
    """A whole frame from a fresh start: (its packed blocks, their ideal code length in nats).
    `progress`: by default, a worker's (the pool's shared count)."""
    codec, progress = Codec(settings, model), progress or _progress
    packed = [encode_blocks(codec, data[a:b], progress) for a, b in block_spans(0, len(data), settings.block_size)]
    return b"".join(packed), codec.nats


def decode_frame(
    settings: Settings, model: Model | None, blocks: list[Block], first: int, progress: Progress | None = None
) -> bytes:
    """A whole frame's bytes from a fresh start; `first` is its first block's number (for errors)."""
    codec, progress = Codec(settings, model), progress or _progress
    return b"".join(decode_one(codec, block, first + i, progress) for i, block in enumerate(blocks))


def worker_settings(settings: Settings, keep_threads: bool) -> Settings:
    """A frame job's settings: the stream's, on one CPU thread unless the user chose a count (speed
    only: the bits are the same)."""
    return settings if keep_threads else replace(settings, threads=1)


# --- in a worker process -------------------------------------------------------------

_counter = None  # the pool's shared count of bytes done, in a worker process


def _progress(n: int) -> None:
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += n


def _start_worker(counter) -> None:
    global _counter
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    if hasattr(signal, "pthread_sigmask"):  # born with it blocked (see `_spawning`): now ignored
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _counter = counter
    import torch

    torch.set_num_threads(1)
    # at the worker's exit (finalizers are still run by multiprocessing's own atexit handler), so
    # that the interpreter's last collections skip torch's objects: about a second per worker
    atexit.register(gc.freeze)


@contextlib.contextmanager
def _spawning(own: bool):
    """Ctrl-C blocked while a submit may start a worker: the new process inherits the mask, so a
    Ctrl-C to the terminal's process group cannot hit it before it has set SIGINT to ignored (it
    would print a traceback). Here, one that arrives meanwhile is delivered when the block ends."""
    if not own or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Pool:
    """Jobs in order, at most `ahead` in flight: in `workers` processes of our own, or on an executor."""

    def __init__(self, workers: int | Executor, progress: Progress | None = None, ahead: int | None = None) -> None:
        self._progress = progress
        if isinstance(workers, int):
            context = multiprocessing.get_context("spawn")  # no fork of a process that runs torch threads
            self._counter = context.Value("q", 0)
            self._executor: Executor = ProcessPoolExecutor(
                workers, context, initializer=_start_worker, initargs=(self._counter,)
            )
            self._own = True
        else:
            self._counter, self._executor, self._own = None, workers, False
        self.ahead = ahead or 2 * (workers if isinstance(workers, int) else getattr(workers, "slots", 2))
        self._jobs: collections.deque[tuple[Future, int]] = collections.deque()
        self._reported = 0

    def submit(self, size: int, fn, *args) -> None:
        """Run `fn(*args)`, a job on `size` bytes (for progress when the workers cannot report)."""
        with _spawning(self._own):
            self._jobs.append((self._executor.submit(fn, *args), size))

    @property
    def full(self) -> bool:
        return len(self._jobs) >= self.ahead

    def results(self, wait_all: bool = False) -> Iterator[tuple[object, int]]:
        """(result, size) of the leading finished jobs, in order; waits while the pool is full (or,
        with `wait_all`, until every job is done)."""
        while self._jobs:
            future, size = self._jobs[0]
            if not future.done() and not (wait_all or len(self._jobs) > self.ahead):
                break
            self._wait(future)
            self._jobs.popleft()
            result = self._result(future)
            self._report(size)
            yield result, size

    def _wait(self, future: Future) -> None:
        while not wait([future], timeout=0.25).done:
            self._report(0)

    def _report(self, finished: int) -> None:
        if self._progress is None:
            return
        if self._counter is None:  # the workers cannot tell: count a frame when it is done
            if finished:
                self._progress(finished)
            return
        done = self._counter.value
        if done > self._reported:
            self._progress(done - self._reported)
            self._reported = done

    @staticmethod
    def _result(future: Future):
        try:
            return future.result()
        except DyncompressError:
            raise
        except BrokenProcessPool:
            raise WorkerDied("a worker process died (killed, or out of memory); the run was stopped") from None
        except Exception as e:  # a job that failed on an engine, or a worker lost there
            raise DyncompressError(f"a frame job failed: {type(e).__name__}: {e}") from None

    def close(self) -> None:
        """Wait for the workers to exit (after the last result)."""
        if self._own:
            self._executor.shutdown(wait=True)

    def kill(self) -> None:
        """Stop at once: drop queued jobs, end the running ones (our own processes; an engine's are
        asked to cancel)."""
        for future, _ in self._jobs:
            future.cancel()
        self._jobs.clear()
        if not self._own:
            return
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)
