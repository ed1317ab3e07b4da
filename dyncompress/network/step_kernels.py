"""The exact network's step and backward on the CPU (`exact.ExactMLSTM`), compiled by numba: the
whole step without side weights in one call (`forward`: the bytes in, the three matmuls, the gates
and the cell, the logits out; LoRA's term on W_out too), the whole backward but the weights'
gradients in another (`backward`; with LoRA on W_out alone, `backward_out_lora`), and the kernels
they are made of, which the step with other side weights (sparse, LoRA elsewhere) calls one by
one. Every matmul is a dot product along the rows of a float32 copy of the weights (`matmul_nt`;
the forward's matrices are stored transposed for it), refreshed after each change of the weights
(`round_weights`, `matrix_copies`); with the 16-bit step (`exact.ExactMLSTM`'s step16) the
whole step's three products run on int16 copies instead (`dot16.matmul16`), the same numbers.
Compiled, because the same step as torch calls is some twenty calls, each dearer in dispatch than
in arithmetic at a few lanes, and MKL's float64 matmuls are slow at a few rows.

They compute what the torch calls compute (still used on other devices), bit for bit: every value
is a float64 integer multiple of its unit and every product and sum is exact (its result is
representable), so the order of a sum, a fused multiply-add (the matmul kernels allow both) or
the torch calls' blocking cannot change it; a rounding is half to even (`np.rint`, as torch's
`round_`), a clamp an exact comparison, and a table index the truncation of an exact
non-negative value (as torch's `.long()`). `tests/test_exact.py` compares the two ways.

A kernel that calls `matmul_nt` passes `add` as `np.bool_(...)`, not as the constant: numba types a
constant as a literal and builds the callee once more for each (as the call from Python does not).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)
from dyncompress.network.dot16 import matmul16


@njit(cache=True)
def mult_gates_in(prev, inputs, gate_in, hm, exm, m, gz, m_bound, m_unit, m16):
    """Per lane b, with x = prev[b]: exm = W_mx[x] (the first H columns of `inputs`); hm rounded;
    m = clamp(m_unit round(exm hm / m_unit), +-m_bound) (m_unit a power of two: 1, or 2^M16 with
    step16), and with m16 given (rows: as m's) m / m_unit as int16 too; gz = gate_in[x] (the gates'
    indices before the m W_m term)."""
    B, H = hm.shape
    inverse = 1.0 / m_unit
    for b in range(B):
        x = prev[b]
        for j in range(H):
            e = inputs[x, j]
            r = np.rint(hm[b, j])
            hm[b, j] = r
            exm[b, j] = e
            m[b, j] = min(max(np.rint(e * r * inverse) * m_unit, -m_bound), m_bound)
        if m16.shape[0]:
            for j in range(H):
                m16[b, j] = np.int16(m[b, j] * inverse)
        for j in range(gz.shape[1]):
            gz[b, j] = gate_in[x, j]


@njit(cache=True)
def as_int16(v, out):
    """out = v (B, H) as int16 (v's values integers below 2^15)."""
    for b in range(v.shape[0]):
        for j in range(v.shape[1]):
            out[b, j] = np.int16(v[b, j])


@njit(cache=True)
def cell(gz, consts, c0, gates, c1, tc, h1):
    """From the gates' table indices gz (B, 4H; clamped to [gate_lo, gate_hi] per column and
    truncated): gates i, f, o, u = table[index]; c1 = clamp(round(f c0 + i u), +-c_bound);
    tc = table[trunc(clamp(tanh_off + c_scale c1, tanh_lo, tanh_hi))]; h1 = round(o tc).
    consts: `forward`'s."""
    gate_lo, gate_hi, table, _, c_bound, c_scale, tanh_off, tanh_lo, tanh_hi = consts[:9]
    B, H = c0.shape
    for b in range(B):
        for j in range(4 * H):
            gates[b, j] = table[np.int64(min(max(gz[b, j], gate_lo[j]), gate_hi[j]))]
        for j in range(H):
            i, f, o, u = gates[b, j], gates[b, H + j], gates[b, 2 * H + j], gates[b, 3 * H + j]
            c = min(max(np.rint(f * c0[b, j] + i * u), -c_bound), c_bound)
            c1[b, j] = c
            t = table[np.int64(min(max(tanh_off + c_scale * c, tanh_lo), tanh_hi))]
            tc[b, j] = t
            h1[b, j] = np.rint(o * t)


@njit(cache=True)
def forward(lanes, weights, consts):
    """The whole step without side weights but LoRA on W_out (`exact.ExactMLSTM.step_array`), in one
    call: x = given (the bytes), hm = h0 W_mh, `mult_gates_in`, gz += 2^-2 m W_m, `cell`, and the
    logits a_scale b_out + h1 W_out (the matrices transposed, `matmul_nt`; with 16-bit copies of
    them given, `dot16.matmul16` on h and m as int16, the same numbers); with LoRA factors A, B
    (given transposed; none: zero rows), lora_p = clamp(round(h1 A), +-p_bound) and the logits
    gain lora_p B. The records:

        lanes    (given, x, h0, hm, exm, m, gz, c0, gates, c1, tc, h1, logits, lora_p, h16, m16): every
                 lane's row of each (B, ...), what `forward_parts` cuts into runs of lanes (h16, m16:
                 int16 scratch, no rows without the 16-bit copies)
        weights  (inputs, gate_in, w_mh_t, w_m_t, w_out_t, b_out, lora_a_t, lora_b_t, w_mh16, w_m16,
                 w_out16): the last three the matrices as int16 multiples of unit16 (none: no rows)
        consts   (gate_lo, gate_hi, table, m_bound, c_bound, c_scale, tanh_off, tanh_lo, tanh_hi,
                 a_scale, p_bound, m_unit, unit16)"""
    given, x, h0, hm, exm, m, gz, c0, gates, c1, tc, h1, logits, lora_p, h16, m16 = lanes
    inputs, gate_in, w_mh_t, w_m_t, w_out_t, b_out, lora_a_t, lora_b_t, w_mh16, w_m16, w_out16 = weights
    _, _, _, m_bound, _, c_scale, _, _, _, a_scale, p_bound, m_unit, unit16 = consts
    narrow = w_m16.shape[0] > 0
    for b in range(x.shape[0]):
        x[b] = given[b]
    if narrow:
        as_int16(h0, h16)
        matmul16(h16, w_mh16, hm, unit16, np.bool_(False))
    else:
        matmul_nt(h0, w_mh_t, hm, 1.0, np.bool_(False))
    mult_gates_in(x, inputs, gate_in, hm, exm, m, gz, m_bound, m_unit, m16)
    if narrow:
        matmul16(m16, w_m16, gz, c_scale * m_unit * unit16, np.bool_(True))
    else:
        matmul_nt(m, w_m_t, gz, c_scale, np.bool_(True))
    cell(gz, consts, c0, gates, c1, tc, h1)
    for b in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            logits[b, j] = a_scale * b_out[j]
    if narrow:
        as_int16(h1, h16)
        matmul16(h16, w_out16, logits, unit16, np.bool_(True))
    else:
        matmul_nt(h1, w_out_t, logits, 1.0, np.bool_(True))
    if lora_a_t.shape[0]:
        matmul_nt(h1, lora_a_t, lora_p, 1.0, np.bool_(False))
        for b in range(lora_p.shape[0]):
            for i in range(lora_p.shape[1]):
                lora_p[b, i] = min(max(np.rint(lora_p[b, i]), -p_bound), p_bound)
        matmul_nt(lora_p, lora_b_t, logits, 1.0, np.bool_(True))


@njit(cache=True)
def forward_lanes(lanes, weights, consts, lo, hi):
    """`forward` of lanes lo ... hi - 1 (every record of `lanes` cut to their rows)."""
    given, x, h0, hm, exm, m, gz, c0, gates, c1, tc, h1, logits, lora_p, h16, m16 = lanes
    rows = (
        given[lo:hi], x[lo:hi], h0[lo:hi], hm[lo:hi], exm[lo:hi], m[lo:hi], gz[lo:hi], c0[lo:hi], gates[lo:hi],
        c1[lo:hi], tc[lo:hi], h1[lo:hi], logits[lo:hi], lora_p[lo:hi], h16[lo:hi], m16[lo:hi],
    )  # fmt: skip
    forward(rows, weights, consts)


@njit(cache=True, parallel=True)
def forward_parts(parts, lanes, weights, consts):
    """`forward` with the lanes cut into `parts` runs of lanes, one per thread (`split`): every
    lane's step is its own, so the bits are the same for any cut."""
    B = lanes[1].shape[0]
    for p in prange(parts):
        forward_lanes(lanes, weights, consts, p * B // parts, (p + 1) * B // parts)


@njit(cache=True)
def grad_gates(dh_t, dh_next, dc_next, dcfd_t, K_t, dc, dZ_t, g_bound, dz_bound):
    """The backward's step t up to the gates: dh = clamp(dh_t + dh_next) (kept in dh_t);
    dc = clamp(round(dh dcfd) + dc_next); dZ = clamp(round([dc, dc, dh, dc] K)) (bounds +-g_bound,
    +-dz_bound; dh_next and dc_next come rounded from step t + 1, zeros at the last step)."""
    B, H = dh_t.shape
    for b in range(B):
        for j in range(H):
            dh = min(max(dh_t[b, j] + dh_next[b, j], -g_bound), g_bound)
            dh_t[b, j] = dh
            c = min(max(np.rint(dh * dcfd_t[b, j]) + dc_next[b, j], -g_bound), g_bound)
            dc[b, j] = c
            dZ_t[b, j] = min(max(np.rint(c * K_t[b, j]), -dz_bound), dz_bound)
            dZ_t[b, H + j] = min(max(np.rint(c * K_t[b, H + j]), -dz_bound), dz_bound)
            dZ_t[b, 2 * H + j] = min(max(np.rint(dh * K_t[b, 2 * H + j]), -dz_bound), dz_bound)
            dZ_t[b, 3 * H + j] = min(max(np.rint(c * K_t[b, 3 * H + j]), -dz_bound), dz_bound)


@njit(cache=True)
def grad_mult(dm, exm_t, dmx, g_bound):
    """dm = clamp(round(dm)) in place (dZ W_m^T); dmx = clamp(round(dm exm)) (bounds +-g_bound)."""
    B, H = dm.shape
    for b in range(B):
        for j in range(H):
            d = min(max(np.rint(dm[b, j]), -g_bound), g_bound)
            dm[b, j] = d
            dmx[b, j] = min(max(np.rint(d * exm_t[b, j]), -g_bound), g_bound)


@njit(cache=True)
def grad_carry(dh_next, dc, f_t, dc_next):
    """What step t passes to step t - 1: dh_next = round(dmx W_mh^T) in place; dc_next = round(dc f)."""
    B, H = dc.shape
    for b in range(B):
        for j in range(H):
            dh_next[b, j] = np.rint(dh_next[b, j])
            dc_next[b, j] = np.rint(dc[b, j] * f_t[b, j])


@njit(cache=True, inline="always")
def dlogits(F, y, mask, weighted, freq_total, dl_scale, dl, t, b):
    """d/dlogits at step t of lane b: round((F - [j = y] freq_total) dl_scale) times the mask (a
    lane's TLM weight, a multiple of 2^-8), rounded again if `weighted`."""
    w = mask[t, b]
    for j in range(dl.shape[2]):
        d = np.rint((F[t, b, j] - (freq_total if j == y[t, b] else 0.0)) * dl_scale) * w
        dl[t, b, j] = np.rint(d) if weighted else d


@njit(cache=True)
def backward_out_lora(F, y, mask, weighted, lora_b, dl, q, freq_total, dl_scale, g_bound):
    """The backward with LoRA on W_out alone (`exact.ExactMLSTM.backward`): dl (T, B, 256) as
    `backward` makes it, and q = clamp(round(dl B^T), +-g_bound) (T, B, r) for A's gradient
    (lora_b: B (r, 256), the rows `matmul_nt` reads). Nothing before W_out adapts, so nothing
    goes back through the steps."""
    T, B, _ = dl.shape
    for t in range(T):
        for b in range(B):
            dlogits(F, y, mask, weighted, freq_total, dl_scale, dl, t, b)
        matmul_nt(dl[t], lora_b, q[t], 1.0, np.bool_(False))
        for b in range(B):
            for i in range(q.shape[2]):
                q[t, b, i] = min(max(np.rint(q[t, b, i]), -g_bound), g_bound)


@njit(cache=True)
def backward(coded, saved, weights, grads, consts, lo, hi):
    """The backward pass through T steps without side weights (`exact.ExactMLSTM.backward`, the
    torch calls there and in `_backward_calls`, in one call), for lanes lo ... hi - 1 (each lane's
    backward is its own: `backward_parts` runs runs of lanes side by side): dl (T, B, 256) from the
    coded frequencies F, the targets y and the mask (rounded again if `weighted`);
    dH = round(dl W_out^T); dcfd and K from the forward's buffers (Z, TC, CS: the first T steps);
    then the steps, last to first (`grad_gates`, dZ W_m^T, `grad_mult`, dMX W_mh^T, `grad_carry`),
    into dZ, dM and dMX. Every product and sum is exact (the bounds of `exact`), so the order of
    the operations is the torch calls' wherever a rounding follows. (A step's lanes are sliced as
    x[t, lo:hi], contiguous: numba compiles x[:, lo:hi] for any strides, four times slower.) The
    records:

        coded    (F, y, mask, weighted): the coded frequencies (T, B, 256), the targets, the mask
        saved    (Z, TC, CS, exm): the forward's buffers
        weights  (w_out, w_m, w_mh): the backward copies
        grads    (dl, dH, dcfd, K, dZ, dM, dMX): what it writes
        consts   (freq_total, dl_scale, fa, fs, g_bound, dz_bound)"""
    F, y, mask, weighted = coded
    Z, TC, CS, exm = saved
    w_out, w_m, w_mh = weights
    dl, dH, dcfd, K, dZ, dM, dMX = grads
    freq_total, dl_scale, fa, fs, g_bound, dz_bound = consts
    T = dl.shape[0]
    H = dH.shape[2]
    aa = fa * fa
    for t in range(T):
        for b in range(lo, hi):
            dlogits(F, y, mask, weighted, freq_total, dl_scale, dl, t, b)
            for j in range(H):
                i_, f_, o_, u_ = Z[t, b, j], Z[t, b, H + j], Z[t, b, 2 * H + j], Z[t, b, 3 * H + j]
                tc, c = TC[t, b, j], CS[t, b, j]
                dcfd[t, b, j] = np.rint(o_ * (aa - tc * tc) * (fs / aa)) * (1.0 / fs)
                K[t, b, j] = np.rint(u_ * (i_ * (1.0 - i_)) * (fs / fa)) * (1.0 / fs)
                K[t, b, H + j] = np.rint(c * (f_ * (1.0 - f_)) * (fs / fa)) * (1.0 / fs)
                K[t, b, 2 * H + j] = np.rint(tc * (o_ * (1.0 - o_)) * (fs / fa)) * (1.0 / fs)
                K[t, b, 3 * H + j] = np.rint((aa - u_ * u_) * (1.0 / fa) * i_ * (fs / fa)) * (1.0 / fs)
        matmul_nt(dl[t, lo:hi], w_out, dH[t, lo:hi], 1.0, np.bool_(False))
        for b in range(lo, hi):
            for j in range(H):
                dH[t, b, j] = np.rint(dH[t, b, j])
    dhn = np.zeros((hi - lo, H))
    dcn = np.zeros((hi - lo, H))
    dc = np.zeros((hi - lo, H))
    for t in range(T - 1, -1, -1):
        grad_gates(dH[t, lo:hi], dhn, dcn, dcfd[t, lo:hi], K[t, lo:hi], dc, dZ[t, lo:hi], g_bound, dz_bound)
        matmul_nt(dZ[t, lo:hi], w_m, dM[t, lo:hi], 1.0, np.bool_(False))
        grad_mult(dM[t, lo:hi], exm[t, lo:hi], dMX[t, lo:hi], g_bound)
        matmul_nt(dMX[t, lo:hi], w_mh, dhn, 1.0, np.bool_(False))
        grad_carry(dhn, dc, Z[t, lo:hi, H : 2 * H], dcn)


@njit(cache=True, inline="always")
def _column4(W, i, j):
    """W[i ... i + 3, j] as float64 (exact: float32 widens without rounding)."""
    return np.float64(W[i, j]), np.float64(W[i + 1, j]), np.float64(W[i + 2, j]), np.float64(W[i + 3, j])


@njit(cache=True, fastmath={"contract", "reassoc"}, inline="always")
def _put(out, b, i, alpha, add, v0, v1, v2, v3):
    """out[b, i ... i + 3] = alpha v (+ out if `add`)."""
    for k, v in enumerate((v0, v1, v2, v3)):
        out[b, i + k] = alpha * v + (out[b, i + k] if add else 0.0)


@njit(cache=True, fastmath={"contract", "reassoc"})
def matmul_nt(x, W, out, alpha, add):
    """out = alpha x W^T (+ out if `add`) for x (B, K), W (N, K) (float32 or float64), out (B, N),
    alpha a power of two: dot products along W's contiguous rows, in blocks of four lanes by four
    rows (then three lanes, or two, then one; the last N mod 4 rows one by one), so that each load
    of W serves four lanes and each load of x four rows. Exact in any order of the sums (reassociated, fused): every
    product and partial sum is a representable multiple of the units' product (the bounds of
    `exact`), and float32 weights are read exactly as float64."""
    B, K = x.shape
    N = W.shape[0]
    n4 = N - N % 4
    b = 0
    while b + 4 <= B:
        for i in range(0, n4, 4):
            a0 = a1 = a2 = a3 = c0 = c1 = c2 = c3 = d0 = d1 = d2 = d3 = e0 = e1 = e2 = e3 = 0.0
            for j in range(K):
                w, v, u, s = _column4(W, i, j)
                x0, x1, x2, x3 = x[b, j], x[b + 1, j], x[b + 2, j], x[b + 3, j]
                a0, a1, a2, a3 = a0 + x0 * w, a1 + x1 * w, a2 + x2 * w, a3 + x3 * w
                c0, c1, c2, c3 = c0 + x0 * v, c1 + x1 * v, c2 + x2 * v, c3 + x3 * v
                d0, d1, d2, d3 = d0 + x0 * u, d1 + x1 * u, d2 + x2 * u, d3 + x3 * u
                e0, e1, e2, e3 = e0 + x0 * s, e1 + x1 * s, e2 + x2 * s, e3 + x3 * s
            _put(out, b, i, alpha, add, a0, c0, d0, e0)
            _put(out, b + 1, i, alpha, add, a1, c1, d1, e1)
            _put(out, b + 2, i, alpha, add, a2, c2, d2, e2)
            _put(out, b + 3, i, alpha, add, a3, c3, d3, e3)
        for i in range(n4, N):
            a0 = a1 = a2 = a3 = 0.0
            for j in range(K):
                w = np.float64(W[i, j])
                a0, a1, a2, a3 = a0 + x[b, j] * w, a1 + x[b + 1, j] * w, a2 + x[b + 2, j] * w, a3 + x[b + 3, j] * w
            for k, v in enumerate((a0, a1, a2, a3)):
                out[b + k, i] = alpha * v + (out[b + k, i] if add else 0.0)
        b += 4
    if B - b == 3:  # (three lanes in one pass over W, not two: a run of 3, 5, 6 or 7 lanes ends so)
        for i in range(0, n4, 4):
            a0 = a1 = a2 = c0 = c1 = c2 = d0 = d1 = d2 = e0 = e1 = e2 = 0.0
            for j in range(K):
                w, v, u, s = _column4(W, i, j)
                x0, x1, x2 = x[b, j], x[b + 1, j], x[b + 2, j]
                a0, a1, a2 = a0 + x0 * w, a1 + x1 * w, a2 + x2 * w
                c0, c1, c2 = c0 + x0 * v, c1 + x1 * v, c2 + x2 * v
                d0, d1, d2 = d0 + x0 * u, d1 + x1 * u, d2 + x2 * u
                e0, e1, e2 = e0 + x0 * s, e1 + x1 * s, e2 + x2 * s
            _put(out, b, i, alpha, add, a0, c0, d0, e0)
            _put(out, b + 1, i, alpha, add, a1, c1, d1, e1)
            _put(out, b + 2, i, alpha, add, a2, c2, d2, e2)
        for i in range(n4, N):
            a0 = a1 = a2 = 0.0
            for j in range(K):
                w = np.float64(W[i, j])
                a0, a1, a2 = a0 + x[b, j] * w, a1 + x[b + 1, j] * w, a2 + x[b + 2, j] * w
            for k, v in enumerate((a0, a1, a2)):
                out[b + k, i] = alpha * v + (out[b + k, i] if add else 0.0)
        b += 3
    if b + 2 <= B:
        for i in range(0, n4, 4):
            a0 = a1 = c0 = c1 = d0 = d1 = e0 = e1 = 0.0
            for j in range(K):
                w, v, u, s = _column4(W, i, j)
                x0, x1 = x[b, j], x[b + 1, j]
                a0, c0, d0, e0 = a0 + x0 * w, c0 + x0 * v, d0 + x0 * u, e0 + x0 * s
                a1, c1, d1, e1 = a1 + x1 * w, c1 + x1 * v, d1 + x1 * u, e1 + x1 * s
            _put(out, b, i, alpha, add, a0, c0, d0, e0)
            _put(out, b + 1, i, alpha, add, a1, c1, d1, e1)
        for i in range(n4, N):
            a0 = a1 = 0.0
            for j in range(K):
                w = np.float64(W[i, j])
                a0, a1 = a0 + x[b, j] * w, a1 + x[b + 1, j] * w
            out[b, i] = alpha * a0 + (out[b, i] if add else 0.0)
            out[b + 1, i] = alpha * a1 + (out[b + 1, i] if add else 0.0)
        b += 2
    while b < B:
        for i in range(0, n4, 4):
            a0 = c0 = d0 = e0 = 0.0
            for j in range(K):
                w, v, u, s = _column4(W, i, j)
                a0, c0, d0, e0 = a0 + x[b, j] * w, c0 + x[b, j] * v, d0 + x[b, j] * u, e0 + x[b, j] * s
            _put(out, b, i, alpha, add, a0, c0, d0, e0)
        for i in range(n4, N):
            a0 = 0.0
            for j in range(K):
                a0 += x[b, j] * np.float64(W[i, j])
            out[b, i] = alpha * a0 + (out[b, i] if add else 0.0)
        b += 1


@njit(cache=True)
def matrix_copies(master, scale_f, unit_f, fw_t, scale_b, unit_b, bw):
    """A weight matrix's two float32 copies from its master (K, N), in one pass: the forward's
    transposed, fw_t (N, K) = rint(master scale_f) unit_f, and the backward's, bw (K, N) =
    rint(master scale_b) unit_b (`exact.rounded`, for scales and units that are powers of two:
    exact; a forward weight is k 2^-20 and a backward one k 2^-16 with |k| <= 2^23, and float32
    holds every integer up to 2^24). The transpose goes through 8 x 8 tiles (a quarter of the
    time of torch's strided copy)."""
    K, N = master.shape
    T = 8
    k_full, n_full = K - K % T, N - N % T
    tile = np.empty((T, T), np.float32)
    for k0 in range(0, k_full, T):
        for n0 in range(0, n_full, T):
            for a in range(T):
                for c in range(T):
                    m = master[k0 + a, n0 + c]
                    tile[c, a] = np.float32(np.rint(m * scale_f) * unit_f)
                    bw[k0 + a, n0 + c] = np.float32(np.rint(m * scale_b) * unit_b)
            for c in range(T):
                for a in range(T):
                    fw_t[n0 + c, k0 + a] = tile[c, a]
    for k in range(K):  # the ragged edges
        for n in range(n_full if k < k_full else 0, N):
            m = master[k, n]
            fw_t[n, k] = np.float32(np.rint(m * scale_f) * unit_f)
            bw[k, n] = np.float32(np.rint(m * scale_b) * unit_b)


@njit(cache=True)
def round_weights(master, scale_f, unit_f, fw, scale_b, unit_b, bw):
    """The weights' rounded copies from the master (flat) in one pass: fw = rint(master scale_f)
    unit_f, and bw likewise unless it is empty (`exact.rounded`, for scales and units that are
    powers of two: exact)."""
    with_bw = bw.shape[0] > 0
    for i in range(master.shape[0]):
        m = master[i]
        fw[i] = np.rint(m * scale_f) * unit_f
        if with_bw:
            bw[i] = np.rint(m * scale_b) * unit_b


@njit(cache=True, parallel=True)
def backward_parts(parts, coded, saved, weights, grads, consts):
    """`backward` with the lanes cut into `parts` runs of lanes, one per thread (`split`): each
    lane's backward is its own (the weights' gradients, which sum over lanes, come after)."""
    B = grads[0].shape[1]
    for p in prange(parts):
        backward(coded, saved, weights, grads, consts, p * B // parts, (p + 1) * B // parts)


@njit(cache=True, parallel=True)
def matrix_copies_parts(master, scale_f, unit_f, fw_t, scale_b, unit_b, bw, parts):
    """`matrix_copies` over `parts` runs of the matrix's rows (whole tiles), one per thread (`split`)."""
    K = master.shape[0]
    tiles = K // 8
    for p in prange(parts):
        lo = tiles * p // parts * 8
        hi = tiles * (p + 1) // parts * 8 if p < parts - 1 else K
        matrix_copies(master[lo:hi], scale_f, unit_f, fw_t[:, lo:hi], scale_b, unit_b, bw[lo:hi])


@njit(cache=True, parallel=True)
def round_weights_parts(master, scale_f, unit_f, fw, scale_b, unit_b, bw, parts):
    """`round_weights` over `parts` runs of the weights, one per thread (`split`)."""
    n = master.shape[0]
    with_bw = bw.shape[0] > 0
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        round_weights(master[lo:hi], scale_f, unit_f, fw[lo:hi], scale_b, unit_b, bw[lo:hi] if with_bw else bw[:0])
