"""The integer tables of the bitwise engine: squash and stretch, and the bit-history states.

Probabilities are 12-bit integers, p in 0 ... 4095 standing for p / 4096 that the bit is 1. The
logistic domain ("stretch") is in units of 1/256 nat: squash(d) = 4096 / (1 + e^(-d / 256)) for
d in -2047 ... 2047, and stretch is its inverse on the integers. Both tables are made here once,
with Decimal's correctly rounded exponential where a float might round differently, so every
machine holds the same integers.

A bit history is what one context has seen of one bit position: a state number 0 ... 255 standing
for a pair of counts (n0, n1) of zeros and ones. State 0 is (0, 0): nothing seen, which is also what
a cleared slot of the hash table holds. A new bit adds one to its own count and discounts the other
(halved above 2), so the states follow a changing source as paq's bit histories do; the caps keep the
number of pairs within a byte. What a state predicts is not fixed here: a state map learns it
(`engine`).
"""

from __future__ import annotations

import functools
import math
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import numpy as np

PROB_BITS = 12
PROB_ONE = 1 << PROB_BITS  # 4096
STRETCH_LIMIT = 2047  # |stretch| <= 2047 (8 nats)

# a count's cap given the (discounted) other count: long runs of one bit are counted far, mixed
# histories only a little (their probability is the state map's to learn)
COUNT_CAPS = (50, 32, 24, 16, 12, 10, 8, 7, 6, 5)


def _squash_value(d: int) -> int:
    """round(4096 / (1 + e^(-d / 256))), correctly rounded (half to even), clipped to 1 ... 4095."""
    v = PROB_ONE / (1.0 + math.exp(-d / 256.0))
    if abs(v - math.floor(v) - 0.5) < 1e-6:  # too near a tie for a float to decide
        with localcontext() as ctx:
            ctx.prec = 40
            exact = Decimal(PROB_ONE) / (1 + (Decimal(-d) / 256).exp())
            v = int(exact.to_integral_value(ROUND_HALF_EVEN))
    else:
        v = math.floor(v + 0.5)
    return min(max(v, 1), PROB_ONE - 1)


@functools.cache
def squash_table() -> np.ndarray:
    """(4095,) int64: squash(d) at index d + 2047, for d in -2047 ... 2047; increasing, 1 ... 4095."""
    return np.array([_squash_value(d) for d in range(-STRETCH_LIMIT, STRETCH_LIMIT + 1)], dtype=np.int64)


@functools.cache
def stretch_table() -> np.ndarray:
    """(4096,) int64: stretch(p) for p in 0 ... 4095, the least d with squash(d) >= p (2047 where
    there is none): squash's inverse on the integers, non-decreasing."""
    sq = squash_table()
    out = np.full(PROB_ONE, STRETCH_LIMIT, dtype=np.int64)
    d = -STRETCH_LIMIT
    for p in range(PROB_ONE):
        while d <= STRETCH_LIMIT and sq[d + STRETCH_LIMIT] < p:
            d += 1
        out[p] = min(d, STRETCH_LIMIT)
    return out


def _discount(n: int) -> int:
    """The count of the other bit after a bit came: kept up to 2, about halved above."""
    if n <= 2:
        return n
    return (n + 1) // 2 + (1 if n > 5 else 0)


def _next_counts(n0: int, n1: int, y: int) -> tuple[int, int]:
    """(n0, n1) after bit y."""
    caps = COUNT_CAPS
    if y:
        other = _discount(n0)
        return other, min(n1 + 1, caps[min(other, len(caps) - 1)])
    other = _discount(n1)
    return min(n0 + 1, caps[min(other, len(caps) - 1)]), other


class States:
    """The bit-history state machine: `next` (256, 2) uint8, the state after bit 0 and bit 1;
    `n0`, `n1` (256,) int64, the counts a state stands for; `priority` (256,) int64, how much a
    state has seen (n0 + n1: the hash table replaces the slot that has seen least). States 0 ...
    count - 1 are the pairs reachable from (0, 0), numbered by total then n1; the rest are unused
    (they map to themselves)."""

    def __init__(self) -> None:
        seen = {(0, 0)}
        todo = [(0, 0)]
        while todo:
            n0, n1 = todo.pop()
            for y in (0, 1):
                t = _next_counts(n0, n1, y)
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        pairs = sorted(seen, key=lambda s: (s[0] + s[1], s[1]))
        if len(pairs) > 256:
            raise ValueError(f"{len(pairs)} bit-history states do not fit in a byte")
        number = {s: i for i, s in enumerate(pairs)}
        self.count = len(pairs)
        self.next = np.tile(np.arange(256, dtype=np.uint8)[:, None], (1, 2))
        self.n0 = np.zeros(256, dtype=np.int64)
        self.n1 = np.zeros(256, dtype=np.int64)
        for s, i in number.items():
            self.n0[i], self.n1[i] = s
            for y in (0, 1):
                self.next[i, y] = number[_next_counts(*s, y)]
        self.priority = self.n0 + self.n1

    def initial_probability(self) -> np.ndarray:
        """(256,) int64: where a state map starts for each state, (n1 + 1/2) / (n0 + n1 + 1) in units
        of 2^-22 (the state map's precision), exact integers."""
        return ((2 * self.n1 + 1) << 21) // (self.n0 + self.n1 + 1)


@functools.cache
def states() -> States:
    """The one state machine (made once)."""
    return States()
