"""The Python API, shaped like the standard library's `lzma` / `bz2`.

    data = dyncompress.compress(text, lanes=8)
    assert dyncompress.decompress(data) == text
    with dyncompress.open("file.dc", "wt") as f: f.write("...")

Incremental `Compressor` / `Decompressor` objects stream block by block with
bounded memory; the command line is built on them.
"""

from __future__ import annotations

import builtins
import functools
import importlib.metadata
import io
import os
import platform
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from . import __version__
from .codec import Codec, decode_block, encode_block, fingerprint
from .container import (
    Block,
    FormatError,
    FrameReader,
    Header,
    block_digest,
    pack_block,
    pack_end,
    pack_header,
    stream_digest,
)
from .errors import DyncompressError
from .model import DEFAULT_MODEL, Model, ModelError
from .model import find as find_model
from .progress import Progress
from .settings import Settings, default_device, default_threads, make_settings


def resolve_model(model: str | Model | None) -> Model | None:
    """A Model from a name, a path, or a Model; None stays None (online mode)."""
    if model is None or isinstance(model, Model):
        return model
    return find_model(model)


def platform_record(device: str) -> dict:
    """What made the file: recorded in the header, shown by `info` and if a self-test fails."""
    record = {
        "dyncompress": __version__,
        "torch": torch.__version__,
        "constriction": importlib.metadata.version("constriction"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if device == "cuda":
        record["gpu"] = torch.cuda.get_device_name()
    return record


def _describe(record: dict) -> str:
    keys = ("torch", "machine", "cpu_capability", "gpu")
    return ", ".join(f"{k} {record[k]}" for k in keys if k in record)


class Compressor:
    """Incremental compression: `compress(chunk) -> bytes` any number of times, then `flush()`.

    `model`: an installed model's name, a model file's path, or a `Model` (default: the shipped
    default model); None for online mode (a seeded random start that learns from the stream only).
    Nothing is coded before the first block is full or `flush()` is called, so an input shorter
    than one block gets the same size-aware settings as a one-shot `compress()` of it.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        model: str | Model | None = DEFAULT_MODEL,
        size_hint: int | None = None,
        progress: Progress | None = None,
        **overrides,
    ) -> None:
        self.model = resolve_model(model)
        self._choose = lambda size: make_settings(settings, size_hint=size, model=self.model, **overrides)
        try:
            self.settings = self._choose(size_hint)
        except ValueError as e:
            raise DyncompressError(str(e)) from None
        self._size_known = size_hint is not None
        self._codec: Codec | None = None
        self._pending = bytearray()
        self._progress = progress
        self._digest = stream_digest()
        self._total = self._blocks = 0
        self._finished = False

    def _start(self, size: int | None) -> bytes:
        """Settle the settings (size known only if the input ended within one block) and the header."""
        try:
            if size is not None and not self._size_known:
                self.settings = self._choose(size)
            self._codec = Codec(self.settings, self.model)
            meta = {
                "settings": self.settings.to_dict(),
                **self._codec.predictor.record(),
                "fingerprint": fingerprint(self.settings, self.model),
                "platform": platform_record(self.settings.device),
            }
        except (ValueError, RuntimeError) as e:
            raise DyncompressError(str(e)) from None
        return pack_header(meta)

    def _emit_blocks(self, final: bool) -> bytes:
        bs = self.settings.block_size
        out = []
        if self._codec is None:
            if not final and len(self._pending) < bs:
                return b""
            out.append(self._start(len(self._pending) if final else None))
        while len(self._pending) >= bs or (final and self._pending):
            data = bytes(self._pending[:bs])
            del self._pending[:bs]
            payload = encode_block(self._codec, data, self._progress)
            stored = len(payload) >= len(data)  # coding expanded it: keep the bytes as they are
            out.append(pack_block(data, data if stored else payload, stored))
            self._digest.update(data)
            self._total += len(data)
            self._blocks += 1
        return b"".join(out)

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
        return out + pack_end(self._total, self._blocks, self._digest.digest())

    @property
    def ideal_bits(self) -> float:
        """-log2 p summed over the bytes coded so far (the model's own estimate)."""
        return self._codec.nats / 0.6931471805599453 if self._codec else 0.0


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
    ) -> None:
        """`model`: the model to decode with (name, path or Model); default: the one the header names.
        `device`, `threads`: where to decode [cuda when available, else cpu; the usable cores, at
        most 4]. Any device and thread count give the same bytes (the arithmetic is exact)."""
        self._given = model
        self._device, self._threads = device, threads
        self.model: Model | None = None
        self._reader = FrameReader()
        self._codec: Codec | None = None
        self.settings: Settings | None = None
        self.meta: dict | None = None
        self._progress = progress
        self._digest = stream_digest()
        self._total = self._blocks = 0

    @property
    def eof(self) -> bool:
        return self._reader.ended

    @property
    def unused_data(self) -> bytes:
        return self._reader.unused

    @property
    def needs_input(self) -> bool:
        return not self.eof

    def _start(self, meta: dict) -> None:
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
        device, threads = self._device or default_device(), self._threads or default_threads()
        settings = replace(settings, device=device, threads=threads)
        try:
            got = fingerprint(settings, model)  # the self-test: the same on every platform
        except (ValueError, RuntimeError) as e:
            raise DyncompressError(str(e)) from None
        if got != expected:
            raise DyncompressError(
                f"self-test failed: the exact arithmetic gave fingerprint {got} here and {expected} where the "
                f"file was made ({_describe(recorded)}; here {_describe(platform_record(settings.device))}): "
                "a bug, please report it; nothing was decoded"
            )
        self.meta, self.settings, self.model = meta, settings, model
        self._codec = Codec(settings, model)

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

    def _decode(self, block: Block) -> bytes:
        if block.stored:  # run the model over it all the same, as the encoder did
            encode_block(self._codec, block.payload, self._progress)
            data = block.payload
        else:
            try:
                data = decode_block(self._codec, block.payload, block.orig_len, self._progress)
            except AssertionError as e:
                # constriction's range decoder met data its model calls impossible: the models differ
                raise DyncompressError(
                    f"block {self._blocks + 1}: the decoder diverged from the encoder ({e}); "
                    "nothing of this block was output"
                ) from None
        if block_digest(data) != block.digest:
            raise DyncompressError(
                f"block {self._blocks + 1}: the decoder diverged from the encoder (checksum mismatch); "
                "nothing of this block was output"
            )
        return data

    def decompress(self, data: bytes) -> bytes:
        if self.eof:
            raise EOFError("already at end of stream")
        self._reader.push(data)
        out = []
        for frame in self._reader.frames():
            if isinstance(frame, Header):
                self._start(frame.meta)
            elif isinstance(frame, Block):
                block = self._decode(frame)
                self._digest.update(block)
                self._total += len(block)
                self._blocks += 1
                out.append(block)
            elif (frame.total_len, frame.blocks, frame.digest) != (self._total, self._blocks, self._digest.digest()):
                raise FormatError("corrupt stream (end marker does not match the blocks read)")
        return b"".join(out)

    def finish(self) -> None:
        """Raise if the stream ended before its end marker."""
        self._reader.finish()


def compress(data: bytes, model: str | Model | None = DEFAULT_MODEL, **settings) -> bytes:
    comp = Compressor(model=model, size_hint=len(data), **settings)
    return comp.compress(data) + comp.flush()


def iter_decompress(
    read: Callable[[int], bytes],
    progress: Progress | None = None,
    chunk: int = 1 << 16,
    model: str | Model | None = None,
    device: str | None = None,
    threads: int | None = None,
):
    """Decoded pieces of one or more concatenated .dc streams pulled through `read(n)`.

    `model`: decode with this model (name, path or Model) instead of the installed one the
    header names; it must have the recorded sha256. `device`, `threads`: as for `Decompressor`.
    Raises DyncompressError on truncation, corruption, trailing garbage or a wrong model.
    """
    model = resolve_model(model)
    start = functools.partial(Decompressor, model=model, progress=progress, device=device, threads=threads)
    dec, pending, later = start(), b"", False
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


def decompress(data: bytes, model: str | Model | None = None, device: str | None = None) -> bytes:
    """Decode one or more concatenated .dc streams (`model`, `device`: as for `iter_decompress`)."""
    view = io.BytesIO(data)
    return b"".join(iter_decompress(view.read, model=model, device=device))


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
