"""The last stage (paq's adaptive probability map): every byte's logit gains two corrections read at
the byte's cost under the mixer (-log2 of its frequency, half-bit buckets interpolated linearly):
one from the row of the previous byte, one from the row of the previous byte with the byte itself.
Both learn by the gradient of the code length of what was coded."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import MASK8, cost_units

NAME = "apm"
TABLES = ()
SEEN = False
READS = ()
BUCKETS = 49  # a byte's cost: 0, 1/2, ..., 24 bits
RATE = 20  # units 2^-10 (nats per unit of gradient)
RATE2 = 20  # the (previous byte, byte) table's


class State(NamedTuple):
    """apm (256, BUCKETS) int64: corrections by previous byte (units 2^-12); apm2 (2^16, BUCKETS)
    int32: by (previous byte, byte), within +-bound; at (B, 256) int64: every byte's bucket and
    weight (units 2^-7) at the last `predict`, for `update`."""

    apm: np.ndarray
    apm2: np.ndarray
    at: np.ndarray
    bound: int


def make(settings, lanes: int, hb: int, used: bool, bound: int) -> State:
    return State(
        np.zeros((256 if used else 0, BUCKETS), dtype=np.int64),
        np.zeros((1 << 16 if used else 0, BUCKETS), dtype=np.int32),
        np.zeros((lanes, 256), dtype=np.int64),
        bound,
    )


@njit(cache=True)
def predict(z, f0, h, st, lo, hi):
    """Lanes lo ... hi - 1: every byte's logit z (B, 256) gains the two corrections at its cost under
    the mixer's frequencies f0 (B, 256), held within +-bound."""
    apm, apm2, at, bound, last = st.apm, st.apm2, st.at, st.bound, h.last
    last_bucket = apm.shape[1] - 2
    for b in range(lo, hi):
        row = np.int64(last[b] & MASK8)
        for j in range(256):  # the buckets first, in a loop of their own (it vectorises)
            x = cost_units(f0[b, j])
            i, w = x >> 7, x & 127
            beyond = i > last_bucket
            at[b, j] = ((last_bucket if beyond else i) << 8) | (128 if beyond else w)
        for j in range(256):
            i, w = at[b, j] >> 8, at[b, j] & 255
            r2 = (row << 8) | j
            corr = (apm[row, i] * (128 - w) + apm[row, i + 1] * w) >> 7
            corr += (np.int64(apm2[r2, i]) * (128 - w) + np.int64(apm2[r2, i + 1]) * w) >> 7
            z[b, j] = min(max(z[b, j] + corr, -bound), bound)


@njit(cache=True)
def update(freqs, y, k, h, st):
    """After byte y was coded with `freqs` (before the history moves on: the row is still the
    previous byte's): each bucket of the previous byte's row moves against its share of the code
    length's gradient p_j - [j = y] summed over j, each bucket of a (previous byte, j) row against
    j's own share; rounded, and the second table's values kept within +-bound."""
    apm, apm2, at, bound, last = st.apm, st.apm2, st.at, st.bound, h.last
    nb = apm.shape[1]
    acc = np.empty(nb, dtype=np.int64)
    for b in range(k):
        row = np.int64(last[b] & MASK8)
        acc[:] = 0
        for j in range(256):
            g = freqs[b, j] - ((np.int64(1) << 24) if j == y[b] else 0)
            i, w = at[b, j] >> 8, at[b, j] & 255
            acc[i] += g * (128 - w)
            acc[i + 1] += g * w
            r2 = (row << 8) | j
            v = np.int64(apm2[r2, i]) - ((g * (128 - w) * RATE2 + (np.int64(1) << 28)) >> 29)
            apm2[r2, i] = min(max(v, -bound), bound)
            v = np.int64(apm2[r2, i + 1]) - ((g * w * RATE2 + (np.int64(1) << 28)) >> 29)
            apm2[r2, i + 1] = min(max(v, -bound), bound)
        for i in range(nb):
            apm[row, i] -= (acc[i] * RATE + (np.int64(1) << 28)) >> 29
