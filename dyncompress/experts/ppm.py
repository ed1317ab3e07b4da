"""The order tables read as PPM reads them (method C, with exclusion), one input of the mixer.

From the highest order seen down, each context gives its bytes not yet given (excluded) count /
(n + d) of what is left and passes on d / (n + d), with n the counts and d the number of those
bytes; what is left at the end is shared by the bytes no context saw. The evidence is the log of
that probability (`log_of`), from a table of correctly rounded logarithms.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import floor_div, no_update, rounded_logs
from dyncompress.experts.counts import n_slots_of, row_tag
from dyncompress.experts.mixer import NET_FLOOR
from dyncompress.experts.orders import ORDERS
from dyncompress.network.int_kernels import floor_log2

NAME = "ppm"
TABLES = ()
SEEN = False
READS = ()
PPM_BITS = 40  # probabilities in units of 2^-40


@functools.cache
def ppm_log_tables() -> tuple[np.ndarray, int]:
    """round(2^12 * ln(m / 2^12)) for m = 2^12 ... 2^13 - 1, and round(2^12 * ln 2): the logarithms
    `log_of` reads, correctly rounded (`common.rounded_logs`)."""
    return np.array(rounded_logs(range(4096, 8192), 4096), dtype=np.int64), rounded_logs([2], 1)[0]


class State(NamedTuple):
    """n_orders: the order tables it reads (the first of the count tables; 0: none); ln_mant (4096,)
    int64: round(2^12 ln(m / 2^12)) for m = 2^12 ... 2^13 - 1; ln2: round(2^12 ln 2); floor: the
    least evidence."""

    n_orders: int
    ln_mant: np.ndarray
    ln2: int
    floor: int


def make(settings, lanes: int, hb: int, used: bool) -> State:
    ln_mant, ln2 = ppm_log_tables()
    return State(len(ORDERS) if used else 0, ln_mant, ln2, NET_FLOOR)


@njit(cache=True, inline="always")
def log_of(v, st):
    """ln(v / 2^PPM_BITS) in units of 2^-12 (at least st.floor): v's leading 13 bits from a table of
    correctly rounded logarithms, the power of two in whole units of ln 2."""
    ln_mant, floor = st.ln_mant, st.floor  # (read before any test, v <= 0 read as 1: `common`)
    u = max(v, 1)
    l = floor_log2(u)
    m = u >> (l - 12) if l >= 12 else u << (12 - l)
    return max(ln_mant[m - 4096] + (l - PPM_BITS) * st.ln2, floor) if v > 0 else floor


@njit(cache=True)
def predict(b, tab, ctx, st, ev, i, m, excl, p):
    """Lane b's PPM distribution over the order tables as input i of the mixer: base[b, i] for the
    bytes no context saw, an entry from ent[b, m] on for each byte seen; returns the next free
    entry. Probabilities in units of 2^-PPM_BITS, every division floored. A row of slots gives the
    same for the bytes its slots hold. excl (256,) bool, p (256,) int64: the caller's scratch (every
    thread its own)."""
    E0, base, ent, n_ent = ev
    counts, slot, n_dense, rows, tagv = tab.counts, tab.slot, tab.n_dense, ctx.rows, ctx.tagv
    n_slots = n_slots_of(slot)
    for j in range(256):
        excl[j] = False
        p[j] = 0
    words = counts.view(np.uint64)  # (rows, 32): eight counts in a word
    left = np.int64(1) << PPM_BITS
    for t in range(st.n_orders - 1, -1, -1):
        row = rows[b, t]
        if row_tag(tab, row) != tagv[b, t]:
            continue
        n = 0
        d = 0
        r = row - n_dense
        if r < 0:
            for w in range(32):  # eight counts at a time, skipping the words of zeros (most)
                if words[row, w] == 0:
                    continue
                for j in range(8 * w, 8 * w + 8):
                    c = np.int64(counts[row, j]) * np.int64(not excl[j])
                    n += c
                    d += np.int64(c != 0)
        else:
            for q in range(n_slots):  # the slots in use (a row's first empty slot ends it)
                if slot[r, 2 * q + 1] == 0:
                    break
                c = np.int64(slot[r, 2 * q + 1]) * np.int64(not excl[slot[r, 2 * q]])
                n += c
                d += np.int64(c != 0)
        if n == 0:
            continue
        den = n + d
        inv = 1.0 / np.float64(den)
        if r < 0:
            for w in range(32):
                if words[row, w] == 0:
                    continue
                for j in range(8 * w, 8 * w + 8):  # p_j is 0 where c is, and floor_div(0, ...) is 0
                    c = np.int64(counts[row, j]) * np.int64(not excl[j])
                    p[j] += floor_div(left * c, den, inv)  # left c < 2^48, the quotient <= left <= 2^40
                    excl[j] = excl[j] or c != 0
        else:
            for q in range(n_slots):  # a row's bytes are distinct
                if slot[r, 2 * q + 1] == 0:
                    break
                j = slot[r, 2 * q]
                c = np.int64(slot[r, 2 * q + 1]) * np.int64(not excl[j])
                p[j] += floor_div(left * c, den, inv)
                excl[j] = excl[j] or c != 0
        left = left * d // den
    unseen = 0
    for j in range(256):
        unseen += np.int64(not excl[j])
    rest = log_of(left // unseen if unseen else 0, st)
    base[b, i] = rest
    seen = excl.view(np.uint64)  # (32,): eight flags in a word
    for w in range(32):
        if seen[w] == 0:
            continue
        for j in range(8 * w, 8 * w + 8):
            if excl[j]:
                ent[b, m, 0] = i
                ent[b, m, 1] = j
                ent[b, m, 2] = log_of(p[j], st) - rest
                m += 1
    return m


update = no_update  # (nothing of its own: it reads the order tables)
