"""The file format: pack and parse side by side, streaming, and every kind of damage."""

import io
import json
import struct
import zlib

import pytest

from dyncompress.container import (
    MAGIC,
    META_DICT,
    VERSION,
    Block,
    End,
    FormatError,
    FrameReader,
    Header,
    block_digest,
    pack_block,
    pack_end,
    pack_header,
    parse_frame,
    parse_header,
    read_frames,
)

META = {"settings": {"hidden": 8, "lanes": 2, "block_size": 64}, "fingerprint": "0123456789abcdef", "model": None}


def test_header_round_trip_and_streaming():
    packed = pack_header(META)
    assert packed.startswith(MAGIC)
    for cut in range(len(packed)):  # every prefix: "need more", never a wrong answer
        assert parse_header(packed[:cut]) is None
    meta, end = parse_header(packed + b"rest")
    assert meta == META and end == len(packed)


def test_the_settings_record_is_deflated_and_checked():
    """Format 3 deflates the meta with a preset dictionary: a real record costs tens of bytes, not
    hundreds. A body that is not exactly one deflate stream is refused, even with a good CRC."""
    meta = json.loads(META_DICT)  # the typical record the dictionary was made from
    meta["fingerprint"], meta["settings"]["lanes"] = "fedcba9876543210", 3
    packed = pack_header(meta)
    assert len(packed) < 100 < len(META_DICT)
    assert parse_header(packed) == (meta, len(packed))
    body = packed[14:-4]
    for bad in (body + b"\x00", body[:-1], json.dumps(meta).encode()):
        head = MAGIC + struct.pack("<HI", VERSION, len(bad)) + bad
        with pytest.raises(FormatError, match="corrupt header"):
            parse_header(head + struct.pack("<I", zlib.crc32(head)))


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


def walk(stream: bytes, chunk: int = 7) -> list:
    """Every item of a whole stream, read in small pieces; running out of bytes is truncation."""
    return list(read_frames(io.BytesIO(stream).read, chunk))


def test_frame_reader_gives_the_same_items_whatever_the_pieces():
    blocks = [(b"first block", b"\x01" * 8), (b"second", b"\x02" * 4)]
    stream = pack_header(META) + b"".join(pack_block(d, p) for d, p in blocks) + pack_end(17, 2, b"e" * 16)
    whole = walk(stream, chunk=len(stream))
    assert [type(f) for f in whole] == [Header, Block, Block, End]
    assert whole[0] == Header(META, len(pack_header(META)))
    assert [f.payload for f in whole[1:3]] == [p for _, p in blocks]
    for cut in range(1, len(stream)):  # two pushes, split anywhere
        reader = FrameReader()
        reader.push(stream[:cut])
        items = list(reader.frames())
        reader.push(stream[cut:] + b"next stream")
        items += list(reader.frames())
        assert items == whole and reader.ended and reader.offset == len(stream)
        assert reader.unused == b"next stream"


def test_frame_reader_names_truncation():
    stream = pack_header(META) + pack_block(b"abc", b"\x00" * 8) + pack_end(3, 1, b"x" * 16)
    header = len(pack_header(META))
    for cut, message in ((0, "empty input"), (5, "incomplete header"), (header + 3, "end marker is missing")):
        with pytest.raises(FormatError, match=message):
            walk(stream[:cut])
    bad = pack_header({**META, "settings": {"hidden": 8}})
    with pytest.raises(FormatError, match="block size"):
        walk(bad)


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
