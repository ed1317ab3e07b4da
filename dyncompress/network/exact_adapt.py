"""The update rules of dynamic evaluation in exact arithmetic (`ExactAdapter`): fixed-point steps
whose every value is exact, so encoder and decoder adapt alike on any machine. The number formats:
`fixed`."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from dyncompress.network import update_kernels as kernels
from dyncompress.network.fixed import FM, W_MAX, G, numpy_views


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


# The bias corrections' powers beta1^t and beta2^t are exact (`DyadicPower`), and grow by 53 bits a
# step. Below these bounds they no longer change a bit of the step, so they stop there
# (`ExactAdapter._next_powers`):
# - beta2^t = p: int((1 - p) 2^60) is 2^60 - 1 for every 0 < p < 2^-60;
# - beta1^t = p: floor(K / (1 - p)), with K = lr sqrt_c2 2^32 a multiple of 2^-1072 (lr a double,
#   sqrt_c2 a multiple of 2^-30), is floor(K) for every 0 < p < 2^-1120 where K < 2^26 (K p / (1 - p)
#   < 2^-1093 is less than K's distance to the next integer above, at least 2^-1072), and the step
#   is capped at 2^26 - 1 where K is larger.
POW_SETTLED = (Fraction(1, 1 << 1120), Fraction(1, 1 << 64))


class DyadicPower:
    """beta^t for a float beta, exactly, as the integers n / 2^e (a float is m / 2^k, so its powers
    are m^t / 2^(k t)): a step is one multiplication of integers, where a `Fraction` would also
    reduce by a greatest common divisor of numbers thousands of bits long."""

    def __init__(self, beta: float) -> None:
        m, d = beta.as_integer_ratio()  # (d a power of two)
        self.m, self.k = m, d.bit_length() - 1
        self.n, self.e = 1, 0

    def step(self) -> None:
        self.n *= self.m
        self.e += self.k

    def under(self, bound: Fraction) -> bool:
        """beta^t < bound, for a bound 1 / 2^j: n < 2^(e - j) (0 included)."""
        return self.n == 0 or self.n.bit_length() <= self.e - (bound.denominator.bit_length() - 1)

    def complement(self) -> tuple[int, int]:
        """1 - beta^t as (numerator, e): (2^e - n) / 2^e."""
        return (1 << self.e) - self.n, self.e

    @property
    def value(self) -> Fraction:
        return Fraction(self.n, 1 << self.e)


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
        # what a compiled pass is handed for an array it does not read (the stream step's momentum
        # where it has none, the rates where nothing decays): an array of its own, since a view of
        # one it writes would overlap it, and the loop would then run a weight at a time, not in vectors
        self._unread = torch.zeros(1, dtype=master.dtype)
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
        """D_i = min(decay * rms_i / mean(rms), 1) for float64 integers rms_i >= 0 (< 2^49 in sum):
        rms_i to 10 significant bits (of the largest), the factor to 6."""
        unit = self._decay_unit(float(rms.max()))
        rq = torch.mul(rms, unit).floor_()
        return rq.mul_(self._decay_scale(int(rq.sum()), len(rq))).clamp_(max=1.0)

    @staticmethod
    def _decay_unit(top: float) -> float:
        """The power of two that leaves the largest rms with 10 significant bits (at most)."""
        return 2.0 ** -max(0, int(top).bit_length() - 10)

    def _decay_scale(self, total: int, n: int) -> float:
        """decay * n / total to 6 significant bits, for `total` the sum of the n rounded rms: what
        multiplies each of them (0 where they are all 0)."""
        if total == 0:
            return 0.0
        return significant(Fraction(self.s.decay) * n / total, 6)

    def reset(self) -> None:
        self.steps = 0
        self.v = self.m = self._rms = None
        self.p1, self.p2 = DyadicPower(self.s.beta1), DyadicPower(self.s.beta2)

    @property
    def b1_pow(self) -> Fraction:
        return self.p1.value

    @property
    def b2_pow(self) -> Fraction:
        return self.p2.value

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
                if self.p1.under(POW_SETTLED[0]) and self.p2.under(POW_SETTLED[1]):
                    break  # (settled, or 0: no further step changes them)

    def _next_powers(self) -> None:
        """beta1^t and beta2^t one step on, exact, until each is settled (`POW_SETTLED`)."""
        for power, bound in zip((self.p1, self.p2), POW_SETTLED, strict=True):
            if power.n == 0 or not power.under(bound):  # (not 0 < beta^t < bound)
                power.step()

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
                step(*numpy_views(theta, g), R, c, self.theta0.numpy(), D, decay, self.limit, *parts)
                return
            theta.sub_(torch.mul(g, self._rates(c), out=work).round_())
        else:
            self._stream_step(g, significant(scale / 16, 22))
        if compiled and decay and self.D is None:  # the rates made in the settling pass
            rms = self._rms.numpy()
            unit = self._decay_unit(kernels.top(rms))
            scale = self._decay_scale(int(kernels.floor_sum(rms, unit)), len(rms))
            kernels.settle_rates(*numpy_views(theta, self.theta0), rms, unit, scale, self.limit)
            return
        D = (self.D if self.D is not None else self._decay_rates(self._rms)) if decay else None
        if compiled:
            kernels.settle(*numpy_views(theta, self.theta0, D if decay else self._unread), decay, self.limit)
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
            m = self.m if self.m is not None else self._unread
            arrays = numpy_views(self.master, self.v, m, self._rms, g)
            kernels.stream_step(*arrays, c, s.beta2, 1 - s.beta2, s.beta1, 1 - s.beta1, self.m is not None, lr, eps)
        else:
            self._stream_step_torch(torch.mul(g, c, out=self.work).round_(), lr, eps)

    def _corrections(self) -> tuple[float, float]:
        """The stream step's rate and epsilon with Adam's bias corrections at this step:
        step = lr sqrt(c2) / c1 * m / (rms + eps sqrt(c2)), c = 1 - beta^t (units 2^-32, 2^-28), the
        rate times H / (H + t) with a half-life of H = rate_half steps (an exact fraction, floored)."""
        s = self.s
        # the same rationals as lr sqrt_c2 / c1 2^32 and eps sqrt_c2 2^28, floored, in integers:
        # c1 = (2^e1 - n1) / 2^e1 (1 without momentum), 1 - beta2^t = c2 / 2^e2
        c2, e2 = self.p2.complement()
        root = math.isqrt((c2 << 60) >> e2)  # sqrt_c2 = root / 2^30
        c1, e1 = self.p1.complement() if self.m is not None else (1, 0)
        a, d = Fraction(s.lr).as_integer_ratio()
        num, den = a * root << (e1 + FM), d * c1 << 30
        if s.rate_half:  # the rate's decay: lr H / (H + t) at the t-th step
            num, den = num * s.rate_half, den * (s.rate_half + self.steps)
        lr = float(min(num // den, (1 << 26) - 1))
        a, d = Fraction(s.eps).as_integer_ratio()
        eps = float(max(1, (a * root << 28) // (d << 30)))
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


def _float32_if_exact(x: torch.Tensor) -> np.ndarray:
    """x as a float32 array where every value converts exactly, else as it is (float64)."""
    x32 = x.numpy().astype(np.float32)
    return x32 if np.array_equal(x32.astype(np.float64), x.numpy()) else x.numpy()


def _significant_array(x: np.ndarray, bits: int) -> np.ndarray:
    """Each positive float64 rounded down to `bits` significant bits (exact: frexp and scaling)."""
    mant, exp = np.frexp(x)
    return np.ldexp(np.floor(np.ldexp(mant, bits)), exp - bits)
