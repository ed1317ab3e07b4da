"""The shape of the mLSTM: its hidden size and the layout of its flat parameter vector (`theta`), which
the model files, the settings and both forms of the network (`network.mlstm`, `network.exact`) share."""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHABET = 256


@dataclass(frozen=True)
class MLSTMShape:
    hidden: int = 256

    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        H = self.hidden
        return [
            ("w_in", (ALPHABET, 5 * H)),  # [W_mx | W_x] rows, one per input byte
            ("w_mh", (H, H)),
            ("w_m", (H, 4 * H)),
            ("b", (4 * H,)),
            ("w_out", (H, ALPHABET)),
            ("b_out", (ALPHABET,)),
        ]

    @property
    def num_params(self) -> int:
        return sum(math.prod(dims) for _, dims in self.layout())
