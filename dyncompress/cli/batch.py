"""Many files at once: with `-j` (or a cluster), each small file is one job for the worker pool,
coded while the files before it are written.

`-j` alone spreads one file's frames over the workers, so a file of one frame (every file up to
`Settings.frame_size`, 4 MiB by default) kept one worker busy and the others idle. `Ahead` reads
the files to come, in order, and hands each that fits in one frame to the pool: `encode_frame`
for an input (the main process then writes the header, index and end marker, so the file is the
one a serial encoder writes: `api.one_frame_stream`), a whole-stream decode for a small .dc file.
At most the pool's `ahead` files are held in memory. Results come back in the order of the
command line, and the caller writes each exactly as it writes a file coded in the main process
(a temporary file, then a rename). Files that do not qualify (stdin, slices, large files, a .dc
to encode) take the ordinary path, in their turn.
"""

from __future__ import annotations

import collections
import io
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor

from dyncompress.coding.parallel import Pool, encode_frame, worker_settings
from dyncompress.config.levels import DEFAULT_MODEL, make_settings, usable_cores
from dyncompress.config.model import Model
from dyncompress.config.settings import Settings
from dyncompress.errors import DyncompressError
from dyncompress.format.container import END_SIZE, parse_end

MAX_DECODED = 1 << 26  # a .dc file whose output is larger decodes in the main process (its frames in parallel)


def _timed(fn: Callable, *args) -> tuple[object, float]:
    started = time.monotonic()
    return fn(*args), time.monotonic() - started


def encode_job(settings: Settings, model: Model | None, data: bytes) -> tuple[object, float]:
    """In a worker: the blocks of a one-frame input (and the seconds it took)."""
    return _timed(encode_frame, settings, model, data)


def _decode(blob: bytes, model: Model | None, device: str | None) -> bytes:
    from dyncompress.api import iter_decompress

    return b"".join(iter_decompress(io.BytesIO(blob).read, model=model, device=device, threads=1))


def decode_job(blob: bytes, model: Model | None, device: str | None) -> tuple[object, float]:
    """In a worker: a whole small .dc stream decoded (and the seconds it took)."""
    return _timed(_decode, blob, model, device)


class Ahead:
    """Files coded ahead in a pool, in command-line order. `plan(path)` returns (the input's bytes,
    the job and its arguments, what turns the job's result into the output's bytes), or None for a
    file to leave to the ordinary path. `take(path)`, called once per file in the same order,
    returns (output bytes, seconds, the input's bytes) for a planned file, else None."""

    def __init__(self, paths: tuple[str, ...], workers: int | Executor, plan: Callable) -> None:
        self._plan, self._paths = plan, iter(enumerate(paths))
        self._pool = Pool(workers)
        self._queued: collections.deque[tuple[int, str, bytes, Callable]] = collections.deque()
        self._turn = 0
        self._fill()

    def _fill(self) -> None:
        while not self._pool.full:
            nxt = next(self._paths, None)
            if nxt is None:
                return
            n, path = nxt
            planned = self._plan(path)
            if planned is not None:
                data, job, finish = planned
                self._pool.submit(len(data), *job)
                self._queued.append((n, path, data, finish))

    def take(self, path: str) -> tuple[bytes, float, bytes] | None:
        turn, self._turn = self._turn, self._turn + 1
        if not self._queued or self._queued[0][0] != turn:
            return None
        _, queued_path, data, finish = self._queued.popleft()
        assert queued_path == path, (queued_path, path)
        (result, seconds), _ = next(self._pool.results(wait_all=True))
        self._fill()
        return finish(result), seconds, data

    def close(self) -> None:
        self._pool.close()

    def kill(self) -> None:
        self._pool.kill()


def pool_workers(workers: int | Executor | None, files: tuple[str, ...]) -> int | Executor | None:
    """The pool for `Ahead`: an executor as it is; a count (0: the usable cores) if above 1 and
    there is more than one file; else None (one file: its frames are the parallel work)."""
    if len(files) < 2 or workers is None:
        return None
    if isinstance(workers, int):
        workers = workers or usable_cores()
        return workers if workers > 1 else None
    return workers


def _small_file(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of 1 ... `limit` bytes, else None (the ordinary path reports
    whatever is wrong with it)."""
    if path == "-" or not os.path.isfile(path):
        return None
    try:
        if not 0 < os.path.getsize(path) <= limit:
            return None
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    return data if 0 < len(data) <= limit else None


def _pooled_limit(settings: Settings) -> int:
    """The largest file the pool codes as one job: one frame (with frame size 0, where any file is one
    frame, one block: what bounds the memory of the files read ahead)."""
    return settings.frame_size or settings.block_size


def encode_plan(level, model: Model | None, knobs: dict, skip: Callable[[str], bool]) -> Callable:
    """`Ahead`'s plan for `encode`: a file that fits in one frame, with the settings the ordinary
    path would choose for its size (with `--frame-size 0`, every file is one frame: those of at
    most one block go to the pool)."""
    from dyncompress.api import one_frame_stream, resolve_model
    from dyncompress.auto import choose_start, is_auto

    auto = is_auto(model)  # as `Compressor` does it, file by file
    base = resolve_model(DEFAULT_MODEL) if auto else model
    limit = _pooled_limit(make_settings(level=level, model=base, **knobs))

    def plan(path: str):
        if skip(path):
            return None
        data = _small_file(path, limit)
        if data is None:
            return None
        try:
            start, online = base, {}
            if auto:
                start, online, _ = choose_start(base, data, len(data), {"level": level, **knobs})
            settings = make_settings(level=level, model=start, size_hint=len(data), **{**online, **knobs})
        except ValueError:
            return None
        if len(data) > _pooled_limit(settings):
            return None
        job = (encode_job, worker_settings(settings, "threads" in knobs), start, data)
        return data, job, lambda result: one_frame_stream(settings, start, data, result[0])

    return plan


def decode_plan(model: Model | None, device: str | None, skip: Callable[[str], bool]) -> Callable:
    """`Ahead`'s plan for `decode` / `test`: a .dc file holding one stream of at most one frame
    (its end marker says so) and at most `MAX_DECODED` bytes of output."""

    def plan(path: str):
        if skip(path):
            return None
        blob = _small_file(path, MAX_DECODED)
        if blob is None or len(blob) < END_SIZE:
            return None
        try:
            end = parse_end(blob[-END_SIZE:])
        except DyncompressError:  # not format 5, or damaged: the ordinary path says which
            return None
        if end.stream_len != len(blob) or end.frames > 1 or end.total_len > MAX_DECODED:
            return None
        return blob, (decode_job, blob, model, device), lambda result: result

    return plan
