"""From the predictor's integer frequencies to bits: range coding.

The predictor hands over integer frequencies (int64, each >= 1, summing to 2^24,
`fixed.frequencies`). constriction's categorical model takes floats and quantizes
them (`fast_quantized_cdf`): it sums them, scales by (2^24 - n) / sum, and gives
symbol i the cumulative floor(scale * sum_{j<i} p_j) + i. Handed p_j = f_j - 1,
every sum is an integer below 2^24 (exact in float64), the scale is exactly 1.0,
and the cumulative comes out as sum_{j<i} f_j: the integers themselves, on every
platform. `tests/test_coder.py` checks the code length this gives.

The range coder is constriction's queue (FIFO) coder, so a block streams out
in the order it is coded. One call codes one step of every active lane.
"""

from __future__ import annotations

from typing import Protocol

import constriction
import numpy as np

_MODEL = constriction.stream.model.Categorical(perfect=False)


def _weights(freqs: np.ndarray) -> np.ndarray:
    """Integer frequencies -> the floats constriction turns back into exactly these integers."""
    return (freqs - 1).astype(np.float64)


class Coder(Protocol):
    """What the codec's loop hands every step's tables and symbols to."""

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        """freqs: (k, 256) int64 frequencies of the k active lanes; symbols: (k,) int32."""


class Encoder:
    """Codes known symbols. `code` reads `symbols` (int32)."""

    def __init__(self) -> None:
        self._coder = constriction.stream.queue.RangeEncoder()

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        self._coder.encode(symbols, _MODEL, _weights(freqs))

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
        symbols[:] = self._coder.decode(_MODEL, _weights(freqs))
