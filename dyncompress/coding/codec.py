"""The one loop: lanes, blocks, and step / code / adapt.

Encoding and decoding run the same `Codec.code_block`; the only difference is
the coder object passed in (an `Encoder` reads the symbols, a `Decoder` writes
them, a `measure.Tally` counts their bits). Nothing in here knows which one it is
holding: that is the symmetry invariant, enforced by construction. Nor does it
know what predicts: it talks to a `predictor.Predictor` and nothing else.

With the engine "bits" (`Settings.engine`) there is no predictor and no loop here: the bitwise engine
(`bitwise.engine.BlockCoder`) codes a block whole, a bit at a time, with its own binary coder; its
encoding and decoding are one compiled loop as well.

A block of `length` bytes is cut into `lanes` contiguous parts of
`lane_len = ceil(length / lanes)` bytes (the last parts may be shorter or
empty) and coded in lock-step as one batch. Every `segment_len` steps the
predictor adapts to the segment just coded. Its parameters, statistics and
state, and the last byte of every lane, carry over from block to block.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import numpy as np

from dyncompress.bitwise.engine import BlockCoder
from dyncompress.coding import split
from dyncompress.coding.coder import Coder, Decoder, Encoder
from dyncompress.config.model import Model
from dyncompress.config.settings import Settings
from dyncompress.progress import Progress


def lane_lengths(length: int, lanes: int) -> tuple[int, np.ndarray]:
    """Steps in the block and the length of every lane (non-increasing)."""
    steps = math.ceil(length / lanes)
    return steps, np.clip(length - np.arange(lanes) * steps, 0, steps)


def frame_spans(length: int, frame_size: int) -> list[tuple[int, int]]:
    """[start, end) of every independent frame of `length` bytes (frame_size 0: one frame)."""
    size = frame_size or max(length, 1)
    return [(start, min(start + size, length)) for start in range(0, length, size)]


def block_spans(start: int, end: int, block_size: int) -> list[tuple[int, int]]:
    """[start, end) of every block of a frame: blocks never cross a frame's end."""
    return [(b, min(b + block_size, end)) for b in range(start, end, block_size)]


def to_lanes(data: bytes, lanes: int) -> np.ndarray:
    """Block bytes -> (steps, lanes) int32, lane i holding a contiguous part, zero padded."""
    steps, _ = lane_lengths(len(data), lanes)
    flat = np.zeros(steps * lanes, dtype=np.int32)
    flat[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return np.ascontiguousarray(flat.reshape(lanes, steps).T)


def from_lanes(tokens: np.ndarray, length: int) -> bytes:
    return tokens.T.reshape(-1)[:length].astype(np.uint8).tobytes()


class Codec:
    """The coding loop for one stream, around the predictor `settings` and `model` make."""

    def __init__(self, settings: Settings, model: Model | None = None) -> None:
        self.s = settings
        # engine "bits": the bitwise engine codes every block whole (`encode_block`), no predictor
        self.bits = None
        if settings.engine == "bits":
            m = settings.mix
            self.bits = BlockCoder(m.table_bits, m.history_bits, m.match_bits)
        split.coding_here()  # (before the predictor's first torch calls)
        self.predictor = None
        if self.bits is None:  # (imported here: the bits engine alone codes without torch)
            from dyncompress.coding.predictor import make_predictor

            self.predictor = make_predictor(settings, model)
        self.prev = np.zeros(settings.lanes, dtype=np.int32)  # the byte each lane saw last (padding: 0)
        self.nats = 0.0  # ideal code length so far, for reporting
        self.chooser: split.Chooser | None = None  # split or whole, by measuring (kept across blocks)

    def code_block(self, coder: Coder, tokens: np.ndarray, length: int, progress: Progress | None = None) -> None:
        """Code one block in place: `tokens` is (steps, lanes) int32, read or filled by `coder`
        (the engine "bytes"; "bits" codes in `encode_block` / `decode_block`)."""
        assert self.bits is None, "the bits engine codes whole blocks (encode_block, decode_block)"
        # decided per block, not once: a codec made before a fork may code in the child (one run)
        threads = split.threads_allowed(self.s.threads)
        parts = split.parts_for(self.s.threads, self.s.lanes)
        if self.chooser is None or self.chooser.ways[0] != (parts, threads):
            self.chooser = split.Chooser(threads, parts)
        with split.torch_threads() as set_torch_threads, split.threads_for(parts):
            self._code_block(coder, tokens, length, progress, set_torch_threads)

    def _code_block(
        self,
        coder: Coder,
        tokens: np.ndarray,
        length: int,
        progress: Progress | None,
        set_torch_threads: Callable[[int], None],
    ) -> None:
        steps, lens = lane_lengths(length, self.s.lanes)
        assert tokens.shape == (steps, self.s.lanes)
        active = (lens[None, :] > np.arange(steps)[:, None]).sum(axis=1)  # (steps,) lanes in play
        chooser, way = self.chooser, None
        for start in range(0, steps, self.s.segment_len):
            stop = min(start + self.s.segment_len, steps)
            if chooser.way != way:  # threads or one: speed only, the bits are the same (`split.Chooser`)
                way = chooser.way
                self.predictor.set_parts(way[0])
                set_torch_threads(way[1])
            began = chooser.clock()
            for t in range(start, stop):
                k = int(active[t])
                freqs = self.predictor.step(self.prev, k)  # (B, 256) int64
                coder.code(freqs[:k], tokens[t, :k])
                self.prev = tokens[t].copy()
            self.nats += self.predictor.adapt(tokens[start:stop], active[start:stop])
            chooser.measured(stop - start, chooser.clock() - began)
            if progress is not None:
                progress(int(np.minimum(lens, stop).sum() - np.minimum(lens, start).sum()))


def encode_block(codec: Codec, data: bytes, progress: Progress | None = None) -> bytes:
    if codec.bits is not None:
        payload = codec.bits.encode(data, progress)
        codec.nats += 8 * len(payload) * math.log(2)  # (the code itself: no ideal to report apart)
        return payload
    encoder = Encoder()
    codec.code_block(encoder, to_lanes(data, codec.s.lanes), len(data), progress)
    return encoder.finish()


def decode_block(codec: Codec, payload: bytes, length: int, progress: Progress | None = None) -> bytes:
    if codec.bits is not None:
        return codec.bits.decode(payload, length, progress)
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

    It covers forward, coding, backward and update at the file's shapes. With the exact
    arithmetic of format 2 it is the same on every platform: it is a self-test, which the
    decoder repeats before decoding, so a broken installation (or a bug in the exact kernels on
    some platform) is caught before a byte is written.
    """
    codec = Codec(settings, model)
    length = 2 * settings.segment_len * settings.lanes + 3  # two segments and a ragged end
    sample = (_FINGERPRINT_TEXT * (length // len(_FINGERPRINT_TEXT) + 1))[:length]
    payload = encode_block(codec, sample)
    h = hashlib.sha256(payload)
    if codec.predictor is None:  # the bits engine: its tables are in the payload's bits
        return h.hexdigest()[:16]
    state = codec.predictor.state_dict(tables=False)  # the network's: a copy of the tables is 245 MB more
    for key in ("theta", "h", "c"):  # (none without a network: the statistics are in the payload)
        if key in state:
            h.update(state[key].cpu().numpy().tobytes())
    return h.hexdigest()[:16]
