"""The network in exact arithmetic (`ExactMLSTM`: the step, the recorded forward, the backward
through a segment and the weight gradients), its master weights and the side weights that sparse
and LoRA adaptation adapt. The number formats and tables: `fixed`; the update rules: `exact_adapt`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from dyncompress.config.settings import LORA_MATRICES, MAX_BATCH, MAX_HIDDEN
from dyncompress.config.shape import ALPHABET, MLSTMShape
from dyncompress.network import dot16, step_kernels
from dyncompress.network.fixed import (
    BACKWARD_MATRICES,
    C_MAX,
    DZ_MAX,
    FA,
    FB,
    FI,
    FM,
    FORWARD_MATRICES,
    FREQ_BITS,
    FREQ_TOTAL,
    FS,
    FW,
    FW16,
    GRAD_MAX,
    M16,
    M_MAX,
    P_MAX,
    W_MAX,
    A,
    G,
    R,
    checked_tables,
    numpy_views,
)
from dyncompress.network.mlstm import CarriedState, unflatten

# the compiled roundings' (scale, unit) of the forward's and the backward's copies: rint(master scale) unit
# is `rounded(master, FW)` and `rounded(master, FB)` (`step_kernels.round_weights`, `matrix_copies`)
COPY_SCALES = ((2.0 ** (FW - FM), 2.0**-FW), (2.0 ** (FB - FM), 2.0**-FB))
# the same for the forward copies of the matrices with step16
COPY_SCALE16 = (2.0 ** (FW16 - FM), 2.0**-FW16)
X16_MAX = int(max(A, M_MAX * A / 2**M16))  # |h| and |m / m_unit| at most: what a row of weights must fit (`dot16.fits`)
NO16 = np.zeros((0, 0), dtype=np.int16)  # no 16-bit copy (`step_kernels.forward`, `mult_gates_in`)


def rounded(master: torch.Tensor, bits: int, out: torch.Tensor) -> torch.Tensor:
    """Master weights (integers, units 2^-32) -> multiples of 2^-bits (values), into `out`."""
    return torch.mul(master, 2.0 ** (bits - FM), out=out).round_().mul_(2.0**-bits)


class ExactMLSTM(CarriedState):
    """The mLSTM of `mlstm.MLSTM` (same equations, same parameter layout) in exact arithmetic,
    for `batch` lanes and segments of up to `max_steps` steps.

    `master` is the int64 master copy of the weights (units 2^-32); `refresh()` rounds it into the
    forward and backward copies the kernels read (call it after every change of `master`).

    `step16` (for matrices that stay as trained while coding): the forward copies of W_mh, W_m and W_out
    at multiples of 2^-10 and m at multiples of 2^-6, so that the step's products are products of
    16-bit integers (`dot16`; on the CPU, where they fit). Still finer than the trained models need
    (what they code at each resolution: docs/lab/notebook.md).
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
        step16: bool = False,
    ) -> None:
        H, n, B = shape.hidden, max_steps, batch
        if H > MAX_HIDDEN:
            raise ValueError(f"hidden size {H} > {MAX_HIDDEN}: the exact arithmetic is bounded for at most that")
        if B * n > MAX_BATCH:
            raise ValueError(f"lanes x segment length {B * n} > {MAX_BATCH}: the exact gradient sums allow no more")
        self.shape, self.master, self.H = shape, master, H
        self.step16 = step16
        self.m_unit = 2.0**M16 if step16 else 1.0  # m's rounding unit (in units of 2^-12)
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
                numpy_views(self.IN[t], self.EXM[t], self.HM[t], self.M[t], Z[t], self.CS[t], self.CS[t + 1],
                            self.TC[t], self.HS[t + 1], self.HS[t])
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
            self.np_const = numpy_views(
                self.inputs, self.gate_in, self.GZ, self.gate_lo[0], self.gate_hi[0], self.table.float(),
                *self.w_t32.values(), self.w["b_out"],
            )  # fmt: skip
            self.np_back = numpy_views(*self.wb32.values())
            # step16 on a CPU with the instruction: the forward matrices as int16 too, for `dot16`
            # (`refresh` says whether they fit it)
            narrow = step16 and dot16.HAVE_PMADDWD and H % dot16.WIDTH == 0
            self.w16 = {k: np.zeros(v.shape if narrow else (0, 0), dtype=np.int16) for k, v in self.w_t32.items()}
            self.use16 = False
            # what `refresh` reads and writes: the master's views, the copies' arrays
            self.np_master = dict(zip(self.w, numpy_views(*unflatten(shape, master).values()), strict=True))
            self.np_fw, self.np_bw = (
                dict(zip(self.w, numpy_views(*v.values()), strict=True)) for v in (self.w, self.wb)
            )
            self.np_t32 = dict(zip(self.w_t32, numpy_views(*self.w_t32.values()), strict=True))
            self.np_b32 = dict(zip(self.wb32, numpy_views(*self.wb32.values()), strict=True))
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
            (sf, uf), (sb, ub) = COPY_SCALES
            master, inputs, fw, bw = numpy_views(self.master, self.inputs.view(-1), self.fw, self.bw)
            runs = (self.parts,) if self.parts > 1 else ()  # in runs of weights, one per thread (`split`)
            round_in = step_kernels.round_weights_parts if runs else step_kernels.round_weights
            copies = step_kernels.matrix_copies_parts if runs else step_kernels.matrix_copies
            round_in(master[:n], sf, uf, inputs, sb, ub, bw[:0], *runs)
            scale16, unit16 = COPY_SCALE16 if self.step16 else (sf, uf)
            for k in FORWARD_MATRICES:
                copies(self.np_master[k], scale16, unit16, self.np_t32[k], sb, ub, self.np_b32[k], *runs)
            fits = True
            for k, w16 in self.w16.items():  # (in the integers of 2^-10; exact)
                if len(w16):
                    np.multiply(self.np_t32[k], 2.0**FW16, out=w16, casting="unsafe")
                    fits = fits and dot16.fits(w16, X16_MAX)
            use16 = fits and len(self.w16["w_m"]) > 0
            if use16 != self.use16:
                self.use16 = use16
                for made in ("step_records", "scratch16"):  # (made again for the copies they now use)
                    self.__dict__.pop(made, None)
            if self.fast:
                for k in ("b", "b_out"):
                    step_kernels.round_weights(self.np_master[k], sf, uf, self.np_fw[k], sb, ub, self.np_bw[k])
            else:
                step_kernels.round_weights(master[n:], sf, uf, fw[n:], sb, ub, bw[n:])
        else:
            rounded(self.master[:n], FW, self.inputs.view(-1))
            rounded(self.master[n:], FW, self.fw[n:])
            rounded(self.master[n:], FB, self.bw[n:])
            if self.step16:
                master = unflatten(self.shape, self.master)
                for k in FORWARD_MATRICES:
                    rounded(master[k], FW16, self.w[k])
        self.inputs[:, self.H :].add_(self.w["b"])  # |.| <= 16: exact
        torch.add(self.gate_off, self.inputs[:, self.H :], alpha=A / 4, out=self.gate_in)
        self.refresh_side()

    def refresh_side(self) -> None:
        """Round the side weights' master (sparse M, LoRA factors) into their forward and backward copies."""
        if len(self.side_master) and self.compiled:  # both copies in one compiled pass
            (sf, uf), (sb, ub) = COPY_SCALES
            master, fw, bw = numpy_views(self.side_master, self.side_f, self.side_b)
            step_kernels.round_weights(master, sf, uf, fw, sb, ub, bw)
        elif len(self.side_master):
            rounded(self.side_master, FW, self.side_f)
            rounded(self.side_master, FB, self.side_b)
        if self.out_lora:
            a_t, b_t = self.lora_t
            np.copyto(a_t, self.sf["w_out.A"].numpy().T)
            np.copyto(b_t, self.sf["w_out.B"].numpy().T)

    def step_array(self, inputs: np.ndarray, t: int) -> np.ndarray:
        """`step` on numpy arrays where `fast` (on the CPU; no side weights, or LoRA on W_out alone): one
        compiled call. `inputs`: (B,) int32, contiguous, as the coding loop holds the bytes (numba
        builds the kernels once per argument type: `step` hands them over the same way)."""
        x, exm, hm, m, gates, c0, c1, tc, h1, h0 = self.np_views[t]
        gz = self.np_const[2]
        logits = np.empty((len(x), ALPHABET))
        lanes = (inputs, x, h0, hm, exm, m, gz, c0, gates, c1, tc, h1, logits, self.np_LP[t], *self.scratch16)
        weights, consts = self.step_records
        if self.parts > 1:
            step_kernels.forward_parts(self.parts, lanes, weights, consts)
        else:
            step_kernels.forward(lanes, weights, consts)
        return logits

    @functools.cached_property
    def step_records(self) -> tuple[tuple, tuple]:
        """The step's weights and constants as `step_kernels.forward` and `cell` take them, made once
        (arrays the step's buffers and weight copies are written into in place): the input table,
        the gates' input weights, the transposed matrices, the output bias, the LoRA factors; the
        gates' index bounds and table, m's and c's bounds, c's table scale, the tanh table's offset
        and bounds, the output bias's scale and the LoRA product's bound."""
        table_in, gate_in, _, lo, hi, table, w_mh, w_m, w_out, b_out = self.np_const
        w16 = [self.w16[k] if self.use16 else NO16 for k in FORWARD_MATRICES]
        weights = (table_in, gate_in, w_mh, w_m, w_out, b_out, *self.lora_t, *w16)
        consts = (
            lo, hi, table, M_MAX * A, C_MAX * A, 2.0 ** (FI - FA), self.tanh_at, self.tanh_lo, self.tanh_hi, A, P_MAX,
            self.m_unit, 2.0**-FW16,
        )  # fmt: skip
        return weights, consts

    @functools.cached_property
    def scratch16(self) -> tuple[np.ndarray, np.ndarray]:
        """The step's int16 copies of h and of m / m_unit (B, H) for `dot16` (no rows without it)."""
        rows = self.IN.shape[1] if self.use16 else 0
        return np.zeros((rows, self.H), dtype=np.int16), np.zeros((rows, self.H), dtype=np.int16)

    def record_array(self, t: int, freqs: np.ndarray) -> None:
        """`record` where `fast`."""
        self.np_F[t] = freqs

    @torch.no_grad()
    def step(self, inputs: torch.Tensor, t: int) -> torch.Tensor:
        """Step t for every lane given the byte each saw last; returns the logits (B, 256) in
        units of 2^-12, exact multiples of 2^-20."""
        if self.fast:
            return torch.from_numpy(self.step_array(np.ascontiguousarray(inputs.numpy(), dtype=np.int32), t))
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
            step_kernels.mult_gates_in(x, inputs, gate_in, hm_, exm_, m_, gz_, M_MAX * A, self.m_unit, NO16)
            step_kernels.matmul_nt(m_, w_m, gz_, 2.0 ** (FI - FA), True)
            gz = self.GZ
        else:
            hm.round_()
            m = torch.mul(exm, hm, out=m)
            if self.step16:  # to a multiple of m_unit
                m.mul_(1 / self.m_unit).round_().mul_(self.m_unit)
            else:
                m.round_()
            m.clamp_(-M_MAX * A, M_MAX * A)
            gz = torch.index_select(self.gate_in, 0, prev, out=self.GZ)
            gz.addmm_(m, w["w_m"], alpha=2.0 ** (FI - FA))
        if self.lora_m:  # + 2^-2 round(m A) B (|m A| < 2^51 units of 2^-20: exact)
            fa, fb, P = self.lora_m
            gz.addmm_(torch.mm(m, fa, out=P[t]).round_().clamp_(-P_MAX, P_MAX), fb, alpha=2.0 ** (FI - FA))
        if self.compiled:
            step_kernels.cell(gz_, self.step_records[1], c0_, gates_, c1_, tc_, h1_)
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
        if self.fast:  # (the kernels are built for the rows the codec hands in: contiguous)
            y = np.ascontiguousarray(targets.numpy())
        if self.out_lora:  # d/dlogits and dl B^T in one compiled call, then the factors' gradients
            dl = torch.empty(T, B, ALPHABET, dtype=torch.float64)
            step_kernels.backward_out_lora(
                self.np_F[:T], y, mask.numpy(), weighted, self.sb["w_out.B"].numpy(), dl.numpy(),
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
            coded = (self.np_F[:T], y, mask.numpy(), weighted)
            saved = tuple(numpy_views(self.Z[:T], self.TC[:T], self.CS[:T], self.EXM[:T]))
            grads = (dl.numpy(), dH, dcfd, K, *numpy_views(dZ, dM, dMX))
            consts = (float(FREQ_TOTAL), 2.0 ** (G - FREQ_BITS), A, 2.0**FS, GRAD_MAX, DZ_MAX)
            kernel(*parts, coded, saved, tuple(self.np_back), grads, consts, *whole)
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
