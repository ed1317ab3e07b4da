"""Integer helpers every expert's kernels share: the hash, the kinds of a byte, an exact floored
division, a code length in fixed point.

Every value in the experts' kernels is an integer (int64, or uint64 for the hashes, whose multiplies
wrap), so the compiled code computes the same on every machine. Constants are numpy scalars of
explicit dtype: numba types a uint64 mixed with a Python int as float64, which would round a hash.

The kernels that loop over lanes allocate nothing and are compiled without numba's reference counts
(`NO_REFCOUNTS`: `step.mix_lanes`, `step.advance`, `counts.choose_rows`, `counts.count_rows`,
`match.find_lanes`); one that needs scratch allocates it and hands it to the kernel that loops
(`step.mix_step`, `counts.update`, `match.find`). With reference counts, every record an inlined
helper takes and every array field it reads is an atomic increment and decrement of the array's
count wherever numba's pruning cannot pair them (a value bound before a branch and used in one arm
only, an early return), for every lane at every step, and the threads of a split contend for those
counters. A kernel compiled without them cannot allocate (numba refuses it when it compiles), and
the kernels it calls are compiled the same way. Where a numba lacks the option, the kernels compile
with reference counts: slower, the same bits. `tools/refcounts.py` lists the reference counts left
in the kernels' loops.

In the kernels that keep reference counts, per-lane code reads a record's array fields in
straight-line code, before any test; where one of two arrays is wanted, both are read and one
chosen (`counts.row_tag`); a helper that writes one of two takes the arrays, read once outside the
caller's loops (`counts.set_row_tag`).

A kernel that calls another (not inlined) passes no integer constant as an argument: numba types
the constant as a literal and compiles the callee once more for it, beside the version that the
same call with a variable needs (`mixer.steps(..., np.int64(0), ...)`, not `0`).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import numpy as np
from numba import njit
from numba.core.cpu import CPUTargetOptions

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)
from dyncompress.network.int_kernels import floor_log2

U4, U8, U16, U29, U31, U64 = np.uint64(4), np.uint64(8), np.uint64(16), np.uint64(29), np.uint64(31), np.uint64(64)
MASK8, MASK16, MASK24 = np.uint64(0xFF), np.uint64(0xFFFF), np.uint64(0xFFFFFF)
P1 = np.uint64(0x9E3779B97F4A7C15)
P2 = np.uint64(0xBF58476D1CE4E5B9)
ONE_U = np.uint64(1)
N_KINDS = 9  # `fine_kind`'s kinds
ONE = 1 << 12  # one nat of evidence (units 2^-12)
# the options of a kernel compiled without numba's reference counts (where this numba has the option)
NO_REFCOUNTS = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


def no_state(settings, lanes: int, hb: int, used: bool) -> tuple:
    """`make` of an expert that keeps no state of its own (its `State` is `tuple`)."""
    return ()


@njit(cache=True, inline="always")
def no_update(b, y, h, st):
    """`update` of an expert with nothing of its own to move on after a byte."""


@njit(cache=True, inline="always")
def mix64(x):
    """A 64-bit hash of x (uint64): two rounds of xor-shift and multiply."""
    x = (x ^ (x >> U31)) * P1
    return (x ^ (x >> U29)) * P2


@njit(cache=True, inline="always")
def hashed_row(key, salt, shift, base):
    """(row, tag) of a hashed context `key` (uint64) in a table of 2^(64 - shift) rows from row
    `base`: the hash's top bits choose the row, 16 bits below them the tag (0 ... 2^16 - 1)."""
    h = mix64(key + salt)
    return np.int64(h >> shift) + base, np.int64((h >> U16) & MASK16)


@njit(cache=True, inline="always")
def is_letter(c):
    """Whether byte c (int64) is a letter of a word: a ... z, A ... Z, or a byte >= 128."""
    return (97 <= (c | 32) <= 122) or c >= 128


@njit(cache=True, inline="always")
def byte_kind(c):
    """A byte's kind (c: int64) for the wrap context: 0 space, 1 a letter (`is_letter`), 2 a digit,
    3 a line feed or carriage return, 4 another control, 5 the rest (punctuation)."""
    if c == 32:
        return 0
    if is_letter(c):
        return 1
    if 48 <= c <= 57:
        return 2
    if c == 10 or c == 13:
        return 3
    return 4 if c < 32 else 5


@njit(cache=True, inline="always")
def fine_kind(c):
    """A byte's kind (c: int64) for the mixer's kinds set: `byte_kind`'s, with the letters split into
    small ASCII letters (1), capitals (6), UTF-8's lead bytes (7) and its continuation bytes (8)."""
    k = byte_kind(c)
    if k == 1 and c >= 65:
        if c <= 90:
            return 6
        if c >= 0xC0:
            return 7
        if c >= 128:
            return 8
    return k


@njit(cache=True, inline="always")
def floor_div(top, den, inv):
    """floor(top / den) for 0 <= top < 2^62 and 1 <= den < 2^62 with a quotient below 2^50, given
    inv = 1.0 / den: the float product is within a quarter of the quotient (three roundings, each
    relative 2^-53), so its integer part is off by at most one, which the exact integer remainder
    corrects. The same result as `top // den` on any machine, without a division in the loop
    (which then vectorises)."""
    q = np.int64(np.float64(top) * inv)
    r = top - q * den
    return q + np.int64(r >= den) - np.int64(r < 0)


@njit(cache=True, inline="always")
def cost_units(f):
    """-log2(f / 2^24) in units of 2^-8 bits, for f in 1 ... 2^24: the bit length, then the next 8
    bits of f as a straight line between powers of two."""
    l = floor_log2(f)
    mant = ((f << 8) >> l) & 255
    return (24 << 8) - ((l << 8) + mant)


def rounded_logs(nums, den: int) -> list[int]:
    """round(2^12 * ln(num / den)) for every num, correctly rounded, the same on every machine (the
    experts' tables of logarithms: `counts.log_table`, `ppm.ppm_log_tables`).

    The float logarithm is off by far less than 10^-9 here (|values| below 2^16, any libm within a
    few units in the last place), so where its fraction is more than 10^-6 from one half it rounds
    to the right integer; only there does Decimal's correctly rounded ln decide (ties cannot occur:
    the logarithm of a rational other than 1 is irrational). `tests/test_mix.py` checks every
    table against Decimal alone."""
    out = []
    for num in nums:
        v = math.log(num / den) * ONE  # num / den: exact (den is a power of two)
        if abs(v - math.floor(v) - 0.5) > 1e-6:
            out.append(math.floor(v + 0.5))
            continue
        with localcontext() as ctx:
            ctx.prec = 40
            out.append(int(((Decimal(num) / den).ln() * ONE).to_integral_value(ROUND_HALF_EVEN)))
    return out
