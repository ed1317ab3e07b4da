"""The cheaper adaptations (issue 12): sparse dynamic evaluation, LoRA, and TLM weighting and skipping."""

import numpy as np
import pytest
import torch

from conftest import corpus
from dyncompress import compress, decompress
from dyncompress.coding.codec import Codec, decode_block, encode_block
from dyncompress.config.levels import MODEL_LEVELS, make_settings
from dyncompress.errors import DyncompressError
from dyncompress.network import exact, fixed, update_kernels
from dyncompress.network.exact import ExactMLSTM, to_master
from dyncompress.network.fixed import (
    FREQ_BITS,
    FREQ_TOTAL,
    LOG_FRAC,
    code_lengths,
    frequencies,
    log2_table,
    tlm_units,
    tlm_weights,
)
from dyncompress.network.mlstm import MLSTMShape, init_params, unflatten

SHAPE = MLSTMShape(32)
K = 16


def _reference_loss(theta, tokens, mask, M=None, lora=None) -> torch.Tensor:
    """The frozen network's summed code length in float64 with autograd, with sparse's M (h' = h +
    h[:k] M on the first k units, feeding both the output and the next step) or LoRA's factors
    ({name: (A, B)}: x W + (x A) B)."""
    w, H, lora = unflatten(SHAPE, theta), SHAPE.hidden, lora or {}

    def mat(x, name):
        y = x @ w[name]
        return y + (x @ lora[name][0]) @ lora[name][1] if name in lora else y

    T, B = tokens.shape
    h = torch.zeros(B, H, dtype=torch.float64)
    c = torch.zeros(B, H, dtype=torch.float64)
    prev = torch.zeros(B, dtype=torch.long)
    loss = torch.zeros((), dtype=torch.float64)
    for t in range(T):
        ex = w["w_in"][prev]
        m = ex[:, :H] * mat(h, "w_mh")
        z = ex[:, H:] + mat(m, "w_m") + w["b"]
        i, f, o = (torch.sigmoid(z[:, j * H : (j + 1) * H]) for j in range(3))
        c = f * c + i * torch.tanh(z[:, 3 * H :])
        h = o * torch.tanh(c)
        if M is not None:
            h = torch.cat([h[:, :K] + h[:, :K] @ M, h[:, K:]], dim=1)
        logp = torch.log_softmax(mat(h, "w_out") + w["b_out"], dim=-1)
        loss = loss - (logp.gather(1, tokens[t].unsqueeze(1)).squeeze(1) * mask[t]).sum()
        prev = tokens[t]
    return loss


def _exact_gradient(net, lanes: int, steps: int):
    """Code 20 steps of alice29 on `lanes` lanes and take the exact backward pass (a ragged end)."""
    data = np.frombuffer(corpus("alice29.txt")[5000 : 5000 + lanes * steps], dtype=np.uint8)
    tokens = torch.from_numpy(data.reshape(lanes, steps).T.astype(np.int64))
    prev = torch.zeros(lanes, dtype=torch.long)
    for t in range(steps):
        net.record(t, torch.from_numpy(frequencies(net.step(prev, t).numpy())))
        prev = tokens[t]
    mask = torch.ones(steps, lanes, dtype=torch.float64)
    mask[-4:, 3:] = 0  # a ragged end
    grad_before = net.grad.clone()
    net.backward(steps, tokens, mask)
    assert torch.equal(net.grad, grad_before)  # the network is frozen: no gradient of its weights
    assert torch.equal(net.side_grad, net.side_grad.round())
    return tokens, mask, net.side_grad * 2.0**-fixed.G


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    cos = float(got @ want / (got.norm() * want.norm()))
    assert cos > 0.99999, cos  # (a missing step back through a factor: 0.9986 ... 0.996)
    assert float((got - want).norm() / want.norm()) < 0.01


def test_the_sparse_gradient_matches_autograd():
    """M's exact gradient (through the output and back through time) against float64 autograd on
    the same equations, with a nonzero M so that the step back through it is exercised too."""
    lanes, steps = 4, 20
    master = to_master(init_params(SHAPE, 3) * 0.7)
    rng = np.random.default_rng(1)
    M = torch.from_numpy(np.round(rng.normal(size=(K, K)) * 0.05 * 2.0**20) * 2.0**-20)
    net = ExactMLSTM(SHAPE, master, lanes, steps, sparse=K)
    net.side_master.copy_(M.reshape(-1) * 2.0**fixed.FM)
    net.refresh_side()
    tokens, mask, got = _exact_gradient(net, lanes, steps)
    M_ref = M.clone().requires_grad_(True)
    _reference_loss(master * 2.0**-fixed.FM, tokens, mask, M=M_ref).backward()
    _close(got, M_ref.grad.reshape(-1))


def test_the_lora_gradients_match_autograd():
    """Both factors' exact gradients on all three matrices (through the output, and back through
    time through W_m and W_mh) against float64 autograd, with B nonzero so that A has a gradient
    and the step back through the factors is exercised."""
    lanes, steps, r = 4, 20, 3
    master = to_master(init_params(SHAPE, 3) * 0.7)
    net = ExactMLSTM(SHAPE, master, lanes, steps, lora=r, lora_on=exact.LORA_MATRICES, seed=5)
    views = exact.unflatten_side(net.side_layout, net.side_master)
    rng = np.random.default_rng(2)
    for name, v in views.items():
        assert name.endswith(".A") == bool(v.abs().sum()), name  # A seeded, B zero: the model as trained
        if name.endswith(".B"):
            v.copy_(torch.from_numpy(np.round(rng.normal(size=v.shape) * 0.3 * 2.0**20) * 2.0**12))
    net.refresh_side()
    tokens, mask, got = _exact_gradient(net, lanes, steps)
    factors = {n: v.mul(2.0**-fixed.FM).requires_grad_(True) for n, v in views.items()}
    lora = {name: (factors[f"{name}.A"], factors[f"{name}.B"]) for name in exact.LORA_MATRICES}
    _reference_loss(master * 2.0**-fixed.FM, tokens, mask, lora=lora).backward()
    want = torch.cat([factors[n].grad.reshape(-1) for n, _ in net.side_layout])
    _close(got, want)
    for name, g in exact.unflatten_side(net.side_layout, got).items():  # each factor on its own too
        _close(g.reshape(-1), factors[name].grad.reshape(-1))


@pytest.mark.parametrize("side", [dict(sparse=K), dict(lora=4), dict(lora=2, lora_on="w_out")])
def test_sparse_and_lora_start_as_the_static_model_and_then_adapt(tiny, side):
    """M and LoRA's B start at zero: with no step (lr 0) they code exactly as the static model; with
    steps, only the side weights move, and the text costs less than with the model as trained."""
    _, model = tiny
    text = corpus("alice29.txt")[30000:34000]

    def coded(**kw):
        codec = Codec(make_settings(model=model, lanes=2, threads=1, experts="", **kw), model)
        return encode_block(codec, text), codec.predictor

    static, _ = coded(rule="static")
    frozen, pred = coded(lr=0.0, **side)
    assert frozen == static
    start = pred.net.side_master.clone()
    adapted, pred = coded(lr=3e-3, **side)
    assert len(adapted) < len(static)
    assert torch.equal(pred.theta, pred.theta_start)  # the network itself never moved
    assert not torch.equal(pred.net.side_master, start)
    pred.reset()
    assert torch.equal(pred.net.side_master, start)


VARIANTS = {
    "sparse": dict(sparse=K),
    "tlm": dict(tlm_bits=4.5),
    "tlm-lanes": dict(tlm_bits=4.5, tlm_lanes=True, tlm_lambda=2.0),
    "tlm-relative": dict(tlm_relative=1.0),
    "sparse-tlm": dict(sparse=8, tlm_bits=4.5),
    "lora": dict(lora=4),
    "lora-tlm": dict(lora=2, lora_on="w_m,w_out", tlm_bits=4.5),
    "lora-out": dict(lora=4, lora_on="w_out"),  # the compiled step and backward (`ExactMLSTM.out_lora`)
}


@pytest.mark.parametrize(
    "name,level",
    [*((name, 6) for name in VARIANTS), ("sparse-tlm", 3), ("sparse-tlm", 9), ("tlm", 9), ("lora-tlm", 3), ("lora", 9)],
)
def test_each_variant_round_trips_across_blocks(tiny, name, level):
    _, model = tiny
    variant = VARIANTS[name]
    data = corpus("grammar.lsp")[:1200]
    settings = make_settings(level=level, model=model, size_hint=len(data), threads=1, **variant)
    assert settings.adapt.rule == "rms-decay" and settings.adapt.sparse == variant.get("sparse", 0)
    # TLM alone weights the level's adaptation: LoRA on W_out from -3 on (a rank up to the hidden size)
    level_lora = 0 if "sparse" in variant else min(MODEL_LEVELS[level].get("lora", 0), model.shape.hidden)
    assert settings.adapt.lora == variant.get("lora", level_lora)
    enc, dec = Codec(settings, model), Codec(settings, model)
    pieces = [data[:500], data[500:501], data[501:]]  # blocks of unequal size; state carries over
    payloads = [encode_block(enc, p) for p in pieces]
    assert [decode_block(dec, c, len(p)) for c, p in zip(payloads, pieces, strict=True)] == pieces
    if "tlm_bits" in variant or "tlm_relative" in variant:
        assert 0 < enc.predictor.skipped < enc.predictor.segments  # some segments skipped, not all
    for (key, a), (key2, b) in zip(enc.predictor.state_dict().items(), dec.predictor.state_dict().items(), strict=True):
        assert key == key2 and torch.equal(a, b), key


@pytest.mark.parametrize(
    "threshold", [dict(tlm_bits=4.5), dict(tlm_relative=1.0), dict(tlm_relative=1.0, rule="rms-decay")]
)
def test_a_skipped_segment_leaves_the_parameters_bit_identical(tiny, threshold):
    """A segment cheaper than the threshold skips the backward pass: weights, side weights (the
    level's LoRA factors) and the rule's statistics stay as they were; a dearer one takes a step.
    The relative threshold is the running mean cost of the segments before (1/16 per segment; the
    first segment's own)."""
    _, model = tiny
    settings = make_settings(model=model, lanes=2, segment_len=8, threads=1, experts="", **threshold)
    pred = Codec(settings, model).predictor
    running = None
    text = corpus("alice29.txt")[40000:42000]
    tokens = np.ascontiguousarray(np.frombuffer(text, dtype=np.uint8).astype(np.int32).reshape(2, -1).T)  # two lanes
    prev, active = np.zeros(2, dtype=np.int32), np.full(8, 2)
    skipped = stepped = 0
    for start in range(0, len(tokens) - 8, 8):
        before = {k: v.clone() for k, v in pred.state_dict().items()}
        for t in range(8):
            pred.step(prev, 2)
            prev = tokens[start + t]
        seg = tokens[start : start + 8]
        freqs = pred.net.F[:8].numpy()[np.arange(8)[:, None], np.arange(2)[None, :], seg]
        mean_bits = -np.log2(freqs / FREQ_TOTAL).mean()
        limit = threshold.get("tlm_bits") or (running if running is not None else mean_bits)
        running = mean_bits if running is None else running + (mean_bits - running) / 16
        was = pred.skipped
        pred.adapt(seg, active)
        after = pred.state_dict()
        if pred.skipped > was:
            skipped += 1
            assert mean_bits < limit + 1e-3
            for k in (k for k in before if k in ("theta", "side") or k.startswith("adapt.")):
                assert torch.equal(after[k], before[k]), k
        else:  # the level's LoRA factors on W_out take the step, the network as trained; or, with a
            # rule asked for, the whole network
            stepped += 1
            assert mean_bits > limit - 1e-3
            moved, kept = ("theta", "side") if "rule" in threshold else ("side", "theta")
            assert not torch.equal(after[moved], before[moved])
            assert kept not in before or torch.equal(after[kept], before[kept])
    assert skipped > 5 and stepped > 5, (skipped, stepped)


def test_the_tlm_weight_follows_its_formula_from_the_coded_bytes():
    """Code lengths from the coded frequencies alone (integers), and S = lambda 2^(mean - P0 bits)
    for a segment over the threshold, 0 under it, as S / 4 to 2^-8."""
    rng = np.random.default_rng(2)
    f = np.concatenate([[1, 2, 3, FREQ_TOTAL - 1, FREQ_TOTAL], rng.integers(1, FREQ_TOTAL, 5000)])
    got = code_lengths(f) / 2**16
    want = -np.log2(f / FREQ_TOTAL)
    assert np.all(got >= want - 1e-9) and np.all(got - want < 2**-11)
    assert np.array_equal(code_lengths(f), code_lengths(f.copy()[::-1])[::-1])  # elementwise, no order
    # the segment's costs as the codec takes them (compiled): the same lengths, summed per lane in play
    T, B = 40, 5
    F = rng.integers(1, FREQ_TOTAL + 1, (T, B, 256)).astype(np.float64)
    F[:, :, 7] = f[:T, None]  # the extremes among them
    y, active = rng.integers(0, 256, (T, B), dtype=np.int32), np.full(T, B)  # (as the codec holds the bytes)
    y[:5], active[-3:] = 7, 2  # a ragged end
    coded, bits = np.empty((T, B), dtype=np.int64), np.empty(B, dtype=np.int64)
    update_kernels.segment_costs(F, y, active, log2_table(), FREQ_BITS, LOG_FRAC, coded, bits)
    in_play = np.arange(B)[None, :] < active[:, None]
    want_coded = np.where(in_play, F[np.arange(T)[:, None], np.arange(B)[None, :], y], 0).astype(np.int64)
    assert np.array_equal(coded, want_coded) and coded[0, 0] == 1 and coded[4, 0] == FREQ_TOTAL
    assert np.array_equal(bits, np.where(in_play, code_lengths(np.maximum(want_coded, 1)), 0).sum(axis=0))
    counts = rng.integers(0, 300, 200)
    bits = (rng.uniform(0, 6, 200) * counts * 2**16).astype(np.int64)
    for lam in (0.5, 1.0, 3.0):
        w = tlm_weights(bits, counts, tlm_units(2.5), lam)
        mean = np.where(counts > 0, bits / np.maximum(counts, 1) / 2**16, 0)
        s = np.where((counts > 0) & (mean > 2.5), lam * 2.0 ** (mean - 2.5), 0)
        assert np.all(w * 256 == np.round(w * 256)) and np.all((0 <= w) & (w <= 1))
        assert np.all(np.abs(w - np.minimum(s / fixed.TLM_CAP, 1)) <= 1 / 256 + 1e-3 * s)


def test_the_api_and_the_header_record_the_variant(tiny):
    path, model = tiny
    data = corpus("alice29.txt")[:1500]
    blob = compress(data, model=model, sparse=K, tlm_bits=2.5, tlm_lambda=2.0, lanes=2, experts="")
    assert decompress(blob, model=model) == data
    from dyncompress.format.container import parse_header

    meta, _ = parse_header(blob)
    adapt = meta["settings"]["adapt"]
    assert (adapt["sparse"], adapt["tlm_bits"], adapt["tlm_lambda"], adapt["tlm_lanes"]) == (K, 2.5, 2.0, False)
    with pytest.raises(DyncompressError, match="pretrained"):
        compress(data, model=None, sparse=K)
    with pytest.raises(DyncompressError, match="adaptive rule"):
        compress(data, model=model, rule="static", tlm_bits=2.0)
    with pytest.raises(DyncompressError, match="adaptive rule"):
        compress(data, model=model, rule="static", tlm_relative=1.0)
    with pytest.raises(DyncompressError, match="choose one"):
        compress(data, model=model, tlm_bits=2.0, tlm_relative=1.0)
    blob = compress(data, model=model, tlm_relative=1.25, lanes=2)
    assert parse_header(blob)[0]["settings"]["adapt"]["tlm_relative"] == 1.25
    assert decompress(blob, model=model) == data
    with pytest.raises(DyncompressError, match="hidden size"):
        compress(data, model=model, sparse=model.shape.hidden + 1)

    blob = compress(data, model=model, lora=3, lora_on="w_out,w_mh", lanes=2, experts="")
    assert decompress(blob, model=model) == data
    adapt = parse_header(blob)[0]["settings"]["adapt"]
    assert (adapt["lora"], adapt["lora_on"], adapt["rule"], adapt["lr"]) == (3, "w_out,w_mh", "rms-decay", 1e-3)
    for bad, message in [
        (dict(model=None, lora=4), "pretrained"),
        (dict(model=model, lora=4, sparse=8), "alternatives"),
        (dict(model=model, lora=4, lora_on="w_in"), "LoRA adapts some of"),
        (dict(model=model, lora=65), "LoRA rank"),
        (dict(model=model, lora=4, rule="static"), "adaptive rule"),
    ]:
        with pytest.raises(DyncompressError, match=message):
            compress(data, **bad)
