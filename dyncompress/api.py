"""The Python API, shaped like the standard library's `lzma` / `bz2`.

    data = dyncompress.compress(text, lanes=8)
    assert dyncompress.decompress(data) == text
    with dyncompress.open("file.dc", "wt") as f: f.write("...")

Incremental `Compressor` / `Decompressor` objects stream block by block with
bounded memory; the command line is built on them.
"""

from __future__ import annotations

import builtins
import collections
import functools
import importlib.metadata
import io
import os
import platform
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import replace

import numpy as np

from dyncompress import __version__
from dyncompress.auto import PROBE_BYTES, choose_start, is_auto
from dyncompress.coding.codec import Codec, block_spans, fingerprint
from dyncompress.coding.parallel import Pool, decode_frame, decode_one, encode_blocks, encode_frame, worker_settings
from dyncompress.config.levels import (
    AUTO_MODEL,
    DEFAULT_MODEL,
    default_device,
    default_threads,
    make_settings,
    usable_cores,
)
from dyncompress.config.model import Model, ModelError, predictor_record
from dyncompress.config.model import find as find_model
from dyncompress.config.settings import Settings
from dyncompress.errors import DyncompressError
from dyncompress.format.container import (
    END_SIZE,
    Block,
    End,
    FormatError,
    FrameReader,
    Header,
    Index,
    format_version,
    index_size,
    pack_end,
    pack_header,
    pack_index,
    parse_end,
    parse_frame,
    parse_header,
    parse_index,
    stream_digest,
)
from dyncompress.progress import Progress


def resolve_model(model: str | Model | None) -> Model | None:
    """A Model from a name, a path, or a Model; None stays None (online mode)."""
    if model is None or isinstance(model, Model):
        return model
    return find_model(model)


def platform_record(device: str, torch_used: bool = True) -> dict:
    """What made the file: recorded in the header, shown by `info` and if a self-test fails. Without
    torch in the coding (the bits engine alone, which never imports it) its version and CPU
    capability are left out and numba's version stands in their place."""
    record = {"dyncompress": __version__}
    if torch_used:
        import torch

        record["torch"] = torch.__version__
    else:
        record["numba"] = importlib.metadata.version("numba")
    record |= {
        "constriction": importlib.metadata.version("constriction"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if torch_used:
        record["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if device == "cuda":
            record["gpu"] = torch.cuda.get_device_name()
    return record


def _describe(record: dict) -> str:
    keys = ("torch", "machine", "cpu_capability", "gpu")
    return ", ".join(f"{k} {record[k]}" for k in keys if k in record)


class Compressor:
    """Incremental compression: `compress(chunk) -> bytes` any number of times, then `flush()`.

    `model`: an installed model's name, a model file's path, or a `Model`; None for online mode (a
    seeded random start that learns from the stream only); "auto" (the default): the shipped
    default model, or online mode where that model does not fit the input (`auto`; `probe` then
    holds what decided).
    Nothing is coded before the first block is full or `flush()` is called, so an input shorter
    than one block gets the same size-aware settings as a one-shot `compress()` of it.

    `workers`: code the independent frames (`frame_size`) in this many processes, or on a
    `concurrent.futures.Executor` (a cluster engine's, see `cluster`); the output is the same
    bytes as with none. At most a few frames are held in memory. Call `close()` if a run is
    abandoned before `flush()` (it stops the workers).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        model: str | Model | None = AUTO_MODEL,
        size_hint: int | None = None,
        progress: Progress | None = None,
        workers: int | Executor | None = None,
        **overrides,
    ) -> None:
        # "auto": the shipped model, or online mode where it does not fit the input (`auto`), chosen
        # when the first block is read; `probe` is then the model's bits per byte on its start
        self._auto = is_auto(model) and settings is None
        self.model = resolve_model(DEFAULT_MODEL if self._auto else model)
        self._overrides, self._online, self.probe = overrides, {}, None
        self._choose = lambda size: make_settings(
            settings, size_hint=size, model=self.model, **{**self._online, **overrides}
        )
        try:
            self.settings = self._choose(size_hint)
        except ValueError as e:
            raise DyncompressError(str(e)) from None
        self._size_known, self._size_hint = size_hint is not None, size_hint
        self._workers, self._own_threads = workers, "threads" in overrides
        self._codec: Codec | None = None
        self._started = False
        self._pool: Pool | None = None
        self._pending = bytearray()
        self._progress = progress
        self._digest = stream_digest()
        self._total = self._blocks = 0
        self._frames: list[tuple[int, int]] = []  # (original, compressed) bytes of every frame done
        self._frame = [0, 0]  # the frame being coded here (serial)
        self._offset = 0  # bytes of the stream so far
        self._nats = 0.0
        self._finished = False

    def _start(self, size: int | None) -> bytes:
        """Settle the settings (size known only if the input ended within one block) and the header."""
        try:
            if self._auto:
                known = size if size is not None else self._size_hint
                sample = bytes(self._pending[:PROBE_BYTES])
                self.model, self._online, self.probe = choose_start(self.model, sample, known, self._overrides)
                self.settings = self._choose(known)
            elif size is not None and not self._size_known:
                self.settings = self._choose(size)
            self._codec = Codec(self.settings, self.model)
            header = stream_header(self.settings, self.model)
        except (ValueError, RuntimeError) as e:
            raise DyncompressError(str(e)) from None
        self._started = True
        if not (self._size_known and self._size_hint <= self.settings.frame_size):  # one frame: code it here
            self._pool = _pool(self._workers, self.settings, self._progress)
        return header

    def _emit_blocks(self, final: bool) -> bytes:
        out = []
        if not self._started:
            if not final and len(self._pending) < self.settings.block_size:
                return b""
            out.append(self._start(len(self._pending) if final else None))
        if self._pool is not None:
            self._emit_frames(final, out)
        else:
            self._emit_serial(final, out)
        data = b"".join(out)
        self._offset += len(data)
        return data

    def _emit_serial(self, final: bool, out: list[bytes]) -> None:
        bs, fs = self.settings.block_size, self.settings.frame_size
        while self._pending:
            n = min(bs, fs - self._frame[0]) if fs else bs
            if len(self._pending) < n and not final:
                return
            data = bytes(self._pending[:n])
            del self._pending[:n]
            if self._codec is None:  # a new frame: a fresh start
                self._codec = Codec(self.settings, self.model)
            packed = encode_blocks(self._codec, data, self._progress)
            out.append(packed)
            self._count(data, 1)
            self._frame[0] += len(data)
            self._frame[1] += len(packed)
            if self._frame[0] == fs:
                self._end_frame()

    def _end_frame(self) -> None:
        if self._frame[0]:
            self._frames.append((self._frame[0], self._frame[1]))
            self._nats += self._codec.nats if self._codec else 0.0
        self._frame, self._codec = [0, 0], None

    def _emit_frames(self, final: bool, out: list[bytes]) -> None:
        fs, settings = self.settings.frame_size, worker_settings(self.settings, self._own_threads)
        while len(self._pending) >= fs or (final and self._pending):
            data = bytes(self._pending[:fs])
            del self._pending[:fs]
            self._pool.submit(len(data), encode_frame, settings, self.model, data)
            self._count(data, len(block_spans(0, len(data), settings.block_size)))
            self._collect(out, False)
        if final:
            self._collect(out, True)

    def _collect(self, out: list[bytes], wait_all: bool) -> None:
        for (packed, nats), size in self._pool.results(wait_all):
            out.append(packed)
            self._frames.append((size, len(packed)))
            self._nats += nats

    def _count(self, data: bytes, blocks: int) -> None:
        self._digest.update(data)
        self._total += len(data)
        self._blocks += blocks

    def compress(self, data: bytes) -> bytes:
        if self._finished:
            raise ValueError("compressor has been flushed")
        self._pending += data
        return self._emit_blocks(final=False)

    def flush(self) -> bytes:
        if self._finished:
            raise ValueError("repeated call to flush()")
        self._finished = True
        out = self._emit_blocks(final=True)
        if self._pool is not None:
            self._pool.close()
        self._end_frame()
        return out + stream_tail(self._frames, self._total, self._blocks, self._digest.digest(), self._offset)

    def close(self) -> None:
        """Stop the workers of an unfinished run (nothing more can be coded)."""
        self._finished = True
        if self._pool is not None:
            self._pool.kill()
            self._pool = None

    @property
    def ideal_bits(self) -> float:
        """-log2 p summed over the bytes coded so far (the model's own estimate)."""
        nats = self._nats + (self._codec.nats if self._codec and self._frame[0] else 0.0)
        return nats / 0.6931471805599453


def stream_header(settings: Settings, model: Model | None) -> bytes:
    """The header of a stream coded with `settings` from `model` (None: online mode)."""
    meta = {
        "settings": settings.to_dict(),
        **predictor_record(model),
        "fingerprint": fingerprint(settings, model),
        "platform": platform_record(settings.device, settings.uses_torch),
    }
    return pack_header(meta)


def stream_tail(frames: list[tuple[int, int]], total: int, blocks: int, digest: bytes, offset: int) -> bytes:
    """A stream's frame index and end marker, after `offset` bytes of header and blocks."""
    index = pack_index(frames)
    return index + pack_end(total, blocks, digest, len(frames), offset + len(index))


def one_frame_stream(settings: Settings, model: Model | None, data: bytes, packed: bytes) -> bytes:
    """The whole stream of an input that is one frame (0 < len(data) <= frame size), its blocks
    `packed` coded elsewhere by `encode_frame`: the bytes `Compressor` writes for it."""
    head = stream_header(settings, model) + packed
    digest = stream_digest()
    digest.update(data)
    blocks = len(block_spans(0, len(data), settings.block_size))
    return head + stream_tail([(len(data), len(packed))], len(data), blocks, digest.digest(), len(head))


def _pool(workers: int | Executor | None, settings: Settings, progress: Progress | None) -> Pool | None:
    """Worker processes (or the executor given) for frames; None to code here (one worker, or one frame)."""
    if workers is None or not settings.frame_size:
        return None
    if isinstance(workers, int):
        workers = workers or usable_cores()
        if workers <= 1:
            return None
    return Pool(workers, progress)


class Decompressor:
    """Incremental decompression: `decompress(chunk) -> bytes`; `eof` once the end marker is read.

    Blocks are returned only after their checksum has been verified: bytes that
    came out wrong are never handed out.
    """

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        progress: Progress | None = None,
        device: str | None = None,
        threads: int | None = None,
        workers: int | Executor | None = None,
    ) -> None:
        """`model`: the model to decode with (name, path or Model); default: the one the header names.
        `device`, `threads`: where to decode [cuda when available, else cpu; the usable cores, at
        most 4]. Any device and thread count give the same bytes (the arithmetic is exact).
        `workers`: decode the independent frames in this many processes (0: one per core), or on
        an executor; the bytes are the same. Call `close()` if a run is abandoned."""
        self._given = model
        self._device, self._threads, self._workers = device, threads, workers
        self.model: Model | None = None
        self._reader = FrameReader()
        self._codec: Codec | None = None
        self._pool: Pool | None = None
        self.settings: Settings | None = None
        self.meta: dict | None = None
        self._progress = progress
        self._digest = stream_digest()
        self._total = self._blocks = 0
        self._frames: list[tuple[int, int]] = []
        self._frame = [0, 0]
        self._frame_blocks: list[Block] = []  # the frame being gathered for a worker
        self._in_flight: collections.deque[int] = collections.deque()  # blocks of each frame at the workers
        self._indexed = False

    @property
    def eof(self) -> bool:
        return self._reader.ended

    @property
    def unused_data(self) -> bytes:
        return self._reader.unused

    @property
    def needs_input(self) -> bool:
        return not self.eof

    def start(self, meta: dict) -> None:
        """Take a stream's header: its settings, model and the self-test."""
        try:
            settings = Settings.from_dict(meta["settings"])
            recorded = meta["platform"]
            expected = str(meta["fingerprint"])
            needed = meta["model"]
            if needed is not None:
                needed = {"name": str(needed["name"]), "sha256": str(needed["sha256"])}
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"corrupt or unsupported header ({e})") from None
        model = self._find_model(needed)
        # the device and thread count are the decoder's own: they change the speed, not the bits
        device = self._device or (default_device() if settings.uses_torch else "cpu")
        threads = self._threads or default_threads()
        settings = replace(settings, device=device, threads=threads)
        try:
            got = fingerprint(settings, model)  # the self-test: the same on every platform
        except (ValueError, RuntimeError) as e:
            raise DyncompressError(str(e)) from None
        if got != expected:
            here = platform_record(settings.device, settings.uses_torch)
            raise DyncompressError(
                f"self-test failed: the exact arithmetic gave fingerprint {got} here and {expected} where the "
                f"file was made ({_describe(recorded)}; here {_describe(here)}): "
                "a bug, please report it; nothing was decoded"
            )
        self.meta, self.settings, self.model = meta, settings, model
        self._pool = _pool(self._workers, settings, self._progress)

    def _find_model(self, needed: dict | None) -> Model | None:
        """The model the header names, checked by hash; a user-given one must match it too."""
        if needed is None:
            return None  # online mode: a given model is not needed, and not used
        name, want = needed["name"], needed["sha256"]
        if self._given is not None:
            model = resolve_model(self._given)
        else:
            try:
                model = find_model(name)
            except ModelError:
                raise ModelError(
                    f"this file was encoded with model {name} (sha256 {want[:16]}), which is not installed "
                    "here; give its file with --model PATH"
                ) from None
        if model.sha256 != want:
            raise ModelError(
                f"wrong model: the file needs {name} with sha256 {want[:16]}, "
                f"{model.path or model.name} has sha256 {model.sha256[:16]}"
            )
        return model

    def frames_decoded(self, frames) -> Iterator[bytes]:
        """The bytes of independent frames, given as (blocks, first block's number, size), in order
        (in the workers, if any)."""
        settings = worker_settings(self.settings, bool(self._threads))
        for blocks, first, size in frames:
            if self._pool is None:
                yield decode_frame(self.settings, self.model, blocks, first, self._progress)
                continue
            self._pool.submit(size, decode_frame, settings, self.model, blocks, first)
            yield from (data for data, _ in self._pool.results())
        if self._pool is not None:
            yield from (data for data, _ in self._pool.results(wait_all=True))

    def _block(self, block: Block, out: list[bytes]) -> None:
        fs = self.settings.frame_size
        if fs and block.orig_len > fs - self._frame[0]:
            raise FormatError("corrupt stream (a block crosses a frame's end)")
        self._frame[0] += block.orig_len
        self._frame[1] += block.packed_len
        if self._pool is not None:
            self._frame_blocks.append(block)
        else:
            if self._codec is None:  # a new frame: a fresh start
                self._codec = Codec(self.settings, self.model)
            self._emit(decode_one(self._codec, block, self._blocks + 1, self._progress), 1, out)
        if self._frame[0] == fs:
            self._end_frame(out)

    def _end_frame(self, out: list[bytes]) -> None:
        if self._frame[0]:
            self._frames.append((self._frame[0], self._frame[1]))
        if self._frame_blocks:
            first = self._blocks + sum(self._in_flight) + 1
            settings = worker_settings(self.settings, bool(self._threads))
            self._pool.submit(self._frame[0], decode_frame, settings, self.model, self._frame_blocks, first)
            self._in_flight.append(len(self._frame_blocks))
            self._collect(out, False)
        self._frame, self._codec, self._frame_blocks = [0, 0], None, []

    def _collect(self, out: list[bytes], wait_all: bool) -> None:
        for data, _ in self._pool.results(wait_all):
            self._emit(data, self._in_flight.popleft(), out)

    def _emit(self, data: bytes, blocks: int, out: list[bytes]) -> None:
        self._digest.update(data)
        self._total += len(data)
        self._blocks += blocks
        out.append(data)

    def decompress(self, data: bytes) -> bytes:
        if self.eof:
            raise EOFError("already at end of stream")
        self._reader.push(data)
        out: list[bytes] = []
        for item in self._reader.frames():
            if isinstance(item, Header):
                self.start(item.meta)
            elif isinstance(item, Block):
                self._block(item, out)
            elif isinstance(item, Index):
                self._end_frame(out)
                if self._pool is not None:
                    self._collect(out, True)
                if list(item.frames) != self._frames:
                    raise FormatError("corrupt stream (the frame index does not match the frames read)")
                self._indexed = True
            else:
                self._end(item, out)
        return b"".join(out)

    def _end(self, end: End, out: list[bytes]) -> None:
        if self._reader.version >= 3 and not (self._indexed and len(self._frames) == end.frames):
            raise FormatError("corrupt stream (the frame index is missing or does not match the end marker)")
        self._end_frame(out)
        if (end.total_len, end.blocks, end.digest) != (self._total, self._blocks, self._digest.digest()):
            raise FormatError("corrupt stream (end marker does not match the blocks read)")
        if end.stream_len and end.stream_len != self._reader.offset:
            raise FormatError("corrupt stream (the end marker's stream length is wrong)")
        if self._pool is not None:
            self._pool.close()

    def finish(self) -> None:
        """Raise if the stream ended before its end marker."""
        self._reader.finish()

    def close(self) -> None:
        """Stop the workers of an unfinished run."""
        if self._pool is not None:
            self._pool.kill()
            self._pool = None


def compress(
    data: bytes, model: str | Model | None = AUTO_MODEL, workers: int | Executor | None = None, **settings
) -> bytes:
    """`data` as one .dc stream (`workers`: code its frames in parallel, as for `Compressor`)."""
    comp = Compressor(model=model, size_hint=len(data), workers=workers, **settings)
    try:
        return comp.compress(data) + comp.flush()
    finally:
        comp.close()


def iter_decompress(
    read: Callable[[int], bytes],
    progress: Progress | None = None,
    chunk: int = 1 << 16,
    model: str | Model | None = None,
    device: str | None = None,
    threads: int | None = None,
    workers: int | Executor | None = None,
):
    """Decoded pieces of one or more concatenated .dc streams pulled through `read(n)`.

    `model`: decode with this model (name, path or Model) instead of the installed one the
    header names; it must have the recorded sha256. `device`, `threads`, `workers`: as for
    `Decompressor`. Raises DyncompressError on truncation, corruption, trailing garbage or a wrong
    model.
    """
    model = resolve_model(model)
    start = functools.partial(
        Decompressor, model=model, progress=progress, device=device, threads=threads, workers=workers
    )
    dec, pending, later = start(), b"", False
    try:
        while True:
            data = pending or read(chunk)
            pending = b""
            if not data:
                dec.finish()
                return
            try:
                out = dec.decompress(data)
            except FormatError:
                if later and dec.meta is None:
                    raise FormatError("trailing garbage after the end of the stream") from None
                raise
            if out:
                yield out
            if dec.eof:
                pending = dec.unused_data or read(chunk)
                if not pending:
                    return
                dec, later = start(), True
    finally:
        dec.close()


def decompress(
    data: bytes, model: str | Model | None = None, device: str | None = None, workers: int | Executor | None = None
) -> bytes:
    """Decode one or more concatenated .dc streams (`model`, `device`, `workers`: as for `iter_decompress`)."""
    view = io.BytesIO(data)
    return b"".join(iter_decompress(view.read, model=model, device=device, workers=workers))


# --- random access -------------------------------------------------------------------


def read_range(
    file,
    start: int = 0,
    end: int | None = None,
    *,
    model: str | Model | None = None,
    device: str | None = None,
    threads: int | None = None,
    workers: int | Executor | None = None,
    progress: Progress | None = None,
) -> bytes:
    """Bytes [start, end) of what a .dc file (a path, or a seekable binary file) holds, decoding
    only the frames that hold them (found through the frame index at the end of each stream).
    `end` None: to the end; past the end: clipped. The other keywords: as for `Decompressor`."""
    own = isinstance(file, (str, bytes, os.PathLike))
    f = builtins.open(file, "rb") if own else file
    try:
        streams = _streams(f)
        total = sum(e.total_len for _, e, _ in streams)
        if not 0 <= start <= total or end is not None and end < start:
            shown = "" if end is None else f"{end:,}"
            raise DyncompressError(f"range {start:,}:{shown} is outside the data's {total:,} bytes")
        end = total if end is None else min(end, total)
        model = resolve_model(model)
        pieces, base = [], 0
        for offset, marker, index in streams:
            if start < base + marker.total_len and base < end:
                dec = Decompressor(model=model, progress=progress, device=device, threads=threads, workers=workers)
                try:
                    here = (max(start - base, 0), min(end - base, marker.total_len))
                    pieces.append(_stream_range(f, dec, offset, marker, index, *here))
                finally:
                    dec.close()
            base += marker.total_len
        return b"".join(pieces)
    finally:
        if own:
            f.close()


def _streams(f) -> list[tuple[int, End, Index]]:
    """(offset, end marker, frame index) of every stream in the file, walking back from its end."""
    size = f.seek(0, io.SEEK_END)
    f.seek(0)
    if format_version(f.read(16)) < 3:
        raise FormatError("this file is format 2, which has no frame index: decode it whole")
    streams, pos = [], size
    while pos > 0:
        if pos < END_SIZE:
            raise FormatError("truncated file (no end marker where a stream should end)")
        f.seek(pos - END_SIZE)
        marker = parse_end(f.read(END_SIZE))
        indexed = index_size(marker.frames)
        if not END_SIZE + indexed < marker.stream_len <= pos:
            raise FormatError("corrupt end marker (impossible stream length)")
        f.seek(pos - END_SIZE - indexed)
        parsed = parse_index(f.read(indexed), 0)
        if parsed is None or parsed[1] != indexed or len(parsed[0].frames) != marker.frames:
            raise FormatError("corrupt frame index")
        pos -= marker.stream_len
        streams.append((pos, marker, parsed[0]))
    return streams[::-1]


def _stream_range(f, dec: Decompressor, offset: int, marker: End, index: Index, start: int, end: int) -> bytes:
    """Bytes [start, end) of the stream at `offset`: its header, then the frames that hold them."""
    f.seek(offset)
    buf = b""
    while (parsed := parse_header(buf)) is None:
        more = f.read(1 << 16)
        if not more:
            raise FormatError("truncated file (incomplete header)")
        buf += more
    meta, header_len = parsed
    dec.start(meta)
    settings = dec.settings
    frames = index.frames
    if header_len + sum(c for _, c in frames) + index_size(len(frames)) + END_SIZE != marker.stream_len:
        raise FormatError("corrupt frame index (its frames do not fill the stream)")
    if sum(o for o, _ in frames) != marker.total_len:
        raise FormatError("corrupt frame index (its frames' sizes do not add up)")
    jobs, orig, comp, blocks_before, first_at = [], 0, offset + header_len, 0, None
    for size, packed in frames:
        if orig < end and start < orig + size:
            first_at = orig if first_at is None else first_at
            jobs.append((size, comp, packed, blocks_before + 1))
        orig, comp = orig + size, comp + packed
        blocks_before += -(-size // settings.block_size)
    out = b"".join(dec.frames_decoded(_read_blocks(f, settings, *job) for job in jobs))
    return out[start - first_at : end - first_at] if jobs else b""


def _read_blocks(f, settings: Settings, size: int, at: int, packed: int, first: int) -> tuple[list[Block], int, int]:
    """The blocks of one frame, read from the file: (blocks, first block's number, original size)."""
    f.seek(at)
    raw, blocks, pos = f.read(packed), [], 0
    while pos < len(raw):
        parsed = parse_frame(raw, pos, settings.block_size)
        if parsed is None or not isinstance(parsed[0], Block):
            raise FormatError("corrupt frame index (a frame does not hold whole blocks)")
        blocks.append(parsed[0])
        pos = parsed[1]
    if len(raw) != packed or sum(b.orig_len for b in blocks) != size:
        raise FormatError("corrupt frame index (a frame's blocks do not match it)")
    return blocks, first, size


# --- file objects -------------------------------------------------------------------


class _Raw(io.RawIOBase):
    """Closes the underlying file when it opened that file itself."""

    def __init__(self, fp, own: bool) -> None:
        self._fp, self._own = fp, own

    def close(self) -> None:
        if not self.closed:
            try:
                self._finish()
            finally:
                super().close()
                if self._own:
                    self._fp.close()

    def _finish(self) -> None:
        pass


class _RawReader(_Raw):
    def __init__(self, fp, own: bool, model) -> None:
        super().__init__(fp, own)
        self._pieces = iter_decompress(fp.read, model=model)
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if not self._out:
            self._out = next(self._pieces, b"")
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


class _RawWriter(_Raw):
    def __init__(self, fp, own: bool, settings: dict) -> None:
        super().__init__(fp, own)
        self._comp = Compressor(**settings)

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self._fp.write(self._comp.compress(bytes(b)))
        return len(b)

    def _finish(self) -> None:
        self._fp.write(self._comp.flush())


def open(file, mode: str = "rb", *, encoding=None, errors=None, newline=None, **settings):  # noqa: A001
    """Open a .dc file (path or binary file object) like `lzma.open`: 'rb', 'wb', 'xb', 'ab', or text 'rt', ...

    Writing takes `compress`'s keywords (`model=`, `level=`, ...); reading takes only `model=`.
    """
    text = "t" in mode
    bmode = mode.replace("t", "").replace("b", "")
    if bmode not in ("r", "w", "x", "a") or ("t" in mode and "b" in mode):
        raise ValueError(f"invalid mode {mode!r}")
    if not text and (encoding or errors or newline):
        raise ValueError("encoding, errors and newline apply only to text mode")
    if bmode == "r" and set(settings) - {"model"}:
        raise ValueError("settings apply only to writing; a reader takes them from the file")
    own = isinstance(file, (str, bytes, os.PathLike))
    fp = builtins.open(file, bmode + "b") if own else file
    try:
        raw = _RawReader(fp, own, settings.get("model")) if bmode == "r" else _RawWriter(fp, own, settings)
    except BaseException:
        if own:
            fp.close()
        raise
    buffered = io.BufferedReader(raw) if bmode == "r" else io.BufferedWriter(raw)
    if text:
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, newline=newline)
    return buffered
