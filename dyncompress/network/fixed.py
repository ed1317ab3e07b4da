"""The coding path's exact arithmetic: its number formats and bounds, the checked tables of its
nonlinearities, the coded frequencies, code lengths and TLM weights; the same numbers on every CPU,
GPU, thread count and library version (format 2 on). `exact` is the network in it, `exact_adapt`
its update rules.

Why it is exact. Every tensor of the coding path holds numbers of the form k * 2^-F with an
integer k small enough that every sum and product the path forms is exactly representable in
IEEE float64 (|value| < 2^53 units of its last bit). An operation whose exact result is
representable returns that result on every IEEE machine, whatever its summation order, SIMD
width, blocking, fused multiply-adds or thread split, so the GEMMs (ordinary BLAS / cuBLAS
float64 matmuls) give the same bits everywhere. Where a value must lose bits, it is rounded by
`round_` (round half to even, the one rounding rule; an IEEE operation on an exact input), and clamped where a bound is
needed for the next step to stay exact. The state of the update rules is int64 (two's
complement integer arithmetic, exact by definition). Nothing in here calls exp, tanh, sigmoid,
softmax, log or a float reduction whose result is inexact.

Formats (value = integer * 2^-F; `A` = 2^12):

    activations h, c, h W_mh, m ... integers in units of 2^-12   (h, tanh outputs: |x| <= A)
    sigmoid outputs i, f, o ....... multiples of 2^-16 in [0, 1]
    forward weights ............... multiples of 2^-20, |w| <= 8 (a rounded copy of the master)
    backward weights .............. multiples of 2^-16 (W_m, W_mh, W_out; another rounded copy)
    master weights ................ integers in units of 2^-32, |w| <= 8
    gradients ..................... integers in units of 2^-16 (of the summed loss)
    frequencies ................... int64, each >= 1, summing to 2^24

Nonlinearities are lookup tables (`Tables`) built by integer-only code (Python integers, a
Taylor series for exp(-2^-10) and repeated fixed-point products), and checked against the
SHA-256 recorded below when built. The tables take inputs rounded to 2^-10 over [-16, 16]
(sigmoid, tanh) and [0, 24] (the exponential of the softmax).

`tests/test_exact.py` checks each kernel against a float64 reference within the stated error
and the bounds that keep every sum exact.
"""

from __future__ import annotations

import functools
import hashlib
import math
from fractions import Fraction

import numpy as np
import torch

from dyncompress.config.shape import ALPHABET

FA = 12  # activations
A = float(1 << FA)
FS = 16  # sigmoid outputs
FW = 20  # forward weights
# With `Settings.step16` (matrices that stay as trained while coding): their forward copies at 2^-FW16,
# and m at multiples of 2^M16 units (2^-6): 16-bit integers both (|w| <= 2^13, |m| <= 2^12 of those
# units), for `dot16.matmul16`
FW16 = 10
M16 = 6
FB = 16  # backward weights
FM = 32  # master weights (float64 integers)
G = 16  # gradients
FI = 10  # table input resolution
T_RANGE = 16  # sigmoid / tanh tables cover [-16, 16]
E_RANGE = 24  # the softmax's exponential covers differences [0, 24] (nats)
E_BITS = 32  # exp table values: round(2^32 * exp(-d))
FREQ_BITS = 24
FREQ_TOTAL = 1 << FREQ_BITS
W_MAX = 8  # |weight| bound (master and copies)
C_MAX = 256  # |c| bound
M_MAX = 64  # |m| bound
GRAD_MAX = 2 ** (G + 6)  # |dh|, |dc|, |dm W| bound (gradient values 64)
DZ_MAX = 2 ** (G + 4)  # |dZ| bound (value 16)
P_MAX = float(16 << FA)  # |x A| bound of a LoRA factor's product (value 16)
R = T_RANGE << FI  # table index of input 0 (each half has R entries)
FORWARD_MATRICES = ("w_mh", "w_m", "w_out")  # (the step's matmuls, in order)
BACKWARD_MATRICES = ("w_out", "w_m", "w_mh")  # (the backward's matmuls)

# SHA-256 of the tables' int64 little-endian bytes (sigmoid | tanh | exp), as built by `Tables`.
TABLES_SHA256 = "bc8abacf9b3e8ada265ad1a58a23a07a59d1faf4af315e22c17cd3a885d195cc"


class ExactnessError(RuntimeError):
    """The integer-only tables did not come out as recorded: this platform cannot code."""


def _exp_neg_step(bits: int) -> int:
    """floor(2^bits * exp(-2^-FI)) by the Taylor series in integers (terms alternate)."""
    total, term, k = 0, 1 << bits, 0
    while term:
        total += term if k % 2 == 0 else -term
        k += 1
        term = term // (k << FI)
    return total


def build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sigmoid, tanh, exp) as int64 arrays, by integer arithmetic only (about a second):

    sigmoid[k] = round(2^16 / (1 + exp(-x)))      x = (k - R) / 2^10, k = 0 ... 2R
    tanh[k]    = round(2^12 * tanh(x))             same x
    exp[j]     = round(2^32 * exp(-j / 2^10))      j = 0 ... 24 * 2^10 (the last entry is 0)

    The package ships their output (`tables.npz`); `tests/test_exact.py` rebuilds it with this.
    """
    P = 96  # working precision: 2^-96 per product, far below the tables' 2^-32
    one = 1 << P
    step = _exp_neg_step(P)
    powers = [one] * (2 * R + 1)  # exp(-j / 2^10) * 2^P, j = 0 ... 2R
    for j in range(1, 2 * R + 1):
        powers[j] = powers[j - 1] * step >> P

    def div_round(num: int, den: int) -> int:
        return (2 * num + den) // (2 * den)

    sig_pos = [div_round(one << FS, one + powers[k]) for k in range(R + 1)]  # x = k / 2^10 >= 0
    sig = [(1 << FS) - sig_pos[R - k] for k in range(R)] + sig_pos  # sigmoid(-x) = 1 - sigmoid(x)
    tanh_pos = [div_round((one - powers[2 * k]) << FA, one + powers[2 * k]) for k in range(R + 1)]
    tanh = [-tanh_pos[R - k] for k in range(R)] + tanh_pos
    exp = [div_round(powers[j], 1 << (P - E_BITS)) for j in range(E_RANGE << FI)] + [0]
    return tuple(np.array(v, dtype=np.int64) for v in (sig, tanh, exp))


TABLE_NAMES = ("sigmoid", "tanh", "exp")
TABLES_FILE = "tables.npz"


def tables_sha256(tables) -> str:
    h = hashlib.sha256()
    for values in tables:
        h.update(np.asarray(values, dtype="<i8").tobytes())
    return h.hexdigest()


@functools.cache
def checked_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shipped tables, checked against the hash recorded in this module."""
    from importlib import resources

    try:
        with resources.files("dyncompress.network").joinpath(TABLES_FILE).open("rb") as f, np.load(f) as npz:
            tables = tuple(npz[name].astype(np.int64) for name in TABLE_NAMES)
    except (OSError, KeyError, ValueError) as e:
        raise ExactnessError(f"cannot read the lookup tables ({TABLES_FILE}): {e}") from None
    digest = tables_sha256(tables)
    if digest != TABLES_SHA256:
        raise ExactnessError(f"lookup tables {TABLES_FILE} hash to {digest[:16]}, not {TABLES_SHA256[:16]}: reinstall")
    return tables


# --- frequencies -------------------------------------------------------------------------


def frequencies(logits: np.ndarray) -> np.ndarray:
    """(k, 256) logits in units of 2^-12 (multiples of 2^-20) -> (k, 256) int64 frequencies,
    each >= 1, summing to 2^24. Integer arithmetic after one exact subtraction:

        e_j  = EXP[round(2^10 * (max - logit_j))]        (0 beyond 24 nats)
        f_j  = floor(e_j * (2^24 - 256) / sum(e)) + 1
        the remainder 2^24 - sum(f) (0 ... 256) goes to the first most probable byte.
    """
    exp = checked_tables()[2]
    d = logits.max(axis=-1, keepdims=True) - logits  # exact: both are multiples of 2^-20, < 2^33
    # nan cannot occur (every input is a bounded integer combination); inf neither
    j = np.minimum(d * 2.0 ** (FI - FA) + 0.5, float(E_RANGE << FI)).astype(np.int64)  # round half up
    e = exp[j]
    total = e.sum(axis=-1, keepdims=True)  # >= 2^32: the maximum's entry
    f = e * (FREQ_TOTAL - ALPHABET) // total + 1
    rows = np.arange(len(f))
    f[rows, e.argmax(axis=-1)] += FREQ_TOTAL - f.sum(axis=-1)
    return f


# --- segment weights (TLM) ----------------------------------------------------------------

LOG_FRAC = 16  # code lengths in units of 2^-16 bits
TLM_CAP = 4  # S above this counts as this: a lane's weight is S / TLM_CAP, a multiple of 2^-8 in [0, 1]


@functools.cache
def log2_table() -> np.ndarray:
    """LOG2[m] = floor(2^16 log2(1 + m / 2^12)), m = 0 ... 2^12 - 1, by integer squaring (each
    squaring of x in [1, 2) gives the next bit of log2 x), so the same on every machine."""
    P, one, out = 64, 1 << 64, []
    for m in range(1 << 12):
        x, y = one + (m << (P - 12)), 0
        for _ in range(LOG_FRAC):
            x, y = x * x >> P, y << 1
            if x >= 2 * one:
                x, y = x >> 1, y | 1
        out.append(y)
    return np.array(out, dtype=np.int64)


@functools.cache
def exp2_table() -> tuple[int, ...]:
    """EXP2[j] = 2^16 * 2^(j / 256), j = 0 ... 255, floored: products of the roots 2^(2^-i) (integer
    square roots at 2^-64), so the same on every machine."""
    P = 64
    roots, r = [], 2 << P
    for _ in range(8):
        r = math.isqrt(r << P)  # 2^(1/2), 2^(1/4), ... 2^(1/256) at 2^-64
        roots.append(r)
    out = []
    for j in range(256):
        x = 1 << P
        for i in range(8):
            if j >> (7 - i) & 1:
                x = x * roots[i] >> P
        out.append(x >> (P - 16))
    return tuple(out)


def code_lengths(freqs: np.ndarray) -> np.ndarray:
    """-log2(f / 2^24) of int64 frequencies 1 ... 2^24, in units of 2^-16 bits (to 2^-12 of the
    exact value: the top 13 bits of f, a floor), integers only."""
    f = freqs.astype(np.int64)
    e = np.frexp(f.astype(np.float64))[1].astype(np.int64) - 1  # floor(log2 f): exact
    top = np.where(e >= 12, f >> np.maximum(e - 12, 0), f << np.maximum(12 - e, 0)) - (1 << 12)
    return ((FREQ_BITS - e) << LOG_FRAC) - log2_table()[top]


def tlm_units(threshold: float) -> int:
    """A threshold in bits per byte (a float from the header) in units of 2^-16 bits, exactly floored."""
    return int(Fraction(threshold) * (1 << LOG_FRAC))


def tlm_relative_threshold(mean: int, relative: float) -> int:
    """`relative` (a float from the header, taken to 2^-8) times a running mean cost (units 2^-16
    bits per byte), floored: the threshold of TLM's relative form, in integers."""
    return int(Fraction(relative) * 256) * mean >> 8


TLM_MEAN_SHIFT = 4  # the running mean cost moves 1/16 of the way to each segment's


def tlm_mean_update(mean: int, bits: int, count: int) -> int:
    """The running mean cost per byte (units 2^-16 bits; -1: none yet) after a segment of `count`
    bytes that cost `bits` (units 2^-16): an integer moving average, the first segment its own."""
    if count == 0:
        return mean
    cost = bits // count
    return cost if mean < 0 else mean + ((cost - mean) >> TLM_MEAN_SHIFT)


def tlm_weights(bits: np.ndarray, counts: np.ndarray, threshold: int, lam: float) -> np.ndarray:
    """Per lane, TLM's S = lam * 2^(mean bits - threshold) if the lane's segment cost more than
    `threshold` bits per byte, else 0 (its PPL against P0 = 2^threshold); returned as S / TLM_CAP
    capped at 1, a multiple of 2^-8 (float64). bits: (B,) summed code lengths (units 2^-16,
    `code_lengths`), counts: (B,) bytes, the threshold in units of 2^-16 bits per byte (`tlm_units`,
    `tlm_relative_threshold`). Integer and exact-fraction arithmetic only."""
    lam, table, out = Fraction(lam), exp2_table(), np.zeros(len(bits))
    for lane, (total, n) in enumerate(zip(bits.tolist(), counts.tolist(), strict=True)):
        if n == 0 or total <= n * threshold:
            continue
        d = (total - n * threshold) // n  # mean excess, units 2^-16 bits
        whole, frac = d >> LOG_FRAC, (d >> (LOG_FRAC - 8)) & 255
        if whole > 40:  # far past the cap
            out[lane] = 1.0
            continue
        s256 = lam * table[frac] * (1 << whole) * 256 / (TLM_CAP << 16)  # S / cap in units of 2^-8
        out[lane] = min(math.floor(s256), 256) / 256
    return out


def numpy_views(*tensors: torch.Tensor) -> list[np.ndarray]:
    """CPU tensors as numpy arrays on the same memory, strides and all (the compiled kernels take any)."""
    return [t.detach().numpy() for t in tensors]
