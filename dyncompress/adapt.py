"""Dynamic-evaluation update rules (Krause et al. 2018), on one flat parameter vector.

Each rule is called once per segment with the gradient of the segment's mean
loss; encoder and decoder call it with bit-identical arguments.

- ``sgd``:       theta -= lr * g
- ``rms``:       Adam/RMSprop on statistics gathered from the stream itself
                 (beta1 = 0 gives plain RMSprop); the rule for a model with no
                 training-set statistics, i.e. online mode.
- ``rms-decay``: theta -= lr * g / (RMS + eps) + decay * decrate * (theta0 - theta),
                 decrate = RMS / mean(RMS) clipped at 1 / decay. The paper takes RMS
                 from mean squared gradients MS_g collected on training data; until a
                 model carries MS_g, RMS comes from the stream (bias-corrected).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RULES = ("sgd", "rms", "rms-decay")


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

    def __init__(self, settings: AdaptSettings, theta: torch.Tensor) -> None:
        if settings.rule not in RULES:
            raise ValueError(f"unknown adaptation rule {settings.rule!r} (choose from {', '.join(RULES)})")
        self.s = settings
        self.theta0 = theta.clone() if settings.rule == "rms-decay" else None
        self._opt = None
        if settings.rule != "sgd":
            # torch's fused Adam kernel: one pass over the parameters, deterministic
            beta1 = settings.beta1 if settings.rule == "rms" else 0.0
            self._opt = torch.optim.Adam(
                [theta], lr=settings.lr, betas=(beta1, settings.beta2), eps=settings.eps, fused=True
            )

    @torch.no_grad()
    def update(self, theta: torch.Tensor, grad: torch.Tensor) -> None:
        s = self.s
        if s.clip > 0:
            # scale by min(1, clip / norm) without a data-dependent Python branch
            grad.mul_((s.clip / (grad.norm() + 1e-12)).clamp_(max=1.0))
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
