"""Probabilities -> integer frequencies -> range coding, and back."""

import numpy as np
import pytest

from dyncompress.coder import FREQ_TOTAL, Decoder, Encoder, frequencies


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def test_frequencies_sum_exactly_and_keep_every_symbol():
    rng = np.random.default_rng(0)
    cases = [
        softmax(rng.normal(size=(16, 256)) * 10),  # peaked
        np.full((2, 256), 1 / 256, dtype=np.float32),  # uniform
        np.eye(256, dtype=np.float32)[:3],  # certain
        np.zeros((1, 256), dtype=np.float32),  # degenerate
        np.full((1, 256), np.nan, dtype=np.float32),  # a diverged model
        np.full((1, 256), np.inf, dtype=np.float32),
    ]
    for probs in cases:
        q = frequencies(probs)
        assert q.dtype == np.float64
        assert (q >= 1).all() and (q == np.floor(q)).all()
        assert (q.sum(axis=1) == FREQ_TOTAL).all()


def test_frequencies_follow_the_probabilities():
    p = softmax(np.random.default_rng(1).normal(size=(4, 256)) * 3)
    q = frequencies(p) / FREQ_TOTAL
    assert np.abs(q - p).max() < 1e-4


def test_range_coding_round_trip_and_cost_near_ideal():
    rng = np.random.default_rng(2)
    steps, lanes = 300, 6
    probs = softmax(rng.normal(size=(steps, lanes, 256)) * 4)
    symbols = np.array([[rng.choice(256, p=p / p.sum()) for p in row] for row in probs], dtype=np.int32)
    enc = Encoder()
    for t in range(steps):
        k = lanes - (t % 3)  # ragged: fewer lanes in play on some steps
        enc.code(frequencies(probs[t, :k]), symbols[t, :k])
    payload = enc.finish()

    dec, out = Decoder(payload), np.zeros_like(symbols)
    for t in range(steps):
        k = lanes - (t % 3)
        dec.code(frequencies(probs[t, :k]), out[t, :k])
    mask = np.arange(lanes)[None, :] < (lanes - np.arange(steps) % 3)[:, None]
    assert (out[mask] == symbols[mask]).all()
    ideal = -np.log2(np.take_along_axis(probs, symbols[..., None], axis=2)[..., 0][mask]).sum()
    assert 8 * len(payload) <= ideal + 64 + 0.01 * ideal


def test_decoder_rejects_ragged_payload():
    with pytest.raises(ValueError):
        Decoder(b"abc")
