"""What every lane has seen, which the experts read their contexts from: its history ring, its
position, its last eight bytes and where its last two lines start.

`History` is one record for all lanes; `make` allocates it, `write` and `advance` move it on after a
byte (in that order, with the experts' own updates between: `step.learn`). A ring is kept only where
an expert reads it (match, record, column, wrap), the line starts only where one reads them
(column, wrap).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import U8


class History(NamedTuple):
    """hist: the rings, lane b's at b << hb ... (b + 1) << hb (uint8; one byte where none is kept);
    hb: log2 of a ring's size; pos (B,) int64: bytes each lane has seen; last (B,) uint64: its last
    8 bytes, the latest lowest; lines (B, 2) int64: where its current line and the one before start."""

    hist: np.ndarray
    hb: int
    pos: np.ndarray
    last: np.ndarray
    lines: np.ndarray


def make(lanes: int, hb: int, ring: bool) -> History:
    """A fresh history for `lanes` lanes, with rings of 2^hb bytes where `ring`."""
    return History(
        np.zeros(lanes << hb if ring else 1, dtype=np.uint8),
        hb,
        np.zeros(lanes, dtype=np.int64),
        np.zeros(lanes, dtype=np.uint64),
        np.zeros((lanes, 2), dtype=np.int64),
    )


@njit(cache=True, inline="always")
def at(h, b, back):
    """The byte lane b saw `back` positions before its next one (1: the last), from its ring."""
    n = np.int64(1) << h.hb
    return h.hist[(np.int64(b) << h.hb) | ((h.pos[b] - back) & (n - 1))]


@njit(cache=True, inline="always")
def column(h, b):
    """Lane b's column: bytes since its last line feed, at most 255."""
    return min(h.pos[b] - h.lines[b, 0], 255)


@njit(cache=True, inline="always")
def write(h, b, y, ring, lines):
    """Lane b's byte y goes into its ring (`ring`), and a line feed starts a line (`lines`); its
    position stays until `advance`."""
    n = np.int64(1) << h.hb
    if ring:
        h.hist[(np.int64(b) << h.hb) | (h.pos[b] & (n - 1))] = np.uint8(y)
    if lines and y == 10:  # a new line starts after it
        h.lines[b, 1] = h.lines[b, 0]
        h.lines[b, 0] = h.pos[b] + 1


@njit(cache=True, inline="always")
def advance(h, b, y):
    """Lane b has seen byte y: its position and last bytes move on."""
    h.pos[b] += 1
    h.last[b] = (h.last[b] << U8) | np.uint64(y)
