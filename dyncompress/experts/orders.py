"""Orders 1 ... 6 and 8: the last k bytes of the lane as a context, one count table each.

Orders 1 and 2 index direct tables (a row for every value of the bytes, tag 0); the others hash
the bytes into their table (`common.hashed_row`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import P2, hashed_row, no_update

NAME = "orders"
ORDERS = (1, 2, 3, 4, 5, 6, 8)
TABLES = tuple(f"o{k}" for k in ORDERS)
SEEN = True  # its tables choose the highest context seen (`counts.Contexts.n_seen`)
READS = ()  # of the history, beyond the position and the last bytes (`history.History`)


class State(NamedTuple):
    """masks (n,) uint64: the bytes of each order in the last eight; salts (n,) uint64: each order's."""

    masks: np.ndarray
    salts: np.ndarray


def make(settings, lanes: int, hb: int, used: bool) -> State:
    masks = np.array([(1 << (8 * k)) - 1 for k in ORDERS], dtype=np.uint64)
    return State(masks, np.arange(1, len(ORDERS) + 1, dtype=np.uint64) * P2)


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's order contexts into tables t ... t + 6; returns the next table."""
    last = h.last[b]
    for i in range(st.masks.shape[0]):
        if i < 2:  # the last byte or two themselves, no tag
            ctx.rows[b, t] = np.int64(last & st.masks[i]) + tab.base[t]
            ctx.tagv[b, t] = 0
        else:
            ctx.rows[b, t], ctx.tagv[b, t] = hashed_row(last & st.masks[i], st.salts[i], tab.shift[t], tab.base[t])
        t += 1
    return t


update = no_update  # (nothing of its own: its contexts are the history's last bytes)
