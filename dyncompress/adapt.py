"""Dynamic-evaluation update rules (Krause et al. 2018), on one flat parameter vector.

Each rule is called once per segment with the gradient of the segment's mean
loss; encoder and decoder call it with bit-identical arguments.

- ``static``:    no update: the model as it is (the baseline dynamic evaluation beats)
- ``sgd``:       theta -= lr * g
- ``rms``:       theta -= lr * g / (RMS + eps). With a calibrated model, RMS = sqrt(MS_g)
                 from its training data (the paper's rule). Without MS_g (online mode,
                 or an uncalibrated model): Adam/RMSprop on statistics gathered from the
                 stream itself (beta1 = 0 gives plain RMSprop).
- ``rms-decay``: the rms step + decay * decrate * (theta0 - theta), decrate = RMS /
                 mean(RMS) clipped at 1 / decay, theta0 the starting (pretrained)
                 weights. RMS from MS_g when the model has it, else from the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._signals import held_interrupts

RULES = ("static", "sgd", "rms", "rms-decay")


@dataclass(frozen=True)
class AdaptSettings:
    rule: str = "rms"
    lr: float = 1.5e-3
    beta1: float = 0.0  # momentum hurt online learning in every measurement (BENCHMARKS.md)
    beta2: float = 0.99
    eps: float = 1e-8
    decay: float = 1e-4  # lambda of rms-decay; the other rules ignore it
    clip: float = 1.0  # max gradient norm per segment; 0 disables


class Adapter:
    """Applies one rule to a flat parameter vector `theta`, in place."""

    def __init__(self, settings: AdaptSettings, theta: torch.Tensor, ms: torch.Tensor | None = None) -> None:
        if settings.rule not in RULES:
            raise ValueError(f"unknown adaptation rule {settings.rule!r} (choose from {', '.join(RULES)})")
        self.s = settings
        self.theta0 = theta.clone() if settings.rule == "rms-decay" else None
        self._opt = None
        self._denom = self._decrate = None
        if ms is not None and settings.rule in ("rms", "rms-decay"):
            # the paper's rule: fixed RMS_g from training data
            rms = ms.to(theta.device, theta.dtype).sqrt()
            self._denom = rms + settings.eps
            if self.theta0 is not None and settings.decay > 0:
                self._decrate = (rms / rms.mean()).clamp_(max=1.0 / settings.decay)
        elif settings.rule in ("rms", "rms-decay"):
            # torch's fused Adam kernel: one pass over the parameters, deterministic
            beta1 = settings.beta1 if settings.rule == "rms" else 0.0
            with held_interrupts():  # its first use imports torch._dynamo: ~800 modules, ~1 s
                self._opt = torch.optim.Adam(
                    [theta], lr=settings.lr, betas=(beta1, settings.beta2), eps=settings.eps, fused=True
                )

    @torch.no_grad()
    def update(self, theta: torch.Tensor, grad: torch.Tensor) -> None:
        s = self.s
        if s.rule == "static":
            return
        if s.clip > 0:
            # scale by min(1, clip / norm) without a data-dependent Python branch
            grad.mul_((s.clip / (grad.norm() + 1e-12)).clamp_(max=1.0))
        if self._denom is not None:
            theta.addcdiv_(grad, self._denom, value=-s.lr)
            if self._decrate is not None:
                theta.addcmul_(self._decrate, self.theta0 - theta, value=s.decay)
            return
        if self._opt is None:
            theta.add_(grad, alpha=-s.lr)
            return
        theta.grad = grad
        self._opt.step()
        theta.grad = None
        if self.theta0 is not None and s.decay > 0:
            ms = self._opt.state[theta]["exp_avg_sq"]  # not bias-corrected: a constant factor
            rms = ms.sqrt()  # and decrate = rms / mean(rms) is scale-free anyway
            decrate = rms.div_(rms.mean()).clamp_(max=1.0 / s.decay)
            theta.addcmul_(decrate, self.theta0 - theta, value=s.decay)
