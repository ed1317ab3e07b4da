"""The experts and the mixer (format 5): exact, symmetric, bounded, and worth their bits."""

import math
from dataclasses import replace
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import numpy as np
import pytest
import torch

from conftest import NET, corpus, rewrite_header, split_started
from dyncompress import DyncompressError, compress, decompress
from dyncompress.coding.codec import Codec, decode_block, encode_block
from dyncompress.coding.measure import measure
from dyncompress.coding.predictor import NoNetwork
from dyncompress.config.levels import DEFAULT_PRIOR, FAST_EXPERTS, NARROWER, ONLINE_PRIOR, make_settings
from dyncompress.config.settings import EXPERTS, PRIOR_KINDS, AdaptSettings, MixSettings, Settings
from dyncompress.experts import counts as tables
from dyncompress.experts.common import N_KINDS, byte_kind, fine_kind, rounded_logs
from dyncompress.experts.counts import Contexts, Tables, log_table
from dyncompress.experts.mix import (
    KINDS_SET,
    MATCH_EDGES,
    MATCH_STATES,
    ORDERS,
    PRIOR_SHA256,
    RATE_SETTLE,
    RATE_START,
    Z_BOUND,
    Experts,
    byte_classes,
    dense_evidence,
    load_prior,
    table_bytes,
)
from dyncompress.experts.mixer import frequencies as integer_frequencies
from dyncompress.experts.ppm import ppm_log_tables
from dyncompress.format.container import FORMAT2_MIX, parse_header
from dyncompress.network.fixed import checked_tables, frequencies

ALL = ",".join(EXPERTS)
BEFORE_WRAP = ",".join(e for e in EXPERTS if e != "wrap")
LOG = log_table(250)
SUBSETS = ["", "orders", "word", "gap", "match", "orders,ppm", "apm", "record", "column", "wrap", ALL]


def settings_with(experts: str, **kw) -> Settings:
    """NET's small online network at the rate these tests' bounds were measured with (online mode's
    before 2026-12-05: the default is 3e-3 since), every mixer setting at its default."""
    return Settings(**{**NET, **kw}, adapt=AdaptSettings(lr=1.5e-3), mix=MixSettings(experts=experts, table_bits=12))


def decimal_logs(nums, den):
    with localcontext() as ctx:
        ctx.prec = 40
        return [int(((Decimal(n) / den).ln() * 4096).to_integral_value(ROUND_HALF_EVEN)) for n in nums]


def test_the_log_tables_are_decimals_correctly_rounded_logarithms(monkeypatch):
    table = log_table(250)  # ln(n + 1/8), n = 0 ... 251
    assert len(table) == 252 and table.dtype == np.int64
    assert table.tolist() == decimal_logs(range(1, 8 * 252, 8), 8)
    ln_mant, ln2 = ppm_log_tables()
    assert ln_mant.tolist() == decimal_logs(range(4096, 8192), 4096) and ln2 == decimal_logs([2], 1)[0]
    # where the float logarithm lands near one half, Decimal decides (not the float's rounding)
    ln = math.log
    monkeypatch.setattr(math, "log", lambda x: (math.floor(4096 * ln(x)) + 0.5) / 4096)
    assert rounded_logs(range(4096, 4200), 4096) == decimal_logs(range(4096, 4200), 4096)


def test_the_compiled_frequencies_are_the_exact_ones():
    """The mixer's frequencies (integer logits, compiled) equal `fixed.frequencies` of the same
    logits: ties for the maximum, differences at the rounding's half-way points, beyond the
    exponential's range and at the mixer's bounds."""
    rng = np.random.default_rng(3)
    z = rng.integers(-40_000, 40_000, (64, 256))
    z[1, [3, 9]] = z[1].max() + 1  # two most probable bytes: the first takes the remainder
    z[2] = z[2, 0] - np.arange(256) * 2  # differences of 2 units of 2^-12: half-way between table points
    z[3, :] = 7  # all equal
    z[4] = rng.choice([-Z_BOUND, Z_BOUND], 256)  # far beyond the 24 nats the table covers
    z[5] = -Z_BOUND
    out = np.empty_like(z)
    integer_frequencies(z, checked_tables()[2], out)
    assert np.array_equal(out, frequencies(z.astype(np.float64)))
    assert (out.sum(axis=1) == 1 << 24).all() and out.min() >= 1


@pytest.mark.parametrize(
    "experts, mixers, classes",
    [(ALL, 2, 7), (FAST_EXPERTS, 2, 7), (FAST_EXPERTS, 1, 1)],
    ids=["every expert", "no apm", "one mixer, one class"],
)
def test_mixing_split_over_threads_changes_nothing(experts, mixers, classes):
    """`mix_parts` (runs of lanes side by side on threads, `split`) gives the serial mix's
    frequencies, logits and evidence at every step, and the same state after, on real text in
    5 lanes split into 2 and into 3 runs: every expert on, and without the APM (`learn_parts` then
    takes half the count tables and half the mixers' weight sets beside `advance`), with two
    mixers and byte classes and with one of each (the fast level's)."""
    text = np.frombuffer(corpus("alice29.txt")[: 5 * 700], dtype=np.uint8).reshape(5, -1)
    mix = MixSettings(experts=experts, table_bits=12, mixers=mixers, classes=classes)
    runs = [Experts(mix, 5) for _ in range(3)]
    split = runs[0].split_tables < runs[0].K and runs[0].split_sets < runs[0]._sets.shape[1]
    assert runs[0].split_tables > 0 and runs[0].split_sets > 0 and split == ("apm" not in experts)
    split_started()
    runs[1].parts, runs[2].parts = 2, 3
    rng = np.random.default_rng(9)
    for t in range(text.shape[1]):
        logits = rng.normal(0, 3 * 4096, (5, 256))
        out = [e.mix(logits) for e in runs]
        for freqs, used in out[1:]:
            assert np.array_equal(freqs, out[0][0]), t
            for key in ("z", "sets", "f0", "f_fast", "f_slow"):
                assert np.array_equal(used[key], out[0][1][key]), (t, key)
            for b in range(5):
                assert np.array_equal(dense_evidence(used["ev"], b), dense_evidence(out[0][1]["ev"], b)), t
        for e, (freqs, used) in zip(runs, out, strict=True):
            e.learn(used, freqs, text[:, t].astype(np.int64), 5)
    states = [e.state() for e in runs]
    for state in states[1:]:
        assert all(np.array_equal(state[k], states[0][k]) for k in states[0])


def test_the_float_guided_division_is_the_integer_one():
    """`floor_div` (a float product, corrected by the remainder) against Python's // where the float
    is most likely off: exact multiples, one below and one above, the largest numerators and
    quotients, and random ones."""
    from dyncompress.experts.common import floor_div

    rng = np.random.default_rng(5)
    cases = []
    for _ in range(4000):
        den = int(rng.integers(1, 1 << int(rng.integers(1, 41)), endpoint=True))
        q = int(rng.integers(0, min(1 << 24, ((1 << 56) - 1) // den)))
        for r in (0, 1, den - 1, den // 2, int(rng.integers(0, den))):
            top = q * den + r
            if top < 1 << 56:
                cases.append((top, den))
    cases += [((1 << 56) - 1, (1 << 32) + 1), ((1 << 24) * (1 << 32) - 1, 1 << 32), (0, 7), (6, 7), (7, 7)]
    for top, den in cases:
        assert floor_div(top, den, 1.0 / den) == top // den, (top, den)


def feed(experts: Experts, text: bytes) -> Experts:
    """One lane takes `text` through the mixer's public steps (network logits all zero)."""
    for byte in text:
        freqs, used = experts.mix(np.zeros((1, 256)))
        experts.learn(used, freqs, np.array([byte]), 1)
    return experts


def test_a_wide_character_is_a_word_of_its_own():
    """Chinese has no spaces: every character of 3 UTF-8 bytes starts a word, so the word contexts
    are the character with the one or two before it. Two-byte letters (German, Russian) do not."""

    def words(text: str) -> list[int]:
        return [int(w) for w in feed(Experts(MixSettings(experts="word", table_bits=10), 1), text.encode()).word[0]]

    assert words("中文") == [words("文")[0], words("中")[0], 0]
    assert words("说中文") == [words("文")[0], words("中")[0], words("说")[0]]
    assert words("für") == [words("für")[0], 0, 0] and words("für")[0] != words("r")[0]
    assert words("да нет") == [words("нет")[0], words("да")[0], 0]


def test_the_ppm_input_is_ppm_c_with_exclusion():
    """The ppm input's evidence is the log of PPM's method C over the order tables, with
    exclusion, computed here again in exact fractions from the same tables: from the highest
    order seen down, each context gives its bytes not yet given count / (n + d) of what is left."""
    from fractions import Fraction

    experts = feed(Experts(MixSettings(experts="orders,ppm", table_bits=12), 1), corpus("alice29.txt")[:4000])
    assert experts.n_ppm == len(ORDERS)
    for context in (b"Alice was be", b"the Queen s", b"\x00\x01\x02zq"):  # seen, half seen, unseen
        feed(experts, context)
        _, used = experts.mix(np.zeros((1, 256)))
        rows, tags = used["rows"][0], used["tags"][0]
        p, left, given = [Fraction(0)] * 256, Fraction(1), set()
        for t in reversed(range(len(ORDERS))):
            row = rows[t]
            if experts.row_tag(row) != tags[t]:
                continue
            counts = experts.row_counts(row)
            c = {j: int(counts[j]) for j in range(256) if counts[j] and j not in given}
            n, d = sum(c.values()), len(c)
            if n:
                for j, cj in c.items():
                    p[j] = left * cj / (n + d)
                given |= set(c)
                left = left * d / (n + d)
        for j in set(range(256)) - given:
            p[j] = left / (256 - len(given))
        assert sum(p) == 1 and given  # order 1 has seen every context here
        evidence = dense_evidence(used["ev"], 0)[1 + len(ORDERS) + 1]
        for j in range(256):
            if p[j] > Fraction(1, 1 << 30):  # flooring to 2^-40 is then far below the tolerance
                assert abs(evidence[j] - 4096 * math.log(p[j])) <= 24, (context, j)
            else:
                assert evidence[j] <= 4096 * math.log(2.0**-29)


def test_a_lane_finds_a_repeat_in_its_own_text_before_a_newer_one_in_another_lane():
    """Lane 0 repeats its own "hello world!", which lane 1 wrote later, followed by another byte.
    The lane's own salted half of the match table points back into lane 0's history, and the match
    predicts what followed there, not what followed lane 1's newer occurrence (which the shared
    half holds)."""
    lanes = (b"hello world!0" + b"z" * 20 + b"hello world!", b"q" * 20 + b"hello world!1" + b"q" * 12)
    experts = Experts(MixSettings(experts="orders,match", table_bits=12, match_bits=12), 2)
    assert experts.match_table.shape == (2 << 12,)
    for a, b in zip(*lanes, strict=True):
        freqs, used = experts.mix(np.zeros((2, 256)))
        experts.learn(used, freqs, np.array([a, b]), 2)
    assert experts.mlen[0] >= 12
    assert experts.ptr[0] >> experts.hb == 0
    freqs, used = experts.mix(np.zeros((2, 256)))
    assert dense_evidence(used["ev"], 0)[-1].argmax() == ord("0")


def test_two_mixers_learn_at_two_rates_and_their_logits_are_averaged():
    """The mixed logits are the mean of two mixers' over the same rows (each the sum of its chosen
    rows times the evidence, in units of 2^-16, clamped); from equal weights, the second's step is
    half the first's; they part, each learning from its own frequencies."""
    one_class = MixSettings(experts="orders,match", table_bits=12, classes=1)
    experts = feed(Experts(one_class, 1), corpus("alice29.txt")[:2000])
    assert not np.array_equal(experts.W, experts.W_slow)
    experts.W_slow[...] = experts.W
    freqs, used = experts.mix(np.zeros((1, 256)))
    w = experts.W.copy()
    experts.learn(used, freqs, np.array([ord("a")]), 1)
    rows = used["sets"][0]
    fast, slow = experts.W[rows] - w[rows], experts.W_slow[rows] - w[rows]
    assert np.abs(fast).max() > 100 and np.abs(slow - fast / 2).max() <= 1
    feed(experts, corpus("alice29.txt")[2000:2500])
    freqs, used = experts.mix(np.zeros((1, 256)))
    E, rows = dense_evidence(used["ev"], 0), used["sets"][0]
    z_fast, z_slow = (np.clip((W[rows].sum(axis=0) @ E) >> 16, -Z_BOUND, Z_BOUND) for W in (experts.W, experts.W_slow))
    assert not np.array_equal(z_fast, z_slow)
    assert np.array_equal(used["z"][0], (z_fast + z_slow) >> 1)
    assert np.array_equal(freqs[0], frequencies_of((z_fast + z_slow) >> 1))  # what is coded
    # what each mixer learns from: its own shares, by one reciprocal of their sum
    exp = checked_tables()[2]
    for z_own, f_own in ((z_fast, used["f_fast"][0]), (z_slow, used["f_slow"][0])):
        e = exp[np.minimum((z_own.max() - z_own + 2) >> 2, len(exp) - 1)]
        assert np.array_equal(f_own, (e * ((1 << 56) // int(e.sum()))) >> 32)
        assert abs(int(f_own.sum()) - (1 << 24)) < 256 and np.abs(f_own - frequencies_of(z_own)).max() < 256


def test_one_mixer_codes_its_own_logits_and_leaves_the_second_alone():
    """mixers=1 (the fast level): z is the one mixer's logits (its chosen rows times the evidence,
    clamped), coded as they are, and it learns from their own shares at the full rate; the second
    mixer's weights and shares stay as they started, untouched."""
    one = MixSettings(experts="orders,match", table_bits=12, mixers=1, classes=1)
    experts = feed(Experts(one, 1), corpus("alice29.txt")[:2000])
    assert np.array_equal(experts.W_slow, experts.w0_slow) and not np.array_equal(experts.W, experts.w0)
    freqs, used = experts.mix(np.zeros((1, 256)))
    E, rows = dense_evidence(used["ev"], 0), used["sets"][0]
    z = np.clip((experts.W[rows].sum(axis=0) @ E) >> 16, -Z_BOUND, Z_BOUND)
    assert np.array_equal(used["z"][0], z) and np.array_equal(freqs[0], frequencies_of(z))
    assert not used["f_slow"].any()  # (never written: the scratch's zeros)
    w = experts.W.copy()
    experts.learn(used, freqs, np.array([ord("a")]), 1)
    rate = np.maximum(experts.lr, experts.lr_start // (RATE_SETTLE + experts.updates[rows] - 1))
    exp = checked_tables()[2]
    e = exp[np.minimum((z.max() - z + 2) >> 2, len(exp) - 1)]
    p = (e * ((1 << 56) // int(e.sum()))) >> 32
    assert np.array_equal(used["f_fast"][0], p)
    g = ((p[None, :] * E).sum(axis=1) >> 24) - E[:, ord("a")]
    assert np.array_equal(experts.W[rows] - w[rows], -((g[None, :] * rate[:, None] + (1 << 15)) >> 16))
    assert np.array_equal(experts.W_slow, experts.w0_slow)


def test_busy_rows_settle_at_the_floor_rate_and_rare_ones_learn_as_before():
    """A weight row's rate starts at RATE_START times mix_lr and comes down with its steps to
    mix_floor (against settling at mix_lr itself): from the same state, a
    step moves the rows chosen thousands of times less than it did, and the rows chosen rarely
    (still above mix_lr's rate) as much."""
    one = MixSettings(experts="orders,match", table_bits=12, mixers=1, classes=1)
    assert 0 < one.mix_floor < one.mix_lr
    new, old = Experts(one, 1), feed(Experts(replace(one, mix_floor=one.mix_lr), 1), corpus("alice29.txt")[:6000])
    lr = round(one.mix_lr * (1 << 20))
    assert new.lr_start == old.lr_start == RATE_START * RATE_SETTLE * lr
    assert old.lr == lr and new.lr == round(one.mix_floor * (1 << 20))
    new.load(old.state())
    steps = []
    for experts in (old, new):
        freqs, used = experts.mix(np.zeros((1, 256)))
        w = experts.W.copy()
        experts.learn(used, freqs, np.array([ord("e")]), 1)
        rows = used["sets"][0]
        steps.append(np.abs(experts.W[rows] - w[rows]).sum(axis=1))
    updates = new.updates[rows] - 1  # (the steps each row had taken before this one)
    busy, rare = updates >= RATE_START * RATE_SETTLE, updates < RATE_SETTLE * (RATE_START - 1)
    assert busy.any() and rare.any()
    assert (steps[1][busy] < steps[0][busy]).all() and (steps[1][rare] == steps[0][rare]).all(), (updates, steps)


def test_byte_classes_weigh_every_class_of_bytes_with_its_own_weights():
    """classes=7: input i's weight for byte j is column i * 7 + class(j) of the chosen rows; at the
    start every class has the input's one weight (the same frequencies as one class), and each
    class's weights learn from that class's share of the gradient, so they part."""
    cls = byte_classes(7)
    assert [cls[ord(c)] for c in "5Ka .\n"] == [1, 2, 3, 0, 0, 0]
    assert (cls[0x80:0xC0] == 4).all() and (cls[0xC0:0xE0] == 5).all() and (cls[0xE0:] == 6).all()
    text = corpus("alice29.txt")[:2000]
    seven, one = (Experts(MixSettings(experts="orders,match", table_bits=12, classes=c), 1) for c in (7, 1))
    assert seven.W.shape == (one.W.shape[0], 7 * one.W.shape[1])
    for e in (seven, one):
        feed(e, text[:300])
        e.W[...], e.W_slow[...] = e.start_weights()  # the weights as they started; the tables keep their counts
    assert np.array_equal(seven.mix(np.zeros((1, 256)))[0], one.mix(np.zeros((1, 256)))[0])
    experts = feed(Experts(MixSettings(experts="orders,match", table_bits=12), 1), text)
    assert not np.array_equal(experts.W[:, 3 * 7 + 3], experts.W[:, 3 * 7 + 0])  # order 3: small letters, the rest
    freqs, used = experts.mix(np.zeros((1, 256)))
    E, rows = dense_evidence(used["ev"], 0), used["sets"][0]
    z_own = []
    for W in (experts.W, experts.W_slow):
        w = W[rows].sum(axis=0).reshape(-1, 7)  # (n_in, 7)
        z_own.append(np.clip((w[:, cls] * E).sum(axis=0) >> 16, -Z_BOUND, Z_BOUND))
    assert np.array_equal(used["z"][0], (z_own[0] + z_own[1]) >> 1)
    # the first mixer's step: each class's gradient from its own bytes' shares
    w = experts.W.copy()
    y = ord("e")
    experts.learn(used, freqs, np.array([y]), 1)
    p = used["f_fast"][0].astype(np.int64)
    g = np.zeros((E.shape[0], 7), dtype=np.int64)
    for c in range(7):
        g[:, c] = (p[cls == c] * E[:, cls == c]).sum(axis=1) >> 24
    g[:, cls[y]] -= E[:, y]
    rate = np.maximum(experts.lr, experts.lr_start // (RATE_SETTLE + experts.updates[rows] - 1))
    assert np.array_equal(experts.W[rows] - w[rows], -((g.reshape(-1)[None, :] * rate[:, None] + (1 << 15)) >> 16))


def frequencies_of(z: np.ndarray) -> np.ndarray:
    out = np.zeros((1, 256), dtype=np.int64)
    integer_frequencies(z[None].astype(np.int64), checked_tables()[2], out)
    return out[0]


def test_the_apm_starts_as_the_identity_and_learns_from_what_was_coded():
    """With its table at zero the APM codes the mixer's own frequencies; it then learns (the
    coded ones differ), and its bucket of a byte's cost is -log2 p within the straight line's error."""
    from dyncompress.experts.common import cost_units

    experts = Experts(MixSettings(experts="orders,apm", table_bits=12), 1)
    freqs, used = experts.mix(np.zeros((1, 256)))
    assert np.array_equal(freqs, used["f0"]) and used["f0"] is not freqs
    feed(experts, corpus("alice29.txt")[:3000])
    freqs, used = experts.mix(np.zeros((1, 256)))
    assert experts.apm.any() and not np.array_equal(freqs, used["f0"])
    th = (ord("t") << 8) | ord("h")  # the (previous byte, byte) table: "th" was coded, and learned up
    assert experts.apm2[th].max() > 0 and experts.apm2.shape == (1 << 16, experts.apm.shape[1])
    assert freqs.sum() == 1 << 24
    for f in (1, 2, 3, 1000, 123_456, (1 << 24) - 1, 1 << 24):
        assert abs(cost_units(f) / 256 + math.log2(f / (1 << 24))) < 0.09, f


@pytest.mark.parametrize("experts", SUBSETS)
def test_every_set_of_experts_round_trips_real_text_and_noise_across_blocks(experts):
    noise = bytes(np.random.default_rng(5).integers(0, 256, 700, dtype=np.uint8))
    text = corpus("alice29.txt")[:3000]
    geo = corpus("calgary_geo_8k")[:2400]  # records of 4 bytes: the record context
    pieces = [text[:1500], noise, text[1500:1501], text[1501:] + text[:900], geo]  # the repeat: match model
    settings = settings_with(experts, lanes=3, segment_len=16)
    enc, dec = Codec(settings), Codec(settings)
    payloads = [encode_block(enc, p) for p in pieces]
    assert [decode_block(dec, c, len(p)) for c, p in zip(payloads, pieces, strict=True)] == pieces
    # every expert's state (tables, histories, match, mixer weights) is the encoder's
    a, b = enc.predictor.state_dict(), dec.predictor.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.startswith("mix.") for k in a) == bool(experts)
    # the network's state alone (what the fingerprint hashes), without copying the tables
    net = enc.predictor.state_dict(tables=False)
    assert net.keys() == {k for k in a if not k.startswith("mix.")} and all(torch.equal(net[k], a[k]) for k in net)


@pytest.mark.parametrize("ways", [1, 4])
def test_rows_of_few_slots_round_trip_across_blocks(ways):
    """The hashed contexts in rows of two slots, where almost every context overflows its row and
    bytes replace each other, each in its own row or in one of four (`choose_rows`): the decoder
    repeats every replacement, and its tables end as the encoder's."""
    slots = 2
    text = corpus("alice29.txt")[:4000]
    settings = Settings(**{**NET, "lanes": 3}, mix=MixSettings(table_bits=12, slots=slots, ways=ways))
    enc, dec = Codec(settings), Codec(settings)
    payloads = [encode_block(enc, p) for p in (text[:2500], text[2500:])]
    assert decode_block(dec, payloads[0], 2500) + decode_block(dec, payloads[1], 1500) == text
    a, b = enc.predictor.state_dict(), dec.predictor.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["mix.slot"].shape[1] == 2 * slots + 4 and a["mix.slot"].any()


def test_a_hashed_context_takes_the_row_of_its_group_that_holds_it_else_the_least_counted():
    """`choose_rows`, in a table of rows of slots and one of rows of counts: a context whose tag one
    of its group's rows holds reads that row; a new one takes the row whose counts sum least (the
    first of equals), which counting then starts afresh; a lane without a context (tag -1) keeps
    its row; one way changes nothing."""
    slot = np.zeros((10, 2 * 3 + tables.SLOT_TAIL), dtype=np.uint8)  # rows of three slots: row 4 + r
    counts = np.zeros((4, 256), dtype=np.uint8)  # four rows of counts: rows 0 ... 3
    base = np.array([4, 0], dtype=np.int64)  # table 0: the rows of slots; table 1: the rows of counts

    def tab(ways: int) -> Tables:
        return Tables(counts, slot, 4, tags, np.zeros(4, np.uint8), base, base.astype(np.uint64), ways, 250, LOG)

    tags = np.zeros(4, dtype=np.uint16)
    for r, tag, held in ((0, 5, [9]), (1, 6, [2, 2]), (2, 7, [1]), (3, 8, [3])):  # rows 4 ... 7: a group of 4
        tables.set_row_tag(tags, slot, 4, 4 + r, tag)
        for q, c in enumerate(held):
            slot[r, 2 * q], slot[r, 2 * q + 1] = 65 + q, c
    for r, tag, held in ((0, 20, 5), (1, 21, 1), (2, 23, 3), (3, 24, 2)):
        tables.set_row_tag(tags, slot, 4, r, tag)
        counts[r, 66] = held
    lanes = [((5, 7), (0, 24)), ((7, 9), (2, 25)), ((4, 5), (1, 21)), ((6, -1), (3, 24)), ((9, 11), (0, 20))]
    tagv = np.array([[a[1], c[1]] for a, c in lanes], dtype=np.int64)
    chosen = {}
    for ways in (1, 2, 4):
        rows = np.array([[a[0], c[0]] for a, c in lanes], dtype=np.int64)
        tables.choose_rows(tab(ways), Contexts(rows, tagv, 2, 2))
        chosen[ways] = rows.T.tolist()
    assert chosen[1] == [[5, 7, 4, 6, 9], [0, 2, 1, 3, 0]]
    # 2 ways: rows 4 and 5 hold tags 5 and 6, so tag 7 takes row 5 (2 + 2 < 9); of 6 and 7, new tag 9
    # takes row 6 (1 < 3); of the empty 8 and 9, the first. Counts: 24 is not in {0, 1}: row 1 (1 < 5)
    assert chosen[2] == [[5, 6, 4, 6, 8], [1, 3, 1, 3, 0]]
    # 4 ways: tag 7 found in row 6, new 9 takes row 6 (it sums least); counts: 24 found in row 3, 25 row 1
    assert chosen[4] == [[6, 6, 4, 6, 8], [3, 1, 1, 3, 0]]


def test_a_row_that_starts_afresh_ages_the_other_rows_of_its_group():
    """`counts.update` with four ways: the lane whose context is new to its row resets it and halves the
    counts of the group's three other rows (rounding up: a count of 1 stays); rows of other groups
    and a lane whose tag is its row's are only counted."""
    slot = np.zeros((8, 2 * 3 + tables.SLOT_TAIL), dtype=np.uint8)
    counts, tags = np.zeros((1, 256), dtype=np.uint8), np.zeros(1, dtype=np.uint16)
    base = np.array([1], dtype=np.int64)  # slot row r is row 1 + r

    def tab(ways: int) -> Tables:
        return Tables(counts, slot, 1, tags, np.zeros(1, np.uint8), base, base.astype(np.uint64), ways, 250, LOG)

    for r in range(8):
        tables.set_row_tag(tags, slot, 1, 1 + r, 10 + r)
        slot[r, 0:4] = [65, 9, 66, 1]  # 'A' counted 9 times, 'B' once
    rows = np.array([[2], [6]], dtype=np.int64)  # lane 0: a new context in row 2; lane 1: row 6's own
    tagv = np.array([[99], [15]], dtype=np.int64)
    for ways, aged in ((1, []), (4, [1, 3, 4])):
        slot[:, 0:4] = [65, 9, 66, 1]
        tables.set_row_tag(tags, slot, 1, 2, 11)
        tables.update(tab(ways), Contexts(rows, tagv, 1, 1), np.array([67, 65]), 2, 0, 1)
        assert tables.row_tag(tab(ways), 2) == 99 and slot[1, 0:4].tolist() == [67, 1, 0, 0]  # afresh: 'C' once
        for r in (1, 3, 4):
            assert slot[r - 1, 0:4].tolist() == ([65, 5, 66, 1] if r in aged else [65, 9, 66, 1])
        assert slot[5, 0:4].tolist() == [65, 10, 66, 1]  # row 6 (another group) counted its 'A'


def test_more_ways_save_bits_where_contexts_collide():
    """Tables far too small for the text (2^10 rows): a context that may take any of four rows keeps
    more of what it learned than one in its own row, and the file still decodes."""
    text = corpus("alice29.txt")[:40000]
    files = [compress(text, model=None, hidden=0, engine="bytes", table_bits=10, ways=ways) for ways in (1, 4)]
    assert [decompress(f) for f in files] == [text, text]
    assert len(files[1]) < 0.995 * len(files[0])


def test_rows_of_slots_stay_packed_and_distinct():
    """Every reader of a row of slots stops at its first empty slot (`counts.update`): that holds only
    if the slots in use always come first. After real text, through resets, replacements and the
    halving of full rows (a low count limit), every row is a run of distinct bytes with counts > 0,
    then empty slots alone."""
    text = corpus("alice29.txt")[:30000]
    experts = feed(Experts(MixSettings(experts="orders,word", table_bits=10, slots=4, count_limit=6), 1), text)
    slot = experts.slot[:, :8]  # (then the tag and the recent byte)
    counts, used = slot[:, 1::2], slot[:, 1::2] > 0
    full = used.all(axis=1)  # rows where a new byte replaced the least counted
    assert (~used).any() and full.any() and (counts == 6).any()  # empty slots, full rows, counts at the limit
    assert not (~used[:, :-1] & used[:, 1:]).any()  # no slot in use after an empty one
    for row in slot[used.sum(axis=1) > 1][:2000]:
        held = row[0::2][row[1::2] > 0]
        assert len(set(held.tolist())) == len(held)


def test_a_context_with_more_bytes_than_slots_keeps_the_most_counted():
    """A hashed context followed by more distinct bytes than its row has slots: a new byte takes an
    empty slot, then the slot with the lowest count (the first of them); the bytes kept give their
    counts' evidence, the one dropped reads as unseen. With slots enough nothing is dropped."""
    text = b"qqqqAqqqqBqqqqAqqqqCqqqq"  # order 4's "qqqq" is followed by A, B, A, C
    o4 = 1 + ORDERS.index(4)  # its input (0 is the network's)
    kept = {}
    for slots in (2, 4):
        experts = feed(Experts(MixSettings(experts="orders", table_bits=12, slots=slots), 1), text)
        _, used = experts.mix(np.zeros((1, 256)))
        row = used["rows"][0, o4 - 1]
        assert row >= experts.n_dense  # (a row of slots)
        counts = experts.row_counts(row)
        kept[slots] = {chr(j): int(c) for j, c in enumerate(counts) if c}
        E = dense_evidence(used["ev"], 0)[o4]
        dropped = slots == 2
        assert E[ord("A")] > E[ord("C")] > E[ord("Z")] and E[ord("B")] == (E[ord("Z")] if dropped else E[ord("C")])
    assert kept == {4: {"A": 2, "B": 1, "C": 1}, 2: {"A": 2, "C": 1}}


def test_the_record_length_is_found_by_votes_and_fades_without_them():
    """A byte whose last four occurrences are equally spaced votes for that distance; 16 votes make
    it the record length, and the record context (the byte one record back) is read. More than 32
    records after the last vote it is no context (tag -1: no evidence, its rows left alone); one vote
    brings it back."""
    experts = feed(Experts(MixSettings(experts="record", table_bits=12), 1), b"abcde" * 4)
    assert experts.rec[0, 4] == 0  # 5 votes so far (a ... e, each the fourth time)
    feed(experts, b"abcde" * 3)
    assert experts.rec[0, 4] == 5  # the 16th vote
    _, used = experts.mix(np.zeros((1, 256)))
    assert used["tags"][0, -1] >= 0
    noise = bytes(np.random.default_rng(8).integers(0, 256, 32 * 5 + 1, dtype=np.uint8))
    feed(experts, noise[:-1])
    _, used = experts.mix(np.zeros((1, 256)))
    assert used["tags"][0, -1] >= 0  # 32 records since the last vote
    feed(experts, noise[-1:])
    tables = ("counts", "slot", "tags", "recent")  # the record's alone (its rows of slots hold their tags)
    before = [getattr(experts, name).copy() for name in tables]
    _, used = experts.mix(np.zeros((1, 256)))
    E = dense_evidence(used["ev"], 0)
    assert used["tags"][0, -1] == -1 and (E[1] == E[1, 0]).all()  # no evidence
    feed(experts, b"xyz")
    after = [getattr(experts, name) for name in tables]
    assert experts.slot.any() and experts.rec[0, 4] == 5  # (the record's rows had counted before)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    feed(experts, noise[-4:] + b"abcde" * 4)  # noise ... then the records again: a vote for 5
    _, used = experts.mix(np.zeros((1, 256)))
    assert used["tags"][0, -1] >= 0


def test_the_record_context_finds_the_records_of_real_data_and_saves_bits():
    """calgary/geo: 32-bit numbers, records of 4 bytes; an online network with every expert."""
    data = corpus("calgary_geo_8k")[:5000]  # (4.6 % smaller with the record context; 4.5 % on all 8 kB)
    experts = feed(Experts(MixSettings(experts="record", table_bits=12), 1), data[:1000])
    assert experts.rec[0, 4] == 4
    without = ",".join(e for e in EXPERTS if e != "record")
    s = settings_with(without, lanes=1)
    off, on = (measure(data, replace(s, mix=replace(s.mix, experts=e)), None).bits for e in (without, ALL))
    assert on < 0.98 * off, (on, off)  # (3.0 % smaller when measured)


def test_the_column_context_is_the_column_and_the_byte_above():
    """The column context: bytes since the last line feed, with the byte at that column in the line
    before (a line feed where that line ended there; none where it was shorter)."""

    def context(text: bytes) -> tuple[int, int]:
        experts = feed(Experts(MixSettings(experts="column", table_bits=12), 1), text)
        _, used = experts.mix(np.zeros((1, 256)))
        return int(used["rows"][0, -1]), int(used["tags"][0, -1])

    experts = feed(Experts(MixSettings(experts="column", table_bits=12), 1), b"abc\nxbz\nab")
    assert experts.lines[0].tolist() == [8, 4]
    assert context(b"abc\nxbz\nab") == context(b"q\nyyz\nzz")  # column 2 under a z
    assert context(b"abc\nxbz\nab") != context(b"q\nyyy\nzz")  # under a y
    assert context(b"q\nyy\nzz") != context(b"q\ny\nzz") == context(b"z\nqq\n\nzz")  # under the line feed; none
    assert context(b"zz") != context(b"zzz")  # the first line: columns only


def test_lanes_that_see_the_same_bytes_at_once_share_the_tables_exactly():
    """Many lanes hitting one row and one match slot in the same step: the result does not
    depend on the order of the lanes' updates, and the decoder repeats it."""
    unit = corpus("grammar.lsp")[:400]
    data = unit * 16  # with 16 lanes every lane codes the same text in lock step
    settings = settings_with(ALL, lanes=16, segment_len=4)
    enc, dec = Codec(settings), Codec(settings)
    packed = encode_block(enc, data)
    assert decode_block(dec, packed, len(data)) == data
    a, b = enc.predictor.state_dict(), dec.predictor.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    counts, slots = a["mix.counts"].numpy(), a["mix.slot"].numpy()
    slots = slots[:, : 2 * settings.mix.slots]  # (then the tag and the recent byte)
    assert slots.shape[0] > 1 and slots[:, 1::2].any()  # the hashed contexts in rows of slots
    for c in (counts, slots[:, 1::2]):
        assert c.max() <= settings.mix.count_limit  # 16 adds at once, still bounded


def test_the_experts_learn_and_the_mixer_weights_move():
    data = corpus("alice29.txt")[:3000]
    off, on = (measure(data, settings_with(e, lanes=2), None).bits for e in ("", ALL))
    assert on < 0.97 * off  # statistics help an online network that starts from nothing (0.61 here)
    codec = Codec(settings_with(ALL, lanes=2))
    encode_block(codec, data[:1000])
    assert not np.array_equal(codec.predictor.experts.W, codec.predictor.experts.start_weights()[0])


def test_the_network_learns_from_what_was_coded():
    """The network's segment step descends the mixture's code length: the frequencies its
    backward pass reads are the coded ones, not its own softmax."""
    settings = settings_with(ALL, lanes=2, segment_len=4)
    predictor = Codec(settings).predictor
    text = np.frombuffer(corpus("alice29.txt")[:12], dtype=np.uint8).astype(np.int32).reshape(6, 2)
    coded = [predictor.step(text[t], 2) for t in range(3)]
    for t, freqs in enumerate(coded):
        assert np.array_equal(predictor.net.net.F[t].numpy(), freqs)
    alone = Codec(settings_with("", lanes=2, segment_len=4)).predictor
    assert not np.array_equal(alone.step(text[0], 2), coded[0])  # the mixture is not the network


def test_a_long_repeat_costs_almost_nothing_the_second_time():
    """The issue's test: a text concatenated with itself, one lane: < 0.1 bits per byte in its
    second half (the match model finds it and the mixer learns to trust it; 0.014 here)."""
    half = corpus("alice29.txt")[20000:25000]
    model_free = Settings(hidden=32, lanes=1, segment_len=16, device="cpu")
    m = measure(half + half, model_free, None, positions=True)
    second = m.positions[len(half) :].sum() / len(half)
    first = m.positions[: len(half)].sum() / len(half)
    assert second < 0.1 < first, (first, second)


def test_table_sizes_are_bounded_and_stated():
    default = make_settings(model=None, device="cpu")
    assert default.mix.expert_names == EXPERTS
    assert table_bytes(default.mix, default.lanes) <= 256 << 20  # the default budget
    experts = Experts(default.mix, default.lanes)
    # orders 1, 2 and the gap pair direct; orders 4, 5, 6 and the word pair full; orders 3 and 8, the
    # word alone and the skip pair half; the record, column and wrap contexts a sixteenth each
    # in rows of (byte, count) slots
    full = 1 << default.mix.table_bits
    # (but the word alone's, in 2^16 rows of counts)
    assert experts.counts.shape == (256 + 65536 + 65536 + 65536, 256)
    # (each row 64 bytes with its tag and recent byte, from a cache line's start)
    assert experts.slot.shape == (4 * full + 3 * full // 2 + 3 * (full // 16), 2 * default.mix.slots + 4)
    assert experts.slot.shape[1] == 64 and experts.slot.ctypes.data % 64 == 0
    assert experts.apm2.shape == (65536, experts.apm.shape[1]) and experts.apm2.dtype == np.int32
    # the match table: 2^match_bits shared slots and as many for the lanes' own
    assert experts.match_table.shape == (2 << default.mix.match_bits,)
    assert experts.hist.size <= 1 << default.mix.history_bits
    # a small input gets small tables (and the same from a streaming encoder: one block)
    small = make_settings(model=None, device="cpu", size_hint=5000)
    assert small.mix.table_bits == 15 and small.mix.match_bits == 13  # (rows of slots: four times the rows)
    assert table_bytes(small.mix, small.lanes) < table_bytes(default.mix, 16) / 4
    assert table_bytes(MixSettings(experts=""), 16) == 0
    nine = make_settings(level=9, model=None, device="cpu")  # -9 may use more: twice the rows
    assert nine.mix.table_bits == default.mix.table_bits + 1
    assert table_bytes(default.mix, default.lanes) < table_bytes(nine.mix, nine.lanes) <= 512 << 20


def test_the_wrap_context_knows_the_column_and_the_kinds_of_the_last_two_bytes():
    """The wrap table's context is the column with the kinds of the last two bytes (space, letter,
    digit, line end, control, punctuation): where a line of wrapped text ends. On alice29 (lines
    wrapped near 70 columns) it saves bits; its rows differ by column and by kind, not by letter."""
    assert [byte_kind(c) for c in b" aZ\xc3\xa40\n\r\t,."] == [0, 1, 1, 1, 1, 2, 3, 3, 4, 5, 5]
    text = corpus("alice29.txt")[:30000]
    base = Settings(hidden=0, lanes=1, adapt=AdaptSettings(rule="static"), mix=MixSettings(table_bits=14, prior=""))
    bits = {e: measure(text, replace(base, mix=replace(base.mix, experts=e)), None).bits for e in (ALL, BEFORE_WRAP)}
    assert bits[ALL] < 0.997 * bits[BEFORE_WRAP], bits
    contexts = []
    for line in (b"ab cd", b"xy zw", b"ab c", b"ab 1"):  # columns 5, 5, 4, 4
        experts = feed(Experts(MixSettings(experts="wrap", table_bits=12, ways=1), 1), b"12\n" + line)
        experts.prepare()
        contexts.append((int(experts._rows[0, 0]), int(experts._tags[0, 0])))
    assert contexts[0] == contexts[1] and len({contexts[0], contexts[2], contexts[3]}) == 3, contexts


def test_the_kinds_set_is_chosen_by_the_kinds_of_the_last_bytes():
    """The mixer's seventh weight set (MixSettings.kinds) is chosen by the kinds of the last `kinds`
    bytes (`fine_kind`: byte_kind's, the letters split into small, capital, UTF-8 lead and
    continuation bytes): two histories of the same kinds share a row, another kind anywhere in the
    last `kinds` bytes takes another."""
    assert [fine_kind(c) for c in b" aZ\xc3\xa40\n\r\t,."] == [0, 1, 6, 7, 8, 2, 3, 3, 4, 5, 5]
    mix = MixSettings(experts="orders", table_bits=12, kinds=4)

    def row(history: bytes) -> int:
        experts = feed(Experts(mix, 1), history)
        experts.mix(np.zeros((1, 256)))
        return int(experts._sets[0, 6])

    same = row(b"xx, Ab"), row(b"qq; Cd"), row(b"ab: Zz")
    assert len(set(same)) == 1, same  # punctuation, space, capital, small letter
    others = row(b"xx, ab"), row(b"xx,  b"), row(b"xx, A\xc3"), row(b"xx1 Ab")
    assert len({same[0], *others}) == 5, others  # (the fifth byte back: beyond the four read)
    assert row(b"x1, Ab") == same[0]
    assert Experts(mix, 1)._sets.shape[1] == 8


def test_the_state_set_is_chosen_by_the_match_the_order_seen_and_the_last_kind():
    """The mixer's eighth weight set has a row for every match state (none; else the kind of the
    byte the match predicts with its length bucket), highest order seen and kind of the last byte,
    indexed directly."""
    mix = MixSettings(experts="orders,match", table_bits=12, kinds=4)
    K = Experts(mix, 1).K

    def row(history: bytes) -> tuple[int, int, int]:
        experts = feed(Experts(mix, 1), history)
        experts.mix(np.zeros((1, 256)))
        offset = int(experts._sets[0, 7] - experts.set_base[7])
        state, rest = divmod(offset, (K + 1) * N_KINDS)
        return state, *divmod(rest, N_KINDS)

    # a fresh start: no match, no order seen, the last byte 0 (a control)
    assert row(b"") == (0, 0, fine_kind(0))
    # twelve different capitals once: no context has been seen before them, nothing repeats
    unique = bytes(range(65, 91))
    state, order, kind = row(unique[:12])
    assert (state, order, kind) == (0, 0, fine_kind(unique[11]))
    # the text again: a match of 12 bytes predicts the next capital, every order has seen its context
    state, order, kind = row(unique + b" " + unique[:12])
    assert state > 0 and order == len(ORDERS) and kind == fine_kind(unique[11])
    bucket = 1 + (state - 1) % len(MATCH_EDGES)  # (lengths 12 ... 15: the third)
    assert (state - 1) // len(MATCH_EDGES) == fine_kind(unique[12]) and MATCH_EDGES[bucket - 1] == 12
    # the same place after a small letter predicted: another row, in the same order and kind
    state2, order2, _ = row(unique.lower() + b" " + unique.lower()[:12])
    assert state2 != state and (state2 - 1) // len(MATCH_EDGES) == fine_kind(ord("m")) and order2 == order
    assert Experts(mix, 1)._sets.shape[1] == 8


def test_the_statistics_alone_round_trip_and_both_sides_keep_the_same_state():
    """hidden 0 (`--fast`): no network, no gradient steps; the experts and the mixer alone, split
    over threads or not, encoder and decoder with the same tables after every block."""
    text, noise = corpus("alice29.txt")[:4000], bytes(np.random.default_rng(3).integers(0, 256, 900, dtype=np.uint8))
    base = Settings(
        hidden=0, lanes=6, segment_len=16, adapt=AdaptSettings(rule="static"), mix=MixSettings(table_bits=12)
    )
    payloads = []
    for threads in (1, 2):
        enc, dec = Codec(replace(base, threads=threads)), Codec(replace(base, threads=3 - threads))
        assert isinstance(enc.predictor.net, NoNetwork) and enc.predictor.state_dict(tables=False) == {}
        payloads.append([encode_block(enc, p) for p in (text, noise, text[:700])])
        assert [decode_block(dec, c, n) for c, n in zip(payloads[-1], (4000, 900, 700), strict=True)] == [
            text,
            noise,
            text[:700],
        ]
        a, b = enc.predictor.state_dict(), dec.predictor.state_dict()
        assert a.keys() == b.keys() and len(a) > 10 and all(torch.equal(a[k], b[k]) for k in a)
        assert enc.nats > 0
    assert payloads[0] == payloads[1]  # the split over threads changes nothing
    # the repeat of the text's start is coded far smaller than its first time
    assert len(payloads[0][2]) < 0.5 * len(payloads[0][0]) * 700 / 4000
    with pytest.raises(ValueError, match="the experts must be on"):
        replace(base, mix=MixSettings(experts=""))
    with pytest.raises(ValueError, match="nothing to adapt"):
        replace(base, adapt=AdaptSettings(rule="rms"))
    with pytest.raises(DyncompressError, match="without a network, so without a model"):
        compress(text, hidden=0)  # the shipped model is the default start
    assert decompress(compress(text[:500], model=None, hidden=0, engine="bytes")) == text[:500]


def test_bad_expert_settings_are_refused():
    with pytest.raises(ValueError, match="unknown expert"):
        MixSettings(experts="orders,sse")
    with pytest.raises(ValueError, match="ppm expert reads the orders"):
        MixSettings(experts="word,ppm")
    with pytest.raises(ValueError, match="table bits"):
        MixSettings(table_bits=40)
    with pytest.raises(ValueError, match="count limit"):
        MixSettings(count_limit=300)
    for kinds in (0, 9):  # (the kinds set reads the last 8 bytes at most: `last` holds 8)
        with pytest.raises(ValueError, match="kinds must be 1 ... 8"):
            MixSettings(kinds=kinds)
    for floor in (0.0, 1.5):
        with pytest.raises(ValueError, match="settled rate must be in"):
            MixSettings(mix_floor=floor)
    with pytest.raises(ValueError, match="slots must be 2 ... 64"):
        MixSettings(slots=0)
    with pytest.raises(ValueError, match="match bits must be 10 ... 24"):
        MixSettings(match_bits=0)


def test_format2_settings_read_as_no_experts():
    """A format-2 header has no `mix`: it reads as the network alone (what format 2 coded)."""
    assert MixSettings(**FORMAT2_MIX).expert_names == ()


def test_a_models_mixer_starts_from_the_prior_learned_on_text(model):
    """With the shipped model and every expert, the mixer's weight rows start from those learned
    on text (`tools/mixer_prior.py`); every frame and reset starts there again. Online mode starts
    from its own prior; the fast level (no network) and other experts keep the hand-set start."""
    s = make_settings(model=model, device="cpu")
    assert s.mix.prior == DEFAULT_PRIOR
    assert make_settings(model=None, device="cpu").mix.prior == ONLINE_PRIOR
    fast = make_settings(model=None, device="cpu", hidden=0, engine="bytes")  # --fast --engine bytes
    assert fast.mix.prior == "" and fast.mix.mixers == 1  # one mixer
    assert make_settings(model=None, device="cpu").mix.mixers == 2
    assert make_settings(model=model, device="cpu", experts="orders,match").mix.prior == ""
    experts = Experts(s.mix, 4)
    # the default prior holds the rows of every weight set, the kinds and state sets' too
    kinds_rows, state_rows = 1 << KINDS_SET[2], MATCH_STATES * (experts.K + 1) * N_KINDS
    assert experts.n_sets - experts.set_base[-1] == state_rows
    zero_rows = kinds_rows + state_rows
    assert experts.set_base[-2] == experts.n_sets - zero_rows
    W, W_slow, updates = load_prior(DEFAULT_PRIOR, (experts.n_sets, experts.n_in))
    assert PRIOR_KINDS[DEFAULT_PRIOR] == s.mix.kinds
    assert W[-zero_rows:].any() and updates[-zero_rows:].any()
    # the prior before it (text4) holds the six sets before the kinds set; the rows after start at zero
    # (a coding with another kinds set than the default prior's starts from it)
    narrower = NARROWER[DEFAULT_PRIOR]
    assert make_settings(model=model, device="cpu", kinds=4).mix.prior == narrower
    with pytest.raises(ValueError, match="was made for kinds 7"):
        replace(s.mix, kinds=4)
    four = Experts(replace(s.mix, prior=narrower), 4)
    W4, _, updates4 = load_prior(narrower, (experts.n_sets - zero_rows, experts.n_in))
    assert np.array_equal(four.W[:, ::7], np.concatenate([W4, np.zeros((zero_rows, W4.shape[1]), W4.dtype)]))
    assert np.array_equal(four.updates, np.concatenate([updates4, np.zeros(zero_rows, updates4.dtype)]))
    # every byte class of an input starts from the prior's weight for it (column i * 7 + c)
    assert s.mix.classes == 7 and experts.W.shape == (W.shape[0], 7 * W.shape[1])
    assert np.array_equal(experts.W[:, ::7], W) and np.array_equal(experts.W_slow[:, 6::7], W_slow)
    assert np.array_equal(experts.W, np.repeat(W, 7, axis=1))
    s = replace(s, mix=replace(s.mix, classes=1))
    experts = Experts(s.mix, 4)
    assert np.array_equal(experts.W, W) and np.array_equal(experts.W_slow, W_slow)
    # the rows start at the rates they had learned down to: step counts of 0 ... 128
    assert np.array_equal(experts.updates, updates) and updates.min() == 0 and updates.max() == 128
    hand_set = Experts(replace(s.mix, prior=""), 4)
    assert not np.array_equal(W, hand_set.W) and not np.array_equal(W, W_slow) and not hand_set.updates.any()
    experts.W[:] += 1
    experts.updates[:] += 1
    experts.reset()
    assert np.array_equal(experts.W, W) and np.array_equal(experts.W_slow, W_slow)
    assert np.array_equal(experts.updates, updates)


def test_the_prior_saves_bits_on_text_it_was_not_made_from(model):
    data = corpus("alice29.txt")[:10000]
    s = make_settings(model=model, device="cpu", size_hint=len(data), threads=1)
    with_prior, without = (
        measure(data, replace(s, mix=replace(s.mix, prior=p)), model).bits for p in (s.mix.prior, "")
    )
    assert with_prior < 0.997 * without, (with_prior, without)


def test_the_prior_is_recorded_and_checked(model, monkeypatch):
    data = corpus("alice29.txt")[:3000]
    packed = compress(data, model=model, device="cpu", threads=1)
    assert parse_header(packed)[0]["settings"]["mix"]["prior"] == DEFAULT_PRIOR
    assert decompress(packed) == data
    hand_set = compress(data, model=model, device="cpu", threads=1, prior="")
    assert hand_set != packed and decompress(hand_set) == data
    # online mode names its own prior, and codes with the hand-set start as well
    online = compress(data, model=None, device="cpu", threads=1)
    assert parse_header(online)[0]["settings"]["mix"]["prior"] == ONLINE_PRIOR and decompress(online) == data
    hand_set = compress(data, model=None, device="cpu", threads=1, prior="")
    assert hand_set != online and decompress(hand_set) == data
    # a prior this version does not know (the development builds' text1 ... text3 among them): a
    # one-line error, not a wrong decode
    for unknown in ("text9", "text1"):
        future = rewrite_header(packed, lambda m, name=unknown: m["settings"]["mix"].update(prior=name))
        with pytest.raises(DyncompressError, match=f"unknown mixer prior '{unknown}'"):
            decompress(future)
    # a damaged prior file stops the coding before any byte
    narrower = NARROWER[DEFAULT_PRIOR]
    fourth = compress(data, model=model, device="cpu", threads=1, prior=narrower)
    assert parse_header(fourth)[0]["settings"]["mix"]["prior"] == narrower and decompress(fourth) == data
    for stream, name in ((packed, DEFAULT_PRIOR), (fourth, narrower)):
        load_prior.cache_clear()
        monkeypatch.setitem(PRIOR_SHA256, name, "0" * 64)
        try:
            with pytest.raises(DyncompressError, match=rf"mixer prior prior_{name}.npz hashes to"):
                decompress(stream)
        finally:
            monkeypatch.undo()
            load_prior.cache_clear()


def test_preparing_a_step_early_changes_nothing():
    """The codec calls `prepare` (the count contexts, their rows fetched) before the network's step;
    `mix` alone prepares itself. Both give the same frequencies and state, byte after byte, and a
    state loaded in between is prepared afresh (not from the rows of before)."""
    text = corpus("alice29.txt")[:1500]
    settings = MixSettings(table_bits=12)
    early, alone = Experts(settings, 1), Experts(settings, 1)
    elsewhere = feed(Experts(settings, 1), corpus("alice29.txt")[5000:5400]).state()
    for i, byte in enumerate(text):
        early.prepare()
        if i == 700:  # a state from elsewhere after preparing: mix must not use the rows prepared
            early.load(elsewhere)
            alone.load(elsewhere)
        got, used = early.mix(np.zeros((1, 256)))
        want, used_alone = alone.mix(np.zeros((1, 256)))
        assert np.array_equal(got, want), i
        early.learn(used, got, np.array([byte]), 1)
        alone.learn(used_alone, want, np.array([byte]), 1)
    assert all(np.array_equal(a, b) for a, b in zip(early.state().values(), alone.state().values(), strict=True))
