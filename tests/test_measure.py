"""Measuring: eval's estimate against a real encode, tuning picks the measured best, per-rule defaults, bench, plot."""

import re
import sys

import numpy as np
import pytest
import torch

from conftest import CORPORA, NET, corpus, run_cli
from dyncompress import DyncompressError
from dyncompress.cli.peers import PEERS, bench_peer, confirm
from dyncompress.coding.measure import Tally, measure, plot, row_settings, save_defaults, tune
from dyncompress.config.levels import LORA_OUT_DEFAULTS, MIXED_FACTORS, MODEL_LEVELS, RULE_DEFAULTS, make_settings
from dyncompress.config.model import load, save

ALICE = CORPORA / "alice29.txt"


@pytest.mark.parametrize("row", ["rms-decay", "static", "online"])
def test_estimate_matches_a_real_encode(tiny, row):
    """Two blocks (state carried across), four lanes, a ragged end: the estimate is the range
    coder's payload to within its flush, a few bytes per block."""
    _, model = tiny
    data = corpus("alice29.txt")[30_000:37_001]
    knobs = dict(block_size=4_000, lanes=4, device="cpu") if row != "online" else dict(NET, block_size=4_000)
    settings, start = row_settings(row, len(data), model, **knobs)
    m = measure(data, settings, start, row, positions=True)
    c = confirm(data, m, start)
    assert 0 <= c["payload"] - c["estimate"] <= 4 * 2 + 4, c
    assert c["file"] == c["payload"] + c["header"] + c["framing"]
    assert len(m.positions) == len(data) and abs(float(m.positions.sum()) - m.bits) < 1e-2 * m.length
    assert np.array_equal(np.sort(m.positions), np.sort(m.order))  # the same bytes' bits, reordered
    assert 1.0 < m.bpb < 8.0


def test_tally_undoes_the_lane_layout():
    """Bits land on the byte they were spent on: lane i holds the i-th contiguous part."""
    tally = Tally(lanes=3)
    freqs = np.full((3, 256), 1 << 16, dtype=np.float64)  # 24 - 16 = 8 bits for every byte ...
    freqs[:, 7] = 1 << 23  # ... except byte 7: 1 bit
    for step in range(4):  # length 10 in 3 lanes of 4: the last lane has 2 bytes
        symbols = np.array([7 if step == 0 else 0, 0, 7][: 3 if step < 2 else 2], dtype=np.int32)
        tally.code(freqs[: len(symbols)], symbols)
    bits = tally.per_byte(10)
    assert bits.tolist() == [1, 8, 8, 8, 8, 8, 8, 8, 1, 1]  # lane 2 = bytes 8, 9: a 7 at steps 0 and 1
    assert tally.in_coding_order().tolist() == [1, 8, 1, 8, 8, 1, 8, 8, 8, 8]  # step by step, active lanes


def test_tune_picks_the_lowest_measured_point(tiny):
    _, model = tiny
    data = corpus("alice29.txt")[60_000:63_000]
    seen = []
    grid = {"lr": [1e-3, 3e-3, 1e-2], "segment_len": [4, 8]}
    net = dict(lanes=2, device="cpu", experts="")  # the search, on the network alone (quicker)
    best, results = tune(data, model, "rms", grid, "grid", report=lambda p, m: seen.append(p), **net)
    assert len(results) == 6 and len(seen) == 6
    lowest = min(results, key=lambda r: r[1].bits)
    assert best == lowest[0] and set(best) == {"lr", "segment_len"}
    assert len({round(m.bpb, 6) for _, m in results}) > 1  # the knobs change the outcome
    best2, results2 = tune(data, model, "rms", grid, "successive", **net)
    assert best2 == min(results2, key=lambda r: r[1].bits)[0] and len(results2) <= 5
    with pytest.raises(ValueError, match="cannot tune"):
        tune(data, model, "rms", {"beta2": [0.9]}, **net)


def test_tuned_settings_become_the_rules_defaults(tiny, tmp_path):
    path, model = tiny
    tuned = save_defaults(model, "sgd", {"lr": 0.05, "segment_len": 4}, {"source": "test"})
    out = tmp_path / "tuned.dcm"
    save(tuned, str(out))
    again = load(str(out))
    s = make_settings(model=again, rule="sgd", device="cpu")
    assert (s.adapt.rule, s.adapt.lr, s.segment_len) == ("sgd", 0.05, 4)
    s = make_settings(model=again, device="cpu", experts="", rule="rms-decay")  # the model's own defaults
    assert (s.adapt.rule, s.adapt.lr, s.adapt.decay, s.segment_len) == ("rms-decay", 3e-3, 1e-3, 8)
    s = make_settings(model=again, device="cpu", rule="rms-decay")  # with experts: the rates scaled for the mixture
    factors = MIXED_FACTORS["rms-decay"]
    assert (s.adapt.lr, s.adapt.decay) == pytest.approx((3e-3 * factors["lr"], 1e-3 * factors["decay"]))
    s = make_settings(model=again, device="cpu")  # the level's LoRA on W_out: its own rate and segments
    assert (s.adapt.rule, s.adapt.lora, s.adapt.lora_on) == ("rms-decay", 24, "w_out")  # (rank <= hidden 24)
    assert (s.adapt.lr, s.segment_len) == (LORA_OUT_DEFAULTS["lr"], MODEL_LEVELS[6]["segment_len"])
    assert s.adapt.decay == pytest.approx(1e-3 * factors["decay"])
    s = make_settings(model=model, rule="sgd", device="cpu")  # nothing recorded: the rule's fallback
    assert s.adapt.lr == RULE_DEFAULTS["sgd"]["lr"]
    assert make_settings(model=again, rule="sgd", lr=0.2, device="cpu").adapt.lr == 0.2  # explicit wins
    assert again.info["tuning"]["sgd"] == {"source": "test"}


def test_one_tlm_threshold_replaces_the_other_form(tiny):
    """A model whose rule records an absolute TLM threshold (`tune -o --tlm-bits`) still codes at
    the levels with it (none skips by itself); an explicit option of either form replaces it, and
    a static level skips nothing."""
    _, model = tiny
    recorded = save_defaults(model, "rms-decay", {"tlm_bits": 2.0}, {"source": "test"})

    def thresholds(**kw):
        a = make_settings(model=recorded, device="cpu", **kw).adapt
        return a.tlm_bits, a.tlm_relative

    assert thresholds() == (2.0, 0.0)  # no level skips by itself: the recorded threshold
    assert thresholds(level=9) == (2.0, 0.0)
    assert thresholds(level=2) == (0.0, 0.0)
    assert thresholds(tlm_relative=1.1) == (0.0, 1.1)
    assert thresholds(tlm_bits=2.5) == (2.5, 0.0)
    assert thresholds(level=9, tlm_relative=1.05) == (0.0, 1.05)
    with pytest.raises(ValueError, match="choose one"):
        thresholds(tlm_bits=2.5, tlm_relative=1.05)


def test_bench_peers_run_and_missing_ones_are_skipped_by_name():
    data = corpus("alice29.txt")
    rows = [bench_peer(p, data) for p in PEERS if p.module in ("zlib", "bz2", "lzma", "pyppmd")]
    assert [r.name for r in rows] == ["zlib -9", "bz2 -9", "lzma -9e", "PPMd o6"]
    assert all(0 < r.size < len(data) for r in rows)
    assert rows[-1].size < min(r.size for r in rows[:-1])  # PPMd: the classical peer to beat on text

    def missing(name):
        raise ImportError(name)

    row = bench_peer(next(p for p in PEERS if p.module == "zstandard"), data, importer=missing)
    assert row.size is None and row.note == "skipped: Python package zstandard not installed"


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(DyncompressError, match=r"pip install 'dyncompress\[plot\]'"):
        plot([], str(tmp_path / "x.png"), "t", 100)
    assert not (tmp_path / "x.png").exists()


def test_cli_eval_table_confirm_and_plot(tiny, tmp_path):
    path, _ = tiny
    png = tmp_path / "curve.png"
    r = run_cli(
        "eval", f"{ALICE}:20k:23k", "--model", path, "--rules", "static,sgd,rms,rms-decay",
        "--lanes", "2", "--confirm", "rms-decay", "--plot", png, "--device", "cpu",
    )  # fmt: skip
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:6]}
    assert list(rows) == ["static", "sgd", "rms", "rms-decay"]
    bpb = {k: float(v[4]) for k, v in rows.items()}
    for rule in ("sgd", "rms", "rms-decay"):  # the "vs static" column agrees with the bits per byte
        assert float(rows[rule][5].rstrip("%")) == pytest.approx(100 * (bpb[rule] / bpb["static"] - 1), abs=0.06)
    m = re.search(r"range coder wrote [\d,]+ \(\+(\d+)\)", out)
    assert m and int(m.group(1)) <= 8, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_eval_refuses_bad_requests(tiny, tmp_path):
    path, _ = tiny
    r = run_cli("eval", ALICE, "--model", path, "--rules", "static,fancy")
    assert r.returncode == 2 and "fancy" in r.stderr.decode()
    r = run_cli("eval", ALICE, "--model", path, "--rules", "static", "--confirm", "rms")
    assert r.returncode == 2 and "--confirm rms" in r.stderr.decode()
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    r = run_cli("eval", ALICE, "--model", path, "--plot", tmp_path / "x.png", env={"PYTHONPATH": str(fake.parent)})
    assert r.returncode == 1 and r.stderr.decode().strip() == (
        "dyncompress: --plot needs matplotlib: pip install 'dyncompress[plot]'"
    )
    r = run_cli("eval", f"{ALICE}:5:5", "--model", path)
    assert r.returncode == 1 and "empty input" in r.stderr.decode()
    if not torch.cuda.is_available():
        for command in (["eval", "-r", "static"], ["tune", "--lr", "1e-3", "--decay", "0", "--segment-len", "8"]):
            r = run_cli(*command, CORPORA / "xargs.1", "--model", path, "--device", "cuda")
            assert r.returncode == 1 and "needs a CUDA GPU" in r.stderr.decode() and b"Traceback" not in r.stderr


def test_cli_tune_reports_every_point_and_saves_the_best(tiny, tmp_path):
    path, _ = tiny
    out = tmp_path / "tuned.dcm"
    r = run_cli(
        "tune", f"{ALICE}:60k:64k", "--model", path, "--rule", "rms-decay", "--lr", "1e-3,1e-2",
        "--decay", "0,1e-3", "--segment-len", "8", "--search", "grid", "--lanes", "2", "-o", out, "--device", "cpu",
    )  # fmt: skip
    text = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    points = re.findall(r"lr=(\S+), decay=(\S+), segment_len=(\d+)\s+([\d.]+) bits/byte", text)
    assert len(points) == 4
    best = min(points, key=lambda p: float(p[3]))
    assert f"best: lr={best[0]}, decay={best[1]}, segment_len={best[2]}: {best[3]}" in text
    s = make_settings(model=load(str(out)), rule="rms-decay", device="cpu")
    assert (f"{s.adapt.lr:g}", f"{s.adapt.decay:g}", str(s.segment_len)) == best[:3]


def test_cli_tune_takes_the_levels_lora_on_w_out(tiny):
    """`tune --lora R --lora-on w_out` tunes the adaptation levels -3 ... -9 use (LoRA on the output
    matrix alone, its own starting rate); --lora-on without a rank is a usage error."""
    path, _ = tiny
    r = run_cli(
        "tune", f"{ALICE}:60k:63k", "--model", path, "--lora", "4", "--lora-on", "w_out", "--segment-len", "8",
        "--decay", "1e-4", "--lanes", "2", "--device", "cpu",
    )  # fmt: skip
    text = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    rates = re.findall(r"lr=(\S+), decay=\S+, segment_len=8\s+[\d.]+ bits/byte", text)
    assert sorted(float(x) for x in rates) == [LORA_OUT_DEFAULTS["lr"] * f for f in (0.25, 0.5, 1, 2, 4)], text
    r = run_cli("tune", f"{ALICE}:60k:63k", "--model", path, "--lora-on", "w_out", "--device", "cpu")
    assert r.returncode == 2 and b"give a rank too" in r.stderr


def test_cli_bench_prints_peers_next_to_dyncompress(tiny):
    path, _ = tiny
    r = run_cli("bench", f"{ALICE}:0:6k", CORPORA / "xargs.1", "--model", path, "--lanes", "2", "--device", "cpu")
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    for name in ("dyncompress -6", "zlib -9", "bz2 -9", "lzma -9e", "PPMd o6"):
        assert len(re.findall(rf"^  {re.escape(name)}\s+[\d,]+\s+\d+\.\d{{3}}", out, re.M)) == 2, out
    for peer in ("zstd -19", "brotli -q 11"):
        line = rf"^  {re.escape(peer)}\s+(skipped: Python package \w+ not installed|[\d,]+)"
        assert len(re.findall(line, out, re.M)) == 2


def test_cli_bench_fast_row_is_the_fast_level_and_beats_lzma():
    r = run_cli("bench", "--fast", f"{ALICE}:0:30k")
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    rows = dict(re.findall(r"^  (dyncompress --fast|lzma -9e)\s+[\d,]+\s+(\d+\.\d{3})", out, re.M))
    assert rows.keys() == {"dyncompress --fast", "lzma -9e"} and float(rows["dyncompress --fast"]) < float(
        rows["lzma -9e"]
    ), out
    r = run_cli("bench", "--fast", "--online", f"{ALICE}:0:1k")
    assert r.returncode == 2 and "a level of its own" in r.stderr.decode()


def test_eval_rows_need_a_model_except_online():
    with pytest.raises(DyncompressError, match="needs a pretrained model"):
        row_settings("rms", 1000, None)
    s, start = row_settings("online", 1000, None, **NET)
    assert start is None and s.adapt.rule == "rms"


def test_eval_measures_by_default_what_the_level_adapts_as_encode_codes_it(model):
    from dyncompress.cli.measure import eval_
    from dyncompress.config.levels import make_settings

    rules = next(p for p in eval_.params if p.name == "rules").default.split(",")
    assert rules[:2] == ["static", "level"] and "online" in rules
    for level in (None, 3, 9):
        settings, start = row_settings("level", 50_000, model, level)
        assert start is model and settings == make_settings(level=level, size_hint=50_000, model=model)
        assert settings.adapt.lora == 32 and settings.adapt.lora_names == (
            "w_out",
        )  # the LoRA rule, not a whole-network row
    with pytest.raises(DyncompressError, match="needs a pretrained model"):
        row_settings("level", 50_000, None)
