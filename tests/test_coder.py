"""Integer frequencies -> range coding, and back: the coder codes with exactly the integers."""

import numpy as np
import pytest

from dyncompress.coding.coder import Decoder, Encoder
from dyncompress.network.fixed import FREQ_BITS, FREQ_TOTAL, frequencies


def _random_freqs(rng, shape):
    return frequencies(rng.normal(size=(*shape, 256)) * 4 * 4096)


def test_range_coding_round_trip_and_cost_near_ideal():
    rng = np.random.default_rng(2)
    steps, lanes = 300, 6
    freqs = np.stack([_random_freqs(rng, (lanes,)) for _ in range(steps)])
    p = freqs / FREQ_TOTAL
    symbols = np.array([[rng.choice(256, p=q) for q in row] for row in p], dtype=np.int32)
    enc = Encoder()
    for t in range(steps):
        k = lanes - (t % 3)  # ragged: fewer lanes in play on some steps
        enc.code(freqs[t, :k], symbols[t, :k])
    payload = enc.finish()

    dec, out = Decoder(payload), np.zeros_like(symbols)
    for t in range(steps):
        k = lanes - (t % 3)
        dec.code(freqs[t, :k], out[t, :k])
    mask = np.arange(lanes)[None, :] < (lanes - np.arange(steps) % 3)[:, None]
    assert (out[mask] == symbols[mask]).all()
    ideal = -np.log2(np.take_along_axis(p, symbols[..., None], axis=2)[..., 0][mask]).sum()
    assert 8 * len(payload) <= ideal + 64 + 0.001 * ideal


@pytest.mark.parametrize("freq", [1, 2, 3])
def test_the_coder_codes_with_exactly_the_integer_frequencies(freq):
    """A symbol of frequency f costs exactly 24 - log2(f) bits: constriction did not quantize the
    table again (handed the frequencies as probabilities, it would give 2 or 3 where we say 2)."""
    row = np.full(256, (FREQ_TOTAL - freq) // 255, dtype=np.int64)
    row[137] = freq
    row[0] += FREQ_TOTAL - row.sum()
    assert row.sum() == FREQ_TOTAL
    n = 4000
    enc = Encoder()
    for _ in range(n // 8):
        enc.code(np.tile(row, (8, 1)), np.full(8, 137, dtype=np.int32))
    bits = 8 * len(enc.finish())
    exact = n * (FREQ_BITS - np.log2(freq))
    assert exact <= bits <= exact + 64


def test_decoder_rejects_ragged_payload():
    with pytest.raises(ValueError):
        Decoder(b"abc")
