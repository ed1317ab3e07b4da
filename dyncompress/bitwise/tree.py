"""A byte distribution as eight bit probabilities: the binary tree of its integer frequencies.

The network's next-byte table is integer frequencies f_0 ... f_255 (each >= 1, summing to 2^24:
`network.fixed.frequencies`). Coded a bit at a time, most significant first, the bits so far name a
node of the binary tree (1 the root; node k's children 2k and 2k + 1; leaf 256 + y the byte y), and
the probability that the next bit is 1 is

    P(1 | node k) = S(2k + 1) / S(k),        S(k) = the sum of f over the bytes below node k.

The eight factors along a byte's path telescope to S(256 + y) / S(1) = f_y / 2^24: coded with these
ratios the bits cost exactly what the byte costs coded whole. `node_sums` gives every S(k) in
integers; `bit_probability` rounds one ratio to the coder's 16 bits, the one rounding on this path,
and where the engine mixes it the ratio enters as it is (`bit_probability`'s argument pair).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)


@njit(cache=True)
def node_sums(freqs, sums):
    """sums (512,) int64 <- S(k) for every node: sums[256 + y] = freqs[y] (256,), sums[k] =
    sums[2k] + sums[2k + 1] for k = 255 ... 1; sums[0] is left 0."""
    for y in range(256):
        sums[256 + y] = freqs[y]
    for k in range(255, 0, -1):
        sums[k] = sums[2 * k] + sums[2 * k + 1]
    sums[0] = 0


@njit(cache=True, inline="always")
def bit_probability(one, whole):
    """P(1) = one / whole as the coder's p / 2^16, rounded down and held in 1 ... 2^16 - 1
    (0 < whole < 2^46)."""
    p = (one << 16) // whole
    if p < 1:
        return np.int64(1)
    if p > 65535:
        return np.int64(65535)
    return p


def path(y: int) -> list[tuple[int, int]]:
    """(node, bit) of byte y's eight decisions, the root first."""
    out = []
    k = 1
    for i in range(7, -1, -1):
        bit = (y >> i) & 1
        out.append((k, bit))
        k = 2 * k + bit
    return out
