"""The file format: pack and parse side by side, streaming, and every kind of damage."""

import io
import json
import struct
import zlib

import pytest

from dyncompress.format.container import (
    MAGIC,
    META_DICT,
    NEVER_RELEASED,
    VERSION,
    Block,
    End,
    FormatError,
    FrameReader,
    Header,
    Index,
    block_digest,
    pack_block,
    pack_end,
    pack_header,
    pack_index,
    parse_end,
    parse_frame,
    parse_header,
    read_frames,
)

META = {
    "settings": {"hidden": 8, "lanes": 2, "block_size": 64, "step16": True},
    "fingerprint": "0123456789abcdef",
    "model": None,
}


def test_header_round_trip_and_streaming():
    packed = pack_header(META)
    assert packed.startswith(MAGIC)
    for cut in range(len(packed)):  # every prefix: "need more", never a wrong answer
        assert parse_header(packed[:cut]) is None
    meta, end = parse_header(packed + b"rest")
    assert meta == {**META, "format": VERSION} and end == len(packed)


def _deflated_header(meta: dict, version: int) -> bytes:
    """A header labelled format `version`, deflated as format 5 deflates it."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zdict=META_DICT)
    body = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    body = deflate.compress(body) + deflate.flush()
    head = MAGIC + struct.pack("<HI", version, len(body)) + body
    return head + struct.pack("<I", zlib.crc32(head))


def test_the_settings_record_is_deflated_and_checked():
    """The meta is deflated with a preset dictionary: a real record costs a few tens of bytes, not
    hundreds. A body that is not exactly one deflate stream is refused, even with a good CRC."""
    dictionary = META_DICT
    meta = json.loads(dictionary[dictionary.rindex(b'{"fingerprint"') :])  # the record it was made from
    meta["fingerprint"], meta["settings"]["lanes"], meta["settings"]["step16"] = "fedcba9876543210", 3, True
    packed = pack_header(meta)
    assert packed == _deflated_header(meta, VERSION) and len(packed) < 72 < 800 < len(dictionary)
    read, end = parse_header(packed)
    assert end == len(packed) and read == {**meta, "format": VERSION}  # (nothing filled in: the record as written)
    body = packed[14:-4]
    for bad in (body + b"\x00", body[:-1], json.dumps(meta).encode()):
        head = MAGIC + struct.pack("<HI", VERSION, len(bad)) + bad
        with pytest.raises(FormatError, match="corrupt header"):
            parse_header(head + struct.pack("<I", zlib.crc32(head)))


def tail(frames: list[tuple[int, int]], total: int, blocks: int, digest: bytes, before: int) -> bytes:
    """The frame index and end marker of a stream with `before` bytes ahead of them."""
    index = pack_index(frames)
    return index + pack_end(total, blocks, digest, len(frames), before + len(index))


def test_frames_round_trip_and_streaming():
    data, payload = b"hello world", b"\x01\x02\x03\x04" * 3
    packed = pack_block(data, payload)
    stream = packed + tail([(len(data), len(packed))], len(data), 1, b"d" * 16, 100 + len(packed))
    for cut in range(len(stream) - 1):
        parsed = parse_frame(stream[:cut], 0, block_size=64)
        assert parsed is None or isinstance(parsed[0], Block)
    block, pos = parse_frame(stream, 0, block_size=64)
    assert block == Block(len(data), block_digest(data), payload) and block.packed_len == len(packed)
    index, pos = parse_frame(stream, pos, block_size=64)
    assert index == Index(((len(data), len(packed)),))
    end, pos2 = parse_frame(stream, pos, block_size=64)
    assert end == End(len(data), 1, b"d" * 16, 1, 100 + len(stream)) and pos2 == len(stream)
    assert parse_end(stream[-len(stream) + pos :]) == end  # found from the end of a file


def walk(stream: bytes, chunk: int = 7) -> list:
    """Every item of a whole stream, read in small pieces; running out of bytes is truncation."""
    return list(read_frames(io.BytesIO(stream).read, chunk))


def test_frame_reader_gives_the_same_items_whatever_the_pieces():
    blocks = [(b"first block", b"\x01" * 8), (b"second", b"\x02" * 4)]
    body = pack_header(META) + b"".join(pack_block(d, p) for d, p in blocks)
    stream = body + tail([(17, len(body) - len(pack_header(META)))], 17, 2, b"e" * 16, len(body))
    whole = walk(stream, chunk=len(stream))
    assert [type(f) for f in whole] == [Header, Block, Block, Index, End]
    assert whole[0] == Header({**META, "format": VERSION}, len(pack_header(META)))
    assert [f.payload for f in whole[1:3]] == [p for _, p in blocks]
    for cut in range(1, len(stream)):  # two pushes, split anywhere
        reader = FrameReader()
        reader.push(stream[:cut])
        items = list(reader.frames())
        reader.push(stream[cut:] + b"next stream")
        items += list(reader.frames())
        assert items == whole and reader.ended and reader.offset == len(stream)
        assert reader.unused == b"next stream"


def small_stream() -> bytes:
    body = pack_header(META) + pack_block(b"abc", b"\x00" * 8)
    return body + tail([(3, len(body) - len(pack_header(META)))], 3, 1, b"x" * 16, len(body))


def test_frame_reader_names_truncation():
    stream = small_stream()
    header = len(pack_header(META))
    for cut, message in ((0, "empty input"), (5, "incomplete header"), (header + 3, "end marker is missing")):
        with pytest.raises(FormatError, match=message):
            walk(stream[:cut])
    bad = pack_header({**META, "settings": {"hidden": 8}})
    with pytest.raises(FormatError, match="block size"):
        walk(bad)


def test_every_single_byte_corruption_is_caught():
    stream = small_stream()
    assert len(walk(stream)) == 4
    for i in range(len(stream)):
        for flip in (0x01, 0x80):
            bad = bytearray(stream)
            bad[i] ^= flip
            with pytest.raises(FormatError):
                walk(bytes(bad))


def test_a_development_format_is_refused_in_one_line():
    """Formats 3 and 4 were written by development builds of 0.4 that were never released (their
    settings records changed under them): a file of either is refused with one line that says so,
    whatever its header holds, never read as today's format."""
    for version in NEVER_RELEASED:
        packed = _deflated_header(META, version)
        with pytest.raises(FormatError, match=f"format {version}, written by a development build") as error:
            parse_header(packed)
        assert "\n" not in str(error.value)
    assert VERSION not in NEVER_RELEASED and parse_header(_deflated_header(META, VERSION))[0]["format"] == VERSION


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
