"""The column (bytes since the last line feed, up to 255) with the byte above it in the line before
(256 where that line was shorter or is no longer in the history), as a context: text laid out in
columns. Not one of the tables that choose the highest context seen."""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress.experts import history
from dyncompress.experts.common import U8, U16, hashed_row, no_state, no_update

NAME = "column"
TABLES = ("column",)
SEEN = False  # not a context seen; its table has 2^(table_bits - 4) rows (`mix.table_sizes`)
READS = ("ring", "lines")  # of the history: the line before, where the lines start
SALT = np.uint64(0x2545F4914F6CDD1D)
State = tuple  # (none: the history keeps where the lines start)

make = no_state


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's column context into table t; returns the next table."""
    n = np.int64(1) << h.hb
    col = history.column(h, b)
    at, line, pos = h.lines[b, 1] + col, h.lines[b, 0], h.pos[b]
    seen = np.uint64(h.hist[(np.int64(b) << h.hb) | (at & (n - 1))])  # (read, then chosen: `common`)
    above = seen if at < line and pos - at < n else np.uint64(256)
    ctx.rows[b, t], ctx.tagv[b, t] = hashed_row(above << U16 | np.uint64(col) << U8, SALT, tab.shift[t], tab.base[t])
    return t + 1


update = no_update
