"""Coding for real and timing it, beside the peers: the classical compressors users compare with.

`round_trip` encodes and decodes through the public API and never reports a size for a file that
does not decode to its input; `confirm` turns a `measure.Measurement` into the sizes of a real file;
`PEERS` are the compressors available as Python packages (zlib, bz2, lzma, PPMd, zstd, brotli),
each timed the same way by `bench_peer`.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from dyncompress.api import compress, iter_decompress
from dyncompress.auto import is_auto
from dyncompress.coding.measure import Measurement
from dyncompress.config.model import Model
from dyncompress.errors import DyncompressError
from dyncompress.format.container import Block, Header, read_frames


def round_trip(data: bytes, model, progress=None, **settings) -> tuple[bytes, float, float]:
    """Encode, decode and compare: (the .dc bytes, encode seconds, decode seconds). A size is
    never reported for a file that does not decode to its input."""
    t0 = time.perf_counter()
    blob = compress(data, model=model, progress=progress, **settings)
    t1 = time.perf_counter()
    start = None if is_auto(model) else model  # the header names the start
    back = b"".join(iter_decompress(io.BytesIO(blob).read, progress, model=start))
    t2 = time.perf_counter()
    if back != data:
        raise DyncompressError("the encoded file does not decode to the input")  # never: blocks are checksummed
    return blob, t1 - t0, t2 - t1


def confirm(data: bytes, m: Measurement, model: Model | None) -> dict:
    """Encode (and decode) for real with the row's settings; sizes of the payloads and of the file."""
    blob, seconds, _ = round_trip(data, model, settings=m.settings)
    header = payload = 0
    for frame in read_frames(io.BytesIO(blob).read):
        if isinstance(frame, Header):
            header = frame.size
        elif isinstance(frame, Block):
            payload += len(frame.payload)
    return {
        "estimate": m.payload_bytes,
        "payload": payload,
        "file": len(blob),
        "header": header,
        "framing": len(blob) - header - payload,
        "seconds": seconds,
    }


# --- peers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    name: str
    module: str  # the Python package it needs
    pack: Callable
    unpack: Callable


def _peers() -> list[Peer]:
    import lzma

    return [
        Peer("zlib -9", "zlib", lambda m, d: m.compress(d, 9), lambda m, d: m.decompress(d)),
        Peer("bz2 -9", "bz2", lambda m, d: m.compress(d, 9), lambda m, d: m.decompress(d)),
        Peer(
            "lzma -9e",
            "lzma",
            lambda m, d: m.compress(d, preset=9 | lzma.PRESET_EXTREME),
            lambda m, d: m.decompress(d),
        ),
        Peer(  # 7-Zip's text method, the strongest classical text compressor (7z -m0=PPMd:o=6:mem=256m)
            "PPMd o6",
            "pyppmd",
            lambda m, d: m.compress(d, max_order=6, mem_size=256 << 20),
            lambda m, d: m.decompress(d, max_order=6, mem_size=256 << 20),
        ),
        Peer(
            "zstd -19",
            "zstandard",
            lambda m, d: m.ZstdCompressor(level=19).compress(d),
            lambda m, d: m.ZstdDecompressor().decompress(d),
        ),
        Peer("brotli -q 11", "brotli", lambda m, d: m.compress(d, quality=11), lambda m, d: m.decompress(d)),
    ]


PEERS = _peers()


@dataclass
class BenchRow:
    name: str
    size: int | None = None  # compressed bytes; None: skipped
    encode_s: float = 0.0
    decode_s: float = 0.0
    note: str = ""


def bench_peer(peer: Peer, data: bytes, importer=importlib.import_module) -> BenchRow:
    try:
        module = importer(peer.module)
    except ImportError:
        return BenchRow(peer.name, note=f"skipped: Python package {peer.module} not installed")
    t0 = time.perf_counter()
    packed = peer.pack(module, data)
    t1 = time.perf_counter()
    back = peer.unpack(module, packed)
    t2 = time.perf_counter()
    if back != data:
        raise DyncompressError(f"{peer.name} did not round-trip")
    return BenchRow(peer.name, len(packed), t1 - t0, t2 - t1)


def bench_dyncompress(data: bytes, name: str, model, progress=None, **settings) -> BenchRow:
    blob, encode_s, decode_s = round_trip(data, model, progress, **settings)
    return BenchRow(name, len(blob), encode_s, decode_s)


def peer_size(name: str, data: bytes) -> int | None:
    """`data` packed by the peer called `name` in PEERS ("PPMd o6", "lzma -9e", ...): its size in
    bytes, checked to round-trip; None where the peer's Python package is not installed. Every
    benchmark script runs its peers through this (or `bench_peer`), so they all run them alike."""
    row = bench_peer(next(p for p in PEERS if p.name == name), data)
    return row.size


def peer_bits(name: str, data: bytes) -> float | None:
    """Bits per byte of `data` under the peer `name` (None: not installed)."""
    size = peer_size(name, data)
    return None if size is None or not data else 8 * size / len(data)


@dataclass(frozen=True)
class CommandPeer:
    """A compressor run as a program, as a user runs it (start-up included): `pack` and `unpack`
    are argument lists in which "{in}" and "{out}" stand for the files."""

    name: str
    pack: tuple[str, ...]
    unpack: tuple[str, ...]


def command_peers(paq8px: str | None = None, cmix: str | None = None) -> list[CommandPeer]:
    """The programs found on this machine: gzip -9, xz -9e, zstd -19 (on the PATH), paq8px -8 and
    cmix where their binaries are given (both are built from their public sources)."""
    found = []
    for name, pack, unpack in (
        ("gzip -9", ("gzip", "-9", "-c", "{in}"), ("gzip", "-d", "-c", "{in}")),
        ("xz -9e", ("xz", "-9e", "-c", "{in}"), ("xz", "-d", "-c", "{in}")),
        ("zstd -19", ("zstd", "-19", "-q", "-c", "{in}"), ("zstd", "-d", "-q", "-c", "{in}")),
    ):
        if shutil.which(pack[0]):
            found.append(CommandPeer(name, pack, unpack))
    if paq8px:
        found.append(CommandPeer("paq8px -8", (paq8px, "-8", "{in}", "{out}"), (paq8px, "-d", "{in}", "{out}")))
    if cmix:
        found.append(CommandPeer("cmix", (cmix, "-c", "{in}", "{out}"), (cmix, "-d", "{in}", "{out}")))
    return found


def bench_command(peer: CommandPeer, path: str, folder: str) -> BenchRow:
    """Pack the file at `path` and unpack it again with `peer`'s program, in `folder`; checked to
    round-trip. A program that writes to stdout (no "{out}") has its output captured."""

    def run(args: tuple[str, ...], src: str, dst: str) -> float:
        argv = [a.replace("{in}", src).replace("{out}", dst) for a in args]
        started = time.perf_counter()
        if "{out}" in args:
            subprocess.run(argv, check=True, capture_output=True, cwd=folder)
        else:
            with open(dst, "wb") as out:
                subprocess.run(argv, check=True, stdout=out, stderr=subprocess.PIPE, cwd=folder)
        return time.perf_counter() - started

    packed, back = os.path.join(folder, "packed"), os.path.join(folder, "unpacked")
    for stale in (packed, back):
        if os.path.exists(stale):
            os.remove(stale)
    encode_s = run(peer.pack, path, packed)
    decode_s = run(peer.unpack, packed, back)
    with open(path, "rb") as a, open(back, "rb") as b:
        if a.read() != b.read():
            raise DyncompressError(f"{peer.name} did not round-trip")
    return BenchRow(peer.name, os.path.getsize(packed), encode_s, decode_s)
