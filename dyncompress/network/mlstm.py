"""Byte-level multiplicative LSTM (Krause et al. 2016), one step at a time, with a
hand-written truncated-BPTT backward.

Per step, with x the previous byte and (h, c) the state:

    m = W_mx[x] * (h W_mh)                   # multiplicative intermediate state
    z = W_x[x] + m W_m + b                   # (B, 4H): gates i, f, o and input u
    c = sigmoid(f) * c + sigmoid(i) * tanh(u)
    h = sigmoid(o) * tanh(c)
    p = softmax(h W_out + b_out)             # (B, 256)

The input is one of 256 bytes, so the paper's embedding followed by W_mx and
W_x is stored as its product: one (256, 5H) table `w_in`, looked up per step.
That is as expressive as any embedding size and removes a third of the FLOPs
per byte (no input matmul forward or backward).

Why hand-written: the coding loop must run step by step anyway, so the forward
records what the backward needs into preallocated per-segment buffers; the
backward then carries only the activation gradients through the steps and forms
every weight gradient once per segment as one large matmul. This is several
times faster than autograd on small batches (no graph, no per-step weight
gradients), and `tests/test_mlstm.py` checks it against autograd.

All parameters live in one flat vector (`theta`), the gradient in another of the
same layout (`grad`), so the update rules in `adapt` are a few large ops.
"""

from __future__ import annotations

import math

import torch

from dyncompress.config.shape import ALPHABET, MLSTMShape


def init_params(shape: MLSTMShape, seed: int) -> torch.Tensor:
    """A seeded initialisation, drawn on the CPU so every device starts from equal weights."""
    gen = torch.Generator().manual_seed(seed)
    H = shape.hidden
    parts = []
    for name, dims in shape.layout():
        if name == "w_in":
            w = torch.randn(dims, generator=gen)  # like a unit-variance embedding times W
        elif name == "b":
            w = torch.zeros(dims)
            w[H : 2 * H] = 1.0  # forget gates start open: remember by default
        elif name == "b_out":
            w = torch.zeros(dims)
        else:
            w = torch.randn(dims, generator=gen) / math.sqrt(dims[0])
        parts.append(w.reshape(-1))
    return torch.cat(parts)


def widen(shape: MLSTMShape, theta: torch.Tensor, hidden: int, seed: int) -> torch.Tensor:
    """A network of `hidden` units that computes what `theta` (of `shape`) does: the start of a
    larger model trained from a smaller one instead of from nothing (Net2WiderNet's idea, Chen et
    al. 2016, with new units that begin silent rather than copies).

    The old units keep their weights. The new ones get the seed's initial weights, so they see the
    input byte, the old units and one another from the first step, but every path from a new unit
    to an old one or to the output starts at zero: its rows of W_mh into old m units, of W_m into old
    gates and of W_out. So the probabilities equal the small network's (up to the order of float
    sums), and training moves those zero rows first, since their gradients (the new units' h and
    m times the old units' errors) are not zero."""
    H, K = shape.hidden, hidden
    if K < H:
        raise ValueError(f"cannot widen {H} units to {K}")
    big = MLSTMShape(K)
    out = init_params(big, seed)
    old, new = unflatten(shape, theta.detach().to(out.dtype).cpu()), unflatten(big, out)

    def blocks(n: int, size: int) -> list[slice]:  # gate (or [W_mx | W_x]) blocks of `size` columns
        return [slice(j * size, j * size + size) for j in range(n)]

    for a, b in zip(blocks(5, H), blocks(5, K), strict=True):  # w_in: [W_mx | i f o u], one row per byte
        new["w_in"][:, b][:, :H] = old["w_in"][:, a]
    new["w_mh"][:H, :H] = old["w_mh"]
    new["w_mh"][H:, :H] = 0  # new h -> old m
    for a, b in zip(blocks(4, H), blocks(4, K), strict=True):
        new["w_m"][:H, b][:, :H] = old["w_m"][:, a]
        new["w_m"][H:, b][:, :H] = 0  # new m -> old gates
        new["b"][b][:H] = old["b"][a]
    new["w_out"][:H] = old["w_out"]
    new["w_out"][H:] = 0  # new h -> the output
    new["b_out"][:] = old["b_out"]
    return out


def unflatten(shape: MLSTMShape, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Named views into a flat parameter (or gradient) vector."""
    views, offset = {}, 0
    for name, dims in shape.layout():
        n = math.prod(dims)
        views[name] = flat[offset : offset + n].view(dims)
        offset += n
    return views


class CarriedState:
    """The recurrent state carried from segment to segment, for networks that record h and c per
    step in `HS` and `CS` ((steps + 1, B, H); slot 0 holds the state the segment started from)."""

    HS: torch.Tensor
    CS: torch.Tensor

    @torch.no_grad()
    def carry(self, T: int) -> None:
        """Start the next segment from the state after step T."""
        self.HS[0].copy_(self.HS[T])
        self.CS[0].copy_(self.CS[T])

    @property
    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The recurrent state (h, c) the next segment starts from: (B, H) each, views."""
        return self.HS[0], self.CS[0]

    @torch.no_grad()
    def set_state(self, h: torch.Tensor, c: torch.Tensor) -> None:
        self.HS[0].copy_(h)
        self.CS[0].copy_(c)

    @torch.no_grad()
    def reset_state(self) -> None:
        """Zero state: the start of a stream."""
        self.HS[0].zero_()
        self.CS[0].zero_()


class MLSTM(CarriedState):
    """The network for `batch` lanes, recording up to `max_steps` steps for one backward.

    Usage per segment: `step(inputs, t)` for t = 0, 1, ..., T - 1 (inputs: the byte each
    lane saw last), then `backward(T, ...)` to fill `grad` (or `nll(T, ...)` without it),
    then `carry(T)` to start the next segment from the last state. `theta` may be updated
    in place between segments. This is the float network: training and calibration use it
    directly; the codec reaches it only through a predictor (`predictor.py`).
    """

    def __init__(self, shape: MLSTMShape, theta: torch.Tensor, batch: int, max_steps: int) -> None:
        H, n, B = shape.hidden, max_steps, batch
        self.shape, self.theta = shape, theta
        self.grad = torch.zeros_like(theta)
        self.w = unflatten(shape, theta)
        self.g = unflatten(shape, self.grad)
        buf = dict(device=theta.device, dtype=theta.dtype)
        # per-step records of the current segment; slot 0 of HS/CS is the carried state
        self.IN = torch.zeros(n, B, dtype=torch.long, device=theta.device)  # input bytes
        self.EX = torch.zeros(n, B, 5 * H, **buf)  # [W_mx | W_x] rows of the inputs
        self.HM = torch.zeros(n, B, H, **buf)  # h_prev W_mh
        self.M = torch.zeros(n, B, H, **buf)
        self.Z = torch.zeros(n, B, 4 * H, **buf)  # pre-activations, then sigmoid(i,f,o), tanh(u)
        self.CS = torch.zeros(n + 1, B, H, **buf)
        self.TC = torch.zeros(n, B, H, **buf)  # tanh(c)
        self.HS = torch.zeros(n + 1, B, H, **buf)
        self.P = torch.zeros(n, B, ALPHABET, **buf)  # next-byte probabilities

    @torch.no_grad()
    def step(self, inputs: torch.Tensor, t: int) -> torch.Tensor:
        """Step t of the segment for every lane, given the byte each lane saw last ((B,)
        integers); returns next-byte probabilities (B, 256)."""
        w, H = self.w, self.shape.hidden
        prev = self.IN[t].copy_(inputs)
        ex = torch.index_select(w["w_in"], 0, prev, out=self.EX[t])
        hm = torch.mm(self.HS[t], w["w_mh"], out=self.HM[t])
        m = torch.mul(ex[:, :H], hm, out=self.M[t])
        z = torch.addmm(w["b"], m, w["w_m"], out=self.Z[t]).add_(ex[:, H:])
        torch.sigmoid_(z[:, : 3 * H])
        torch.tanh_(z[:, 3 * H :])
        c = torch.mul(z[:, H : 2 * H], self.CS[t], out=self.CS[t + 1]).addcmul_(z[:, :H], z[:, 3 * H :])
        tc = torch.tanh(c, out=self.TC[t])
        h = torch.mul(z[:, 2 * H : 3 * H], tc, out=self.HS[t + 1])
        return torch.softmax(torch.addmm(w["b_out"], h, w["w_out"]), dim=-1, out=self.P[t])

    @torch.no_grad()
    def target_log_probs(self, T: int, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) of the first T steps: (T, B) for targets (T, B) int64."""
        return torch.log(self.P[:T].gather(2, targets.unsqueeze(2)).squeeze(2))

    @torch.no_grad()
    def nll(self, T: int, targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood `backward` returns, without the backward pass."""
        return -(self.target_log_probs(T, targets) * (weight > 0)).sum()

    @torch.no_grad()
    def backward(self, T: int, targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Gradient of sum(weight * -log p(target)) over the first T steps into `grad`.

        targets: (T, B) int64; weight: (T, B) per-byte loss weights (0 for padding).
        Returns the unweighted negative log-likelihood of the bytes with weight > 0.
        Truncated BPTT: no gradient flows into the state carried from the previous segment.
        """
        w, g, H = self.w, self.g, self.shape.hidden
        B = targets.shape[1]
        P, Z, TC, CS = self.P[:T], self.Z[:T], self.TC[:T], self.CS[:T]
        i, f, o, u = Z[..., :H], Z[..., H : 2 * H], Z[..., 2 * H : 3 * H], Z[..., 3 * H :]
        nll = self.nll(T, targets, weight)

        # d(-log softmax)/dlogits = p - onehot (one_hot, not scatter: no atomics on any device)
        dlogits = (P - torch.nn.functional.one_hot(targets, ALPHABET).to(P.dtype)) * weight.unsqueeze(2)
        dH = dlogits @ w["w_out"].T  # (T, B, H): from the output layer
        # batched over time: everything that does not depend on the recurrence
        dc_from_dh = o * (1 - TC * TC)  # dc/dh through h = o tanh(c)
        gate_in = torch.cat([u, CS, TC, i], dim=2)  # what dc, dc, dh, dc multiply
        gate_slope = torch.cat([Z[..., : 3 * H] * (1 - Z[..., : 3 * H]), 1 - u * u], dim=2)
        K = gate_in * gate_slope  # (T, B, 4H)
        exm = self.EX[:T, :, :H]

        dZ = torch.empty(T, B, 4 * H, dtype=P.dtype, device=P.device)
        dM = torch.empty(T, B, H, dtype=P.dtype, device=P.device)
        dh_next = torch.zeros(B, H, dtype=P.dtype, device=P.device)
        dc_next = torch.zeros(B, H, dtype=P.dtype, device=P.device)
        w_m_t, w_mh_t = w["w_m"].T, w["w_mh"].T
        for t in range(T - 1, -1, -1):
            dh = dH[t].add_(dh_next)
            dc = torch.addcmul(dc_next, dh, dc_from_dh[t])
            torch.mul(torch.cat([dc, dc, dh, dc], dim=1), K[t], out=dZ[t])
            dm = torch.mm(dZ[t], w_m_t, out=dM[t])
            dh_next = (dm * exm[t]) @ w_mh_t
            dc_next = dc * f[t]

        # weight gradients: one matmul each over all T*B positions
        flat = lambda x: x.reshape(T * B, -1)  # noqa: E731
        torch.mm(flat(self.HS[1 : T + 1]).T, flat(dlogits), out=g["w_out"])
        torch.sum(flat(dlogits), dim=0, out=g["b_out"])
        torch.mm(flat(self.M[:T]).T, flat(dZ), out=g["w_m"])
        torch.sum(flat(dZ), dim=0, out=g["b"])
        torch.mm(flat(self.HS[:T]).T, flat(dM * exm), out=g["w_mh"])
        dEX = torch.cat([dM * self.HM[:T], dZ], dim=2)  # (T, B, 5H)
        g["w_in"].zero_().index_add_(0, self.IN[:T].reshape(-1), flat(dEX))
        return nll
