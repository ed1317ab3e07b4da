"""The binary arithmetic coder: one bit at a time, on 32-bit integers, with 16-bit probabilities.

The interval is [x1, x2] of 32-bit integers. A bit with probability p / 2^16 of being 1 splits it at
xmid = x1 + floor((x2 - x1) * p / 2^16) (computed in two parts so that nothing passes 2^48): a 1
keeps [x1, xmid], a 0 keeps [xmid + 1, x2]. When the two ends share their top byte, that byte is
settled: it is written (encoding) or the next byte is read into x (decoding), and both ends shift
left by a byte. The ends always differ in their top byte afterwards, so x2 - x1 >= 2^24 and both
parts of every split are non-empty for every p in 1 ... 2^16 - 1. At the end one byte, x1's top
byte plus one, names a point inside the interval (the bytes the decoder reads past the end are 0).

Encoding and decoding are one function (`code`): the same arithmetic, and one branch for where the
bit comes from. The state is `Coder` (x1, x2, x, pos in an int64 array) with the buffer it writes
or reads; both live in arrays, so a coding can stop at any byte and go on later.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)

TOP = np.int64(0xFF000000)
WORD = np.int64(0xFFFFFFFF)
X1, X2, X, POS = 0, 1, 2, 3  # the registers of a coder's state array


def new_state(payload: bytes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A coder's (state, buffer): for encoding (payload None) an empty buffer (`room` makes it larger
    before a span is coded); for decoding the payload, with its first four bytes already in x."""
    st = np.zeros(4, dtype=np.int64)
    st[X2] = WORD
    if payload is None:
        return st, np.zeros(1 << 16, dtype=np.uint8)
    buf = np.frombuffer(payload, dtype=np.uint8).copy()
    for _ in range(4):
        st[X] = (st[X] << 8) | (np.int64(buf[st[POS]]) if st[POS] < len(buf) else 0)
        st[POS] += 1
    return st, buf


@njit(cache=True, inline="always")
def code(st, buf, p, y, decode):
    """Code one bit with probability p / 2^16 of a 1 (p: 1 ... 65535): encoding, the bit y; decoding,
    the bit read (y is ignored). Returns the bit. The buffer must have room for 4 more bytes when
    encoding (`room`)."""
    x1 = st[X1]
    x2 = st[X2]
    r = x2 - x1
    xmid = x1 + (r >> 16) * p + (((r & 0xFFFF) * p) >> 16)
    if decode:
        y = 1 if st[X] <= xmid else 0
    if y:
        x2 = xmid
    else:
        x1 = xmid + 1
    while ((x1 ^ x2) & TOP) == 0:
        pos = st[POS]
        if decode:
            nxt = np.int64(buf[pos]) if pos < len(buf) else np.int64(0)
            st[X] = ((st[X] << 8) & WORD) | nxt
        else:
            buf[pos] = np.uint8(x2 >> 24)
        st[POS] = pos + 1
        x1 = (x1 << 8) & WORD
        x2 = ((x2 << 8) & WORD) | 255
    st[X1] = x1
    st[X2] = x2
    return y


def room(st: np.ndarray, buf: np.ndarray, need: int) -> np.ndarray:
    """The encoder's buffer with room for `need` more bytes (a larger copy where it has not)."""
    if st[POS] + need <= len(buf):
        return buf
    out = np.zeros(max(2 * len(buf), int(st[POS]) + need), dtype=np.uint8)
    out[: st[POS]] = buf[: st[POS]]
    return out


def finish(st: np.ndarray, buf: np.ndarray) -> bytes:
    """The encoder's bytes: those written, then x1's top byte plus one (a point of the interval)."""
    return buf[: st[POS]].tobytes() + bytes([(int(st[X1]) >> 24) + 1])
