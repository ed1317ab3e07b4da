"""The bitwise engine: its tables, its coder and its state maps against plain-Python references on
real text, the exact bit decomposition of a byte distribution, and round trips of real and binary
data."""

import io
import json
import math
import os
import struct
import subprocess
import sys
import zlib
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

import dyncompress
from conftest import corpus, region_edges, run_cli
from dyncompress.bitwise import coder, engine, tree
from dyncompress.bitwise.tables import PROB_ONE, STRETCH_LIMIT, squash_table, states, stretch_table
from dyncompress.format.container import MAGIC, META_DICT, VERSION, Block, parse_header, read_frames
from dyncompress.network.fixed import FREQ_TOTAL, frequencies


def _text_bits(data: bytes) -> list[int]:
    return [(c >> i) & 1 for c in data for i in range(7, -1, -1)]


def test_squash_is_the_correctly_rounded_logistic_and_stretch_its_inverse():
    sq, st = squash_table(), stretch_table()
    with localcontext() as ctx:
        ctx.prec = 40
        for d in range(-STRETCH_LIMIT, STRETCH_LIMIT + 1, 7):
            exact = Decimal(PROB_ONE) / (1 + (Decimal(-d) / 256).exp())
            want = min(max(int(exact.to_integral_value()), 1), PROB_ONE - 1)
            assert sq[d + STRETCH_LIMIT] == want, d
    assert (np.diff(sq) >= 0).all() and sq[0] >= 1 and sq[-1] <= PROB_ONE - 1
    for p in range(1, PROB_ONE):
        d = st[p]
        # the least d whose squash reaches p
        assert d == STRETCH_LIMIT or sq[d + STRETCH_LIMIT] >= p
        assert d == -STRETCH_LIMIT or sq[d - 1 + STRETCH_LIMIT] < p


def test_the_bit_history_states_count_runs_and_discount_the_other_bit():
    s = states()
    assert s.count <= 256 and (s.n0[0], s.n1[0]) == (0, 0)
    st = 0
    for k in range(1, 30):  # a run of ones counts up, zeros stay 0
        st = s.next[st, 1]
        assert (s.n0[st], s.n1[st]) == (0, k)
    st = s.next[st, 0]  # one zero after the run: the ones are about halved, the zero counted
    assert s.n0[st] == 1 and 10 <= s.n1[st] <= 16
    # every state's successors are states of the machine, and their counts follow the rule
    for i in range(s.count):
        for y in (0, 1):
            j = s.next[i, y]
            assert j < s.count
            assert (s.n1[j] if y else s.n0[j]) >= min(s.n1[i] if y else s.n0[i], 5)


def _reference_code(bits, probs):
    """The coder's arithmetic in plain Python integers."""
    x1, x2, out = 0, 0xFFFFFFFF, bytearray()
    for y, p in zip(bits, probs, strict=True):
        r = x2 - x1
        xmid = x1 + (r >> 16) * p + (((r & 0xFFFF) * p) >> 16)
        x1, x2 = (x1, xmid) if y else (xmid + 1, x2)
        while not (x1 ^ x2) & 0xFF000000:
            out.append(x2 >> 24)
            x1, x2 = (x1 << 8) & 0xFFFFFFFF, ((x2 << 8) & 0xFFFFFFFF) | 255
    return bytes(out) + bytes([(x1 >> 24) + 1])


def test_the_coder_matches_its_reference_and_decodes_what_it_coded():
    rng = np.random.default_rng(5)
    bits = _text_bits(corpus("quijote_8k.txt")[:1500])
    # probabilities from sure and wrong to sure and right, the extremes included
    probs = [int(p) for p in rng.integers(1, 65536, size=len(bits))]
    probs[:4] = [1, 65535, 1, 65535]
    st, buf = coder.new_state()
    buf = coder.room(st, buf, 4 * len(bits) + 8)
    for y, p in zip(bits, probs, strict=True):
        coder.code(st, buf, p, y, False)
    payload = coder.finish(st, buf)
    assert payload == _reference_code(bits, probs)
    st, buf = coder.new_state(payload)
    assert [coder.code(st, buf, p, 0, True) for p in probs] == bits
    ideal = -sum(math.log2(p / 65536 if y else 1 - p / 65536) for y, p in zip(bits, probs, strict=True))
    assert 8 * len(payload) <= ideal + 40


def test_a_state_map_learns_as_its_reference_does_on_real_text():
    """The order-1 model's histories and state map over alice29's bits, in the engine's integers
    and in plain Python: the same map at the end."""
    s = states()
    data = corpus("alice29.txt")[:3000]
    sm = np.tile(s.initial_probability(), (1, 1))
    sn = np.zeros((1, 256), dtype=np.int64)
    m = engine.new_model(table_bits=12, ring_bits=12, match_bits=10)
    ref_sm = [int(v) for v in s.initial_probability()]
    ref_sn = [0] * 256
    hist: dict[int, int] = {}
    c1 = 0
    for c in data:
        c0 = 1
        for i in range(7, -1, -1):
            y = (c >> i) & 1
            node = (c1 << 8) | c0
            h = hist.get(node, 0)
            engine.sm_update(sm, sn, 0, h, y, m.recip)
            n = ref_sn[h]
            ref_sm[h] += (((y << 22) - ref_sm[h]) * ((1 << 17) // (2 * n + 3))) >> 16
            ref_sn[h] = min(n + 1, engine.SM_LIMIT)
            hist[node] = int(s.next[h, y])
            c0 = (c0 << 1) | y
        c1 = c
    assert sm[0].tolist() == ref_sm and sn[0].tolist() == ref_sn
    assert len(set(hist.values())) > 40  # many histories were reached


@pytest.mark.parametrize(
    "case",
    ["network", "one sure symbol", "all equal", "tiny tails"],
)
def test_the_bit_decomposition_is_exact(case):
    """For every byte the product of its eight bit probabilities is its probability as the integers
    define it, f_y / 2^24, and the 16-bit probabilities the coder gets stay inside 1 ... 2^16 - 1."""
    rng = np.random.default_rng(11)
    if case == "network":
        freqs = frequencies(rng.normal(size=(1, 256)) * 5 * 4096)[0]
    elif case == "one sure symbol":
        freqs = np.ones(256, dtype=np.int64)
        freqs[200] = FREQ_TOTAL - 255
    elif case == "all equal":
        freqs = np.full(256, FREQ_TOTAL // 256, dtype=np.int64)
    else:  # a few large, the rest 1 or 2
        freqs = rng.integers(1, 3, size=256).astype(np.int64)
        rest = FREQ_TOTAL - (freqs.sum() - freqs[[3, 97, 250]].sum())
        freqs[[3, 97]] = rest // 3
        freqs[250] = rest - 2 * (rest // 3)
    assert freqs.sum() == FREQ_TOTAL and freqs.min() >= 1
    sums = np.zeros(512, dtype=np.int64)
    tree.node_sums(freqs, sums)
    assert sums[1] == FREQ_TOTAL
    for y in range(256):
        prob = Fraction(1)
        for k, bit in tree.path(y):
            one = Fraction(int(sums[2 * k + 1]), int(sums[k]))
            prob *= one if bit else 1 - one
            assert 1 <= tree.bit_probability(sums[2 * k + 1], sums[k]) <= 65535
        assert prob == Fraction(int(freqs[y]), FREQ_TOTAL), y


def test_coded_bitwise_the_network_costs_what_it_costs_bytewise():
    """The network's tables coded through the tree: within the coder's 16-bit rounding of the cost
    of coding the same bytes whole."""
    rng = np.random.default_rng(3)
    data = corpus("alice29.txt")[:400]
    st, buf = coder.new_state()
    buf = coder.room(st, buf, 64 * len(data))
    sums = np.zeros(512, dtype=np.int64)
    ideal = 0.0
    tables = frequencies(rng.normal(size=(len(data), 256)) * 3 * 4096)
    for c, freqs in zip(data, tables, strict=True):
        tree.node_sums(freqs, sums)
        ideal -= math.log2(freqs[c] / FREQ_TOTAL)
        for k, bit in tree.path(c):
            coder.code(st, buf, tree.bit_probability(sums[2 * k + 1], sums[k]), bit, False)
    payload = coder.finish(st, buf)
    assert 8 * len(payload) <= ideal * 1.001 + 40
    st, buf = coder.new_state(payload)
    back = bytearray()
    for freqs in tables:
        tree.node_sums(freqs, sums)
        k = 1
        while k < 256:
            k = 2 * k + coder.code(st, buf, tree.bit_probability(sums[2 * k + 1], sums[k]), 0, True)
        back.append(k - 256)
    assert bytes(back) == data


def test_the_engine_says_how_much_memory_its_model_holds():
    """`table_bytes` (what `info` prints) counts every array `new_model` makes."""
    for sizes in ((12, 14, 10, 1), (16, 12, 13, 1), (12, 10, 11, 5)):
        m = engine.new_model(*sizes)
        assert engine.table_bytes(*sizes) == sum(a.nbytes for a in m if isinstance(a, np.ndarray))


SMALL = {"table_bits": 14, "ring_bits": 16, "match_bits": 12}


@pytest.mark.parametrize(
    "name",
    ["alice29.txt", "hongloumeng_6k.txt", "calgary_obj1", "calgary_geo_8k", "empty", "one byte", "zeros", "random"],
)
def test_the_engine_round_trips_real_text_binary_and_edge_cases(name):
    made = {
        "empty": b"",
        "one byte": b"\xff",
        "zeros": bytes(20000),
        "random": np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes(),
    }
    data = made[name] if name in made else corpus(name)[:60000]
    payload = engine.compress(data, **SMALL)
    assert engine.decompress(payload, len(data), **SMALL) == data
    if name in ("alice29.txt", "hongloumeng_6k.txt", "calgary_obj1", "zeros"):
        # a context mixer: well under zlib's best on text, binary and runs
        assert len(payload) < 0.85 * len(zlib.compress(data, 9))
    if name == "random":
        assert len(payload) < len(data) * 1.01 + 16


@pytest.mark.parametrize("name", engine.MODEL_NAMES)
def test_every_model_of_the_engine_is_used(name):
    """Leaving one model out changes the code of real text (its inputs are mixed, its weights
    chosen), and the engine without it still decodes what it coded."""
    data = corpus("alice29.txt")[:16000] + corpus("calgary_obj1")[:4000]
    whole = engine.compress(data, **SMALL)
    less = engine.compress(data, leave_out=(name,), **SMALL)
    assert less != whole
    assert engine.decompress(less, len(data), leave_out=(name,), **SMALL) == data


def test_the_indirect_contexts_remember_what_followed_on_real_text():
    """`Model.ind` after coding real text: for every pair of bytes and every byte, the two bytes that
    followed its last two occurrences, as a plain-Python pass over the text has them (the stream
    starts after two zero bytes)."""
    data = corpus("alice29.txt")[:6000] + corpus("calgary_obj1")[:2000]
    bc = engine.BlockCoder(**SMALL)
    bc.encode(data)
    want = np.zeros(65536 + 256, dtype=np.int64)
    before = [0, 0]
    for c in data:
        pair = (before[0] << 8) | before[1]
        want[pair] = ((want[pair] << 8) | c) & 0xFFFF
        want[65536 + before[1]] = ((want[65536 + before[1]] << 8) | c) & 0xFFFF
        before = [before[1], c]
    assert (bc.model.ind == want).all()
    assert np.count_nonzero(want[:65536]) > 500  # (real text: many pairs seen twice and more)


def test_the_engine_refuses_a_model_it_does_not_have():
    with pytest.raises(ValueError, match="no such model in the engine: orders"):
        engine.new_model(12, 12, 12, leave_out=("orders",))


# A stand-in for the predictor: lanes as the codec cuts them, each with order-1 counts (a byte's
# frequency 16 per time seen after the last byte, plus 1), coded through `engine.code_step`.
_LANES = """
import numpy as np
from dyncompress.bitwise import engine


def code_lanes(data, lanes, payload=None, oracle=False):
    \"\"\"The engine's payload for `data` cut into `lanes` (decoding `payload` instead: the bytes).\"\"\"
    n = len(data)
    step_len = -(-n // lanes)
    lens = [max(0, min(step_len, n - b * step_len)) for b in range(lanes)]
    parts = [np.frombuffer(data[b * step_len : b * step_len + lens[b]], np.uint8) for b in range(lanes)]
    out = [bytearray() for _ in range(lanes)]
    m = engine.new_model(14, 12, 12, lanes=lanes)
    coder = engine.LaneEncoder(m) if payload is None else engine.LaneDecoder(m, payload)
    counts = np.zeros((lanes, 256, 256), np.int64)
    prev = np.zeros(lanes, np.int64)
    for t in range(step_len):
        k = sum(length > t for length in lens)
        freqs = counts[np.arange(k), prev[:k]] * 16 + 1
        sym = np.array([p[t] for p in parts[:k]], np.int32)
        if oracle:  # (a test of trust: the true byte nearly certain)
            freqs[np.arange(k), sym] = 1 << 24
        if payload is not None:
            sym[:] = 0
        coder.code(freqs, sym)
        for b in range(k):
            out[b].append(int(sym[b]))
        counts[np.arange(k), prev[:k], sym] += 1
        prev[:k] = sym
    return coder.finish() if payload is None else b"".join(out)
"""

_OTHER_KERNELS = (
    _LANES
    + """
import sys
data = sys.stdin.buffer.read()
payload = engine.compress(data, table_bits=14, ring_bits=16, match_bits=12)
assert engine.decompress(payload, len(data), table_bits=14, ring_bits=16, match_bits=12) == data
lanes = code_lanes(data, 3)
sys.stdout.buffer.write(len(payload).to_bytes(4, "little") + payload + lanes)
"""
)
_lanes: dict = {}
exec(_LANES, _lanes)
code_lanes = _lanes["code_lanes"]


def _order1_cost(data: bytes, lanes: int) -> float:
    """Bits the stand-in predictor's tables cost coded whole (`code_lanes`' counts)."""
    step_len = -(-len(data) // lanes)
    bits = 0.0
    for b in range(lanes):
        counts = np.zeros((256, 256), np.int64)
        prev = 0
        for c in data[b * step_len : (b + 1) * step_len]:
            row = counts[prev] * 16 + 1
            bits -= math.log2(row[c] / row.sum())
            counts[prev, c] += 1
            prev = c
    return bits


def test_lanes_coded_through_the_engine_with_a_predictor_mixed_last():
    """Lanes of text coded in turn, a predictor's table mixed in last (`code_step`): exact both ways,
    with a ragged end (the last lane shorter, the lanes after it empty); the engine adds to a weak
    predictor (well under its cost), and trusts a sure one from the first byte (its weight starts
    at 1)."""
    data = corpus("alice29.txt")[:20000] + corpus("calgary_obj1")[:3990]
    payload = code_lanes(data, 4)
    assert code_lanes(data, 4, payload=payload) == data
    assert 8 * len(payload) < 0.8 * _order1_cost(data, 4)
    sure = code_lanes(data[:3000], 3, oracle=True)
    assert 8 * len(sure) < 0.05 * 3000
    assert code_lanes(data[:3000], 3, payload=sure, oracle=True) == data[:3000]
    assert code_lanes(data[:1000], 1, payload=code_lanes(data[:1000], 1)) == data[:1000]


def test_the_engine_codes_the_same_bytes_under_generic_kernels(portable_kernels):
    """Integers only: the engine compiled for a generic CPU writes the bytes this machine's does,
    alone and with lanes and a predictor's tables mixed in."""
    data = corpus("alice29.txt")[30000:45000] + corpus("calgary_obj1")[:5000]
    env = dict(os.environ, **portable_kernels)
    done = subprocess.run([sys.executable, "-c", _OTHER_KERNELS], input=data, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    alone = engine.compress(data, **SMALL)
    assert done.stdout == len(alone).to_bytes(4, "little") + alone + code_lanes(data, 3)


# --- the engine in the container: engine "bits" (`encode --fast --engine bits`) ---------------

BITS = dict(model=None, hidden=0, engine="bits", device="cpu")


def test_the_bits_engine_round_trips_frames_blocks_and_a_stored_block():
    """Text, noise (a stored block, which the engine still learns from) and object code, in frames
    of two blocks: the file decodes exactly, whole and frame by frame in parallel."""
    noise = np.random.default_rng(4).integers(0, 256, 6000, dtype=np.uint8).tobytes()
    data = corpus("alice29.txt")[:18000] + noise + corpus("calgary_obj1")[:12000]  # block 4 the noise
    packed = dyncompress.compress(data, block_size=6000, frame_size=12000, **BITS)
    blocks = [f for f in read_frames(io.BytesIO(packed).read) if isinstance(f, Block)]
    assert [b.stored for b in blocks] == [False, False, False, True, False, False]
    assert dyncompress.decompress(packed) == data
    assert dyncompress.decompress(packed, workers=2) == data
    meta, _ = parse_header(packed)
    assert meta["format"] == VERSION == 6 and meta["settings"]["engine"] == "bits"


def test_the_bits_engine_fails_cleanly_on_corruption_and_truncation():
    data = corpus("xargs.1")[:3000]
    packed = dyncompress.compress(data, block_size=1000, **BITS)
    for i in region_edges(packed):
        bad = bytearray(packed)
        bad[i] ^= 0x20
        with pytest.raises(dyncompress.DyncompressError) as caught:
            out = dyncompress.decompress(bytes(bad))
            raise AssertionError(f"corruption at byte {i} decoded to {out[:40]!r}")
        assert "\n" not in str(caught.value)
        with pytest.raises(dyncompress.DyncompressError, match="truncated|empty input"):
            dyncompress.decompress(packed[:i])


def test_a_format_5_header_reads_as_the_bytes_engine():
    """Format 5 named no engine: everything it coded was a byte at a time."""
    meta = {"settings": {"hidden": 0, "lanes": 4}, "model": None}
    body = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=META_DICT)
    body = body.compress(json.dumps(meta).encode()) + body.flush()
    head = struct.pack("<8sHI", MAGIC, 5, len(body)) + body
    read, _ = parse_header(head + struct.pack("<I", zlib.crc32(head)))
    assert read["format"] == 5 and read["settings"]["engine"] == "bytes"


_NO_TORCH = """
import sys
from dyncompress.cli.main import run
src, packed, out = sys.argv[1:]
commands = (["encode", "--fast", "-q", "-o", packed, src], ["decode", "-q", "-o", out, packed])
commands += (["info", packed], ["test", packed])
for argv in commands:
    sys.argv = ["dyncompress", *argv]
    try:
        run()
    except SystemExit as e:
        assert not e.code, e.code
print("torch" in sys.modules)
"""


def test_the_bits_engine_codes_without_loading_torch(tmp_path):
    """`--fast` (the bits engine alone) encodes, decodes, describes and tests a file without importing
    torch (its start-up and memory are the engine's own); the header names numba instead."""
    src = tmp_path / "in.txt"
    src.write_bytes(corpus("alice29.txt")[:20000])
    args = [str(src), str(tmp_path / "in.dc"), str(tmp_path / "out.txt")]
    done = subprocess.run([sys.executable, "-c", _NO_TORCH, *args], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split()[-1] == "False"
    assert (tmp_path / "out.txt").read_bytes() == src.read_bytes()
    meta, _ = parse_header((tmp_path / "in.dc").read_bytes())
    assert "numba" in meta["platform"] and "torch" not in meta["platform"]


def test_the_command_line_refuses_what_contradicts_the_bits_engine(tmp_path):
    """--engine without --fast, or the bits engine (what --fast means) with lanes, is a usage error
    of one line, nothing written. (Round trips of --fast from the command line: test_cli.)"""
    src = tmp_path / "text"
    src.write_bytes(corpus("xargs.1")[:2000])
    for args, says in (
        (["--engine", "bits"], "add --fast"),
        (["--engine", "bytes", "-6"], "add --fast"),
        (["--fast", "--lanes", "3"], "one lane"),
    ):
        r = run_cli("encode", *args, "-c", src)
        assert r.returncode == 2 and says in r.stderr.decode() and not r.stdout, (args, r.stderr)
        assert "Traceback" not in r.stderr.decode(), r.stderr
