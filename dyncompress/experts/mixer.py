"""The mixer: the network's logits and the experts' evidence added in logit space with weights
chosen per lane by small contexts, and learned after every byte by the gradient of the code length.

    z_j = sum_i w_i,class(j) * e_ij        (e_0 = the network's logits, less their maximum)

The evidence e_ij of input i for byte j is kept sparse, in ev = (E0, base, ent, n_ent): the
network's (input 0) whole in E0 (B, 256) int32, every other input's as base[b, i] for every byte
but those listed in ent[b, :n_ent[b]] as (i, j, e_ij - base[b, i]) (int32; |e| <= 2^18): a
context's counts, the PPM input's bytes seen, the one byte the match and the run input predict.
Every sum below is the sum over all 256 bytes of every input regrouped, in integers: the same
values to the bit.

A lane's weights are the sum of one row of every weight set (`choose`); with `classes` 7 every input
has a weight per class of the byte it weighs (column i * C + class). With `two`, two mixers over
the same rows, the second at half the rate, their logits averaged; each learns from its own
probabilities (`shares`). Weights in units of 2^-16, logits in units of 2^-12.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import MASK8, MASK16, MASK24, N_KINDS, U4, fine_kind, floor_div, mix64
from dyncompress.experts.counts import COUNT_EDGES

NAME = "mixer"
TABLES = ()
NET_FLOOR = -(1 << 17)  # the network's logits less their maximum are held at -32 nats or more


class State(NamedTuple):
    """W, W_slow (rows, n_in * C) int64: the two mixers' weight rows; updates (rows,) int64: the steps
    every row has taken (its rate: `steps`); cls (256,) int64: every byte's class; two: whether the
    second mixer runs; lr, lr_start, settle: a row's rate max(lr, lr_start / (settle + steps)) (units
    2^-20); w_bound: |w| bound; set_base (S,) int64: every weight set's first row; set_salts,
    set_shifts (4,) uint64: the hashed sets' (pair, word, triple, kinds); kinds: the bytes the kinds
    set reads; exp: `exact`'s exponentials table; z_bound: |z| bound; net_floor: the least network
    evidence."""

    W: np.ndarray
    W_slow: np.ndarray
    updates: np.ndarray
    cls: np.ndarray
    two: bool
    lr: int
    lr_start: int
    settle: int
    w_bound: int
    set_base: np.ndarray
    set_salts: np.ndarray
    set_shifts: np.ndarray
    kinds: int
    exp: np.ndarray
    z_bound: int
    net_floor: int


@njit(cache=True, inline="always")
def network_input(b, logits, ev, floor):
    """Input 0 for lane b: the network's logits (float, units 2^-12) less their maximum, rounded half
    to even (the only rounding in the mixer), at least `floor`."""
    E0, base, ent, n_ent = ev
    top_logit = logits[b, 0]
    for j in range(256):
        top_logit = max(top_logit, logits[b, j])
    for j in range(256):
        E0[b, j] = max(np.int64(np.rint(logits[b, j] - top_logit)), floor)
    base[b, 0] = 0


@njit(cache=True, inline="always")
def choose(b, mx, sets, K, seen, last, word0):
    """Lane b's row of every weight set: (match bucket, order seen); (order seen, its count bucket
    and whether it saw one byte); the previous byte; hashes of the last two bytes, the current word
    (word0) and the last three; the kinds of the last `kinds` bytes (`fine_kind`, four bits each,
    the last first); the match state with the order seen and the last byte's kind, directly.
    seen = (match bucket, match state, order seen, confidence) (`match.predict`, `counts.predict`)."""
    bucket, state, order_seen, conf = seen
    sets[b, 0] = bucket * (K + 1) + order_seen + mx.set_base[0]
    sets[b, 1] = order_seen * (2 * COUNT_EDGES.shape[0] + 2) + conf + mx.set_base[1]
    sets[b, 2] = np.int64(last & MASK8) + mx.set_base[2]
    keys = (last & MASK16, word0, last & MASK24)
    for s in range(3):
        sets[b, 3 + s] = np.int64(mix64(keys[s] + mx.set_salts[s]) >> mx.set_shifts[s]) + mx.set_base[3 + s]
    kind = fine_kind(np.int64(last & MASK8))
    key = np.uint64(kind)
    for j in range(1, mx.kinds):
        key = key << U4 | np.uint64(fine_kind(np.int64((last >> np.uint64(8 * j)) & MASK8)))
    sets[b, 6] = np.int64(mix64(key + mx.set_salts[3]) >> mx.set_shifts[3]) + mx.set_base[6]
    sets[b, 7] = (state * (K + 1) + order_seen) * N_KINDS + kind + mx.set_base[7]


@njit(cache=True, inline="always")
def chosen_weights(b, sets, W, weights):
    """Lane b's weights: every column of W summed over the rows its weight sets chose (rows within
    +-w_bound: each sum below 2^31)."""
    for col in range(W.shape[1]):
        w = 0
        for s in range(sets.shape[1]):
            w += W[sets[b, s], col]
        weights[col] = np.int32(w)


@njit(cache=True, inline="always")
def mixed_logits(b, ev, m, cls, weights, common, acc):
    """acc[j] = sum_i w_i,cls(j) e_ij for lane b: what every byte of a class gets (sum_i w_i,c
    base_i), the network's logits, then every byte listed, its input's weight times its difference."""
    E0, base, ent, n_ent = ev
    n_in = base.shape[1]
    C = weights.shape[0] // n_in
    for c in range(C):
        common[c] = 0
    for i in range(n_in):
        for c in range(C):
            common[c] += weights[i * C + c] * base[b, i]
    for j in range(256):
        c = cls[j]
        acc[j] = common[c] + weights[c] * np.int64(E0[b, j])
    for q in range(m):
        i, j, d = ent[b, q, 0], ent[b, q, 1], np.int64(ent[b, q, 2])
        acc[j] += weights[i * C + cls[j]] * d


@njit(cache=True, inline="always")
def predict(b, mx, ev, m, sets, out, scratch):
    """Lane b's mixed logits from the rows chosen in `sets`: out = (z, z_fast, z_slow), each (B, 256)
    int64; z is z_fast, or with `two` the mean of z_fast and z_slow (rounded down), all within
    +-z_bound. scratch: the caller's (weights, weights_slow, common, acc, acc_slow)."""
    z, z_fast, z_slow = out
    weights, weights_slow, common, acc, acc_slow = scratch
    cls, bound = mx.cls, mx.z_bound
    chosen_weights(b, sets, mx.W, weights)
    mixed_logits(b, ev, m, cls, weights, common, acc)
    if mx.two:
        chosen_weights(b, sets, mx.W_slow, weights_slow)
        mixed_logits(b, ev, m, cls, weights_slow, common, acc_slow)
        for j in range(256):
            z_fast[b, j] = min(max(acc[j] >> 16, -bound), bound)
            z_slow[b, j] = min(max(acc_slow[j] >> 16, -bound), bound)
            z[b, j] = (z_fast[b, j] + z_slow[b, j]) >> 1
    else:
        for j in range(256):
            z_fast[b, j] = min(max(acc[j] >> 16, -bound), bound)
            z[b, j] = z_fast[b, j]


@njit(cache=True, inline="always")
def exponentials(zb, exp, e):
    """e_j = exp[round(2^-2 (max - z_j))] (half up) for one lane's integer logits zb (256; units
    2^-12), the table's last entry (0) standing for everything beyond its range; returns their sum."""
    cap = exp.shape[0] - 1
    top = zb[0]
    for j in range(256):
        top = max(top, zb[j])
    total = 0
    for j in range(256):
        e[j] = exp[min((top - zb[j] + 2) >> 2, cap)]
        total += e[j]
    return total


@njit(cache=True)
def shares(z, exp, out):
    """Every byte's probability under integer logits z (B, 256; units 2^-12) in units of 2^-24, for
    a mixer's gradient (not coded): the exponentials of `frequencies`, each times one reciprocal
    of their sum, floored (one division per lane, not 256)."""
    e = np.empty(256, dtype=np.int64)
    for b in range(z.shape[0]):
        total = exponentials(z[b], exp, e)
        inv = (np.int64(1) << 56) // total  # exp[0] = 2^32 <= total <= 2^40: 2^16 <= inv <= 2^24
        for j in range(256):
            out[b, j] = (e[j] * inv) >> 32  # below 2^24: out may be int32


@njit(cache=True)
def frequencies(z, exp, out):
    """`exact.frequencies` of integer logits z (B, 256; units 2^-12), in integers: the same
    table index round(2^-2 (max - z)) (half up), the same exponentials, shares and remainder."""
    total_f = np.int64(1) << 24
    share = total_f - 256
    e = np.empty(256, dtype=np.int64)
    for b in range(z.shape[0]):
        total = exponentials(z[b], exp, e)
        inv = 1.0 / np.float64(total)
        best, best_e = 0, np.int64(-1)
        for j in range(256):
            if e[j] > best_e:  # the first most probable byte
                best, best_e = j, e[j]
        given = 0
        for j in range(256):
            f = floor_div(e[j] * share, total, inv) + 1  # e_j <= total: the quotient is below 2^24
            out[b, j] = f
            given += f
        out[b, best] += total_f - given


@njit(cache=True)
def gradients(ev, f, mx, y, lo, hi, G_fast, G_slow):
    """Rows lo ... hi - 1 of G_fast and G_slow (k, n_in * C): lane b's gradient of the code length
    for each weight, sum_{j of class c} p_j e_ij - [y of class c] e_iy for input i's weight of
    class c, for each mixer (G_slow only with `two`), p its own frequencies f = (f_fast, f_slow)
    (int32, below 2^24; e below 2^18: each product widens to int64), from the sparse evidence: a
    class's sum_j p_j e_ij = base_i sum_j p_j (over the class) + the listed bytes' p_j (e_ij -
    base_i), the same integer. Every lane's is its own (the weights do not enter it)."""
    E0, base, ent, n_ent = ev
    f_fast, f_slow = f
    two, cls = mx.two, mx.cls
    n_in = base.shape[1]
    n_cols = G_fast.shape[1]
    C = n_cols // n_in
    acc = np.empty(n_cols, dtype=np.int64)
    acc_slow = np.empty(n_cols, dtype=np.int64)
    at_y = np.empty(n_cols, dtype=np.int64)
    total = np.empty(C, dtype=np.int64)
    total_slow = np.empty(C, dtype=np.int64)
    for b in range(lo, hi):
        cy = cls[y[b]]
        for c in range(C):
            total[c] = total_slow[c] = acc[c] = acc_slow[c] = at_y[c] = 0
        for j in range(256):
            c = cls[j]
            fj, e = np.int64(f_fast[b, j]), np.int64(E0[b, j])
            total[c] += fj
            acc[c] += fj * e
            if two:
                f_slow_j = np.int64(f_slow[b, j])
                total_slow[c] += f_slow_j
                acc_slow[c] += f_slow_j * e
        at_y[cy] = E0[b, y[b]]
        for i in range(1, n_in):
            for c in range(C):
                acc[i * C + c] = base[b, i] * total[c]
                acc_slow[i * C + c] = base[b, i] * total_slow[c]
                at_y[i * C + c] = base[b, i] if c == cy else 0
        col_run = -1  # the entries come in runs of one input (and class): summed in registers, added at the run's end
        s_fast = s_slow = s_y = 0
        for q in range(n_ent[b]):
            i, j, d = ent[b, q, 0], ent[b, q, 1], np.int64(ent[b, q, 2])
            col = i * C + cls[j]
            if col != col_run:
                if col_run >= 0:
                    acc[col_run] += s_fast
                    acc_slow[col_run] += s_slow
                    at_y[col_run] += s_y
                col_run, s_fast, s_slow, s_y = col, 0, 0, 0
            s_fast += np.int64(f_fast[b, j]) * d
            if two:
                s_slow += np.int64(f_slow[b, j]) * d
            s_y += d * np.int64(j == y[b])
        if col_run >= 0:
            acc[col_run] += s_fast
            acc_slow[col_run] += s_slow
            at_y[col_run] += s_y
        for col in range(n_cols):
            G_fast[b, col] = (acc[col] >> 24) - at_y[col]
            if two:
                G_slow[b, col] = (acc_slow[col] >> 24) - at_y[col]


@njit(cache=True)
def step_rows(G, sets, k, W, rate, w_bound, s_lo, s_hi):
    """One mixer's step from its gradients G in the weight sets s_lo ... s_hi - 1: every chosen row
    -= rate * g, lane after lane (lanes may share rows), each row at its rate (k, S); then the rows
    are held within +-w_bound. Every set has its own rows."""
    n_in = G.shape[1]
    for b in range(k):
        for s in range(s_lo, s_hi):
            row = sets[b, s]
            for i in range(n_in):
                W[row, i] -= (G[b, i] * rate[b, s] + (1 << 15)) >> 16
    for b in range(k):
        for s in range(s_lo, s_hi):
            row = sets[b, s]
            for i in range(n_in):
                W[row, i] = min(max(W[row, i], -w_bound), w_bound)


@njit(cache=True)
def steps(G, mx, sets, k, s_lo, s_hi):
    """The mixers' steps from their gradients G = (G_fast, G_slow) in the weight sets s_lo ... s_hi -
    1, each chosen row at its own rate from the steps it had taken before this one: max(lr,
    lr_start / (settle + steps)) for W, half that (each term halved, floored) for W_slow (with
    `two`). Every set's rows (and their step counts) are its own, so the sets can be stepped in any
    grouping (`step.learn_parts`)."""
    G_fast, G_slow = G
    updates, lr, lr_start, settle = mx.updates, mx.lr, mx.lr_start, mx.settle
    rate = np.empty(sets.shape, dtype=np.int64)
    for b in range(k):
        for s in range(s_lo, s_hi):
            rate[b, s] = max(lr, lr_start // (settle + updates[sets[b, s]]))
    step_rows(G_fast, sets, k, mx.W, rate, mx.w_bound, s_lo, s_hi)
    if mx.two:
        for b in range(k):
            for s in range(s_lo, s_hi):
                rate[b, s] = max(lr >> 1, (lr_start >> 1) // (settle + updates[sets[b, s]]))
        step_rows(G_slow, sets, k, mx.W_slow, rate, mx.w_bound, s_lo, s_hi)
    for b in range(k):
        for s in range(s_lo, s_hi):
            updates[sets[b, s]] += 1


@njit(cache=True, inline="always")
def update(ev, f, mx, sets, y, k):
    """The mixers' steps after byte y (`steps`), with their gradients from the evidence ev."""
    G = (np.empty((k, mx.W.shape[1]), dtype=np.int64), np.empty((k, mx.W.shape[1]), dtype=np.int64))
    gradients(ev, f, mx, y, np.int64(0), k, G[0], G[1])
    steps(G, mx, sets, k, np.int64(0), sets.shape[1])
