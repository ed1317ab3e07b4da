"""The .dc file format: header, block frames, end marker. Pack and parse side by side.

    header  = MAGIC (8) | version u16 | meta_len u32 | meta | crc32 u32
              meta: UTF-8 JSON (sorted keys, no spaces); from format 5 on, raw deflate of it with
              the preset dictionary `META_DICT` (about 30 bytes instead of 800: a small file
              should not pay for its header)
    block   = tag | orig_len u32 | payload_len u32 | payload_crc32 u32
                   | digest (8, BLAKE2b of the original block) | crc32 u32 | payload
              tag 0x01: payload is range-coded; 0x02: payload is the block itself ("stored",
              when coding would have expanded it; the decoder still runs the model over it
              so that both sides adapt alike)
    index   = 0x03 | frames u32 | per frame: (orig_len u64, comp_len u64) | crc32 u32
              from format 5 on, just before the end marker: where every independent frame starts
              (a frame is a run of blocks coded from a fresh start, see `Settings.frame_size`;
              comp_len counts its blocks' bytes), so a reader can seek to the frames it needs
    end     = 0x00 | total_len u64 | blocks u32 | digest (16, BLAKE2b of all original bytes)
                   | [format 5 on: frames u32 | stream_len u64] | crc32 u32
              stream_len is the whole stream's size, end marker included: from the end of a file
              a reader finds the index, and the start of this stream (and of the one before it)

All integers little-endian. Every byte of the file is covered by a CRC, so a
corrupted file is refused before the model runs on it, and the digest of the
original bytes catches a decoder that drifted from the encoder. `meta` holds
everything decoding needs; the decoder trusts it, never its own defaults.

Parsers take a buffer and an offset and return (value, next_offset), or None
when the buffer does not yet hold the whole item (streaming); bad data raises
FormatError. `FrameReader` walks a stream with them (bytes pushed in any pieces,
out come the header, blocks, index and end): the decoder, `info` and the measuring code
all read files through it.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dyncompress.errors import DyncompressError

MAGIC = b"\x89DYNC\r\n\x1a"  # binary marker, then catches CRLF and ^Z mangling like PNG's
# 6: the engine named (bytes or bits), and the network's 16-bit step (`Settings.step16`, which the 0.4
# line's headers before it lack: false); 5: experts mixed with the network (0.4); 2: exact arithmetic
# (0.3); 1: float32 (0.1, 0.2)
VERSION = 6
READS = (2, 5, 6)  # the formats this version decodes
READS_OLD = {1: "0.2.0"}  # older formats, and the last release that reads them
# Formats no release wrote: the development builds of 0.4 (experts mixed in, settings then in flux).
NEVER_RELEASED = (3, 4)
# Format 2 coded with the network alone: its settings read as today's with no experts (the mixer's
# other fields, which nothing reads without experts, at values this version accepts).
FORMAT2_MIX = {
    "experts": "", "table_bits": 16, "history_bits": 24, "count_limit": 250, "mix_lr": 0.002, "prior": "",
    "match_bits": 16, "slots": 30, "ways": 1, "mixers": 1, "classes": 1, "kinds": 7, "mix_floor": 0.002,
}  # fmt: skip
# Update-rule settings added after format 2 (0.4): a format-2 header lacks them, and means what they do when off.
ADAPT_ADDED = {
    "sparse": 0,
    "lora": 0,
    "lora_on": "w_mh,w_m,w_out",
    "tlm_bits": 0.0,
    "tlm_lambda": 1.0,
    "tlm_lanes": False,
    "tlm_relative": 0.0,
    "rate_half": 0,
}
MAX_META = 1 << 20
# The preset dictionary of the meta's deflate (format 5 on): a typical record, for the model, online
# mode and a GPU's platform (a header of about 30 bytes instead of 800: a small file should not pay for
# its header). It is part of the format (changing it would break every file), so a new one means a new
# format.
META_DICT = (
    b'"cuda":"12.8","device":"cuda","gpu":"NVIDIA H200",{"fingerprint":"0123456789abcdef","model":null,"pl'
    b'atform":{"constriction":"0.5.0","cpu_capability":"AVX512","dyncompress":"0.4.0.dev0","machine":"x86_'
    b'64","numpy":"2.4.6","python":"3.11.7","torch":"2.13.0+cpu"},"settings":{"adapt":{"beta1":0.0,"beta2"'
    b':0.99,"clip":1.0,"decay":0.0001,"eps":1e-08,"lora":0,"lora_on":"w_mh,w_m,w_out","lr":0.003,"rule":"r'
    b'ms","sparse":0,"tlm_bits":0.0,"tlm_lambda":1.0,"tlm_lanes":false,"tlm_relative":0.0},"block_size":10'
    b'48576,"device":"cpu","frame_size":4194304,"hidden":128,"lanes":3,"mix":{"count_limit":250,"experts":'
    b'"orders,word,gap,match,ppm,apm,record,column","history_bits":18,"mix_lr":0.0005,"prior":"","table_bi'
    b'ts":17},"seed":0,"segment_len":16,"threads":2}}{"fingerprint":"0123456789abcdef","model":{"name":"en'
    b'wiki-h256","sha256":"70245cff386dcb36a776169a7b0239f7ae72a6902759e67ba08b20ce517229e1"},"platform":{'
    b'"constriction":"0.5.0","cpu_capability":"AVX512","dyncompress":"0.4.0.dev0","machine":"x86_64","nump'
    b'y":"2.4.6","python":"3.11.7","torch":"2.13.0+cpu"},"settings":{"adapt":{"beta1":0.0,"beta2":0.99,"cl'
    b'ip":1.0,"decay":0.0001,"eps":1e-08,"lora":0,"lora_on":"w_mh,w_m,w_out","lr":7e-05,"rule":"rms-decay"'
    b',"sparse":0,"tlm_bits":0.0,"tlm_lambda":1.0,"tlm_lanes":false,"tlm_relative":1.1},"block_size":10485'
    b'76,"device":"cpu","frame_size":4194304,"hidden":256,"lanes":4,"mix":{"count_limit":250,"experts":"or'
    b'ders,word,gap,match,ppm,apm,record,column","history_bits":19,"mix_lr":0.0005,"prior":"text1","table_'
    b'bits":17},"seed":0,"segment_len":16,"threads":2}}'
)
MAX_BLOCK_SIZE = 1 << 30  # a block is held in memory whole, on both sides

_HEAD = struct.Struct("<8sHI")
_BLOCK = struct.Struct("<BIII8s")
_END2 = struct.Struct("<BQI16s")
_END = struct.Struct("<BQI16sIQ")
_INDEX = struct.Struct("<BI")
_ENTRY = struct.Struct("<QQ")
_CRC = struct.Struct("<I")
END_SIZE = _END.size + _CRC.size
TAG_END, TAG_BLOCK, TAG_STORED, TAG_INDEX = 0, 1, 2, 3
MAX_FRAMES = 1 << 24


class FormatError(DyncompressError):
    """The bytes are not a valid .dc stream (message is one line for the user)."""


def block_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=8).digest()


def stream_digest() -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=16)


def _crc(*parts: bytes) -> int:
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return crc


# --- header -------------------------------------------------------------------------


def pack_header(meta: dict) -> bytes:
    body = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zdict=META_DICT)
    body = deflate.compress(body) + deflate.flush()
    head = _HEAD.pack(MAGIC, VERSION, len(body)) + body
    return head + _CRC.pack(_crc(head))


def format_version(fixed: bytes) -> int:
    """The format of the stream that starts with these bytes (its magic checked)."""
    if len(fixed) < _HEAD.size or fixed[: len(MAGIC)] != MAGIC:
        raise FormatError("not a dyncompress file (bad magic bytes)")
    return _HEAD.unpack(fixed[: _HEAD.size])[1]


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[dict, int] | None:
    fixed = bytes(buf[pos : pos + _HEAD.size])
    if fixed[: len(MAGIC)] != MAGIC[: len(fixed)]:
        raise FormatError("not a dyncompress file (bad magic bytes)")
    if len(fixed) < _HEAD.size:
        return None
    _, version, meta_len = _HEAD.unpack(fixed)
    if version in READS_OLD:
        release = READS_OLD[version]
        raise FormatError(
            f"this file is format {version}, made by dyncompress {release} or earlier; this version reads format "
            f"{VERSION}: decode it with dyncompress {release} (pip install 'dyncompress=={release}')"
        )
    if version in NEVER_RELEASED:
        raise FormatError(
            f"this file is format {version}, written by a development build of dyncompress 0.4 that was never "
            f"released; this version reads formats {', '.join(map(str, READS))}: encode the original again"
        )
    if version not in READS:
        raise FormatError(
            f"unsupported format version {version} (this dyncompress reads versions {', '.join(map(str, READS))})"
        )
    if meta_len > MAX_META:
        raise FormatError("corrupt header (implausible length)")
    end = pos + _HEAD.size + meta_len + _CRC.size
    if len(buf) < end:
        return None
    head = bytes(buf[pos : end - _CRC.size])
    if _CRC.unpack(bytes(buf[end - _CRC.size : end]))[0] != _crc(head):
        raise FormatError("corrupt header (checksum mismatch)")
    try:
        meta = json.loads(_inflate(head[_HEAD.size :]) if version > 2 else head[_HEAD.size :])
    except (ValueError, zlib.error) as e:
        raise FormatError(f"corrupt header ({e})") from None
    if not isinstance(meta, dict):
        raise FormatError("corrupt header (not a settings record)")
    settings = meta.get("settings")
    if isinstance(settings, dict):  # (a malformed record is left for Settings.from_dict to refuse)
        if version == 2 and "mix" not in settings:
            settings["mix"] = dict(FORMAT2_MIX)
            settings["frame_size"] = 0  # one frame: the whole stream
        if version == 2 and isinstance(settings.get("adapt"), dict):
            for key, off in ADAPT_ADDED.items():
                settings["adapt"].setdefault(key, off)
        if version < 6:  # coded a byte at a time: the one engine there was
            settings.setdefault("engine", "bytes")
        settings.setdefault("step16", False)  # (the network's step in the arithmetic of format 2)
    meta["format"] = version
    return meta, end


def _inflate(body: bytes) -> bytes:
    inflate = zlib.decompressobj(-15, zdict=META_DICT)
    text = inflate.decompress(body, MAX_META)
    if not inflate.eof or inflate.unused_data or inflate.unconsumed_tail:
        raise ValueError("the settings record does not end where its length says")
    return text


# --- frames -------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    meta: dict
    size: int  # bytes of the header in the file


@dataclass(frozen=True)
class Block:
    orig_len: int
    digest: bytes
    payload: bytes
    stored: bool = False

    @property
    def packed_len(self) -> int:
        """Its bytes in the file, head included."""
        return _BLOCK.size + _CRC.size + len(self.payload)


@dataclass(frozen=True)
class Index:
    frames: tuple[tuple[int, int], ...]  # (original bytes, compressed bytes) of every frame


@dataclass(frozen=True)
class End:
    total_len: int
    blocks: int
    digest: bytes
    frames: int = 1
    stream_len: int = 0  # 0: not recorded (format 2)


def pack_block(data: bytes, payload: bytes, stored: bool = False) -> bytes:
    tag = TAG_STORED if stored else TAG_BLOCK
    head = _BLOCK.pack(tag, len(data), len(payload), zlib.crc32(payload), block_digest(data))
    return head + _CRC.pack(_crc(head)) + payload


def pack_index(frames: list[tuple[int, int]]) -> bytes:
    body = _INDEX.pack(TAG_INDEX, len(frames)) + b"".join(_ENTRY.pack(*f) for f in frames)
    return body + _CRC.pack(_crc(body))


def index_size(frames: int) -> int:
    return _INDEX.size + frames * _ENTRY.size + _CRC.size


def pack_end(total_len: int, blocks: int, digest: bytes, frames: int, stream_len: int) -> bytes:
    """`stream_len`: the stream's bytes before the end marker (the marker's own are added)."""
    body = _END.pack(TAG_END, total_len, blocks, digest, frames, stream_len + END_SIZE)
    return body + _CRC.pack(_crc(body))


def max_payload(orig_len: int) -> int:
    """Bound on a block's range-coded size: 24 bits per byte at worst, plus the flush."""
    return 3 * orig_len + 16


def _checked(buf, pos: int, layout: struct.Struct, what: str) -> tuple[tuple, int] | None:
    """Unpack `layout` at `pos` and verify the CRC that follows it."""
    end = pos + layout.size + _CRC.size
    if len(buf) < end:
        return None
    body = bytes(buf[pos : pos + layout.size])
    if _CRC.unpack(bytes(buf[pos + layout.size : end]))[0] != _crc(body):
        raise FormatError(f"corrupt {what} (checksum mismatch)")
    return layout.unpack(body), end


def parse_frame(
    buf: bytes | bytearray | memoryview, pos: int, block_size: int, version: int = VERSION
) -> tuple[Block | Index | End, int] | None:
    if len(buf) <= pos:
        return None
    tag = buf[pos]
    if tag in (TAG_BLOCK, TAG_STORED):
        if (parsed := _checked(buf, pos, _BLOCK, "block header")) is None:
            return None
        (_, orig_len, payload_len, payload_crc, digest), start = parsed
        stored = tag == TAG_STORED
        coded_ok = payload_len <= max_payload(orig_len) and payload_len % 4 == 0
        if not 0 < orig_len <= block_size or not (payload_len == orig_len if stored else coded_ok):
            raise FormatError("corrupt block header (impossible lengths)")
        end = start + payload_len
        if len(buf) < end:
            return None
        payload = bytes(buf[start:end])
        if zlib.crc32(payload) != payload_crc:
            raise FormatError("corrupt compressed data (block checksum mismatch)")
        return Block(orig_len, digest, payload, stored), end
    if tag == TAG_INDEX and version > 2:
        return parse_index(buf, pos)
    if tag == TAG_END:
        if (parsed := _checked(buf, pos, _END if version > 2 else _END2, "end marker")) is None:
            return None
        (_, total_len, blocks, digest, *more), end = parsed
        return End(total_len, blocks, digest, *more), end
    raise FormatError(f"corrupt data (unknown frame tag {tag})")


def parse_index(buf: bytes | bytearray | memoryview, pos: int) -> tuple[Index, int] | None:
    fixed = bytes(buf[pos : pos + _INDEX.size])
    if len(fixed) < _INDEX.size:
        return None
    count = _INDEX.unpack(fixed)[1]
    if count > MAX_FRAMES:
        raise FormatError("corrupt frame index (implausible length)")
    end = pos + index_size(count)
    if len(buf) < end:
        return None
    body = bytes(buf[pos : end - _CRC.size])
    if _CRC.unpack(bytes(buf[end - _CRC.size : end]))[0] != _crc(body):
        raise FormatError("corrupt frame index (checksum mismatch)")
    entries = tuple(_ENTRY.iter_unpack(body[_INDEX.size :]))
    return Index(entries), end


def parse_end(tail: bytes) -> End:
    """The format-5 end marker in the last `END_SIZE` bytes of a stream."""
    if len(tail) != END_SIZE or tail[0] != TAG_END:
        raise FormatError("no end marker at the end of the file (truncated, or not a seekable .dc file)")
    parsed = _checked(tail, 0, _END, "end marker")
    assert parsed is not None
    return End(*parsed[0][1:])


# --- walking a stream ---------------------------------------------------------------


def _block_limit(meta: dict) -> int:
    """The largest block the header allows (its settings' block size)."""
    settings = meta.get("settings")
    limit = settings.get("block_size") if isinstance(settings, dict) else None
    if not isinstance(limit, int) or not 0 < limit <= MAX_BLOCK_SIZE:
        raise FormatError("corrupt or unsupported header (no valid block size)")
    return limit


class FrameReader:
    """One .dc stream, pushed in as bytes arrive: `frames()` yields the Header, then every
    complete Block, then the Index (format 5) and the End; it stops (to be called again after more `push`) where the
    buffered bytes end mid-item. Memory is bounded by one frame."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.meta: dict | None = None
        self.version = VERSION
        self._limit = 0
        self.offset = 0  # stream bytes consumed: the file's size so far
        self.ended = False

    def push(self, data: bytes) -> None:
        self._buf += data

    def frames(self) -> Iterator[Header | Block | Index | End]:
        pos = 0
        try:
            while not self.ended:
                if self.meta is None:
                    parsed = parse_header(self._buf, pos)
                else:
                    parsed = parse_frame(self._buf, pos, self._limit, self.version)
                if parsed is None:
                    return
                item, end = parsed
                self.offset += end - pos
                pos = end
                if self.meta is None:
                    self.meta, self._limit, self.version = item, _block_limit(item), item["format"]
                    item = Header(self.meta, end)
                elif isinstance(item, End):
                    self.ended = True
                yield item
        finally:
            del self._buf[:pos]

    @property
    def unused(self) -> bytes:
        """What followed the end marker (another stream, or garbage)."""
        return bytes(self._buf) if self.ended else b""

    def finish(self) -> None:
        """Raise if the input ended before the stream's end marker."""
        if self.meta is None:
            raise FormatError("truncated file (incomplete header)" if self._buf else "empty input, not a .dc stream")
        if not self.ended:
            raise FormatError("truncated file (the end marker is missing)")


def read_frames(
    read: Callable[[int], bytes], chunk: int = 1 << 16, reader: FrameReader | None = None
) -> Iterator[Header | Block | Index | End]:
    """The Header, Blocks, Index and End of the stream that `read(n)` returns, pulled as needed
    (through `reader`, if given, whose `offset` then tells how far the stream has been read)."""
    reader = reader or FrameReader()
    while not reader.ended:
        data = read(chunk)
        if not data:
            reader.finish()
        reader.push(data)
        yield from reader.frames()
