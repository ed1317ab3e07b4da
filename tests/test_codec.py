"""The one loop: lanes, blocks, adaptation, the predictor seam, fingerprint."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import NET, corpus
from dyncompress.coding.codec import Codec, decode_block, encode_block, fingerprint, from_lanes, lane_lengths, to_lanes
from dyncompress.config.settings import RULES, AdaptSettings, Settings


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


def test_static_codes_with_the_weights_untouched():
    codec = Codec(Settings(**NET, adapt=AdaptSettings(rule="static", lr=1.0)))
    before = codec.predictor.state_dict()["theta"]
    encode_block(codec, corpus("xargs.1")[:1500])
    after = codec.predictor.state_dict()
    assert torch.equal(after["theta"], before)
    assert after["h"].abs().sum() > 0  # the network did run: its state moved
    adapting = Codec(Settings(**NET))
    encode_block(adapting, corpus("xargs.1")[:1500])
    assert not torch.equal(adapting.predictor.state_dict()["theta"], before)


def test_predictor_state_restores_and_resets():
    """Coding on from a saved state gives the same bytes as going on; reset is a fresh start."""
    text = corpus("alice29.txt")[:3000]
    codec = Codec(Settings(**NET))  # online rms: Adam statistics are part of the state
    encode_block(codec, text[:1000])
    saved, prev = codec.predictor.state_dict(), codec.prev.copy()
    assert any(k.startswith("adapt.") for k in saved)
    went_on = encode_block(codec, text[1000:])
    codec.predictor.load_state_dict(saved)
    codec.prev = prev
    assert encode_block(codec, text[1000:]) == went_on
    codec.predictor.reset()
    codec.prev[:] = 0
    assert encode_block(codec, text[:1000]) == encode_block(Codec(Settings(**NET)), text[:1000])


def test_thread_count_is_the_recorded_one_while_coding(monkeypatch):
    """The kernels' floats depend on the thread count: coding runs with the settings' count, whatever
    the process uses, and gives the process its own count back."""
    seen = []
    codec = Codec(Settings(**{**NET, "threads": 3}))
    step = codec.predictor.step
    monkeypatch.setattr(codec.predictor, "step", lambda *args: seen.append(torch.get_num_threads()) or step(*args))
    torch.set_num_threads(1)
    encode_block(codec, b"threads " * 20)
    assert seen and set(seen) == {3}
    assert torch.get_num_threads() == 1


def _fingerprint_in_fresh_process(settings: Settings, threads: int) -> str:
    code = (
        "import sys, json, torch; torch.set_num_threads(int(sys.argv[2]));"
        "from dyncompress.coding.codec import fingerprint; from dyncompress.config.settings import Settings;"
        "print(fingerprint(Settings.from_dict(json.loads(sys.argv[1]))))"
    )
    import json

    args = [sys.executable, "-c", code, json.dumps(settings.to_dict()), str(threads)]
    return subprocess.run(args, capture_output=True, check=True, text=True).stdout.strip()


def test_fingerprint_is_reproduced_by_a_fresh_process_and_tracks_settings():
    s = Settings(**NET)
    here = fingerprint(s)
    assert len(here) == 16 and int(here, 16) >= 0
    assert _fingerprint_in_fresh_process(s, threads=2) == here  # another process, another default thread count
    others = [
        Settings(**{**NET, "hidden": 33}),
        Settings(**{**NET, "lanes": 7}),
        Settings(**{**NET, "seed": 1}),
        Settings(**NET, adapt=AdaptSettings(lr=1e-3)),
        Settings(**NET, adapt=AdaptSettings(rule="static")),
    ]
    prints = {fingerprint(o) for o in others}
    assert here not in prints and len(prints) == len(others)


def test_bounded_stress_run_has_no_failures(tmp_path):
    """bench/stress.py for ~3 s (small inputs and networks; the lab notebook has a long run): random
    inputs, modes, levels, lanes and block sizes, in-process and in fresh CLI processes, two
    workers at once; every round trip exact."""
    script = Path(__file__).resolve().parent.parent / "bench" / "stress.py"
    r = subprocess.run(
        [sys.executable, str(script), "--seconds", "3", "--workers", "2", "--max-size", "2000", "--max-hidden", "32"]
        + ["--fresh-every", "4", "--seed", "7", "--failures", str(tmp_path / "failures.json")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    summary = r.stdout.splitlines()[0]
    trips = int(summary.split()[1])
    assert trips >= 2 and " 0 failed" in summary, r.stdout
    assert "ok fresh" in r.stdout and "ok in-process" in r.stdout, r.stdout
