"""For data of fixed-length records (the rows of an image, tables of numbers): the byte one record
back, with the record's length, as a context.

Every lane finds its record length by votes (`vote`: a byte whose last four occurrences are equally
spaced votes for that distance; REC_VOTES votes make the length) and gives a context while that
length had a vote within the last REC_FRESH records; else it gives none (tag -1). Its table comes
after the tables that choose the highest context seen: it is not one of them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts import history
from dyncompress.experts.common import U8, U16, hashed_row

NAME = "record"
TABLES = ("record",)
SEEN = False  # not a context seen; its table has 2^(table_bits - 4) rows (`mix.table_sizes`)
READS = ("ring",)  # of the history: the byte one record back
SALT = np.uint64(0x5851F42D4C957F2D)
REC_VOTES = 16  # a record length takes over after this many votes
REC_FRESH = 32  # the record context is used while the length had a vote within this many records
RECORD_MAX = 65535  # the longest record length found


class State(NamedTuple):
    """at (B, 256, 3) int64: every byte's last three positions in every lane (latest first, 0: none);
    rec (B, 6) int64: two candidate lengths with their votes, the length (0: none) and the position
    of its latest vote; longest: the longest length found (at most the history's ring)."""

    at: np.ndarray
    rec: np.ndarray
    longest: int


def make(settings, lanes: int, hb: int, used: bool) -> State:
    shape = (lanes, 256 if used else 1, 3)
    return State(np.zeros(shape, dtype=np.int64), np.zeros((lanes, 6), dtype=np.int64), min((1 << hb) - 1, RECORD_MAX))


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's record context into table t (tag -1 where it has none); returns the next table."""
    r, voted, pos = st.rec[b, 4], st.rec[b, 5], h.pos[b]  # (read before the test: see `common`)
    if r > 0 and pos >= r and pos - voted <= r * REC_FRESH:
        above = np.uint64(history.at(h, b, r))
        ctx.rows[b, t], ctx.tagv[b, t] = hashed_row(np.uint64(r) << U16 | above << U8, SALT, tab.shift[t], tab.base[t])
    else:
        ctx.rows[b, t] = tab.base[t]
        ctx.tagv[b, t] = -1
    return t + 1


@njit(cache=True, inline="always")
def update(b, y, h, st):
    """Lane b's byte y at position pos + 1 (counted from 1): where its last four occurrences are
    equally spaced, 2 ... `longest` apart, that distance gets a vote. Two candidates (rec[0], count
    rec[1]; rec[2], rec[3]) collect votes, a new distance replacing the one with fewer; a candidate
    with REC_VOTES votes becomes the record length rec[4] and both counts start again. rec[5]: the
    position of the length's latest vote."""
    at, rec, p = st.at[b, y], st.rec[b], h.pos[b] + 1
    d = p - at[0]
    if at[2] > 0 and 2 <= d <= st.longest and d == at[0] - at[1] and d == at[1] - at[2]:
        if d == rec[4]:
            rec[5] = p
        if d == rec[0]:
            rec[1] += 1
        elif d == rec[2]:
            rec[3] += 1
        elif rec[1] > rec[3]:
            rec[2], rec[3] = d, 1
        else:
            rec[0], rec[1] = d, 1
        for c in (0, 2):
            if rec[c + 1] >= REC_VOTES and rec[4] != rec[c]:
                rec[4], rec[5] = rec[c], p
                rec[1], rec[3] = 0, 0
    at[2], at[1], at[0] = at[1], at[0], p
