"""The engine: models of what each bit will be, a two-layer mixer, APMs, and the loop that codes.

Per byte, every context model has a context (a hash of the bytes before it); per nibble, that
context and the nibble's first bits choose a slot of 16 bytes in the hash table: a check byte and
the bit histories (`tables.States`) of the nibble's 15 tree nodes. Per bit, each model's history at
the node of the bits so far is read through its state map (what that history has meant for this
model, learned) and stretched; the match model offers the bit that followed the longest recent
repeat, weighted by the repeat's length. The inputs

    x_i = stretch(p_i)        (1/256 nat, |x| <= 2047)

are added by several mixers, each with weights chosen by its own small context (the bits of the
byte so far; the last byte; the match's length and the bit's position; how many of orders 2, 3, 4
and the first indirect context have seen theirs and the bit's position; the kind of the last byte
and the bits so far), each trained on its own error; a final mixer adds their outputs. Three APMs refine the result:
by the byte's first bits, by them and the last byte, by them and a hash of the last two bytes. Every
number is an integer (weights 16.16, probabilities 12 bits, state maps 22 bits), so encoder and
decoder on any machine compute the same.

With a predictor (the codec's byte tables), one more mixer comes last: the predictor's probability
of the bit (its table's tree, `tree`), the engine's and its mixers' sum, weighted by the match's
length and the bit's position, starting at the predictor's alone. Its lanes are coded in turn, each
with its own registers, contexts and ring, all sharing the tables (`code_step`).

`Model` holds the arrays (`new_model`); `code_byte` codes one byte, encoding or decoding, through
one code path; `code_span` (the engine alone, one lane) and `code_step` (a step of lanes with a
predictor's tables: `LaneEncoder`, `LaneDecoder`) call it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)
from dyncompress.bitwise import coder, tree
from dyncompress.bitwise.tables import PROB_ONE, STRETCH_LIMIT, squash_table, states, stretch_table
from dyncompress.experts.common import N_KINDS, P1, P2, fine_kind, is_letter, mix64

# the hashed context models (`_next_byte` makes their contexts): orders 2, 3, 4 of the bytes before;
# the last byte with the two that followed it the time before (indirect, `Model.ind`); the current
# word, the current and the previous word; the last two bytes with the byte that followed them the
# time before (indirect); order 5; the two bytes before the last (sparse); order 8; the column in the
# line with the byte above it (same column, line before) and the last byte; the byte the match
# expects with its length bucket. Orders 0 and 1 index tables directly.
HASHED = 12
DIRECT = 2
MODELS = DIRECT + HASHED
# every model's name, in the order of its inputs (the direct, the hashed as `_next_byte` makes their
# contexts), and the match model last: what `new_model(leave_out=...)` takes
MODEL_NAMES = (
    "order0", "order1", "order2", "order3", "order4", "indirect1", "word", "words", "indirect2",
    "order5", "sparse", "order8", "column", "match-byte", "match",
)  # fmt: skip
N_INPUTS = 2 * MODELS + 2  # two per model, the match model, and a bias
# the first-layer mixers' weight sets: by the byte's bits so far; by the last byte; by the match's
# length bucket, whether it agrees, and the bit's position; by how many of the first four hashed
# contexts (orders 2, 3, 4 and indirect1) have seen theirs, and the bit's position; by the kind of the
# last byte (`common.fine_kind`) and the byte's bits so far
MIXER_SETS = (256, 256, 256, 64, N_KINDS * 256)
MATCH_MIN = 6  # the bytes the match model hashes to find a repeat
MATCH_BUCKETS = 16
SM_LIMIT = 1023  # a state map's count limit: its rate settles at 1 / (SM_LIMIT + 1.5)
# the mixers' learning rates: a weight moves x * (4096 y - p) * rate / 2^16 (x, p in their integer units)
MIX_RATE = 24
FINAL_RATE = 8
W_INIT = 1 << 13  # a first-layer weight's start (1/8: the inputs' sum starts near their mean)
W_LIMIT = (1 << 31) - 1  # a first-layer weight (int32) held in +-W_LIMIT
APM_RATE = 6  # an APM point moves 1 / 2^APM_RATE of the way to each bit
APM_CONTEXTS = (256, 1 << 16, 1 << 18)  # the APMs' contexts: bits so far; and the last byte; and a hash of two
# the last stage where a predictor's byte table comes in (`code_step`): a mixer of the predictor's bit
# probability, the engine's and its first mixers' sum, and a bias, with weights chosen by the match's
# length bucket (0: none) and the bit's position; its weights start at the predictor's alone
FINAL_INPUTS = 4
FINAL_SETS = MATCH_BUCKETS * 8
FINAL_RATE_NET = 8

# a lane's registers (a row of int64: every value the loop carries from one byte to the next; MLANE,
# MPTR: the lane and position the match follows; LINE, LINE1: where the current and the previous line start)
C0, C4, C8, WORD, WORD1, MLANE, MPTR, MLEN, POS, MPRED, LINE, LINE1 = range(12)
N_REGS = 12
LANE_SHIFT = 40  # a match table entry: lane << LANE_SHIFT | the position after the hashed bytes


class Model(NamedTuple):
    """Everything the engine learns and carries, for L lanes (one: the engine alone).

    reg (L, N_REGS) int64: the registers above; ctx (L, HASHED) uint64: the hashed models' byte
    contexts; slot (L, HASHED) int64: their current slots' first byte in `table`; table (2^tb * 16,)
    uint8: the hash table's slots (check, 15 histories); o0 (256,) and o1 (65536,) uint8: the direct
    models' histories; sm (MODELS, 256) int64 and sn (MODELS, 256): the state maps' probabilities
    (2^-22) and counts; ring (L, 2^rb) uint8: the bytes each lane has seen (the match model's
    history); mtab (2^mb,) int64: lane << LANE_SHIFT | the position after a hash of MATCH_MIN bytes;
    msm, msn (1, 1 + 2 MATCH_BUCKETS) int64: the match model's state map, row 1 + 2 bucket + expected
    bit while the match agrees (row 0: none); w1 (sum MIXER_SETS, N_INPUTS) int32, w2
    (len(MIXER_SETS) + 1,) int64: the mixers' weights; apm1, apm2, apm3 (APM_CONTEXTS * 33,) int32:
    the APMs' points (2^-16); x (N_INPUTS,), pr and row (len(MIXER_SETS),), sums (512,), xf
    (FINAL_INPUTS,) int64: scratch; wf (FINAL_SETS, FINAL_INPUTS) int64: the last mixer's weights
    (with a predictor); sq, st: squash and stretch; nxt (256, 2) uint8 and pri (256,): the state
    machine and its priorities; recip (SM_LIMIT + 1,): a state map's rate by its count, 2^17 / (2n + 3);
    use (len(MODEL_NAMES),) uint8: which models are on; ind (65536 + 256,) uint16: the two bytes that
    followed each pair of bytes (ind[pair]) and each byte (ind[65536 + byte]) the last times, all lanes'.

    With several lanes (coded in turn, `code_step`) reg, ctx, slot and ring have a row per lane;
    everything else is all lanes' (the lanes' bytes are one stream to the tables, the mixers and the
    APMs; a match is looked for in every lane's ring)."""

    reg: np.ndarray
    ctx: np.ndarray
    slot: np.ndarray
    table: np.ndarray
    o0: np.ndarray
    o1: np.ndarray
    sm: np.ndarray
    sn: np.ndarray
    ring: np.ndarray
    mtab: np.ndarray
    msm: np.ndarray
    msn: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    apm1: np.ndarray
    apm2: np.ndarray
    apm3: np.ndarray
    x: np.ndarray
    pr: np.ndarray
    row: np.ndarray
    sums: np.ndarray
    xf: np.ndarray
    wf: np.ndarray
    sq: np.ndarray
    st: np.ndarray
    nxt: np.ndarray
    pri: np.ndarray
    recip: np.ndarray
    use: np.ndarray
    ind: np.ndarray


def _apm_start(contexts: int) -> np.ndarray:
    """APM points that leave a probability as it is: point k at squash((k - 16) * 128), in 2^-16."""
    sq = squash_table()
    d = np.clip((np.arange(33) - 16) * 128, -STRETCH_LIMIT, STRETCH_LIMIT)
    return np.tile(sq[d + STRETCH_LIMIT] * 16, contexts).astype(np.int32)


def new_model(
    table_bits: int = 22, ring_bits: int = 24, match_bits: int = 20, lanes: int = 1, leave_out: tuple[str, ...] = ()
) -> Model:
    """A fresh model for `lanes` lanes coded in turn: 2^table_bits slots of 16 bytes, a ring of
    2^ring_bits bytes a lane, 2^match_bits match positions; without the models named in `leave_out`
    (`MODEL_NAMES`: their inputs 0, nothing learned; the match's state also chooses no weights)."""
    unknown = set(leave_out) - set(MODEL_NAMES)
    if unknown:
        raise ValueError(f"no such model in the engine: {', '.join(sorted(unknown))}")
    s = states()
    sm = np.tile(s.initial_probability(), (MODELS, 1))
    reg = np.zeros((lanes, N_REGS), dtype=np.int64)
    reg[:, C0] = 1
    return Model(
        reg=reg,
        ctx=np.zeros((lanes, HASHED), dtype=np.uint64),
        slot=np.zeros((lanes, HASHED), dtype=np.int64),
        table=np.zeros((1 << table_bits) * 16, dtype=np.uint8),
        o0=np.zeros(256, dtype=np.uint8),
        o1=np.zeros(1 << 16, dtype=np.uint8),
        sm=sm,
        sn=np.zeros((MODELS, 256), dtype=np.int64),
        ring=np.zeros((lanes, 1 << ring_bits), dtype=np.uint8),
        mtab=np.zeros(1 << match_bits, dtype=np.int64),
        msm=np.full((1, 1 + 2 * MATCH_BUCKETS), 1 << 21, dtype=np.int64),
        msn=np.zeros((1, 1 + 2 * MATCH_BUCKETS), dtype=np.int64),
        w1=np.full((sum(MIXER_SETS), N_INPUTS), W_INIT, dtype=np.int32),
        w2=np.append(np.full(len(MIXER_SETS), (1 << 16) // len(MIXER_SETS)), 0).astype(np.int64),
        apm1=_apm_start(APM_CONTEXTS[0]),
        apm2=_apm_start(APM_CONTEXTS[1]),
        apm3=_apm_start(APM_CONTEXTS[2]),
        x=np.zeros(N_INPUTS, dtype=np.int64),
        pr=np.zeros(len(MIXER_SETS), dtype=np.int64),
        row=np.zeros(len(MIXER_SETS), dtype=np.int64),
        sums=np.zeros(512, dtype=np.int64),
        xf=np.zeros(FINAL_INPUTS, dtype=np.int64),
        wf=np.tile(np.array([1 << 16] + [0] * (FINAL_INPUTS - 1), dtype=np.int64), (FINAL_SETS, 1)),
        sq=squash_table(),
        st=stretch_table(),
        nxt=s.next,
        pri=s.priority,
        recip=np.array([(1 << 17) // (2 * n + 3) for n in range(SM_LIMIT + 1)], dtype=np.int64),
        use=np.array([name not in leave_out for name in MODEL_NAMES], dtype=np.uint8),
        ind=np.zeros(65536 + 256, dtype=np.uint16),
    )


def table_bytes(table_bits: int, ring_bits: int, match_bits: int, lanes: int = 1) -> int:
    """The memory a model of these sizes holds in its arrays, in bytes (`new_model`'s, counted
    without making them): the sized three, the APMs, the direct and mixer tables."""
    sized = (16 << table_bits) + (lanes << ring_bits) + (8 << match_bits)
    apms = 4 * 33 * sum(APM_CONTEXTS)
    direct = 256 + (1 << 16) + 2 * 8 * MODELS * 256 + 2 * 8 * (1 + 2 * MATCH_BUCKETS)
    mixers = 4 * sum(MIXER_SETS) * N_INPUTS + 8 * (len(MIXER_SETS) + 1 + N_INPUTS + 2 * len(MIXER_SETS))
    mixers += 8 * (512 + FINAL_INPUTS + FINAL_SETS * FINAL_INPUTS)  # sums, xf, wf
    shared = 8 * (2 * (2 * STRETCH_LIMIT + 1) + 1) + 2 * 256 + 8 * 256 + 8 * (SM_LIMIT + 1)  # sq, st, nxt, pri, recip
    shared += len(MODEL_NAMES) + 2 * (65536 + 256)  # use, ind
    return sized + apms + direct + mixers + lanes * (8 * N_REGS + 16 * HASHED) + shared


U32, U56 = np.uint64(32), np.uint64(56)


@njit(cache=True, inline="always")
def clip(v, lo, hi):
    """v held in lo ... hi."""
    return lo if v < lo else hi if v > hi else v


@njit(cache=True, inline="always")
def squash(d, sq):
    """The probability (12 bits) of a stretched value d, clipped to |d| <= 2047."""
    return sq[clip(d, -STRETCH_LIMIT, STRETCH_LIMIT) + STRETCH_LIMIT]


@njit(cache=True, inline="always")
def find_slot(table, key, pri):
    """The first byte of the slot for context hash `key` (uint64): one of the four slots of its
    64-byte group whose check byte matches, else the one whose first history has seen least,
    cleared and claimed."""
    group = np.int64(key >> np.uint64(40)) & ((len(table) >> 6) - 1)
    check = np.uint8((key >> U32) & np.uint64(255))
    base = group << 6
    best = base
    best_pri = np.int64(1 << 30)
    for k in range(4):
        s = base + (k << 4)
        if table[s] == check:
            return s
        pr = pri[table[s + 1]]
        if pr < best_pri:
            best_pri = pr
            best = s
    for k in range(16):
        table[best + k] = 0
    table[best] = check
    return best


@njit(cache=True, inline="always")
def apm_predict(t, cx, pr, st):
    """An APM's refined probability (12 bits) of pr in context cx, and the point the bit trains:
    the stretch of pr places it between two of the context's 33 points, interpolated."""
    s = st[pr] + 2048  # 1 ... 4095
    lo = s >> 7
    w = s & 127
    i = cx * 33 + lo
    p = (t[i] * (128 - w) + t[i + 1] * w) >> 11
    return p, i + (w >> 6)


@njit(cache=True, inline="always")
def sm_update(sm, sn, row, s, y, recip):
    """A state map's entry (row, s) moves toward bit y by 1 / (its count + 1.5)."""
    n = sn[row, s]
    sm[row, s] += (((y << 22) - sm[row, s]) * recip[n]) >> 16
    if n < SM_LIMIT:
        sn[row, s] = n + 1


@njit(cache=True, inline="always")
def code_byte(m, b, c, st, buf, decode, net):
    """Code lane b's byte c (decoding: c is ignored) through model m, a bit at a time, and return it;
    every model learns from every bit, and the contexts move on past the byte. net: whether a
    predictor's byte table comes in, its tree's sums in `m.sums` (`tree.node_sums`)."""
    reg = m.reg[b]
    ctx = m.ctx[b]
    slot = m.slot[b]
    use = m.use
    x = m.x
    pr_l1 = m.pr
    row_l1 = m.row
    sets0 = MIXER_SETS[0]
    sets1 = sets0 + MIXER_SETS[1]
    sets2 = sets1 + MIXER_SETS[2]
    sets3 = sets2 + MIXER_SETS[3]
    pf = np.int64(0)
    rf = np.int64(0)
    for bit in range(8):
        c0 = reg[C0]
        # the models' inputs
        if bit == 0 or bit == 4:
            for k in range(HASHED):
                if use[DIRECT + k]:
                    key = mix64(ctx[k] + np.uint64(c0) * P2 + np.uint64(k))
                    slot[k] = find_slot(m.table, key, m.pri)
        j = c0 if bit < 4 else ((c0 & ((1 << (bit - 4)) - 1)) | (1 << (bit - 4)))
        c1 = reg[C4] & 255
        at1 = (c1 << 8) | c0  # order 1's history
        seen = 0
        for k in range(DIRECT):
            hist = m.o0[c0] if k == 0 else m.o1[at1]
            pk = m.sm[k, hist] >> 10
            x[k] = m.st[pk] if use[k] else 0
            x[MODELS + k] = (pk - 2048) >> 2 if use[k] else 0
        for k in range(HASHED):
            hist = m.table[slot[k] + j] if use[DIRECT + k] else 0
            if hist != 0:
                pk = m.sm[DIRECT + k, hist] >> 10
                x[DIRECT + k] = m.st[pk]
                x[MODELS + DIRECT + k] = (pk - 2048) >> 2
                if k < 4:
                    seen += 1
            else:
                x[DIRECT + k] = 0
                x[MODELS + DIRECT + k] = 0
        mlen = reg[MLEN]
        mrow = 0
        if mlen > 0 and use[MODELS]:
            expected = (reg[MPRED] >> (7 - bit)) & 1
            if ((reg[MPRED] | 256) >> (8 - bit)) == c0:  # the bits so far are the predicted byte's
                mrow = 1 + 2 * min(mlen, MATCH_BUCKETS - 1) + expected
        x[2 * MODELS] = m.st[m.msm[0, mrow] >> 10] if mrow != 0 else 0
        x[2 * MODELS + 1] = 256
        # the first layer: one mixer per selector, each on the same inputs
        row_l1[0] = c0
        row_l1[1] = sets0 + c1
        mb = min(mlen, MATCH_BUCKETS - 1) if mrow != 0 else 0
        row_l1[2] = sets1 + ((mb << 3) | bit) * 2 + (1 if mrow == 0 else 0)
        row_l1[3] = sets2 + seen * 8 + bit
        row_l1[4] = sets3 + fine_kind(c1) * 256 + c0
        dot2 = np.int64(0)
        for s in range(len(MIXER_SETS)):
            r = row_l1[s]
            dot = np.int64(0)
            for k in range(N_INPUTS):
                dot += x[k] * np.int64(m.w1[r, k])
            d = clip(dot >> 16, -STRETCH_LIMIT, STRETCH_LIMIT)
            pr_l1[s] = d
            dot2 += d * m.w2[s]
        dot2 += 256 * m.w2[len(MIXER_SETS)]
        pm = squash(dot2 >> 16, m.sq)
        # the APMs
        pa1, ia1 = apm_predict(m.apm1, c0, pm, m.st)
        cx2 = (c1 << 8) | c0
        pa2, ia2 = apm_predict(m.apm2, cx2, pm, m.st)
        cx3 = np.int64(mix64(np.uint64(((reg[C4] & 0xFFFF) << 8) | c0)) >> np.uint64(46))
        pa3, ia3 = apm_predict(m.apm3, cx3, pm, m.st)
        p = clip((pm + pa1 + 3 * pa2 + 3 * pa3 + 4) >> 3, 1, PROB_ONE - 1)
        if net:  # the predictor's bit probability, the engine's, mixed last
            xf = m.xf
            one = tree.bit_probability(m.sums[2 * c0 + 1], m.sums[c0])  # (2^-16)
            xf[0] = m.st[clip((one + 8) >> 4, 1, PROB_ONE - 1)]
            xf[1] = m.st[p]
            xf[2] = m.st[pm]
            xf[3] = 256
            rf = (min(mlen, MATCH_BUCKETS - 1) if mrow != 0 else 0) * 8 + bit
            dotf = np.int64(0)
            for k in range(FINAL_INPUTS):
                dotf += xf[k] * m.wf[rf, k]
            pf = squash(dotf >> 16, m.sq)
            p = clip(pf, 1, PROB_ONE - 1)
        # code the bit
        y = coder.code(st, buf, p << 4, (c >> (7 - bit)) & 1, decode)
        if net:
            ef = ((y << 12) - pf) * FINAL_RATE_NET
            for k in range(FINAL_INPUTS):
                m.wf[rf, k] += (m.xf[k] * ef) >> 16
        # learn
        e2 = ((y << 12) - pm) * FINAL_RATE
        for s in range(len(MIXER_SETS)):
            m.w2[s] += (pr_l1[s] * e2) >> 16
        m.w2[len(MIXER_SETS)] += (256 * e2) >> 16
        for s in range(len(MIXER_SETS)):
            r = row_l1[s]
            e = ((y << 12) - squash(pr_l1[s], m.sq)) * MIX_RATE
            for k in range(N_INPUTS):
                m.w1[r, k] = clip(np.int64(m.w1[r, k]) + ((x[k] * e) >> 16), -W_LIMIT, W_LIMIT)
        m.apm1[ia1] += ((y << 16) - m.apm1[ia1]) >> APM_RATE
        m.apm2[ia2] += ((y << 16) - m.apm2[ia2]) >> APM_RATE
        m.apm3[ia3] += ((y << 16) - m.apm3[ia3]) >> APM_RATE
        if use[0]:
            hist = m.o0[c0]
            sm_update(m.sm, m.sn, 0, hist, y, m.recip)
            m.o0[c0] = m.nxt[hist, y]
        if use[1]:
            hist = m.o1[at1]
            sm_update(m.sm, m.sn, 1, hist, y, m.recip)
            m.o1[at1] = m.nxt[hist, y]
        for k in range(HASHED):
            if not use[DIRECT + k]:
                continue
            at = slot[k] + j
            hist = m.table[at]
            if hist != 0:
                sm_update(m.sm, m.sn, DIRECT + k, hist, y, m.recip)
            m.table[at] = m.nxt[hist, y]
        if mrow != 0:
            sm_update(m.msm, m.msn, 0, mrow, y, m.recip)
        reg[C0] = (c0 << 1) | y
    c = reg[C0] & 255
    _next_byte(m, b, c)
    return c


@njit(cache=True)
def code_span(m, data, start, stop, st, buf, decode):
    """Code bytes start ... stop - 1 of `data` (uint8) with the engine alone: encoding, read them;
    decoding, write them. st, buf: the coder's (`coder`)."""
    for i in range(start, stop):
        c = code_byte(m, 0, np.int64(data[i]) if not decode else np.int64(0), st, buf, decode, False)
        if decode:
            data[i] = np.uint8(c)
    return stop


@njit(cache=True)
def code_step(m, freqs, symbols, k, st, buf, decode):
    """Code one step of lanes 0 ... k - 1 in turn: lane b's byte symbols[b] (int32; decoding, written)
    with the predictor's table freqs[b] (int64 frequencies, each >= 1) mixed in last."""
    for b in range(k):
        tree.node_sums(freqs[b], m.sums)
        c = code_byte(m, b, np.int64(symbols[b]) if not decode else np.int64(0), st, buf, decode, True)
        if decode:
            symbols[b] = c


@njit(cache=True, inline="always")
def _next_byte(m, b, c):
    """After lane b's byte c: its ring, last bytes, word hashes, line starts, match and every model's
    context. The match table is all lanes': a repeat may be found in any lane's ring."""
    reg = m.reg[b]
    ctx = m.ctx[b]
    ring = m.ring[b]
    rmask = m.ring.shape[1] - 1
    mmask = len(m.mtab) - 1
    pos = reg[POS]
    ring[pos & rmask] = np.uint8(c)
    pos += 1
    reg[POS] = pos
    reg[C0] = 1
    # what c followed: the two bytes before it, and the one before it
    followed2, followed1 = reg[C4] & 0xFFFF, 65536 + (reg[C4] & 0xFF)
    m.ind[followed2] = ((np.int64(m.ind[followed2]) << 8) | c) & 0xFFFF
    m.ind[followed1] = ((np.int64(m.ind[followed1]) << 8) | c) & 0xFFFF
    reg[C8] = ((reg[C8] << 8) | (reg[C4] >> 24)) & 0xFFFFFFFF
    reg[C4] = ((reg[C4] << 8) | c) & 0xFFFFFFFF
    if is_letter(c):
        reg[WORD] = ((reg[WORD] + (c | 32) + 1) * 0x2F0F3) & 0xFFFFFFFF
    elif reg[WORD] != 0:
        reg[WORD1] = reg[WORD]
        reg[WORD] = 0
    # the match: extend it, or look the last MATCH_MIN bytes up
    if reg[MLEN] > 0 and reg[MPRED] == c:
        reg[MLEN] = min(reg[MLEN] + 1, 65535)
        reg[MPTR] += 1
        if reg[MPTR] >= m.reg[reg[MLANE], POS]:  # (a lane that has ended: nothing more to follow)
            reg[MLEN] = 0
    else:
        reg[MLEN] = 0
    h = np.uint64(0)
    if pos >= MATCH_MIN:
        for k in range(MATCH_MIN):
            h = (h + np.uint64(ring[(pos - 1 - k) & rmask]) + np.uint64(1)) * P1
        hi = np.int64(h >> np.uint64(40)) & mmask
        if reg[MLEN] == 0:
            entry = m.mtab[hi]
            lane = entry >> LANE_SHIFT
            cand = entry & ((1 << LANE_SHIFT) - 1)
            other = m.ring[lane]
            if cand > 0 and m.reg[lane, POS] - cand < rmask:
                n = 0
                while n < 65535 and n < cand and other[(cand - 1 - n) & rmask] == ring[(pos - 1 - n) & rmask]:
                    n += 1
                    if n > 400:
                        break
                if n >= MATCH_MIN:
                    reg[MLEN] = n
                    reg[MLANE] = lane
                    reg[MPTR] = cand
        m.mtab[hi] = (b << LANE_SHIFT) | pos
    if reg[MLEN] > 0:
        reg[MPRED] = np.int64(m.ring[reg[MLANE], reg[MPTR] & rmask])
    c4 = np.uint64(reg[C4])
    c8 = np.uint64(reg[C8])
    w = np.uint64(reg[WORD])
    w1 = np.uint64(reg[WORD1])
    ctx[0] = mix64((c4 & np.uint64(0xFFFF)) + (np.uint64(2) << U56))
    ctx[1] = mix64((c4 & np.uint64(0xFFFFFF)) + (np.uint64(3) << U56))
    ctx[2] = mix64(c4 + (np.uint64(4) << U56))
    ctx[3] = mix64(np.uint64(c | (np.int64(m.ind[65536 + c]) << 8)) + (np.uint64(13) << U56))
    ctx[4] = mix64(w + (np.uint64(7) << U56))
    ctx[5] = mix64(w + (w1 << U32) + (np.uint64(8) << U56))
    last2 = reg[C4] & 0xFFFF
    ctx[6] = mix64(np.uint64(last2 | ((np.int64(m.ind[last2]) & 0xFF) << 16)) + (np.uint64(14) << U56))
    ctx[7] = mix64(c4 + ((c8 & np.uint64(0xFF)) << U32) + (np.uint64(5) << U56))
    ctx[8] = mix64((c4 & np.uint64(0xFFFF00)) + (np.uint64(10) << U56))
    ctx[9] = mix64(mix64(c4 + (np.uint64(11) << U56)) + c8)
    if c == 10:
        reg[LINE1] = reg[LINE]
        reg[LINE] = pos
    col = min(pos - reg[LINE], 255)
    above = np.uint64(ring[(reg[LINE1] + col) & rmask]) if reg[LINE1] + col < reg[LINE] else np.uint64(0)
    ctx[10] = mix64(
        np.uint64(col) + (above << np.uint64(8)) + ((c4 & np.uint64(0xFF)) << np.uint64(16)) + (np.uint64(12) << U56)
    )
    expects = (reg[MPRED] | 256) * (min(reg[MLEN], MATCH_BUCKETS - 1) + 1) if reg[MLEN] > 0 else 0
    ctx[11] = mix64(np.uint64(expects) + (np.uint64(15) << U56))


SPAN = 1 << 16  # bytes coded per compiled call (the encoder's buffer grows between calls)


def _payload(st: np.ndarray, buf: np.ndarray) -> bytes:
    """A block's payload: the coder's bytes, padded with zero bytes to a multiple of 4 (the
    container's words)."""
    out = coder.finish(st, buf)
    return out + bytes(-len(out) % 4)


class BlockCoder:
    """The engine for one frame: it codes the frame's blocks in turn, each block's payload a code of
    its own, the model's tables carried from one block to the next. Sizes: 2^table_bits slots of
    16 bytes, a ring of 2^ring_bits bytes, 2^match_bits match positions; `leave_out` as `new_model`'s.
    `progress(n)` hears of every SPAN bytes coded."""

    def __init__(
        self, table_bits: int = 22, ring_bits: int = 24, match_bits: int = 20, leave_out: tuple[str, ...] = ()
    ) -> None:
        self.model = new_model(table_bits, ring_bits, match_bits, leave_out=leave_out)

    def encode(self, data: bytes, progress=None) -> bytes:
        """The block's payload (`_payload`)."""
        st, buf = coder.new_state()
        src = np.frombuffer(data, dtype=np.uint8).copy()  # writable: one compiled loop codes both ways
        for start in range(0, len(src), SPAN):
            stop = min(start + SPAN, len(src))
            buf = coder.room(st, buf, 16 * (stop - start) + 64)
            code_span(self.model, src, start, stop, st, buf, False)
            if progress is not None:
                progress(stop - start)
        return _payload(st, buf)

    def decode(self, payload: bytes, n: int, progress=None) -> bytes:
        """The n bytes `encode` coded into `payload` (given the same model state)."""
        st, buf = coder.new_state(payload)
        out = np.zeros(n, dtype=np.uint8)
        for start in range(0, n, SPAN):
            stop = min(start + SPAN, n)
            code_span(self.model, out, start, stop, st, buf, True)
            if progress is not None:
                progress(stop - start)
        return out.tobytes()


class LaneEncoder:
    """A `coding.coder.Coder` that codes every step's bytes through the engine, a bit at a time, with
    the predictor's tables mixed in last (`code_step`): a model of the codec's lanes, carried from
    block to block by its owner; one code for the block (`finish`)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.st, self.buf = coder.new_state()

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        self.buf = coder.room(self.st, self.buf, 16 * len(symbols) + 64)
        code_step(self.model, freqs, symbols, len(symbols), self.st, self.buf, False)

    def finish(self) -> bytes:
        """The block's payload (`_payload`)."""
        return _payload(self.st, self.buf)


class LaneDecoder:
    """`LaneEncoder`'s counterpart: `code` writes the step's bytes into `symbols`."""

    def __init__(self, model: Model, payload: bytes) -> None:
        self.model = model
        self.st, self.buf = coder.new_state(payload)

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        code_step(self.model, freqs, symbols, len(symbols), self.st, self.buf, True)


def compress(data: bytes, **options) -> bytes:
    """The engine's code for `data` from a fresh model (its length is the caller's to record);
    options: `BlockCoder`'s sizes and `leave_out`."""
    return BlockCoder(**options).encode(data)


def decompress(payload: bytes, n: int, **options) -> bytes:
    """The n bytes that `compress` coded into `payload` (with the same options)."""
    return BlockCoder(**options).decode(payload, n)
