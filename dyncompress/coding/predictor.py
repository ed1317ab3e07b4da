"""The predictor: the one thing the codec's loop talks to.

A predictor turns the byte each lane saw last into a next-byte table for every
lane (`step`), learns from the segment just coded (`adapt`), and has a state
that can be saved, restored and reset. Encoder and decoder call it with
bit-identical arguments in the same order; that is all the codec asks of it.

`MLSTMPredictor` is the first one: the mLSTM network (`mlstm`) with a
dynamic-evaluation rule (`adapt`), starting from a pretrained model or from a
seeded random initialisation (online mode). Later predictors (experts and a
mixer) plug in behind the same interface.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from dyncompress.config.levels import FROZEN_NEEDS_MODEL
from dyncompress.config.model import Model, predictor_record
from dyncompress.config.settings import Settings
from dyncompress.experts.mix import Experts
from dyncompress.network import update_kernels as kernels
from dyncompress.network.exact import ExactMLSTM, init_master, to_master
from dyncompress.network.exact_adapt import ExactAdapter
from dyncompress.network.fixed import (
    FREQ_BITS,
    FREQ_TOTAL,
    LOG_FRAC,
    TLM_CAP,
    frequencies,
    log2_table,
    tlm_mean_update,
    tlm_relative_threshold,
    tlm_units,
    tlm_weights,
)


class Predictor(Protocol):
    settings: Settings  # what it was built from (the header records them)
    lanes: int
    segment_len: int  # most steps between two `adapt` calls
    segments: int  # gradient steps due so far (statistics only)
    skipped: int  # of them, skipped (TLM)

    def step(self, inputs: np.ndarray, active: int) -> np.ndarray:
        """(lanes,) previous bytes -> (lanes, 256) next-byte frequencies: int64, each >= 1,
        summing to `fixed.FREQ_TOTAL` (2^24) in every row: what the range coder codes with.
        `active`: how many lanes (from the first) code a byte at this step."""

    def adapt(self, targets: np.ndarray, active: np.ndarray) -> float:
        """Learn from the steps since the last call: targets (T, lanes) are the bytes that came,
        active (T,) how many lanes (from the first) were in play at each step. Returns the
        segment's negative log-likelihood in nats."""

    def state_dict(self, tables: bool = True) -> dict[str, torch.Tensor]:
        """Everything that changes while coding, as tensors (copies). `tables=False` leaves out the
        experts' count tables and the other statistics (hundreds of MB to copy): the network's
        state alone."""

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...

    def reset(self) -> None:
        """Back to the start: the initial weights, a zero state, no statistics."""

    def record(self) -> dict:
        """What the header must hold for a decoder to build the same predictor (beside Settings)."""

    def set_parts(self, parts: int) -> None:
        """Run every step's lanes in `parts` runs on threads from now on (`split`; speed only)."""


def prepare_device(kind: str) -> torch.device:
    """The device. No deterministic-kernel settings are needed: the arithmetic is exact (`exact`),
    so every kernel and summation order gives the same numbers."""
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("this needs a CUDA GPU, and torch sees none here")
    return torch.device(kind)


class MLSTMPredictor:
    """The mLSTM with its update rule, in the exact arithmetic of `exact` (format 2). `model`:
    pretrained weights (and MS_g) to start from; None is online mode, a seeded random start."""

    def __init__(self, settings: Settings, model: Model | None = None) -> None:
        self.settings, self.lanes, self.segment_len = settings, settings.lanes, settings.segment_len
        self.device = prepare_device(settings.device)
        if model is None:
            master = init_master(settings.shape, settings.seed)
        elif model.shape != settings.shape:
            raise ValueError(f"model {model.name} has hidden size {model.shape.hidden}, settings say {settings.hidden}")
        else:
            master = to_master(model.theta)
        self.model = model
        # the master weights (integers), made on the CPU (the same everywhere), then moved
        self.theta = master.to(self.device)
        self.theta_start = self.theta.clone()  # for reset(), and the weights rms-decay pulls back to
        rule = settings.adapt
        if rule.frozen and model is None:
            raise ValueError(FROZEN_NEEDS_MODEL)
        self.net = ExactMLSTM(
            settings.shape, self.theta, settings.lanes, settings.segment_len,
            rule.sparse, rule.lora, rule.lora_names, settings.seed, step16=settings.step16,
        )  # fmt: skip
        self.side_start = self.net.side_master.clone()
        if rule.rule == "static":
            self.adapter = None
        elif rule.frozen:  # the side weights alone (sparse M, LoRA factors), with statistics from the stream,
            # decaying toward their start (M and B zero: the model as trained)
            self.adapter = ExactAdapter(rule, self.net.side_master, None, self.side_start)
        else:
            self.adapter = ExactAdapter(rule, self.theta, model.ms if model else None, self.theta_start)
        self.t = 0  # steps recorded since the last adapt
        self.segments = self.skipped = 0  # segments adapted on, and those TLM skipped (statistics only)
        self.cost = -1  # relative TLM: the running mean cost per byte, units 2^-16 bits (-1: none yet)

    def set_parts(self, parts: int) -> None:
        self.net.parts = parts if self.net.fast else 1  # (the step with side weights runs whole)
        if self.adapter is not None:
            self.adapter.parts = self.net.parts

    def forward(self, inputs: np.ndarray) -> np.ndarray:
        """The network's logits (B, 256; units 2^-12) for this step. `learn_from` must follow."""
        if self.net.fast:
            return self.net.step_array(inputs, self.t)
        return self.net.step(torch.from_numpy(inputs).to(self.device), self.t).cpu().numpy()

    def learn_from(self, freqs: np.ndarray) -> None:
        """The frequencies coded at this step: the segment's gradient step descends their code
        length (the network's own, or the mixture's when experts are mixed in)."""
        if self.net.fast:
            self.net.record_array(self.t, freqs)
        else:
            self.net.record(self.t, torch.from_numpy(freqs).to(self.device))
        self.t += 1

    def step(self, inputs: np.ndarray, active: int) -> np.ndarray:
        freqs = frequencies(self.forward(inputs))
        self.learn_from(freqs)
        return freqs

    def adapt(self, targets: np.ndarray, active: np.ndarray) -> float:
        """One gradient step on the mean loss of the segment just coded (none for `static`).
        Returns the segment's ideal code length in nats (for reporting only)."""
        T = len(targets)
        assert T == self.t, "adapt() must follow the steps of the segment it learns from"
        net = self.net
        in_play = np.arange(self.lanes)[None, :] < active[:, None]  # (T, B)
        coded, bits = np.empty((T, self.lanes), dtype=np.int64), np.empty(self.lanes, dtype=np.int64)
        F = net.F[:T].cpu().numpy()
        kernels.segment_costs(F, targets, active, log2_table(), FREQ_BITS, LOG_FRAC, coded, bits)
        nats = float(-np.log(coded[in_play] / FREQ_TOTAL).sum())
        if self.adapter is not None:
            self._learn(T, targets, active, in_play, bits)
        net.carry(T)
        self.t = 0
        return nats

    def _learn(self, T: int, targets: np.ndarray, active: np.ndarray, in_play: np.ndarray, bits: np.ndarray) -> None:
        """The segment's gradient step; with TLM, weighted by how surprising the segment was (or each
        lane by its own surprise), and none at all (no backward pass) when nothing was surprising."""
        net, rule = self.net, self.settings.adapt
        self.segments += 1
        mask, gain = in_play.astype(np.float64), 1
        if rule.tlm:
            total, count = int(bits.sum()), int(in_play.sum())
            if rule.tlm_relative:  # against the cost of the segments before (the first: its own)
                before, self.cost = self.cost, tlm_mean_update(self.cost, total, count)
                threshold = tlm_relative_threshold(self.cost if before < 0 else before, rule.tlm_relative)
            else:
                threshold = tlm_units(rule.tlm_bits)
            if rule.tlm_lanes:  # the paper's: each lane's own S
                weights = tlm_weights(bits, in_play.sum(axis=0), threshold, rule.tlm_lambda)
            else:  # one S for the segment, from all its lanes' bytes
                one = tlm_weights(np.array([total]), np.array([count]), threshold, rule.tlm_lambda)
                weights = np.repeat(one, len(bits))
            if not weights.any():
                self.skipped += 1
                return
            mask, gain = mask * weights, TLM_CAP
        tokens = torch.from_numpy(targets.astype(np.int64)).to(self.device)
        net.backward(T, tokens, torch.from_numpy(mask).to(self.device), weighted=gain != 1)
        if rule.frozen:
            self.adapter.update(net.side_grad, int(active.sum()), gain)
            net.refresh_side()
        else:
            self.adapter.update(net.grad, int(active.sum()), gain)
            net.refresh()

    def state_dict(self, tables: bool = True) -> dict[str, torch.Tensor]:
        assert self.t == 0, "state is taken between segments"
        h, c = self.net.state
        state = {"theta": self.theta.clone(), "h": h.clone(), "c": c.clone(), "tlm_cost": torch.tensor(self.cost)}
        if len(self.net.side_master):
            state["side"] = self.net.side_master.clone()
        if self.adapter is not None:
            state.update({f"adapt.{k}": v for k, v in self.adapter.state_dict().items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.theta.copy_(state["theta"])
        if len(self.net.side_master):
            self.net.side_master.copy_(state["side"])
        self.net.refresh()
        self.net.set_state(state["h"], state["c"])
        if self.adapter is not None:
            self.adapter.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("adapt.")})
        self.t, self.cost = 0, int(state["tlm_cost"])

    def reset(self) -> None:
        self.theta.copy_(self.theta_start)
        self.net.side_master.copy_(self.side_start)
        self.net.refresh()
        self.net.reset_state()
        if self.adapter is not None:
            self.adapter.reset()
        self.t, self.cost = 0, -1

    def record(self) -> dict:
        return predictor_record(self.model)


class MixedPredictor:
    """The network mixed with exact byte statistics (`mix.Experts`, format 5). The network's segment
    step descends the code length of the mixture (what was coded), so it learns what the statistics
    miss. The mixer and the statistics learn from every byte, at the next step (or at `adapt`, for
    a segment's last). Without a network (`Settings.hidden` 0, `--fast`) its place is a `NoNetwork`."""

    def __init__(self, settings: Settings, model: Model | None = None) -> None:
        self.settings, self.lanes, self.segment_len = settings, settings.lanes, settings.segment_len
        self.net = MLSTMPredictor(settings, model) if settings.hidden else NoNetwork(settings, model)
        self.experts = Experts(settings.mix, settings.lanes, network=bool(settings.hidden))
        self.t = 0
        self.pending: tuple | None = None  # (what the mixer used, the freqs, lanes in play)

    @property
    def segments(self) -> int:
        return self.net.segments

    @property
    def skipped(self) -> int:
        return self.net.skipped

    def set_parts(self, parts: int) -> None:
        self.net.set_parts(parts)
        self.experts.parts = parts

    def _learn(self, y: np.ndarray) -> None:
        used, freqs, k = self.pending
        self.experts.learn(used, freqs, y, k)
        self.pending = None

    def step(self, inputs: np.ndarray, active: int) -> np.ndarray:
        if self.pending is not None:
            self._learn(inputs)
        self.experts.prepare()  # (its reads from memory overlap the network's step)
        freqs, used = self.experts.mix(self.net.forward(inputs))
        self.net.learn_from(freqs)
        self.pending = (used, freqs, active)
        self.t += 1
        return freqs

    def adapt(self, targets: np.ndarray, active: np.ndarray) -> float:
        T = len(targets)
        assert T == self.t, "adapt() must follow the steps of the segment it learns from"
        self._learn(targets[T - 1])
        self.t = 0
        return self.net.adapt(targets, active)  # its recorded frequencies are the coded ones

    def state_dict(self, tables: bool = True) -> dict[str, torch.Tensor]:
        assert self.t == 0, "state is taken between segments"
        state = self.net.state_dict()
        if tables:
            state.update({f"mix.{k}": torch.from_numpy(v) for k, v in self.experts.state().items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.net.load_state_dict({k: v for k, v in state.items() if not k.startswith("mix.")})
        self.experts.load({k[4:]: v.numpy() for k, v in state.items() if k.startswith("mix.")})
        self.t, self.pending = 0, None

    def reset(self) -> None:
        self.net.reset()
        self.experts.reset()
        self.t, self.pending = 0, None

    def record(self) -> dict:
        return self.net.record()


class NoNetwork:
    """The network's place in `MixedPredictor` where there is none (`Settings.hidden` 0: `--fast`):
    logits of zero, whose evidence is zero for every byte, so the mixer's weight on them never
    moves; no gradient steps, no model. What the experts and the mixer learn from every byte is
    all the adaptation there is. It keeps a segment's coded frequencies for its code length
    (reporting only)."""

    segments = skipped = 0  # (no gradient steps)

    def __init__(self, settings: Settings, model: Model | None = None) -> None:
        if model is not None:
            raise ValueError("the statistics alone (hidden 0) start from no model")
        self.zeros = np.zeros((settings.lanes, 256))  # (float, as a network's logits: one build of the kernels)
        self.coded: list[np.ndarray] = []  # the segment's frequencies, step by step

    def set_parts(self, parts: int) -> None:
        pass

    def forward(self, inputs: np.ndarray) -> np.ndarray:
        return self.zeros

    def learn_from(self, freqs: np.ndarray) -> None:
        self.coded.append(freqs)  # (a fresh array every step: `Experts.mix`)

    def adapt(self, targets: np.ndarray, active: np.ndarray) -> float:
        """The segment's code length in nats (a float, for reporting: the coded bits never depend on it)."""
        nats = 0.0
        for t, (freqs, k) in enumerate(zip(self.coded, active, strict=True)):
            nats -= float(np.log(freqs[np.arange(k), targets[t, :k]] / FREQ_TOTAL).sum())
        self.coded = []
        return nats

    def state_dict(self, tables: bool = True) -> dict[str, torch.Tensor]:
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.coded = []

    def reset(self) -> None:
        self.coded = []

    def record(self) -> dict:
        return predictor_record(None)


def make_predictor(settings: Settings, model: Model | None = None) -> Predictor:
    if settings.mix.expert_names:  # (always, without a network: `Settings`)
        return MixedPredictor(settings, model)
    return MLSTMPredictor(settings, model)
