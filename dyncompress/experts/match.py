"""The longest recent repeat of the last bytes, predicting the byte that followed it.

A hash of the last MATCH_MIN bytes points into the history (`History.hist`); the length is verified
backwards (up to MATCH_CHECK bytes), then extended byte by byte while the prediction holds. The
table has 2^bits slots that all lanes file in, and as many where each lane files under its own
salt, looked up first: a repeat in the lane's own text wins over a more recent one in another
lane's. Its evidence is one nat on the predicted byte (the mixer's last input); its length bucket
and the predicted byte's kind choose weight rows (`mixer`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import N_KINDS, NO_REFCOUNTS, ONE, P2, U64, fine_kind, mix64

NAME = "match"
TABLES = ()
SEEN = False
READS = ("ring",)  # of the history: the repeat and what followed it
MATCH_MIN = 6  # bytes hashed to find a match
MATCH_CHECK = 32  # bytes compared backwards to verify one
MATCH_MAX = 65535
EDGES = np.array([1, 8, 12, 16, 24, 32, 64, 256], dtype=np.int64)  # length buckets 1 ... 8
STATES = 1 + N_KINDS * len(EDGES)  # none; else the predicted byte's kind with the length's bucket


class State(NamedTuple):
    """table (2 << bits,) int32: 1 + the flat history index that followed each hashed context (0:
    none yet), the shared half, then the lanes' own; ptr (B,) int64: the flat history index of each
    lane's predicted byte; mlen (B,) int64: its match length (0: none); bits: log2 of a half's slots."""

    table: np.ndarray
    ptr: np.ndarray
    mlen: np.ndarray
    bits: int


def make(settings, lanes: int, hb: int, used: bool) -> State:
    table = np.zeros(2 << settings.match_bits if used else 1, dtype=np.int32)
    return State(table, np.zeros(lanes, dtype=np.int64), np.zeros(lanes, dtype=np.int64), settings.match_bits)


@njit(cache=True, inline="always")
def predict(b, h, st, ev, i, m):
    """Lane b's evidence as input i of the mixer: one nat on the predicted byte. Returns (the next
    free entry, the length's bucket (0: no match), the match state for the weight sets: 0, or 1 +
    the predicted byte's kind with the bucket)."""
    E0, base, ent, n_ent = ev
    base[b, i] = 0
    mlen, predicted = st.mlen[b], np.int64(h.hist[st.ptr[b]])  # (read before the tests: `common`)
    if mlen > 0:
        ent[b, m, 0] = i
        ent[b, m, 1] = predicted
        ent[b, m, 2] = ONE
        m += 1
    bucket = 0
    while bucket < EDGES.shape[0] and EDGES[bucket] <= mlen:
        bucket += 1
    state = 0
    if mlen > 0:
        state = 1 + fine_kind(predicted) * EDGES.shape[0] + bucket - 1
    return m, bucket, state


@njit(cache=True, inline="always")
def update(b, y, h, st):
    """Lane b's byte y, before any lane's history moves on: the match extends or ends."""
    n = np.int64(1) << h.hb
    mlen, ptr, hb = st.mlen[b], st.ptr[b], h.hb  # (every read before the test, both outcomes written: `common`)
    seen = np.int64(h.hist[ptr])
    extends = mlen > 0 and seen == y
    st.ptr[b] = ((ptr >> hb) << hb) | ((ptr + 1) & (n - 1)) if extends else ptr
    st.mlen[b] = min(mlen + 1, MATCH_MAX) if extends else 0


@njit(cache=True, inline="always")
def match_length(h, cand, b):
    """How many of the bytes before history index `cand` (at most MATCH_CHECK) equal lane b's last ones."""
    hist, hb, pos = h.hist, h.hb, h.pos[b]
    n = np.int64(1) << hb
    c_lane, c_off = cand >> hb, cand & (n - 1)
    length = 0
    for back in range(1, MATCH_CHECK + 1):
        theirs = hist[(c_lane << hb) | ((c_off - back) & (n - 1))]
        ours = hist[(np.int64(b) << hb) | ((pos - back) & (n - 1))]
        if theirs != ours:
            break
        length += 1
    return length


@njit(cache=True)
def find(k, h, st):
    """After every lane's history has moved on: lanes without a match look one up (their own half
    first), then every lane files its position, the lowest last. Every lookup reads the table
    before any lane files."""
    find_lanes(k, h, st, np.empty((k, 2), dtype=np.int64), np.empty((k, 2), dtype=np.int64))


@njit(cache=True, **NO_REFCOUNTS)
def find_lanes(k, h, st, slots, cands):
    """`find`'s work; slots, cands (k, 2): room for every lane's two slots (the shared one, the
    lane's own) and the candidates in them."""
    table, mlen, ptr, last, pos, hb = st.table, st.mlen, st.ptr, h.last, h.pos, h.hb
    n = np.int64(1) << hb
    key_mask = np.uint64((1 << (8 * MATCH_MIN)) - 1)
    shift = U64 - np.uint64(st.bits)
    size = np.int64(1) << st.bits
    for b in range(k):
        key = last[b] & key_mask
        slots[b, 0] = np.int64(mix64(key) >> shift)
        cands[b, 0] = table[slots[b, 0]] - 1
        slots[b, 1] = size + np.int64(mix64(key ^ (np.uint64(b + 1) * P2)) >> shift)
        cands[b, 1] = table[slots[b, 1]] - 1
    for b in range(k):
        if mlen[b] != 0 or pos[b] < MATCH_MIN:
            continue
        for c in range(1, -1, -1):  # the lane's own first
            cand = cands[b, c]
            if cand < 0:
                continue
            length = match_length(h, cand, b)
            if length >= MATCH_MIN:
                mlen[b] = length
                ptr[b] = cand
                break
    for b in range(k - 1, -1, -1):  # the lowest lane files last
        here = ((np.int64(b) << hb) | (pos[b] & (n - 1))) + 1
        table[slots[b, 0]] = here
        table[slots[b, 1]] = here
