"""The one loop: lanes, blocks, and step / code / adapt.

Encoding and decoding run the same `Codec.code_block`; the only difference is
the coder object passed in (an `Encoder` reads the symbols, a `Decoder` writes
them). Nothing in here knows which one it is holding: that is the symmetry
invariant, enforced by construction.

A block of `length` bytes is cut into `lanes` contiguous parts of
`lane_len = ceil(length / lanes)` bytes (the last parts may be shorter or
empty) and coded in lock-step as one batch. Every `segment_len` steps the
parameters take one gradient step on the segment just coded. Parameters,
adaptation statistics and the recurrent state carry over from block to block.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch

from .adapt import RULES, Adapter, AdaptSettings
from .coder import Decoder, Encoder, frequencies
from .mlstm import MLSTM, MLSTMShape, init_params
from .model import Model

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Settings:
    """Everything the decoder needs to repeat the encoder; all of it goes in the header."""

    hidden: int = 256
    seed: int = 0
    lanes: int = 16
    segment_len: int = 16
    block_size: int = 1 << 20
    threads: int = 1  # CPU threads while coding: matmul results depend on it, so it is recorded
    device: str = "cpu"
    dtype: str = "float32"
    adapt: AdaptSettings = field(default_factory=AdaptSettings)

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 1, "hidden size must be at least 1"),
            (self.lanes >= 1, "lanes must be at least 1"),
            (self.segment_len >= 1, "segment length must be at least 1"),
            (self.block_size >= 1, "block size must be at least 1 byte"),
            (self.block_size <= 1 << 30, "block size must be at most 1 GiB"),
            (1 <= self.threads <= 256, "threads must be 1 ... 256"),
            (self.device in ("cpu", "cuda"), f"unknown device {self.device!r} (cpu or cuda)"),
            (self.dtype in DTYPES, f"unknown dtype {self.dtype!r} ({', '.join(DTYPES)})"),
            (self.adapt.rule in RULES, f"unknown rule {self.adapt.rule!r} ({', '.join(RULES)})"),
            (self.adapt.lr >= 0 and self.adapt.decay >= 0, "learning rate and decay must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def shape(self) -> MLSTMShape:
        return MLSTMShape(self.hidden)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Settings:
        """Strict: unknown or missing keys are an error, never silently defaulted."""
        d = dict(d)
        adapt = d.pop("adapt")
        names = {f.name for f in fields(cls)} - {"adapt"}
        if set(d) != names or set(adapt) != {f.name for f in fields(AdaptSettings)}:
            raise ValueError("settings in the header do not match this version's fields")
        return cls(**d, adapt=AdaptSettings(**adapt))


# Levels trade ratio for speed like xz/zstd -1 ... -9. On ~1 MB of text the best gradient
# step averages about 256 bytes (lanes x segment_len); a wider network compresses better and
# runs slower. Chosen from the measurements in BENCHMARKS.md.
LEVELS: dict[int, dict] = {
    1: dict(hidden=128, lanes=32, segment_len=8, lr=2e-3),
    2: dict(hidden=128, lanes=16, segment_len=16, lr=2e-3),
    3: dict(hidden=192, lanes=32, segment_len=8, lr=1.5e-3),
    4: dict(hidden=192, lanes=16, segment_len=16, lr=1.5e-3),
    5: dict(hidden=256, lanes=32, segment_len=8, lr=1.5e-3),
    6: dict(hidden=256, lanes=16, segment_len=16, lr=1.5e-3),
    7: dict(hidden=384, lanes=16, segment_len=16, lr=1e-3),
    8: dict(hidden=512, lanes=16, segment_len=16, lr=1e-3),
    9: dict(hidden=512, lanes=8, segment_len=32, lr=1e-3),
}
DEFAULT_LEVEL = 6


def level_settings(level: int, device: str) -> Settings:
    if level not in LEVELS:
        raise ValueError(f"level must be 1 ... 9, not {level}")
    knobs = dict(LEVELS[level])
    adapt = AdaptSettings(lr=knobs.pop("lr"))
    return Settings(**knobs, device=device, adapt=adapt)


MIN_LANE_BYTES = 32 * 1024


def lanes_for_size(lanes: int, size: int) -> int:
    """Fewer lanes for a small input: on alice29 (152 kB) 4 lanes beat 16 by 0.17 bits per byte."""
    return max(1, min(lanes, size // MIN_LANE_BYTES))


def prepare_device(kind: str) -> torch.device:
    """The device, with deterministic kernels where the device has a choice."""
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("this needs a CUDA GPU, and torch sees none here")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(kind)


def lane_lengths(length: int, lanes: int) -> tuple[int, np.ndarray]:
    """Steps in the block and the length of every lane (non-increasing)."""
    steps = math.ceil(length / lanes)
    return steps, np.clip(length - np.arange(lanes) * steps, 0, steps)


def to_lanes(data: bytes, lanes: int) -> np.ndarray:
    """Block bytes -> (steps, lanes) int32, lane i holding a contiguous part, zero padded."""
    steps, _ = lane_lengths(len(data), lanes)
    flat = np.zeros(steps * lanes, dtype=np.int32)
    flat[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return np.ascontiguousarray(flat.reshape(lanes, steps).T)


def from_lanes(tokens: np.ndarray, length: int) -> bytes:
    return tokens.T.reshape(-1)[:length].astype(np.uint8).tobytes()


class Codec:
    """The coding loop for one stream. `model`: pretrained weights (and MS_g) to start from;
    None is online mode, a seeded random start."""

    def __init__(self, settings: Settings, model: Model | None = None) -> None:
        self.s = settings
        self.device = prepare_device(settings.device)
        # denormals make the update rules ~10x slower; flushing them is part of the
        # arithmetic both sides share (process-wide, set before every codec)
        torch.set_flush_denormal(True)
        if model is None:
            theta = init_params(settings.shape, settings.seed)
        elif model.shape != settings.shape:
            raise ValueError(f"model {model.name} has hidden size {model.shape.hidden}, settings say {settings.hidden}")
        else:
            theta = model.theta.clone()
        theta = theta.to(self.device, DTYPES[settings.dtype])
        self.net = MLSTM(settings.shape, theta, settings.lanes, settings.segment_len)
        self.adapter = Adapter(settings.adapt, theta, model.ms if model is not None else None)
        self.nats = 0.0  # ideal code length so far, for reporting

    def code_block(
        self,
        coder: Encoder | Decoder,
        tokens: np.ndarray,
        length: int,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Code one block in place: `tokens` is (steps, lanes) int32, read or filled by `coder`."""
        outside = torch.get_num_threads()
        torch.set_num_threads(self.s.threads)  # kernels split work by thread count: part of the floats
        try:
            self._code_block(coder, tokens, length, progress)
        finally:
            torch.set_num_threads(outside)

    def _code_block(self, coder, tokens: np.ndarray, length: int, progress) -> None:
        steps, lens = lane_lengths(length, self.s.lanes)
        assert tokens.shape == (steps, self.s.lanes)
        active = (lens[None, :] > np.arange(steps)[:, None]).sum(axis=1)  # (steps,) lanes in play
        for start in range(0, steps, self.s.segment_len):
            stop = min(start + self.s.segment_len, steps)
            for t in range(start, stop):
                probs = self.net.step(t - start)  # (B, 256)
                k = int(active[t])
                coder.code(frequencies(probs[:k].cpu().numpy()), tokens[t, :k])
                self.net.feed(torch.from_numpy(tokens[t]).to(self.device))
            self._adapt(tokens[start:stop], active[start:stop])
            if progress is not None:
                progress(int(np.minimum(lens, stop).sum() - np.minimum(lens, start).sum()))

    def _adapt(self, tokens: np.ndarray, active: np.ndarray) -> None:
        """One gradient step on the mean loss of the segment just coded (tokens: (T, B))."""
        T = len(tokens)
        targets = torch.from_numpy(tokens.astype(np.int64)).to(self.device)
        in_play = np.arange(self.s.lanes)[None, :] < active[:, None]  # (T, B)
        weight = torch.from_numpy(in_play / int(active.sum())).to(self.device, self.net.theta.dtype)
        if self.s.adapt.rule == "static":
            self.nats += float(self.net.nll(T, targets, weight))
            self.net.carry(T)
            return
        self.nats += float(self.net.backward(T, targets, weight))
        self.adapter.update(self.net.theta, self.net.grad)
        self.net.carry(T)


def encode_block(codec: Codec, data: bytes, progress=None) -> bytes:
    encoder = Encoder()
    codec.code_block(encoder, to_lanes(data, codec.s.lanes), len(data), progress)
    return encoder.finish()


def decode_block(codec: Codec, payload: bytes, length: int, progress=None) -> bytes:
    steps, _ = lane_lengths(length, codec.s.lanes)
    tokens = np.zeros((steps, codec.s.lanes), dtype=np.int32)
    codec.code_block(Decoder(payload), tokens, length, progress)
    return from_lanes(tokens, length)


_FINGERPRINT_TEXT = (
    b"<page><title>Fingerprint</title><text>The quick brown fox jumps over the lazy dog; "
    b"0123456789 [[dynamic evaluation]] {{mLSTM}}.</text></page>\n" + bytes(range(256))
)


def fingerprint(settings: Settings, model: Model | None = None) -> str:
    """A hash of a fixed small run of the real code path with these settings.

    It covers forward, coding, backward and update on this platform's kernels at
    the file's shapes, so a machine that would compute different floats is
    caught before decoding starts.
    """
    codec = Codec(settings, model)
    length = 2 * settings.segment_len * settings.lanes + 3  # two segments and a ragged end
    sample = (_FINGERPRINT_TEXT * (length // len(_FINGERPRINT_TEXT) + 1))[:length]
    payload = encode_block(codec, sample)
    h = hashlib.sha256(payload)
    for t in (codec.net.theta, codec.net.HS[0], codec.net.CS[0]):
        h.update(t.cpu().numpy().tobytes())
    return h.hexdigest()[:16]
