"""Dynamic-evaluation update rules (Krause et al. 2018), on one flat parameter vector.

Each rule is called once per segment with the gradient of the segment's mean
loss; encoder and decoder call it with bit-identical arguments.

- ``static``:    no update: the model as it is (the baseline dynamic evaluation beats)
- ``sgd``:       theta -= lr * g
- ``rms``:       theta -= lr * g / (RMS + eps). With a calibrated model, RMS = sqrt(MS_g)
                 from its training data (the paper's rule). Without MS_g (online mode,
                 or an uncalibrated model): Adam/RMSprop on statistics gathered from the
                 stream itself (beta1 = 0 gives plain RMSprop), at the rate lr H / (H + t)
                 at the t-th step (H = rate_half; 0: lr throughout).
- ``rms-decay``: the rms step + decay * decrate * (theta0 - theta), decrate = RMS /
                 mean(RMS) clipped at 1 / decay, theta0 the starting (pretrained)
                 weights. RMS from MS_g when the model has it, else from the stream.
"""

from __future__ import annotations

import torch

from dyncompress.config.settings import RULES, AdaptSettings

ADAPTIVE = tuple(r for r in RULES if r != "static")  # static adapts nothing: it gets no Adapter


@torch.no_grad()
def clip_grad_(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale `grad` in place to a norm of at most `max_norm` (0: leave it). The one clipping rule
    of the codec, calibration (which must see the gradients the codec will) and training."""
    if max_norm > 0:
        # scale by min(1, max_norm / norm) without a data-dependent Python branch
        grad.mul_((max_norm / (grad.norm() + 1e-12)).clamp_(max=1.0))
    return grad


class Adapter:
    """Applies one adaptive rule to the flat parameter vector `theta`, in place."""

    def __init__(
        self,
        settings: AdaptSettings,
        theta: torch.Tensor,
        ms: torch.Tensor | None = None,
        theta0: torch.Tensor | None = None,
    ) -> None:
        """`theta0`: the weights rms-decay pulls back to (default: a copy of `theta` as it is now);
        a caller that keeps the starting weights anyway passes them, and must not change them."""
        if settings.rule not in ADAPTIVE:
            raise ValueError(f"no adaptation for rule {settings.rule!r} (adaptive rules: {', '.join(ADAPTIVE)})")
        self.s, self.theta = settings, theta
        self.theta0 = None
        if settings.rule == "rms-decay":
            self.theta0 = theta.clone() if theta0 is None else theta0
        self._opt = None
        self._denom = self._decrate = None
        if ms is not None and settings.rule in ("rms", "rms-decay"):
            # the paper's rule: fixed RMS_g from training data
            rms = ms.to(theta.device, theta.dtype).sqrt()
            self._denom = rms + settings.eps
            if self.theta0 is not None and settings.decay > 0:
                self._decrate = (rms / rms.mean()).clamp_(max=1.0 / settings.decay)
        elif settings.rule in ("rms", "rms-decay"):
            # torch's fused Adam kernel (beta1 = 0: RMSprop): one pass over the parameters
            beta1 = settings.beta1 if settings.rule == "rms" else 0.0
            self._opt = FusedAdam(theta, settings.lr, (beta1, settings.beta2), settings.eps, settings.rate_half)

    @torch.no_grad()
    def update(self, grad: torch.Tensor) -> None:
        """One step of the rule with the gradient of the segment's mean loss (clipped in place)."""
        s, theta = self.s, self.theta
        clip_grad_(grad, s.clip)
        if self._denom is not None:
            theta.addcdiv_(grad, self._denom, value=-s.lr)
            if self._decrate is not None:
                theta.addcmul_(self._decrate, self.theta0 - theta, value=s.decay)
            return
        if self._opt is None:
            theta.add_(grad, alpha=-s.lr)
            return
        self._opt.step(grad)
        if self.theta0 is not None and s.decay > 0:
            ms = self._opt.state["exp_avg_sq"]  # not bias-corrected: a constant factor
            rms = ms.sqrt()  # and decrate = rms / mean(rms) is scale-free anyway
            decrate = rms.div_(rms.mean()).clamp_(max=1.0 / s.decay)
            theta.addcmul_(decrate, self.theta0 - theta, value=s.decay)

    def state_dict(self) -> dict:
        """The statistics gathered on the stream (Adam's moments and step count); {} if none."""
        return {k: v.clone() for k, v in self._opt.state.items()} if self._opt is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self._opt is not None:
            self._opt.state = {k: v.clone() for k, v in state.items()}

    def reset(self) -> None:
        """Forget what was gathered on the stream."""
        self.load_state_dict({})


class FusedAdam:
    """`torch.optim.Adam(fused=True)` on one tensor, reduced to the two calls its step makes.

    The same kernel with the same arguments, hence the same bits as the optimizer object (the
    golden online-mode files hold it to that), without the optimizer object itself, whose
    construction imports torch._dynamo (about 800 modules) in every process that codes in online
    mode. The state (step count, first and second moments) is created at the first step, as the
    optimizer does.
    """

    def __init__(self, theta: torch.Tensor, lr: float, betas: tuple[float, float], eps: float, half: int = 0) -> None:
        self.theta, self.lr, (self.beta1, self.beta2), self.eps = theta, lr, betas, eps
        self.half = half  # > 0: the rate at step t is lr half / (half + t) (AdaptSettings.rate_half)
        self.state: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, grad: torch.Tensor) -> None:
        if not self.state:
            self.state = {
                "step": torch.zeros((), dtype=torch.float32, device=self.theta.device),
                "exp_avg": torch.zeros_like(self.theta),
                "exp_avg_sq": torch.zeros_like(self.theta),
            }
        st = self.state
        torch._foreach_add_([st["step"]], 1)
        torch._fused_adam_(
            [self.theta],
            [grad],
            [st["exp_avg"]],
            [st["exp_avg_sq"]],
            [],
            [st["step"]],
            amsgrad=False,
            lr=self.lr * self.half / (self.half + float(st["step"])) if self.half else self.lr,
            beta1=self.beta1,
            beta2=self.beta2,
            weight_decay=0.0,
            eps=self.eps,
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
