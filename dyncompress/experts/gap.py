"""The two bytes before the last one, as a context (a direct table, tag 0)."""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress.experts.common import MASK16, U8, no_state, no_update

NAME = "gap"
TABLES = ("gap",)
SEEN = True  # its table chooses the highest context seen (`counts.Contexts.n_seen`)
READS = ()  # of the history, beyond the position and the last bytes (`history.History`)
State = tuple  # (none)

make = no_state


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's gap context into table t; returns the next table."""
    ctx.rows[b, t] = np.int64((h.last[b] >> U8) & MASK16) + tab.base[t]
    ctx.tagv[b, t] = 0
    return t + 1


update = no_update
