"""The lzma-shaped API: round trips of real and awkward data, streaming, damage."""

import io
import json
import struct
import zlib

import numpy as np
import pytest

import dyncompress
from conftest import SMALL, corpus, needs_split, region_edges, rewrite_header
from dyncompress import Compressor, Decompressor, DyncompressError, compress, decompress
from dyncompress.config.levels import LEVELS
from dyncompress.format.container import (
    MAGIC,
    VERSION,
    Block,
    pack_block,
    parse_frame,
    parse_header,
    read_frames,
)
from dyncompress.network.mlstm import unflatten

RNG = np.random.default_rng(0)
CASES = {
    "empty": b"",
    "one byte": b"A",
    "all 256 byte values": bytes(range(256)),
    "random bytes": bytes(RNG.integers(0, 256, 3000, dtype=np.uint8)),
    "invalid utf-8": b"caf\xc3 \xff\xfe\xc0\xaf ok \xed\xa0\x80" * 20,
    "long run": b"\x00" * 5000 + b"z" * 3000,
    "binary (calgary obj1)": corpus("calgary_obj1")[:6000],
    "english (xargs.1)": corpus("xargs.1"),
    "c source": corpus("fields.c")[:5000],
    "wiki xml (enwik8 head)": corpus("enwik4")[:5000],
    "spanish": corpus("quijote_8k.txt")[:4000],
    "chinese": corpus("hongloumeng_6k.txt")[:3000],
}


@pytest.mark.parametrize("name", CASES)
def test_round_trip(name):
    data = CASES[name]
    packed = compress(data, **SMALL)
    assert decompress(packed) == data


def test_text_compresses():
    data = corpus("alice29.txt")[:12000]
    packed = compress(data, model=None, hidden=64, lanes=4, device="cpu")
    assert len(packed) < 0.75 * len(data)


def test_the_rates_half_life_is_recorded_and_followed():
    """The stream rule's rate falls as lr H / (H + t) (AdaptSettings.rate_half): the header records H,
    the decoder follows it, and it changes what is coded (H = 0, a constant rate, as files made
    before it; a header without it reads so: test_container). 4,000 bytes in 8 lanes: 62 segments,
    three times the half-life of 20."""
    data = corpus("alice29.txt")[:4000]
    packed = {half: compress(data, **{**SMALL, "segment_len": 8, "rate_half": half}) for half in (0, 20)}
    payloads = []
    for half, blob in packed.items():
        meta, end = parse_header(blob)
        assert meta["settings"]["adapt"]["rate_half"] == half
        assert decompress(blob) == data
        payloads.append(blob[end:])
    assert payloads[0] != payloads[1]
    default, _ = parse_header(compress(data[:100], **SMALL))
    assert default["settings"]["adapt"]["rate_half"] == 2000


@pytest.mark.parametrize("lanes", [1, 3, 16, 64])
def test_more_lanes_than_bytes_and_odd_lane_counts(lanes):
    for data in (b"xy", b"hello, world", corpus("grammar.lsp")[:777]):
        assert decompress(compress(data, **{**SMALL, "lanes": lanes})) == data


def test_several_blocks_and_incremental_objects():
    data = corpus("enwik4")[:6000]
    settings = {**SMALL, "block_size": 1000}
    comp = Compressor(**settings)
    pieces = [comp.compress(data[i : i + 777]) for i in range(0, len(data), 777)]
    packed = b"".join(pieces) + comp.flush()
    assert packed == compress(data, **settings)  # chunking does not change the output
    assert sum(1 for p in pieces if p) >= 5  # blocks come out as soon as they are full

    dec, out = Decompressor(), []
    for i in range(0, len(packed), 333):
        out.append(dec.decompress(packed[i : i + 333]))
    assert dec.eof and b"".join(out) == data
    with pytest.raises(EOFError):
        dec.decompress(b"more")


def test_concatenated_streams_and_trailing_garbage():
    a, b = compress(b"first part ", **SMALL), compress(b"second part", **SMALL)
    assert decompress(a + b) == b"first part second part"
    with pytest.raises(DyncompressError, match="trailing garbage"):
        decompress(a + b"\x00garbage")


def test_truncation_anywhere_fails_cleanly():
    packed = compress(b"truncate me, please", **{**SMALL, "block_size": 8})  # three blocks
    for cut in region_edges(packed):
        with pytest.raises(DyncompressError, match="truncated|empty input"):
            decompress(packed[:cut])


def test_corruption_anywhere_fails_cleanly():
    data = b"no silent corruption, ever."
    packed = compress(data, **{**SMALL, "block_size": 10})
    for i in region_edges(packed):
        bad = bytearray(packed)
        bad[i] ^= 0x20
        with pytest.raises(DyncompressError) as caught:
            out = decompress(bytes(bad))
            raise AssertionError(f"corruption at byte {i} decoded to {out!r}")
        assert "\n" not in str(caught.value)


def test_failed_self_test_is_refused_up_front_naming_both_platforms():
    packed = compress(b"fingerprint", **SMALL)
    forged = rewrite_header(packed, lambda m: m.update(fingerprint="0000000000000000"))
    with pytest.raises(DyncompressError, match="self-test failed.*0000000000000000") as e:
        decompress(forged)
    assert "\n" not in str(e.value) and str(e.value).count("torch ") == 2


def test_a_file_made_on_a_gpu_decodes_on_the_cpu(monkeypatch):
    """The device is the decoder's choice: a header that says cuda decodes on a machine without one."""
    data = corpus("xargs.1")[:2000]
    packed = compress(data, **SMALL)
    forged = rewrite_header(packed, lambda m: m["settings"].update(device="cuda"))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert decompress(forged) == data


def test_unsupported_version_and_wrong_magic():
    packed = compress(b"v", **SMALL)
    meta, _ = parse_header(packed)
    body = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    head = struct.pack("<8sHI", MAGIC, VERSION + 1, len(body)) + body
    with pytest.raises(DyncompressError, match="unsupported format version"):
        decompress(head + struct.pack("<I", zlib.crc32(head)))
    with pytest.raises(DyncompressError, match="not a dyncompress file"):
        decompress(zlib.compress(b"gzip-like data"))


def test_diverging_decoder_never_outputs_wrong_bytes(monkeypatch):
    """If the decoder drifts anyway (a bug), the block checksum stops it."""
    data = corpus("xargs.1")[:1500]
    packed = compress(data, **SMALL)
    import dyncompress.api as api
    import dyncompress.coding.predictor as predictor

    real_init = predictor.init_master

    def nudged(shape, seed):
        master = real_init(shape, seed)
        unflatten(shape, master)["w_mh"][0, 0] += 2**20  # a recurrent weight (+2^-12): every prediction moves
        return master

    expected = parse_header(packed)[0]["fingerprint"]
    monkeypatch.setattr(predictor, "init_master", nudged)
    monkeypatch.setattr(api, "fingerprint", lambda settings, model=None: expected)  # slip past the up-front check
    dec = Decompressor()
    with pytest.raises(DyncompressError, match="diverged"):
        dec.decompress(packed)


def test_payloads_the_model_calls_impossible_are_one_clear_error(monkeypatch):
    """Range-coded words that pass their CRC but were not made by this model (a decoder that drifted
    far, or a forged block): the range decoder can meet a state no symbol owns. That must be a
    DyncompressError like any divergence, never the coder's own exception, never output."""
    data = corpus("alice29.txt")[:800]
    packed = compress(data, **SMALL)
    meta, start = parse_header(packed)
    import dyncompress.api as api

    monkeypatch.setattr(api, "fingerprint", lambda settings, model=None: meta["fingerprint"])  # tested elsewhere
    block, end = parse_frame(packed, start, 1 << 20)
    assert not block.stored
    rng = np.random.default_rng(0)
    messages = []
    impossible = "invalid for the employed entropy model"  # the coder's path
    for _ in range(400):  # until both kinds were met (how soon depends on the model's probabilities)
        words = rng.integers(0, 2**32, size=int(rng.integers(1, 40)), dtype=np.uint64).astype("<u4").tobytes()
        forged = packed[:start] + pack_block(data, words) + packed[end:]
        with pytest.raises(DyncompressError, match="diverged") as caught:
            decompress(forged)
        messages.append(str(caught.value))
        if any(impossible in m for m in messages) and any("checksum mismatch" in m for m in messages):
            break
    assert any(impossible in m for m in messages), len(messages)
    assert any("checksum mismatch" in m for m in messages)


def test_open_binary_and_text(tmp_path):
    path = tmp_path / "notes.dc"
    text = corpus("quijote_8k.txt").decode()[:3000]
    with dyncompress.open(path, "wt", encoding="utf-8", newline="", **SMALL) as f:
        f.write(text)
    with dyncompress.open(path, "rt", encoding="utf-8", newline="") as f:
        assert f.read() == text
    with dyncompress.open(path, "rb") as f:
        assert f.read(10) == text.encode()[:10]
        assert f.read() == text.encode()[10:]
    buf = io.BytesIO()
    with dyncompress.open(buf, "wb", **SMALL) as f:
        f.write(b"to a file object")
    assert not buf.closed and decompress(buf.getvalue()) == b"to a file object"
    with pytest.raises(ValueError):
        dyncompress.open(path, "rw")


def test_unknown_setting_is_a_type_error():
    with pytest.raises(TypeError, match="hidden_size"):
        compress(b"x", model=None, hidden_size=10)


def test_incompressible_block_is_stored_and_both_sides_stay_in_step():
    noise = bytes(np.random.default_rng(5).integers(0, 256, 2000, dtype=np.uint8))
    text = corpus("enwik4")[:2000]
    packed = compress(noise + text + text, **{**SMALL, "block_size": 2000})
    stored = [f.stored for f in read_frames(io.BytesIO(packed).read) if isinstance(f, Block)]
    assert stored == [True, False, False]  # the noise would have expanded: kept as it is
    assert decompress(packed) == noise + text + text  # and the model ran over it on both sides


@pytest.mark.parametrize("level", range(1, 10))
def test_every_level_round_trips_with_its_own_shapes(level):
    data = corpus("alice29.txt")[5000:6500]
    comp = Compressor(level=level, model=None, device="cpu", block_size=1000)  # a full first block: no size rule
    packed = comp.compress(data) + comp.flush()
    meta = parse_header(packed)[0]["settings"]
    assert (meta["hidden"], meta["lanes"]) == (LEVELS[level]["hidden"], LEVELS[level]["lanes"])
    assert decompress(packed) == data


def test_stream_shorter_than_a_block_gets_the_one_shot_settings():
    data = corpus("grammar.lsp")[:1500]  # (level 1 online codes ~0.5 kB/s at one lane: kept short)
    comp = Compressor(level=1, model=None, device="cpu")  # no size given, as for a pipe
    pieces = [comp.compress(data[i : i + 400]) for i in range(0, len(data), 400)]
    assert pieces == [b""] * len(pieces)  # nothing is decided before the block is full or flushed
    packed = b"".join(pieces) + comp.flush()
    assert packed == compress(data, level=1, model=None, device="cpu")
    assert parse_header(packed)[0]["settings"]["lanes"] == 1


def _from_forked_child(target, *args, limit: float = 240):
    """What target(*args, queue) puts on the queue in a forked child; fails if the child dies or
    hangs (the bugs these tests catch) instead of answering."""
    import multiprocessing
    import queue as queues
    import time

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=target, args=(*args, results))
    child.start()
    try:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                result = results.get(timeout=1)
                break
            except queues.Empty:
                assert child.is_alive() or not results.empty(), f"the child died (exit {child.exitcode})"
        else:
            raise AssertionError(f"the child hung ({limit} s)")
        child.join(timeout=30)
        assert child.exitcode == 0
        return result
    finally:
        if child.is_alive():
            child.kill()


def _code_in_forked_child(data: bytes, queue) -> None:
    from dyncompress.coding import split

    queue.put((split.parts_for(2, 4), compress(data, threads=2, lanes=4)))


def test_a_forked_child_codes_on_one_thread_instead_of_hanging():
    """A process that coded on two threads (torch's and numba's OpenMP threads started) forks; the
    child codes at -T 2 too. GNU OpenMP does not survive a fork: before `split` the child hung in
    its first parallel torch call. Now it runs on one thread, unsplit, and writes the same bytes."""

    import torch

    data = corpus("alice29.txt")[:20000]
    here = compress(data, threads=2, lanes=4)
    torch.set_num_threads(2)
    assert float(torch.ones(1 << 22, dtype=torch.float64).sum()) == 1 << 22  # torch's threads started
    needs_split()  # and numba's (the split runs at -T 2 on this machine)
    parts, there = _from_forked_child(_code_in_forked_child, data)
    assert parts == 1 and there == here and decompress(there) == data


def _code_with_the_parents_codec(codec, data: bytes, queue) -> None:
    from dyncompress.coding.codec import encode_block

    queue.put(encode_block(codec, data))


def test_a_codec_made_before_a_fork_codes_in_the_child_unsplit():
    """A codec that split its lanes over two threads in the parent, used again in a forked child:
    the child codes its next block unsplit (numba ends a child that enters its OpenMP threads
    after the parent started them) and writes what the parent writes with the same codec."""
    import copy

    needs_split()

    from dyncompress.api import resolve_model
    from dyncompress.coding.codec import Codec, encode_block
    from dyncompress.config.levels import make_settings

    model = resolve_model("enwiki-h256")
    settings = make_settings(model=model, threads=2, lanes=4, size_hint=8000)
    data = corpus("alice29.txt")
    codec = Codec(settings, model)
    encode_block(codec, data[:4000])
    assert codec.chooser.ways[0] == (2, 2)  # the parent could split its lanes (and did, at first)
    state = copy.deepcopy(codec.predictor.state_dict())
    there = _from_forked_child(_code_with_the_parents_codec, codec, data[4000:8000])
    codec.predictor.load_state_dict(state)
    assert there == encode_block(codec, data[4000:8000])
