"""The column with the kinds of the last two bytes (`common.byte_kind`), as a context: where a
text's wrapped lines end. Not one of the tables that choose the highest context seen."""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress.experts import history
from dyncompress.experts.common import MASK8, U8, U16, byte_kind, hashed_row, no_state, no_update

NAME = "wrap"
TABLES = ("wrap",)
SEEN = False  # not a context seen; its table has 2^(table_bits - 4) rows (`mix.table_sizes`)
READS = ("lines",)  # of the history: where the line starts
SALT = np.uint64(0x94D049BB133111EB)
State = tuple  # (none: the history keeps where the lines start)

make = no_state


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's wrap context into table t; returns the next table."""
    col = history.column(h, b)
    last = h.last[b]
    kinds = byte_kind(np.int64(last & MASK8)) * 8 + byte_kind(np.int64((last >> U8) & MASK8))
    key = np.uint64(kinds) << U16 | np.uint64(col) << U8
    ctx.rows[b, t], ctx.tagv[b, t] = hashed_row(key, SALT, tab.shift[t], tab.base[t])
    return t + 1


update = no_update
