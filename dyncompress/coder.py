"""From the predictor's probabilities to bits: integer frequencies and range coding.

`frequencies` is the one deterministic function that turns probabilities
into integer frequencies; encoder and decoder both call it on bit-identical
inputs, so they get identical tables. Every byte value keeps a frequency of at
least 1, so any byte can be coded whatever the model believes (also when the
model has diverged to NaN).

The range coder is constriction's queue (FIFO) coder, so a block streams out
in the order it is coded. One call codes one step of every active lane.
"""

from __future__ import annotations

from typing import Protocol

import constriction
import numpy as np

FREQ_BITS = 24  # constriction's range coder works at 24-bit probability precision
FREQ_TOTAL = 1 << FREQ_BITS
_MODEL = constriction.stream.model.Categorical(perfect=False)


def frequencies(probs: np.ndarray) -> np.ndarray:
    """(k, 256) probabilities -> (k, 256) integer frequencies, each >= 1, summing to FREQ_TOTAL.

    Returned as float64 (exact for these integers), the dtype constriction takes.
    IEEE float64 arithmetic: a row sum of the probabilities (in numpy's summation
    order), a division, a multiply and a floor per entry, then sums of integers (exact).
    The same on every CPU for one numpy version and the same inputs; it is not integer
    arithmetic throughout (format 2 will make it so).
    """
    alphabet = probs.shape[-1]
    # fmax/fmin map NaN to a bound; the tiny floor keeps an all-zero row codable
    p = np.fmin(np.fmax(probs, 0.0), 1.0, dtype=np.float64) + 2.0**-40
    scale = (FREQ_TOTAL - alphabet) / p.sum(axis=-1, keepdims=True)
    q = np.floor(p * scale) + 1.0  # each >= 1, sum <= total (up to one unit of rounding)
    # the rounding remainder goes to the most probable symbol, so the sum is exact
    q[np.arange(len(q)), q.argmax(axis=-1)] += FREQ_TOTAL - q.sum(axis=-1)
    return q


class Coder(Protocol):
    """What the codec's loop hands every step's tables and symbols to."""

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        """freqs: (k, 256) integer frequencies (float64) of the k active lanes; symbols: (k,) int32."""


class Encoder:
    """Codes known symbols. `code` reads `symbols` (int32)."""

    def __init__(self) -> None:
        self._coder = constriction.stream.queue.RangeEncoder()

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        self._coder.encode(symbols, _MODEL, freqs)

    def finish(self) -> bytes:
        return self._coder.get_compressed().astype("<u4").tobytes()


class Decoder:
    """Recovers symbols. `code` writes into `symbols` (an int32 view of the output)."""

    def __init__(self, payload: bytes) -> None:
        if len(payload) % 4:
            raise ValueError("range-coded payload is not a whole number of 32-bit words")
        words = np.frombuffer(payload, dtype="<u4").astype(np.uint32)
        self._coder = constriction.stream.queue.RangeDecoder(words)

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        symbols[:] = self._coder.decode(_MODEL, freqs)
