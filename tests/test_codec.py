"""The one loop: lanes, blocks, adaptation, fingerprint."""

import numpy as np
import pytest

from conftest import NET, corpus
from dyncompress.adapt import RULES, AdaptSettings
from dyncompress.codec import (
    DEFAULT_LEVEL,
    LEVELS,
    Codec,
    Settings,
    decode_block,
    encode_block,
    fingerprint,
    from_lanes,
    lane_lengths,
    level_settings,
    to_lanes,
)


@pytest.mark.parametrize("length,lanes", [(1, 1), (1, 4), (10, 4), (12, 4), (13, 4), (100, 7), (3, 8)])
def test_lanes_split_and_join(length, lanes):
    data = bytes(np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8))
    tokens = to_lanes(data, lanes)
    steps, lens = lane_lengths(length, lanes)
    assert tokens.shape == (steps, lanes) and lens.sum() == length
    assert all(lens[i] >= lens[i + 1] for i in range(lanes - 1))
    assert from_lanes(tokens, length) == data


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_round_trips_across_blocks(rule):
    data = corpus("grammar.lsp")
    settings = Settings(**NET, adapt=AdaptSettings(rule=rule, lr=0.05 if rule == "sgd" else 3e-3, decay=1e-3))
    enc, dec = Codec(settings), Codec(settings)
    pieces = [data[:1000], data[1000:1001], data[1001:]]  # blocks of unequal size; state carries over
    payloads = [encode_block(enc, p) for p in pieces]
    assert [decode_block(dec, c, len(p)) for c, p in zip(payloads, pieces, strict=True)] == pieces


def test_adaptation_learns_from_the_stream():
    """A repeated text costs less the second time: the parameters really change."""
    text = corpus("xargs.1")[:2000]
    settings = Settings(**NET, adapt=AdaptSettings(lr=5e-3))
    codec = Codec(settings)
    first = len(encode_block(codec, text))
    second = len(encode_block(codec, text))
    assert second < 0.85 * first
    static = Settings(**NET, adapt=AdaptSettings(lr=0.0))
    frozen = Codec(static)
    assert len(encode_block(frozen, text)) >= first


def test_fingerprint_is_stable_and_tracks_settings():
    s = Settings(**NET)
    assert fingerprint(s) == fingerprint(s)
    assert len(fingerprint(s)) == 16
    assert fingerprint(s) != fingerprint(Settings(**{**NET, "hidden": 33}))
    assert fingerprint(s) != fingerprint(Settings(**NET, adapt=AdaptSettings(lr=1e-3)))


def test_settings_validate_and_round_trip():
    s = Settings(**NET, adapt=AdaptSettings(rule="rms-decay", decay=0.01))
    assert Settings.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError):
        Settings(lanes=0)
    with pytest.raises(ValueError):
        Settings(device="tpu")
    with pytest.raises(ValueError):
        Settings.from_dict({**s.to_dict(), "extra": 1})


def test_levels_are_valid_and_the_default_is_level_6():
    assert level_settings(DEFAULT_LEVEL, "cpu") == Settings()
    sizes = [level_settings(level, "cpu").hidden for level in LEVELS]
    assert sorted(LEVELS) == list(range(1, 10)) and sizes == sorted(sizes)
    with pytest.raises(ValueError):
        level_settings(0, "cpu")
