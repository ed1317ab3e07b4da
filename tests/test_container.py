"""The file format: pack and parse side by side, streaming, and every kind of damage."""

import struct
import zlib

import pytest

from dyncompress.container import (
    MAGIC,
    VERSION,
    Block,
    End,
    FormatError,
    block_digest,
    pack_block,
    pack_end,
    pack_header,
    parse_frame,
    parse_header,
)

META = {"settings": {"hidden": 8, "lanes": 2}, "fingerprint": "0123456789abcdef", "model": None}


def test_header_round_trip_and_streaming():
    packed = pack_header(META)
    assert packed.startswith(MAGIC)
    for cut in range(len(packed)):  # every prefix: "need more", never a wrong answer
        assert parse_header(packed[:cut]) is None
    meta, end = parse_header(packed + b"rest")
    assert meta == META and end == len(packed)


def test_frames_round_trip_and_streaming():
    data, payload = b"hello world", b"\x01\x02\x03\x04" * 3
    stream = pack_block(data, payload) + pack_end(len(data), 1, b"d" * 16)
    for cut in range(len(stream) - 1):
        parsed = parse_frame(stream[:cut], 0, block_size=64)
        assert parsed is None or isinstance(parsed[0], Block)
    block, pos = parse_frame(stream, 0, block_size=64)
    assert block == Block(len(data), block_digest(data), payload)
    end, pos2 = parse_frame(stream, pos, block_size=64)
    assert end == End(len(data), 1, b"d" * 16) and pos2 == len(stream)


def walk(stream: bytes) -> list:
    """Parse a whole stream; running out of bytes is truncation."""
    parsed = parse_header(stream)
    frames = []
    while parsed is not None:
        item, pos = parsed
        frames.append(item)
        if isinstance(item, End):
            return frames
        parsed = parse_frame(stream, pos, block_size=64)
    raise FormatError("truncated")


def test_every_single_byte_corruption_is_caught():
    stream = pack_header(META) + pack_block(b"abc", b"\x00" * 8) + pack_end(3, 1, b"x" * 16)
    assert len(walk(stream)) == 3
    for i in range(len(stream)):
        for flip in (0x01, 0x80):
            bad = bytearray(stream)
            bad[i] ^= flip
            with pytest.raises(FormatError):
                walk(bytes(bad))


def test_wrong_magic_and_unsupported_version():
    with pytest.raises(FormatError, match="not a dyncompress file"):
        parse_header(b"PK\x03\x04 a zip file")
    body = b"{}"
    head = struct.pack("<8sHI", MAGIC, VERSION + 1, len(body)) + body
    with pytest.raises(FormatError, match=f"unsupported format version {VERSION + 1}"):
        parse_header(head + struct.pack("<I", zlib.crc32(head)))


def test_impossible_block_lengths_are_refused():
    with pytest.raises(FormatError, match="impossible"):
        parse_frame(pack_block(b"x" * 100, b"\x00" * 4), 0, block_size=50)


def test_stored_block_round_trip_and_length_check():
    data = b"kept as it is"
    block, _ = parse_frame(pack_block(data, data, stored=True), 0, block_size=64)
    assert block.stored and block.payload == data and block.digest == block_digest(data)
    with pytest.raises(FormatError, match="impossible"):
        parse_frame(pack_block(data, data + b"!", stored=True), 0, block_size=64)
