"""The update rules' passes over the weights (`exact.ExactAdapter`), compiled by numba: one pass
instead of a chain of torch calls, each a pass of its own over every weight, often with a
temporary vector. The stream rule (RMSprop / Adam without calibrated statistics: online mode) took
some forty (at hidden 256, 38 ms of every 16-byte segment, two thirds of its time); the calibrated
rules' step with rms-decay's pull and the bound took six.

They compute what the torch calls in `exact.ExactAdapter` compute (still used on other devices),
bit for bit: every value is a float64 integer below 2^53, and each operation is one IEEE operation
(correctly rounded; no fused multiply-add: numba leaves contraction off without fastmath), a
rounding half to even (`np.rint`, as torch's `round_`), or an exact comparison; the square root
and the quotient are corrected by the same exact integer tests as `floor_sqrt_` and `floor_div_`.
`tests/test_exact.py` compares the two ways on every rule.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)
from dyncompress.network.int_kernels import floor_log2

GM_BOUND = float(1 << 26)  # |mean gradient| <= 1/4 per parameter (units 2^-28)


@njit(cache=True, error_model="numpy")  # (no check for a zero divisor: den >= eps >= 1)
def stream_step(master, v, m, rms, g, c, b2, one_b2, b1, one_b1, use_m, lr, eps):
    """For every weight i: gm = clamp(round(g c)); v = round(v b2) + round(gm^2 (1 - b2));
    with momentum m = round(m b1) + round(gm (1 - b1)); rms = floor(sqrt(v));
    master -= floor(lr num / (rms + eps)), num = m or gm. `rms` receives the roots (rms-decay's
    rates read them)."""
    for i in range(master.shape[0]):
        x = np.rint(g[i] * c)
        x = min(max(x, -GM_BOUND), GM_BOUND)
        vi = np.rint(v[i] * b2) + np.rint(x * x * one_b2)
        v[i] = vi
        num = x
        if use_m:
            num = np.rint(m[i] * b1) + np.rint(x * one_b1)
            m[i] = num
        r = np.floor(np.sqrt(vi))
        for _ in range(2):
            if (r + 1.0) * (r + 1.0) <= vi:
                r += 1.0
            if r * r > vi:
                r -= 1.0
        rms[i] = r
        top, den = num * lr, r + eps
        q = np.floor(top / den)
        for _ in range(2):
            if q * den > top:
                q -= 1.0
            if (q + 1.0) * den <= top:
                q += 1.0
        master[i] -= q


@njit(cache=True, fastmath={"reassoc"})
def gradient_stats(g):
    """(max |g|, sum g^2) of a gradient: the maximum exact; the sum a float (summed in any order:
    it only filters the clip's exact norm, see `exact.ExactAdapter._scale`), in one pass."""
    big = 0.0
    squares = 0.0
    for i in range(g.shape[0]):
        big = max(big, abs(g[i]))
        squares += g[i] * g[i]
    return big, squares


@njit(cache=True, fastmath={"reassoc"})
def rounded_squares(g, scale):
    """sum round(g scale)^2, without storing the rounded vector: exact in any order of the sum for
    |round(g scale)| <= 2^14 and fewer than 2^23 weights (every partial sum an integer below 2^51)."""
    total = 0.0
    for i in range(g.shape[0]):
        q = np.rint(g[i] * scale)
        total += q * q
    return total


@njit(cache=True)
def rate_step(master, g, R, c, theta0, D, decay, limit):
    """The calibrated rules' step, with rms-decay's pull and the bound: for every weight i,
    t = master - round(g R c) (R c exact: 12 and 11 significant bits); with decay,
    t += round((theta0 - t) D); master = clamp(t, +-limit). R and D may be float32 copies (exact:
    16 significant bits at most), half the bytes to stream."""
    for i in range(master.shape[0]):
        t = master[i] - np.rint(g[i] * (R[i] * c))
        if decay:
            t += np.rint((theta0[i] - t) * D[i])
        master[i] = min(max(t, -limit), limit)


@njit(cache=True)
def settle(master, theta0, D, decay, limit):
    """After a step: with decay, master += round((theta0 - master) D); then clamp(master, +-limit)."""
    for i in range(master.shape[0]):
        t = master[i]
        if decay:
            t += np.rint((theta0[i] - t) * D[i])
        master[i] = min(max(t, -limit), limit)


@njit(cache=True)
def top(x):
    """max x (exact), 0 for none."""
    big = 0.0
    for i in range(x.shape[0]):
        big = max(big, x[i])
    return big


@njit(cache=True)
def floor_sum(x, unit):
    """sum floor(x unit) for float64 integers x >= 0 and a power of two `unit` (integer sums below
    2^53: exact in any order)."""
    total = 0.0
    for i in range(x.shape[0]):
        total += np.floor(x[i] * unit)
    return total


@njit(cache=True)
def settle_rates(master, theta0, rms, unit, scale, limit):
    """`settle` with decay, the rates made on the way (`exact.ExactAdapter._decay_rates`):
    D_i = min(floor(rms_i unit) scale, 1), then master += round((theta0 - master) D);
    clamp(master, +-limit)."""
    for i in range(master.shape[0]):
        d = min(np.floor(rms[i] * unit) * scale, 1.0)
        t = master[i]
        t += np.rint((theta0[i] - t) * d)
        master[i] = min(max(t, -limit), limit)


@njit(cache=True)
def segment_costs(F, y, active, log2, freq_bits, log_frac, coded, bits):
    """A segment's coded frequencies and TLM's costs: for every step t and lane b in play
    (b < active[t]), coded[t, b] = F[t, b, y[t, b]] (0 elsewhere) and bits[b] sums its code length
    -log2(f / 2^freq_bits) in units of 2^-log_frac bits, to 2^-12 of the exact value (the top 13
    bits of f, a floor: `exact.code_lengths`, in integers)."""
    T, B = y.shape
    for b in range(B):
        bits[b] = 0
    for t in range(T):
        for b in range(B):
            coded[t, b] = 0
            if b >= active[t]:
                continue
            f = np.int64(F[t, b, y[t, b]])
            coded[t, b] = f
            e = floor_log2(f)
            top = (f >> (e - 12) if e >= 12 else f << (12 - e)) - (1 << 12)
            bits[b] += ((freq_bits - e) << log_frac) - log2[top]


@njit(cache=True, parallel=True)
def gradient_stats_parts(g, parts):
    """`gradient_stats` over `parts` runs of the weights, one per thread (`split`)."""
    n = g.shape[0]
    bigs, squares = np.zeros(parts), np.zeros(parts)
    for p in prange(parts):
        bigs[p], squares[p] = gradient_stats(g[p * n // parts : (p + 1) * n // parts])
    return bigs.max(), squares.sum()


@njit(cache=True, parallel=True)
def rate_step_parts(master, g, R, c, theta0, D, decay, limit, parts):
    """`rate_step` over `parts` runs of the weights, one per thread (`split`): each weight's step
    is its own."""
    n = master.shape[0]
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        rate_step(master[lo:hi], g[lo:hi], R[lo:hi], c, theta0[lo:hi], D[lo:hi], decay, limit)


@njit(cache=True, parallel=True)
def rounded_squares_parts(g, scale, parts):
    """`rounded_squares` over `parts` runs of the weights, one per thread (`split`): integer sums, exact."""
    n = g.shape[0]
    totals = np.zeros(parts)
    for p in prange(parts):
        totals[p] = rounded_squares(g[p * n // parts : (p + 1) * n // parts], scale)
    return totals.sum()
