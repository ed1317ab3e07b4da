"""The coding path in exact arithmetic: the same numbers on every CPU, GPU, thread count and
library version (format 2).

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

from dyncompress.config.settings import LORA_MATRICES, MAX_BATCH, MAX_HIDDEN
from dyncompress.config.shape import ALPHABET, MLSTMShape
from dyncompress.network import step_kernels
from dyncompress.network import update_kernels as kernels
from dyncompress.network.mlstm import CarriedState, unflatten

FA = 12  # activations
A = float(1 << FA)
FS = 16  # sigmoid outputs
FW = 20  # forward weights
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


# --- the network ---------------------------------------------------------------------------


def rounded(master: torch.Tensor, bits: int, out: torch.Tensor) -> torch.Tensor:
    """Master weights (integers, units 2^-32) -> multiples of 2^-bits (values), into `out`."""
    return torch.mul(master, 2.0 ** (bits - FM), out=out).round_().mul_(2.0**-bits)


class ExactMLSTM(CarriedState):
    """The mLSTM of `mlstm.MLSTM` (same equations, same parameter layout) in exact arithmetic,
    for `batch` lanes and segments of up to `max_steps` steps.

    `master` is the int64 master copy of the weights (units 2^-32); `refresh()` rounds it into the
    forward and backward copies the kernels read (call it after every change of `master`).
    """

    def __init__(
        self,
        shape: MLSTMShape,
        master: torch.Tensor,
        batch: int,
        max_steps: int,
        sparse: int = 0,
        lora: int = 0,
        lora_on: tuple[str, ...] = (),
        seed: int = 0,
        compiled: bool | None = None,
    ) -> None:
        H, n, B = shape.hidden, max_steps, batch
        if H > MAX_HIDDEN:
            raise ValueError(f"hidden size {H} > {MAX_HIDDEN}: the exact arithmetic is bounded for at most that")
        if B * n > MAX_BATCH:
            raise ValueError(f"lanes x segment length {B * n} > {MAX_BATCH}: the exact gradient sums allow no more")
        self.shape, self.master, self.H = shape, master, H
        dev = master.device
        f64 = dict(device=dev, dtype=torch.float64)
        sig, tanh, _ = checked_tables()
        # one table: sigmoid as multiples of 2^-16, then tanh in units of 2^-12
        self.table = torch.cat([torch.from_numpy(sig) * 2.0**-FS, torch.from_numpy(tanh).double()]).to(**f64)
        # gates: columns i, f, o index the sigmoid half, u the tanh half (+0.5: round half up)
        lo = torch.cat([torch.zeros(3 * H), torch.full((H,), 2.0 * R + 1)]).to(**f64)
        self.gate_off, self.gate_lo, self.gate_hi = lo + R + 0.5, lo.expand(B, -1), (lo + 2 * R).expand(B, -1)
        self.tanh_at = 3.0 * R + 1.5  # the tanh half's index of c = 0 (+0.5: round half up)
        self.tanh_off = torch.full((B, H), self.tanh_at, **f64)
        self.tanh_lo, self.tanh_hi = 2.0 * R + 1, 4.0 * R + 1
        self.fw = torch.zeros(master.shape, **f64)
        self.bw = torch.zeros(master.shape, **f64)  # (its w_in part unused)
        self.w, self.wb = unflatten(shape, self.fw), unflatten(shape, self.bw)
        self.inputs = torch.zeros(ALPHABET, 5 * H, **f64)  # w_in's rows with b added to the W_x part
        self.w_in_size = self.inputs.numel()  # w_in comes first in the layout
        # the W_x part again as the gates' table indices before the m W_m term: 2^-2 (W_x[x] + b)
        # in units of 2^-12, plus the offsets (exact: multiples of 2^-10 below 2^16)
        self.gate_in = torch.zeros(ALPHABET, 4 * H, **f64)
        self.mx_rows = self.inputs[:, :H]  # the W_mx part (a view)
        self.grad = torch.zeros(master.shape, **f64)
        self.g = unflatten(shape, self.grad)
        self.IN = torch.zeros(n, B, dtype=torch.long, device=dev)
        self.EXM = torch.zeros(n, B, H, **f64)  # the W_mx rows each step read
        self.GZ = torch.zeros(B, 4 * H, **f64)  # the gates' table indices (as floats) of a step
        self.idx = torch.zeros(B, 4 * H, dtype=torch.long, device=dev)
        self.HM = torch.zeros(n, B, H, **f64)
        self.M = torch.zeros(n, B, H, **f64)
        self.Z = torch.zeros(n, B, 4 * H, **f64)  # i, f, o (2^-16) and u (units 2^-12)
        self.CS = torch.zeros(n + 1, B, H, **f64)
        self.TC = torch.zeros(n, B, H, **f64)
        self.HS = torch.zeros(n + 1, B, H, **f64)
        self.F = torch.zeros(n, B, ALPHABET, **f64)  # the frequencies coded at each step
        # The side weights, adapted while the network stays frozen (`side_master`, units 2^-32 like
        # the network's, with copies at 2^-20 and 2^-16 in `sf` and `sb`):
        # - sparse dynamic evaluation: h' = h + round(h[:k] M) on the first k units, M (k, k) zero at the start;
        # - LoRA: x W + round(x A) B for W in `lora_on`, A (in, r) seeded (`init_side`), B (r, out) zero.
        self.k, self.r = k, r = sparse, lora
        self.lora_on = tuple(lora_on) if r else ()
        self.side_layout = side_layout(shape, k, r, self.lora_on)
        self.side_master = init_side(self.side_layout, seed).to(dev)
        self.side_grad = torch.zeros_like(self.side_master)
        self.side_f, self.side_b = torch.zeros_like(self.side_master), torch.zeros_like(self.side_master)
        self.sf, self.sb, self.sg = (
            unflatten_side(self.side_layout, v) for v in (self.side_f, self.side_b, self.side_grad)
        )
        self.Mf, self.Mb = self.sf.get("M"), self.sb.get("M")
        self.HP = torch.zeros(n, B, k, **f64)  # h[:k] before M (what M multiplies)
        self.DHS = torch.zeros(n, B, k, **f64)  # the gradient reaching h'[:k]
        # LoRA: per matrix, each step's round(x A) (units 2^-12) and the backward's round(dy B^T) (2^-16)
        self.LP = {name: torch.zeros(n, B, r, **f64) for name in self.lora_on}
        self.LQ = {name: torch.zeros(n, B, r, **f64) for name in self.lora_on}
        self.lora_mh, self.lora_m, self.lora_out = (
            (self.sf[f"{name}.A"], self.sf[f"{name}.B"], self.LP[name]) if name in self.lora_on else None
            for name in LORA_MATRICES
        )
        # every step's views, made once (slicing them anew each step costs more than some kernels)
        Z = self.Z
        self.views = [
            (self.IN[t], self.EXM[t], self.HS[t], self.HM[t], self.M[t], Z[t].view(-1),
             Z[t, :, :H], Z[t, :, H : 2 * H], Z[t, :, 2 * H : 3 * H], Z[t, :, 3 * H :],
             self.CS[t], self.CS[t + 1], self.TC[t], self.TC[t].view(-1), self.HS[t + 1])
            for t in range(n)
        ]  # fmt: skip
        # On the CPU the step and the backward run compiled (`step_kernels`) on the same memory, as
        # numpy arrays made once; elsewhere (or if `compiled` is False) as torch's calls
        self.compiled = dev.type == "cpu" if compiled is None else compiled and dev.type == "cpu"
        if self.compiled:
            self.np_views = [
                _arrays(self.IN[t], self.EXM[t], self.HM[t], self.M[t], Z[t], self.CS[t], self.CS[t + 1], self.TC[t],
                        self.HS[t + 1], self.HS[t])
                for t in range(n)
            ]  # fmt: skip
            # The kernels read float32 copies, exact, of the table (multiples of 2^-16 in [0, 1] and
            # integers up to 2^12: 256 kB for the gates' scattered reads, not 512) and of the
            # matrices (a forward weight is k 2^-20, a backward one k 2^-16, |k| <= 2^23: float32
            # holds every integer up to 2^24; half the bytes to stream through the caches every
            # step): the forward's transposed, for the matmul kernel's dot products along W's rows
            self.w_t32 = {k: torch.zeros(self.w[k].T.shape, dtype=torch.float32) for k in FORWARD_MATRICES}
            self.wb32 = {k: torch.zeros(self.wb[k].shape, dtype=torch.float32) for k in BACKWARD_MATRICES}
            # (views of the weights' copies: `refresh` writes into them in place)
            self.np_const = _arrays(
                self.inputs, self.gate_in, self.GZ, self.gate_lo[0], self.gate_hi[0], self.table.float(),
                *self.w_t32.values(), self.w["b_out"],
            )  # fmt: skip
            self.np_back = _arrays(*self.wb32.values())
            # what `refresh` reads and writes: the master's views, the copies' arrays
            self.np_master = dict(zip(self.w, _arrays(*unflatten(shape, master).values()), strict=True))
            self.np_fw, self.np_bw = (dict(zip(self.w, _arrays(*v.values()), strict=True)) for v in (self.w, self.wb))
            self.np_t32 = dict(zip(self.w_t32, _arrays(*self.w_t32.values()), strict=True))
            self.np_b32 = dict(zip(self.wb32, _arrays(*self.wb32.values()), strict=True))
            self.np_F = self.F.numpy()
        # LoRA on W_out alone leaves the network's step as it is and adds round(h A) B to its logits,
        # and its factors' gradients need d/dlogits alone (no pass back through the steps)
        self.out_lora = self.compiled and not self.k and self.lora_on == ("w_out",)
        # without side weights, or with LoRA on W_out alone (its term in the same kernel), the step
        # runs as one compiled call on numpy arrays (`step_array`)
        self.fast = self.compiled and not self.k and (not self.lora_on or self.out_lora)
        # the LoRA factors transposed for the step's kernel (`refresh_side`); none: no rows
        self.lora_t = [np.zeros((r if self.out_lora else 0, H)), np.zeros((ALPHABET, r if self.out_lora else 0))]
        self.np_LP = self.LP["w_out"].numpy() if self.out_lora else np.zeros((n, B, 0))
        self.np_LQ = self.LQ["w_out"].numpy() if self.out_lora else None
        self.parts = 1  # runs of lanes the fast step and backward are split into, one per thread (`split`)
        self.refresh()

    def refresh(self) -> None:
        """Round the master weights into what the kernels read: w_in straight into the input table
        (`fw` leaves its w_in part unused), the rest into `fw`, and the three matrices the
        backward reads (W_mh, W_m, W_out, with the small b and b_out) into `bw`. Compiled, the
        three matrices go straight from the master to their float32 copies (`matrix_copies`), and
        `fw` and `bw` keep only b and b_out (and, with side weights, `bw` the matrices the
        backward's torch calls read). (Storing the backward's matrices transposed, for contiguous
        matmuls, costs more in rounding them than it saves.)"""
        n = self.w_in_size
        if self.compiled:  # the same values as the calls below, in one pass over the master
            (sf, uf), (sb, ub) = (2.0 ** (FW - FM), 2.0**-FW), (2.0 ** (FB - FM), 2.0**-FB)
            master, inputs, fw, bw = _arrays(self.master, self.inputs.view(-1), self.fw, self.bw)
            runs = (self.parts,) if self.parts > 1 else ()  # in runs of weights, one per thread (`split`)
            round_in = step_kernels.round_weights_parts if runs else step_kernels.round_weights
            copies = step_kernels.matrix_copies_parts if runs else step_kernels.matrix_copies
            round_in(master[:n], sf, uf, inputs, sb, ub, bw[:0], *runs)
            for k in FORWARD_MATRICES:
                copies(self.np_master[k], sf, uf, self.np_t32[k], sb, ub, self.np_b32[k], *runs)
            if self.fast:
                for k in ("b", "b_out"):
                    step_kernels.round_weights(self.np_master[k], sf, uf, self.np_fw[k], sb, ub, self.np_bw[k])
            else:
                step_kernels.round_weights(master[n:], sf, uf, fw[n:], sb, ub, bw[n:])
        else:
            rounded(self.master[:n], FW, self.inputs.view(-1))
            rounded(self.master[n:], FW, self.fw[n:])
            rounded(self.master[n:], FB, self.bw[n:])
        self.inputs[:, self.H :].add_(self.w["b"])  # |.| <= 16: exact
        torch.add(self.gate_off, self.inputs[:, self.H :], alpha=A / 4, out=self.gate_in)
        self.refresh_side()

    def refresh_side(self) -> None:
        """Round the side weights' master (sparse M, LoRA factors) into their forward and backward copies."""
        if len(self.side_master):
            rounded(self.side_master, FW, self.side_f)
            rounded(self.side_master, FB, self.side_b)
        if self.out_lora:
            a_t, b_t = self.lora_t
            np.copyto(a_t, self.sf["w_out.A"].numpy().T)
            np.copyto(b_t, self.sf["w_out.B"].numpy().T)

    def step_array(self, inputs: np.ndarray, t: int) -> np.ndarray:
        """`step` on numpy arrays where `fast` (on the CPU; no side weights, or LoRA on W_out alone): one
        compiled call."""
        x, exm, hm, m, gates, c0, c1, tc, h1, h0 = self.np_views[t]
        table_in, gate_in, gz, lo, hi, table, w_mh, w_m, w_out, b_out = self.np_const
        logits = np.empty((len(x), ALPHABET))
        parts, kernel = ((self.parts,), step_kernels.forward_parts) if self.parts > 1 else ((), step_kernels.forward)
        kernel(
            *parts, inputs, x, table_in, gate_in, h0, hm, exm, m, gz, lo, hi, table, c0, gates, c1, tc, h1, w_mh, w_m,
            w_out, b_out, logits, M_MAX * A, C_MAX * A, 2.0 ** (FI - FA), self.tanh_at, self.tanh_lo, self.tanh_hi, A,
            *self.lora_t, self.np_LP[t], P_MAX,
        )  # fmt: skip
        return logits

    def record_array(self, t: int, freqs: np.ndarray) -> None:
        """`record` where `fast`."""
        self.np_F[t] = freqs

    @torch.no_grad()
    def step(self, inputs: torch.Tensor, t: int) -> torch.Tensor:
        """Step t for every lane given the byte each saw last; returns the logits (B, 256) in
        units of 2^-12, exact multiples of 2^-20."""
        if self.fast:
            return torch.from_numpy(self.step_array(inputs.numpy(), t))
        w = self.w
        prev, exm, h0, hm, m, gates, i, f, o, u, c0, c1, tc, tc_flat, h1 = self.views[t]
        prev.copy_(inputs)
        if self.compiled:
            x, exm_, hm_, m_, gates_, c0_, c1_, tc_, h1_, h0_ = self.np_views[t]
            inputs, gate_in, gz_, lo, hi, table, w_mh, w_m, w_out, b_out = self.np_const
            step_kernels.matmul_nt(h0_, w_mh, hm_, 1.0, False)
        else:
            torch.index_select(self.mx_rows, 0, prev, out=exm)
            torch.mm(h0, w["w_mh"], out=hm)
        if self.lora_mh:  # + round(h A) B: multiples of 2^-20 below 2^33 units, summed exactly; rounded once
            fa, fb, P = self.lora_mh
            hm.addmm_(torch.mm(h0, fa, out=P[t]).round_().clamp_(-P_MAX, P_MAX), fb)
        # the gates' table indices: 2^-2 (W_x[x] + b + m W_m) (units 2^-12) plus the offsets,
        # clamped to the table and rounded half up by the truncation (all exact)
        if self.compiled:  # the same as the calls below, in one pass
            step_kernels.mult_gates_in(x, inputs, gate_in, hm_, exm_, m_, gz_, M_MAX * A)
            step_kernels.matmul_nt(m_, w_m, gz_, 2.0 ** (FI - FA), True)
            gz = self.GZ
        else:
            hm.round_()
            torch.mul(exm, hm, out=m).round_().clamp_(-M_MAX * A, M_MAX * A)
            gz = torch.index_select(self.gate_in, 0, prev, out=self.GZ)
            gz.addmm_(m, w["w_m"], alpha=2.0 ** (FI - FA))
        if self.lora_m:  # + 2^-2 round(m A) B (|m A| < 2^51 units of 2^-20: exact)
            fa, fb, P = self.lora_m
            gz.addmm_(torch.mm(m, fa, out=P[t]).round_().clamp_(-P_MAX, P_MAX), fb, alpha=2.0 ** (FI - FA))
        if self.compiled:
            step_kernels.cell(
                gz_, lo, hi, table, c0_, gates_, c1_, tc_, h1_, C_MAX * A, 2.0 ** (FI - FA), self.tanh_at,
                self.tanh_lo, self.tanh_hi,
            )  # fmt: skip
            h = h1
        else:
            self.idx.copy_(gz.clamp_(self.gate_lo, self.gate_hi))
            torch.index_select(self.table, 0, self.idx.view(-1), out=gates)
            c = torch.mul(f, c0, out=c1).addcmul_(i, u).round_().clamp_(-C_MAX * A, C_MAX * A)
            cidx = torch.add(self.tanh_off, c, alpha=2.0 ** (FI - FA)).clamp_(self.tanh_lo, self.tanh_hi).long()
            torch.index_select(self.table, 0, cidx.view(-1), out=tc_flat)
            h = torch.mul(o, tc, out=h1).round_()
        if self.k:  # h' = h + h M on the first k units (|h M| < 2^45 units of 2^-20: exact), kept in [-1, 1]
            hp = self.HP[t].copy_(h[:, : self.k])
            h[:, : self.k].add_(torch.mm(hp, self.Mf).round_()).clamp_(-A, A)
        if self.compiled:
            logits = torch.empty(h.shape[0], ALPHABET, dtype=torch.float64)
            np.multiply(b_out, A, out=logits.numpy())  # (broadcast over the lanes; exact)
            step_kernels.matmul_nt(h1_, w_out, logits.numpy(), 1.0, True)  # (h is h1)
        else:
            logits = torch.addmm(w["b_out"], h, w["w_out"], beta=A)
        if self.lora_out:  # + round(h A) B: multiples of 2^-20, |.| < 2^25 units
            fa, fb, P = self.lora_out
            logits.addmm_(torch.mm(h, fa, out=P[t]).round_().clamp_(-P_MAX, P_MAX), fb)
        return logits

    @torch.no_grad()
    def record(self, t: int, freqs: torch.Tensor) -> None:
        """Keep the frequencies coded at step t (for the backward pass)."""
        self.F[t].copy_(freqs)

    @torch.no_grad()
    def backward(self, T: int, targets: torch.Tensor, mask: torch.Tensor, weighted: bool = False) -> None:
        """Gradient of the summed code length (-log of the coded frequencies) of the first T
        steps, over the positions where `mask` (T, B) is 1, into `grad` (units 2^-16).

        Truncated BPTT as in `mlstm.MLSTM.backward`; d/dlogits = p - onehot with p the coded
        frequencies / 2^24, rounded to 2^-16.
        """
        wb, H = self.wb, self.H
        B = targets.shape[1]
        if self.out_lora:  # d/dlogits and dl B^T in one compiled call, then the factors' gradients
            dl = torch.empty(T, B, ALPHABET, dtype=torch.float64)
            step_kernels.backward_out_lora(
                self.np_F[:T], targets.numpy(), mask.numpy(), weighted, self.sb["w_out.B"].numpy(), dl.numpy(),
                self.np_LQ[:T], float(FREQ_TOTAL), 2.0 ** (G - FREQ_BITS), GRAD_MAX,
            )  # fmt: skip
            self._weight_gradients(T, dl, None, None, None)
            return
        if self.fast:  # all of it but the weights' gradients in one compiled call (`step_kernels.backward`)
            dl, dZ, dM, dMX = (torch.empty(T, B, n, dtype=torch.float64) for n in (ALPHABET, 4 * H, H, H))
            dH, dcfd, K = np.empty((T, B, H)), np.empty((T, B, H)), np.empty((T, B, 4 * H))
            runs = self.parts > 1  # (else one run of lanes: all of them)
            kernel, parts, whole = (
                (step_kernels.backward_parts, (self.parts,), ()) if runs else (step_kernels.backward, (), (0, B))
            )
            kernel(
                *parts, self.np_F[:T], targets.numpy(), mask.numpy(), weighted,
                *_arrays(self.Z[:T], self.TC[:T], self.CS[:T], self.EXM[:T]), *self.np_back, dl.numpy(), dH, dcfd,
                K, *_arrays(dZ, dM, dMX), float(FREQ_TOTAL), 2.0 ** (G - FREQ_BITS), A, 2.0**FS, GRAD_MAX, DZ_MAX,
                *whole,
            )  # fmt: skip
            self._weight_gradients(T, dl, dZ, dM, dMX)
            return
        Z, TC, CS = self.Z[:T], self.TC[:T], self.CS[:T]
        i, f, o, u = Z[..., :H], Z[..., H : 2 * H], Z[..., 2 * H : 3 * H], Z[..., 3 * H :]
        onehot = torch.nn.functional.one_hot(targets, ALPHABET).to(torch.float64)
        dl = self.F[:T].sub(onehot, alpha=FREQ_TOTAL).mul_(2.0 ** (G - FREQ_BITS)).round_()
        # mask: 0 / 1, or a lane's TLM weight (a multiple of 2^-8 in [0, 1]): the product rounded
        dl.mul_(mask.unsqueeze(2))  # units 2^-16, |dl| <= 2^16, sum |dl| <= 2^17 per position
        if weighted:
            dl.round_()
        dH = torch.matmul(dl, wb["w_out"].T)  # (T, B, H)
        sb, lora = self.sb, self.lora_on
        if "w_out" in lora:  # + round(dl B^T) A^T (|dl B^T| <= 2^36, |q A^T| <= 2^41 r ulps of 2^-16: exact)
            q_out = torch.matmul(dl, sb["w_out.B"].T, out=self.LQ["w_out"][:T]).round_().clamp_(-GRAD_MAX, GRAD_MAX)
            dH.add_(torch.matmul(q_out, sb["w_out.A"].T))
        dH.round_()
        # dc/dh through h = o tanh(c), as a multiple of 2^-16
        dcfd = (o * (A * A - TC * TC)).mul_(2.0 ** (FS - 2 * FA)).round_().mul_(2.0**-FS)
        # what dc, dc, dh, dc multiply for the pre-activations i, f, o, u (multiples of 2^-16)
        slope = Z[..., : 3 * H] * (1 - Z[..., : 3 * H])  # s (1 - s), multiples of 2^-32
        K = torch.cat([u, CS, TC], dim=2).mul_(slope).mul_(2.0 ** (FS - FA)).round_()
        Ku = (A * A - u * u).mul_(2.0**-FA).mul_(i).mul_(2.0 ** (FS - FA)).round_()
        K = torch.cat([K, Ku], dim=2).mul_(2.0**-FS)
        exm = self.EXM[:T]

        dZ = torch.empty(T, B, 4 * H, dtype=torch.float64, device=dl.device)
        dMX = torch.empty(T, B, H, dtype=torch.float64, device=dl.device)
        dM = torch.empty(T, B, H, dtype=torch.float64, device=dl.device)
        self._backward_calls(T, dH, dcfd, K, dZ, dM, dMX, exm, f)
        self._weight_gradients(T, dl, dZ, dM, dMX)

    def _backward_calls(self, T, dH, dcfd, K, dZ, dM, dMX, exm, f) -> None:
        """Through the steps, last to first: the gates' gradients dZ, dM (m's) and dMX (the mult's)."""
        B, H, dev = dH.shape[1], self.H, dH.device
        sb, lora, k = self.sb, self.lora_on, self.k
        dh_next = torch.zeros(B, H, dtype=torch.float64, device=dev)
        dc_next = torch.zeros(B, H, dtype=torch.float64, device=dev)
        w_m_t, w_mh_t = self.wb["w_m"].T, self.wb["w_mh"].T
        m_t = self.Mb.T if k else None
        # LoRA on W_m, W_mh: dm += round(dZ B^T) A^T, dh += round(dmx B^T) A^T (the q kept for A's gradient)
        lm, lmh = ("w_m" in lora, "w_mh" in lora)
        if lm:
            bm_t, am_t = sb["w_m.B"].T, sb["w_m.A"].T
        if lmh:
            bmh_t, amh_t = sb["w_mh.B"].T, sb["w_mh.A"].T
        none = torch.zeros(T, B, 0, dtype=torch.float64, device=dev)
        qm, qmh = (self.LQ[n][:T] if n in lora else none for n in ("w_m", "w_mh"))
        views = (dH, dcfd, K, dZ, dM, exm, dMX, f, self.DHS[:T], qm, qmh)
        steps = zip(*(x.unbind(0) for x in views), strict=True)
        for dh_t, dcfd_t, K_t, dZ_t, dM_t, exm_t, dMX_t, f_t, dhs_t, qm_t, qmh_t in reversed(list(steps)):
            dh = dh_t.add_(dh_next).clamp_(-GRAD_MAX, GRAD_MAX)
            if k:  # dh reaches h'; through h' = h + h[:k] M it reaches h (|dh' M^T| < 2^51 units 2^-16: exact)
                dhs_t.copy_(dh[:, :k])
                dh[:, :k].add_(torch.mm(dhs_t, m_t).round_()).clamp_(-GRAD_MAX, GRAD_MAX)
            dc = torch.mul(dh, dcfd_t).round_().add_(dc_next).clamp_(-GRAD_MAX, GRAD_MAX)
            torch.mul(torch.cat([dc, dc, dh, dc], dim=1), K_t, out=dZ_t).round_().clamp_(-DZ_MAX, DZ_MAX)
            dm = torch.mm(dZ_t, w_m_t, out=dM_t)
            if lm:  # |dZ B^T| < 2^51 ulps of 2^-16; |q A^T| <= 2^45: the sum below 2^52, exact
                dm.addmm_(torch.mm(dZ_t, bm_t, out=qm_t).round_().clamp_(-DZ_MAX, DZ_MAX), am_t)
            dm.round_().clamp_(-GRAD_MAX, GRAD_MAX)
            dmx = torch.mul(dm, exm_t, out=dMX_t).round_().clamp_(-GRAD_MAX, GRAD_MAX)
            dh_next = torch.mm(dmx, w_mh_t)
            if lmh:  # likewise (|dmx B^T| < 2^51, |q A^T| <= 2^47)
                dh_next.addmm_(torch.mm(dmx, bmh_t, out=qmh_t).round_().clamp_(-GRAD_MAX, GRAD_MAX), amh_t)
            dh_next.round_()
            dc_next = torch.mul(dc, f_t).round_()

    def _weight_gradients(self, T, dl, dZ, dM, dMX) -> None:
        """The weights' gradients: one matmul each over all T*B positions, rescaled to units of 2^-16."""
        B, k, lora, g = dl.shape[1], self.k, self.lora_on, self.g
        flat = lambda x: x.reshape(T * B, -1)  # noqa: E731
        if k:  # the network is frozen: M's gradient alone (|h dh'| <= 2^34, summed over <= 2^14: exact)
            torch.mm(flat(self.HP[:T]).T, flat(self.DHS[:T]), out=self.sg["M"]).mul_(2.0**-FA).round_()
        if lora:  # the network is frozen: the factors' gradients, B's = P^T dy and A's = x^T q, over all
            # positions (<= 2^14): |P| <= 2^16 with |dl|, |dMX|, |dZ| <= 2^16, 2^22, 2^20; |x| <= 2^12 (h),
            # 2^18 (m) with |q| <= 2^22, 2^22, 2^20: every sum below 2^53
            ys = {"w_out": (dl, self.HS[1 : T + 1]), "w_mh": (dMX, self.HS[:T]), "w_m": (dZ, self.M[:T])}
            sg = self.sg
            for name in lora:
                dy, x = ys[name]
                torch.mm(flat(self.LP[name][:T]).T, flat(dy), out=sg[f"{name}.B"]).mul_(2.0**-FA).round_()
                torch.mm(flat(x).T, flat(self.LQ[name][:T]), out=sg[f"{name}.A"]).mul_(2.0**-FA).round_()
        if k or lora:
            return
        torch.mm(flat(self.HS[1 : T + 1]).T, flat(dl), out=g["w_out"]).mul_(2.0**-FA).round_()
        torch.sum(flat(dl), dim=0, out=g["b_out"])
        torch.mm(flat(self.M[:T]).T, flat(dZ), out=g["w_m"]).mul_(2.0**-FA).round_()
        torch.sum(flat(dZ), dim=0, out=g["b"])
        torch.mm(flat(self.HS[:T]).T, flat(dMX), out=g["w_mh"]).mul_(2.0**-FA).round_()
        dEX = torch.cat([dM.mul(self.HM[:T]).mul_(2.0**-FA).round_(), dZ], dim=2)  # (T, B, 5H)
        g["w_in"].zero_().index_add_(0, self.IN[:T].reshape(-1), flat(dEX))


def side_layout(shape: MLSTMShape, sparse: int, lora: int, lora_on: tuple[str, ...]) -> list[tuple[str, tuple]]:
    """The side weights' layout: sparse's M (k, k), then per LoRA matrix A (in, r) and B (r, out)."""
    H = shape.hidden
    dims = {"w_mh": (H, H), "w_m": (H, 4 * H), "w_out": (H, ALPHABET)}
    layout = [("M", (sparse, sparse))] if sparse else []
    for name in LORA_MATRICES:
        if name in lora_on and lora:
            layout += [(f"{name}.A", (dims[name][0], lora)), (f"{name}.B", (lora, dims[name][1]))]
    return layout


def unflatten_side(layout: list[tuple[str, tuple]], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    views, pos = {}, 0
    for name, dims in layout:
        n = math.prod(dims)
        views[name] = flat[pos : pos + n].view(dims)
        pos += n
    return views


def init_side(layout: list[tuple[str, tuple]], seed: int) -> torch.Tensor:
    """The side weights' start (units 2^-32), with integers only: M and every B zero (so the model
    starts as trained); every LoRA A uniform in +-sqrt(3 / in) (unit variance over its fan-in) from
    numpy's PCG64 seeded with (seed, 1), the same stream on every platform."""
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    parts = []
    for name, dims in layout:
        n = math.prod(dims)
        if name.endswith(".A"):
            a = math.isqrt(3 * (1 << (2 * FM)) // dims[0])  # sqrt(3 / in) in units of 2^-32
            parts.append(rng.integers(-a, a, size=n, endpoint=True, dtype=np.int64))
        else:
            parts.append(np.zeros(n, dtype=np.int64))
    return torch.from_numpy(np.concatenate(parts or [np.zeros(0, dtype=np.int64)]).astype(np.float64))


def to_master(theta: torch.Tensor) -> torch.Tensor:
    """Float weights -> master weights (float64 integers in units of 2^-32, |w| <= 8). Exact
    arithmetic on the float32 values (a power-of-two scaling and a rounding), done on the CPU,
    so every machine starts from the same integers."""
    limit = W_MAX * 2.0**FM
    return theta.detach().cpu().double().mul(2.0**FM).round_().clamp_(-limit, limit)


def init_master(shape: MLSTMShape, seed: int) -> torch.Tensor:
    """Online mode's seeded starting weights, made with integers only (torch.randn's floats differ
    between CPU kernels): each weight is the sum of four uniform 16-bit integers from numpy's PCG64
    (the same stream on every platform), centred and scaled to unit variance (Irwin-Hall, close to
    normal), times 1 / sqrt(fan-in) as in `mlstm.init_params`; forget-gate biases start at 1."""
    rng = np.random.Generator(np.random.PCG64(seed))
    H, parts = shape.hidden, []
    for name, dims in shape.layout():
        n = math.prod(dims)
        if name in ("b", "b_out"):
            w = np.zeros(n, dtype=np.int64)
            if name == "b":
                w[H : 2 * H] = 1 << FM
        else:
            u = rng.integers(0, 1 << 16, size=(n, 4), dtype=np.int64).sum(axis=1) * 2 - 4 * ((1 << 16) - 1)
            # u / 2 has variance 4 (2^32 - 1) / 12: unit variance is u / 2 * sqrt(3) / 2^16
            fan_in = 1 if name == "w_in" else dims[0]
            k = math.isqrt(3 * (1 << (2 * (FM - 17 + 24))) // fan_in)  # sqrt(3 / fan_in) 2^(FM-17), in 2^-24
            w = (u * k + (1 << 23)) >> 24  # |u| < 2^18, k < 2^40: below 2^58
        parts.append(w)
    return torch.from_numpy(np.concatenate(parts).astype(np.float64))


# --- the update rules ------------------------------------------------------------------------


def significant(x: float | Fraction, bits: int) -> float:
    """`x` >= 0 rounded down to `bits` significant bits: a float that holds it exactly."""
    x = Fraction(x)
    if x <= 0:
        return 0.0
    e = x.numerator.bit_length() - x.denominator.bit_length()  # 2^e <= x < 2^(e+1), give or take one
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    unit = Fraction(2) ** (e + 1 - bits)
    return float(math.floor(x / unit) * unit)


def floor_sqrt_(v: torch.Tensor) -> torch.Tensor:
    """floor(sqrt(v)) for float64 integers 0 <= v < 2^52, exactly, whatever the library's square root.

    The root comes from `sqrt`, then is corrected by exact integer tests: r + 1 while (r + 1)^2 <= v,
    r - 1 while r^2 > v (every square below 2^53, so exact), twice each way, so any root within 1.5
    of the truth (its floor within 2) floors right. A correctly rounded square root needs no
    correction, but torch's CPU `sqrt` is not always one: in 1 to 3 of 80-120 fresh processes on a
    loaded machine it gave 32159.99... for the root of 32160^2 (in 129 of 54,656 entries, the first
    call only), so the self-test of the files made there failed. Where
    the root was right nothing changes: the bits are those of format 2 as before."""
    r = v.sqrt().floor_()
    for _ in range(2):
        r.add_((torch.add(r, 1.0).square_() <= v).to(r.dtype))
        r.sub_((torch.square(r) > v).to(r.dtype))
    return r


def floor_div_(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """floor(num / den) for float64 integers |num| < 2^52, den >= 1, exactly, whatever the
    library's division: an IEEE division is correctly rounded, and a quotient within 1 / den of
    an integer n would need |n| den >= 2^53 to round onto it; the quotient is still checked, as
    the square root in `floor_sqrt_` is, by exact products (|q den| <= |num| + 3 den < 2^53):
    q - 1 while q den > num, q + 1 while (q + 1) den <= num, twice each way."""
    q = torch.div(num, den).floor_()
    for _ in range(2):
        q.sub_((torch.mul(q, den) > num).to(q.dtype))
        q.add_((torch.add(q, 1.0).mul_(den) <= num).to(q.dtype))
    return q


# The bias corrections' powers beta1^t and beta2^t are exact fractions, which grow by 53 bits a step
# (at 20,000 segments a step cost 2 ms in them, and rising). Below these bounds they no longer change
# a bit of the step, so they stop there (`ExactAdapter._next_powers`):
# - beta2^t = p: int((1 - p) 2^60) is 2^60 - 1 for every 0 < p < 2^-60;
# - beta1^t = p: floor(K / (1 - p)), with K = lr sqrt_c2 2^32 a multiple of 2^-1072 (lr a double,
#   sqrt_c2 a multiple of 2^-30), is floor(K) for every 0 < p < 2^-1120 where K < 2^26 (K p / (1 - p)
#   < 2^-1093 is less than K's distance to the next integer above, at least 2^-1072), and the step
#   is capped at 2^26 - 1 where K is larger.
POW_SETTLED = (Fraction(1, 1 << 1120), Fraction(1, 1 << 64))


class ExactAdapter:
    """The update rules of `adapt.Adapter` on the master weights (float64 integers, units 2^-32),
    every step exact or a single IEEE operation (correctly rounded, hence the same everywhere).

    Per segment, the summed gradient g (units 2^-16, |g| <= 2^30) is clipped to a norm of `clip`
    (the norm from g rounded to 14 significant bits, summed exactly) and divided by the byte
    count, as one scalar c with 11 significant bits. Then, with products that stay below 2^53:

    - sgd:        theta -= round(g * c lr)                     (c lr: 22 significant bits)
    - rms:        with MS_g: theta -= round(g * R_i * c), R_i = lr / (sqrt(MS_g,i) + eps) to 12
                  significant bits (computed once by IEEE square root and division, correctly
                  rounded on every platform). Without: RMSprop / Adam on the stream, in units of
                  2^-28: v = round(v b2) + round(g^2 (1 - b2)), rms = floor(sqrt(v)) and
                  step = floor(lr' m / (rms + eps')), both exact (`floor_sqrt_`, `floor_div_`),
                  with Adam's bias corrections in lr' and eps' (exact fractions).
    - rms-decay:  the rms step, then theta += round((theta0 - theta) * D_i), D_i = decay * RMS_i /
                  mean(RMS) at most 1 (RMS_i to 10 significant bits, the factor to 6).

    The weights stay within |w| <= 8.
    """

    G_MAX = float(1 << 30)
    MAX_PARAMS = 1 << 23  # the clip filter's bound (below) holds for fewer (hidden 1024: 6.8 M)

    def __init__(self, settings, master: torch.Tensor, ms: torch.Tensor | None, theta0: torch.Tensor) -> None:
        if master.numel() >= self.MAX_PARAMS:
            raise ValueError(f"{master.numel()} weights: the exact update is bounded for fewer than 2^23")
        self.s, self.master, self.theta0 = settings, master, theta0
        self.limit = float(W_MAX << FM)
        self.R = self.D = None
        self.work = torch.empty_like(master)  # scratch (a fresh vector per step costs page faults)
        self.compiled = master.device.type == "cpu"  # the update as compiled passes (`update_kernels`)
        self._rc, self._rates_for = None, None  # R_i c, and the c it was made for
        self.parts = 1  # runs of weights the compiled passes are split into, one per thread (`split`)
        dev = master.device
        if ms is not None and settings.rule in ("rms", "rms-decay"):
            rms = np.sqrt(ms.detach().cpu().numpy().astype(np.float64))
            r = settings.lr / (rms + settings.eps)  # IEEE: correctly rounded
            self.R = torch.from_numpy(_significant_array(np.minimum(r, 64.0), 12)).to(dev)
            if settings.rule == "rms-decay" and settings.decay > 0:
                rms_int = np.floor(rms * 2.0**40)  # exact scaling; below 2^53
                self.D = self._decay_rates(torch.from_numpy(rms_int)).to(dev)
        # the compiled step reads R and D as float32 where that is exact (it is: 12 and 16
        # significant bits, in float32's range): half the bytes to stream
        self._R32, self._D32 = (
            None if x is None or not self.compiled else _float32_if_exact(x) for x in (self.R, self.D)
        )
        self.reset()

    def _decay_rates(self, rms: torch.Tensor) -> torch.Tensor:
        """D_i = min(decay * rms_i / mean(rms), 1) for float64 integers rms_i >= 0 (< 2^49 in sum)."""
        top = float(rms.max())
        if top == 0:
            return torch.zeros_like(rms)
        shift = max(0, int(top).bit_length() - 10)
        rq = torch.mul(rms, 2.0**-shift).floor_()  # 10 significant bits
        total = int(rq.sum())  # exact: integers below 2^53
        if total == 0:
            return torch.zeros_like(rms)
        scale = significant(Fraction(self.s.decay) * len(rq) / total, 6)
        return rq.mul_(scale).clamp_(max=1.0)

    def reset(self) -> None:
        self.steps = 0
        self.v = self.m = self._rms = None
        self.b1_pow = self.b2_pow = Fraction(1)

    def state_dict(self) -> dict:
        if self.v is None:
            return {}
        state = {"step": torch.tensor(self.steps), "v": self.v.clone()}
        if self.m is not None:
            state["m"] = self.m.clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.reset()
        if state:
            self.v = state["v"].clone()
            self.m = state["m"].clone() if "m" in state else None
            self.steps = int(state["step"])
            for _ in range(self.steps):
                self._next_powers()
                if self.b1_pow < POW_SETTLED[0] and self.b2_pow < POW_SETTLED[1]:
                    break  # (settled, or 0: no further step changes them)

    def _next_powers(self) -> None:
        """beta1^t and beta2^t one step on, exact, until each is settled (`POW_SETTLED`)."""
        s = self.s
        if not 0 < self.b1_pow < POW_SETTLED[0]:
            self.b1_pow *= Fraction(s.beta1)
        if not 0 < self.b2_pow < POW_SETTLED[1]:
            self.b2_pow *= Fraction(s.beta2)

    @torch.no_grad()
    def update(self, grad: torch.Tensor, count: int, gain: int = 1) -> None:
        """One step with the summed gradient `grad` (float64 integers, units 2^-16) of `count` bytes,
        times `gain` (TLM: the weights' scale)."""
        s = self.s
        compiled, squares = self.compiled, None  # squares: sum g^2, a float (the clip's filter)
        if compiled:  # max |g| and sum g^2 in one pass
            stats = kernels.gradient_stats_parts if self.parts > 1 else kernels.gradient_stats
            big, squares = stats(grad.numpy(), *((self.parts,) if self.parts > 1 else ()))
        else:
            lo, hi = torch.aminmax(grad)
            big = max(float(hi), -float(lo))  # max |g|: exact
        if big == 0:
            return
        g = grad
        if big > self.G_MAX:
            g, big, squares = grad.clamp_(-self.G_MAX, self.G_MAX), self.G_MAX, None
        scale = self._scale(g, big, Fraction(gain, count), squares) * (1 << (FM - G))  # units 2^-16 -> 2^-32
        theta, work = self.master, self.work
        decay = s.rule == "rms-decay" and s.decay > 0
        if s.rule == "sgd":
            theta.sub_(torch.mul(g, significant(scale * Fraction(s.lr), 22), out=work).round_())
        elif self.R is not None:
            c = significant(scale, 11)
            if compiled:  # one pass: the step, the pull and the bound (`update_kernels`)
                R, D = self._R32, self._D32 if decay else self._R32
                step, parts = (kernels.rate_step_parts, (self.parts,)) if self.parts > 1 else (kernels.rate_step, ())
                step(*_arrays(theta, g), R, c, self.theta0.numpy(), D, decay, self.limit, *parts)
                return
            theta.sub_(torch.mul(g, self._rates(c), out=work).round_())
        else:
            self._stream_step(g, significant(scale / 16, 22))
        D = (self.D if self.D is not None else self._decay_rates(self._rms)) if decay else None
        if compiled:
            kernels.settle(*_arrays(theta, self.theta0, D if decay else theta), decay, self.limit)
            return
        if decay:
            theta.add_(torch.sub(self.theta0, theta, out=work).mul_(D).round_())
        theta.clamp_(-self.limit, self.limit)

    # The clip's norm (below) comes from q = round(g 2^-shift), max |q| in [2^13, 2^14]: it is
    # within sqrt(n) 2^(shift-1) of |g|, and |g| >= max |g| >= 2^(shift+13), so within
    # sqrt(n) / 2^14 < 18 % of |g| for n < MAX_PARAMS = 2^23 parameters. So when
    # the float norm of g (a filter only, off by far less than 1e-6) is below CLEAR = 0.8 of the
    # limit, the exact norm is below 0.8 * 1.18 < 1 of it and the clip cannot apply: the exact
    # norm is computed only when it might.
    CLEAR = 0.8

    def _scale(self, g: torch.Tensor, big: float, per: Fraction, squares: float | None = None) -> Fraction:
        """`per` (1 / count, times a gain), or the clip's smaller factor: clip / |g| (from the exact
        norm below). `squares`: sum g^2 where already known (a float)."""
        s = self.s
        scale = per
        if s.clip <= 0:
            return scale
        limit = s.clip / float(per) * (1 << G)  # in units of 2^-16
        if squares is None:
            squares = float(torch.dot(g, g))
        if math.sqrt(squares) < self.CLEAR * limit:  # (float: only a filter)
            return scale
        shift = int(big).bit_length() - 14
        if self.compiled:  # q = round(g 2^-shift), |q| <= 2^14: q.q sums below 2^51, exact
            if self.parts > 1:
                qq = kernels.rounded_squares_parts(g.numpy(), 2.0**-shift, self.parts)
            else:
                qq = kernels.rounded_squares(g.numpy(), 2.0**-shift)
        else:
            q = torch.mul(g, 2.0**-shift, out=self.work).round_()
            qq = torch.dot(q, q)
        # the norm of the summed gradient: sqrt(q.q) 2^shift in units of 2^-16
        norm = Fraction(math.isqrt(int(qq))) * Fraction(2) ** shift / (1 << G)
        if norm * per > Fraction(s.clip):
            scale = Fraction(s.clip) / norm
        return scale

    def _rates(self, c: float) -> torch.Tensor:
        """R_i c (exact: 12 and 11 significant bits), kept while c repeats (it usually does)."""
        if self._rates_for != c:
            self._rc = torch.mul(self.R, c, out=self._rc if self._rc is not None else torch.empty_like(self.R))
            self._rates_for = c
        return self._rc

    def _stream_step(self, g: torch.Tensor, c: float) -> None:
        """RMSprop / Adam on statistics gathered from the stream; the mean gradient is round(g c),
        units 2^-28. On the CPU one compiled pass (`update_kernels`), elsewhere torch's calls: the
        same integers either way."""
        s = self.s
        if self.v is None:
            self.v = torch.zeros_like(g)
            if s.rule == "rms" and s.beta1 > 0:
                self.m = torch.zeros_like(g)
        if self._rms is None:
            self._rms = torch.zeros_like(g)
        self.steps += 1
        self._next_powers()
        lr, eps = self._corrections()
        if self.compiled:
            m = self.m if self.m is not None else self.v[:1]
            arrays = _arrays(self.master, self.v, m, self._rms, g)
            kernels.stream_step(*arrays, c, s.beta2, 1 - s.beta2, s.beta1, 1 - s.beta1, self.m is not None, lr, eps)
        else:
            self._stream_step_torch(torch.mul(g, c, out=self.work).round_(), lr, eps)

    def _corrections(self) -> tuple[float, float]:
        """The stream step's rate and epsilon with Adam's bias corrections at this step:
        step = lr sqrt(c2) / c1 * m / (rms + eps sqrt(c2)), c = 1 - beta^t (units 2^-32, 2^-28), the
        rate times H / (H + t) with a half-life of H = rate_half steps (an exact fraction, floored)."""
        s = self.s
        c1 = 1 - self.b1_pow if self.m is not None else Fraction(1)
        sqrt_c2 = Fraction(math.isqrt(int((1 - self.b2_pow) * (1 << 60))), 1 << 30)
        lr = Fraction(s.lr) * sqrt_c2 / c1 * (1 << FM)  # step in units 2^-32: < 2^26
        if s.rate_half:  # the rate's decay: lr H / (H + t) at the t-th step
            lr = lr * s.rate_half / (s.rate_half + self.steps)
        lr = math.floor(lr)
        lr = float(min(lr, (1 << 26) - 1))
        eps = float(max(1, math.floor(Fraction(s.eps) * sqrt_c2 * (1 << 28))))
        return lr, eps

    def _stream_step_torch(self, gm: torch.Tensor, lr: float, eps: float) -> None:
        """`_stream_step` in torch's calls (any device), gm = round(g c)."""
        s = self.s
        gm = gm.clamp_(-float(1 << 26), float(1 << 26))  # |mean gradient| <= 1/4 per parameter
        self.v.mul_(s.beta2).round_().add_(torch.mul(gm, gm).mul_(1 - s.beta2).round_())  # < 2^52
        num = gm
        if self.m is not None:
            self.m.mul_(s.beta1).round_().add_(torch.mul(gm, 1 - s.beta1).round_())
            num = self.m
        self._rms = rms = floor_sqrt_(self.v)  # units 2^-28, < 2^26
        # |num * lr| <= 2^26 * 2^26: exact
        self.master.sub_(floor_div_(num.mul(lr), rms.add(eps)))


def _arrays(*tensors: torch.Tensor) -> list[np.ndarray]:
    """CPU tensors as numpy arrays on the same memory, strides and all (the compiled kernels take any)."""
    return [t.detach().numpy() for t in tensors]


def _float32_if_exact(x: torch.Tensor) -> np.ndarray:
    """x as a float32 array where every value converts exactly, else as it is (float64)."""
    x32 = x.numpy().astype(np.float32)
    return x32 if np.array_equal(x32.astype(np.float64), x.numpy()) else x.numpy()


def _significant_array(x: np.ndarray, bits: int) -> np.ndarray:
    """Each positive float64 rounded down to `bits` significant bits (exact: frexp and scaling)."""
    mant, exp = np.frexp(x)
    return np.ldexp(np.floor(np.ldexp(mant, bits)), exp - bits)
