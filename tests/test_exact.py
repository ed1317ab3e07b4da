"""The exact arithmetic of format 2: tables, frequencies, kernels, update rules.

Each kernel is checked against a float64 reference within its stated error, and the parts
that must be exact (tables, frequencies, integer square roots and divisions) against Python
integers.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from conftest import corpus, split_started
from dyncompress.config.settings import AdaptSettings
from dyncompress.network import dot16, exact_adapt, fixed
from dyncompress.network.exact import ExactMLSTM, to_master
from dyncompress.network.exact_adapt import ExactAdapter
from dyncompress.network.fixed import FREQ_TOTAL, frequencies
from dyncompress.network.mlstm import MLSTM, MLSTMShape, init_params


def test_shipped_tables_are_what_the_integer_code_builds_and_match_their_hash():
    built = fixed.build_tables()
    shipped = fixed.checked_tables()  # raises if the hash differs
    for a, b in zip(built, shipped, strict=True):
        assert np.array_equal(a, b)
    assert fixed.tables_sha256(built) == fixed.TABLES_SHA256


def test_a_changed_table_is_refused(monkeypatch):
    sig, tanh, exp = fixed.build_tables()
    tanh = tanh.copy()
    tanh[5] += 1
    assert fixed.tables_sha256((sig, tanh, exp)) != fixed.TABLES_SHA256


def test_tables_are_the_functions_to_half_a_unit():
    sig, tanh, exp = fixed.checked_tables()
    x = (np.arange(len(sig)) - fixed.R) / 2.0**fixed.FI
    assert np.abs(sig - 2.0**fixed.FS / (1 + np.exp(-x))).max() <= 0.5 + 1e-6
    assert np.abs(tanh - 2.0**fixed.FA * np.tanh(x)).max() <= 0.5 + 1e-6
    d = np.arange(len(exp) - 1) / 2.0**fixed.FI
    assert np.abs(exp[:-1] - 2.0**fixed.E_BITS * np.exp(-d)).max() <= 0.5 + 1e-3
    assert exp[-1] == 0 and sig[0] == 0 and sig[-1] == 2**fixed.FS and tanh[fixed.R] == 0


def _reference_frequencies(logits: np.ndarray) -> np.ndarray:
    """The same function in Python integers and Fractions, row by row."""
    from fractions import Fraction

    table = fixed.checked_tables()[2]
    out = []
    for row in logits:
        top = max(Fraction(v) for v in row)
        scale, last = 2 ** (fixed.FI - fixed.FA), len(table) - 1
        js = [min(math.floor((top - Fraction(v)) * scale + Fraction(1, 2)), last) for v in row]
        e = [int(table[j]) for j in js]
        f = [x * (FREQ_TOTAL - 256) // sum(e) + 1 for x in e]
        f[e.index(max(e))] += FREQ_TOTAL - sum(f)
        out.append(f)
    return np.array(out, dtype=np.int64)


ADVERSARIAL = {
    "all equal": np.zeros((2, 256)),
    "one huge": np.where(np.arange(256) == 7, 2.0**31, 0.0)[None, :],
    "one tiny": np.where(np.arange(256) == 7, -(2.0**31), 0.0)[None, :],
    "extremes": np.where(np.arange(256) % 2 == 0, 2.0**31, -(2.0**31))[None, :],
    "two maxima": np.where(np.isin(np.arange(256), [3, 200]), 5.0 * 4096, 0.0)[None, :],
    "fine steps": (np.arange(256) * 2.0**-20)[None, :],
    "random": np.random.default_rng(0).normal(size=(8, 256)) * 6 * 4096,
    "peaked": np.random.default_rng(1).normal(size=(8, 256)) * 30 * 4096,
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_frequencies_are_exact_on_adversarial_logits(case):
    logits = np.round(ADVERSARIAL[case] * 2.0**20) / 2.0**20  # multiples of 2^-20, as the network gives
    f = frequencies(logits)
    assert f.dtype == np.int64 and (f >= 1).all() and (f.sum(axis=1) == FREQ_TOTAL).all()
    assert np.array_equal(f, _reference_frequencies(logits))


def test_frequencies_follow_the_softmax():
    logits = np.random.default_rng(3).normal(size=(16, 256)) * 3
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    q = frequencies(np.round(logits * 4096 * 2.0**20) / 2.0**20) / FREQ_TOTAL
    assert np.abs(q - p).max() < 2e-4  # input rounding to 2^-10 nats, table to 2^-32, +1 floor
    cross = -(p * np.log2(q)).sum(axis=1) + (p * np.log2(p)).sum(axis=1)  # KL(p || q), bits
    assert cross.max() < 1e-4


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 15, 16, 17, 2**26 - 1, 2**26, 2**26 + 1, 2**52 - 1, 2**51 + 12345])
def test_floor_sqrt_is_exact(n):
    v = torch.tensor([float(n)], dtype=torch.float64)
    assert int(exact_adapt.floor_sqrt_(v)) == math.isqrt(n)


def check_floor_sqrt_and_div(rng, squares: int = 0) -> None:
    """floor_sqrt_ on random integers below 2^52 (and, with `squares`, that many exact squares and
    their neighbours), floor_div_ on random quotients near integers: against Python's integers."""
    n = rng.integers(0, 2**26, squares)
    v = np.concatenate([n * n, n * n - 1, n * n + 1, rng.integers(0, 2**52, 20000)]).clip(0).astype(np.float64)
    r = exact_adapt.floor_sqrt_(torch.from_numpy(v)).numpy()
    assert all(int(a) == math.isqrt(int(b)) for a, b in zip(r, v, strict=True))
    den = rng.integers(1, 2**26, 20000).astype(np.float64)
    num = (rng.integers(-(2**25), 2**25, 20000) * den + rng.integers(-3, 3, 20000)).astype(np.float64)
    q = exact_adapt.floor_div_(torch.from_numpy(num), torch.from_numpy(den)).numpy()
    assert all(int(a) == int(b) // int(c) for a, b, c in zip(q, num, den, strict=True))


def test_floor_sqrt_and_div_are_exact_on_random_integers():
    check_floor_sqrt_and_div(np.random.default_rng(4), squares=5000)


@pytest.mark.parametrize("off", [-1.5, -1e-9, 1e-9, 1.5])
def test_floor_sqrt_and_div_stay_exact_when_the_library_is_off(monkeypatch, off):
    """torch's CPU sqrt once gave 32159.99... for the root of 32160^2 (a self-test failed): the
    results are corrected by exact integer tests, so a root or quotient up to 1.5 off still
    floors to the truth."""
    sqrt, div = torch.Tensor.sqrt, torch.div
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda t: sqrt(t).add_(off).clamp_(min=0))
    monkeypatch.setattr(torch, "div", lambda a, b: div(a, b).add_(off))
    check_floor_sqrt_and_div(np.random.default_rng(5), squares=5000)


def test_significant_rounds_down_to_the_bits_asked():
    assert exact_adapt.significant(1.0, 3) == 1.0
    assert exact_adapt.significant(0.1, 11) == math.floor(0.1 * 2**14) / 2**14
    assert exact_adapt.significant(1e6 + 1, 5) == 30 * 2**15  # 1e6 = 30.5 * 2^15
    assert exact_adapt.significant(0, 4) == 0.0


SHAPE = MLSTMShape(64)


def _pair(lanes=4, steps=24, seed=0):
    theta = init_params(SHAPE, seed) * 0.7
    master = to_master(theta)
    net = ExactMLSTM(SHAPE, master, lanes, steps)
    ref = MLSTM(SHAPE, master.mul(2.0**-fixed.FM), lanes, steps)  # float64, the same weights
    return net, ref


def _tokens(lanes, steps):
    data = np.frombuffer(corpus("alice29.txt")[: lanes * steps], dtype=np.uint8)
    return torch.from_numpy(data.reshape(lanes, steps).T.astype(np.int64))


def test_forward_matches_the_float64_network_and_stays_in_its_formats():
    lanes, steps = 4, 24
    net, ref = _pair(lanes, steps)
    tokens = _tokens(lanes, steps)
    prev = torch.zeros(lanes, dtype=torch.long)
    worst = 0.0
    for t in range(steps):
        logits = net.step(prev, t)
        freqs = frequencies(logits.numpy())
        net.record(t, torch.from_numpy(freqs))
        p = ref.step(prev, t)
        worst = max(worst, float((torch.from_numpy(freqs) / FREQ_TOTAL - p).abs().max()))
        prev = tokens[t]
        # every activation is an integer within its bound; weights are multiples of 2^-20
        bounds = ((net.HS[t + 1], fixed.A), (net.CS[t + 1], fixed.C_MAX * fixed.A), (net.M[t], fixed.M_MAX * fixed.A))
        for x, bound in bounds:
            assert torch.equal(x, x.round()) and float(x.abs().max()) <= bound
        assert torch.equal(logits * 2.0**20, (logits * 2.0**20).round())
    assert worst < 0.01, worst  # rounding of activations (2^-12), gates (2^-16) and table inputs (2^-10)


def test_backward_matches_the_float64_gradient():
    lanes, steps = 4, 24
    net, ref = _pair(lanes, steps)
    tokens = _tokens(lanes, steps)
    prev = torch.zeros(lanes, dtype=torch.long)
    for t in range(steps):
        net.record(t, torch.from_numpy(frequencies(net.step(prev, t).numpy())))
        ref.step(prev, t)
        prev = tokens[t]
    mask = torch.ones(steps, lanes, dtype=torch.float64)
    mask[-3:, 2:] = 0  # a ragged end
    net.backward(steps, tokens, mask)
    ref.backward(steps, tokens, mask)
    got, want = net.grad * 2.0**-fixed.G, ref.grad
    assert torch.equal(net.grad, net.grad.round())
    cos = float(got @ want / (got.norm() * want.norm()))
    assert cos > 0.999, cos
    assert float((got - want).norm() / want.norm()) < 0.05


def _step_both(compiled, calls, lanes, steps):
    """Both networks through `steps` steps of real text, the logits equal at every step, each
    recording the frequencies coded; returns the text's bytes (steps, lanes)."""
    tokens = _tokens(lanes, steps)
    prev = torch.zeros(lanes, dtype=torch.long)
    for t in range(steps):
        logits = compiled.step(prev, t)
        assert torch.equal(logits, calls.step(prev, t)), t
        freqs = torch.from_numpy(frequencies(logits.numpy()))
        compiled.record(t, freqs)
        calls.record(t, freqs)
        prev = tokens[t]
    return tokens


@pytest.mark.parametrize(
    "scale,lanes,parts", [(0.5, 4, 1), (6.0, 3, 1), (6.0, 8, 1), (0.5, 4, 2), (6.0, 3, 2), (6.0, 8, 3)]
)
def test_the_compiled_step_and_backward_are_the_torch_calls_bit_for_bit(scale, lanes, parts):
    """On the CPU the step and the backward run compiled (`step_kernels`); the torch calls they
    replace still run on other devices. Both give the same integers in every
    buffer, on real text, from a carried state with c past its bound (so c and the tanh's table
    input are clamped), and with weights large enough (scale 6) to drive m and the gates' table
    inputs into their clamps too; also with the lanes split into runs on threads (`split`), evenly
    or not."""
    steps = 24
    master = to_master((init_params(SHAPE, 3) * scale).clamp(-fixed.W_MAX, fixed.W_MAX))
    compiled = ExactMLSTM(SHAPE, master.clone(), lanes, steps)
    if parts > 1:
        split_started()
    compiled.parts = parts
    compiled.refresh()  # (the weights' copies, made in runs of weights where split)
    calls = ExactMLSTM(SHAPE, master.clone(), lanes, steps, compiled=False)  # as on a GPU
    assert compiled.compiled and compiled.fast and not calls.compiled and not calls.fast
    rng = np.random.default_rng(5)  # a carried state from anywhere in its range, c past its bound
    h0 = torch.from_numpy(rng.integers(-fixed.A, fixed.A + 1, (lanes, SHAPE.hidden)).astype(np.float64))
    c0 = torch.from_numpy(rng.integers(-300 * fixed.A, 300 * fixed.A, (lanes, SHAPE.hidden)).astype(np.float64))
    for net in (compiled, calls):
        net.HS[0], net.CS[0] = h0, c0
    tokens = _step_both(compiled, calls, lanes, steps)
    for name in ("HS", "CS", "Z", "M", "HM", "EXM", "TC", "IN"):
        assert torch.equal(getattr(compiled, name), getattr(calls, name)), name
    if scale > 1:  # the clamps were reached
        assert float(compiled.M.abs().max()) == fixed.M_MAX * fixed.A
        assert float(compiled.CS[1:].abs().max()) == fixed.C_MAX * fixed.A
    mask = torch.ones(steps, lanes, dtype=torch.float64)
    mask[-3:, 2:] = 0  # a ragged end
    compiled.backward(steps, tokens, mask)
    calls.backward(steps, tokens, mask)
    assert torch.equal(compiled.grad, calls.grad) and compiled.grad.abs().sum() > 0
    mask[:, 1] = 0.5 + 1 / 256  # TLM: a lane's weight, the products rounded
    compiled.backward(steps, tokens, mask, weighted=True)
    calls.backward(steps, tokens, mask, weighted=True)
    assert torch.equal(compiled.grad, calls.grad)


@pytest.mark.parametrize("lanes", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("K,N", [(16, 4), (64, 256), (512, 2048)])
def test_the_16_bit_products_are_the_float_products_to_their_bounds(lanes, K, N):
    """`dot16.matmul16` (vpmaddwd where the CPU has it) and its plain loop give the float kernel's
    numbers for inputs at their bound (|x| <= 2^12, the extremes among them) and rows of weights whose
    sum |w| 2^12 is just below 2^31, where an int32 partial sum is at its largest; `fits` draws that
    line exactly."""
    from dyncompress.network.exact import X16_MAX
    from dyncompress.network.step_kernels import matmul_nt

    rng = np.random.default_rng(K + lanes)
    x = rng.integers(-X16_MAX, X16_MAX + 1, (lanes, K)).astype(np.int16)
    x[0], x[-1] = X16_MAX, -X16_MAX  # lanes at the bound (one lane: the last wins)
    W = rng.integers(-8192, 8193, (N, K)).astype(np.int16)
    limit = (dot16.SUM_LIMIT - 1) // X16_MAX  # the largest sum |w| that fits
    total = min(limit, K * 8192)  # (|w| <= 2^13: a short row cannot reach it)
    q, r = divmod(total, K)
    W[0] = q  # every product of row 0 with lane 0 (or the last) of one sign: partial sums at their largest
    W[0, :r] += 1
    W[1] = -W[0]
    for row in W[2:]:  # the other rows brought under the limit
        size = int(np.abs(row.astype(np.int64)).sum())
        if size > limit:
            row[:] = np.trunc(row * (limit / size))  # (toward zero: the sum stays under)
    assert dot16.fits(W, X16_MAX)
    if total == limit:
        over = W.copy()
        over[0, -1] += 1
        assert not dot16.fits(over, X16_MAX)
    start = rng.integers(-(2**20), 2**20, (lanes, N)).astype(np.float64)
    want = start.copy()
    matmul_nt(x.astype(np.float64), W.astype(np.float32), want, 2.0**-6, np.bool_(True))
    assert want[-1, 0] - start[-1, 0] == int(x[-1, 0]) * total * 2.0**-6  # (|.| = sum |w| 2^12)
    for kernel in (dot16.matmul16, dot16._matmul16_plain):
        got = start.copy()
        kernel(x, W, got, 2.0**-6, np.bool_(True))
        assert np.array_equal(got, want)


@pytest.mark.parametrize("scale,lanes,parts,rank", [(0.5, 4, 1, 0), (0.5, 7, 2, 8), (0.5, 3, 1, 0), (1000.0, 5, 2, 0)])
def test_the_16_bit_step_is_the_torch_calls_and_the_float_kernels_bit_for_bit(scale, lanes, parts, rank, monkeypatch):
    """With step16 (format 6's 16-bit step) the compiled step's products run in int16 (`dot16`) where
    the weights fit it: the same integers in every buffer as the torch calls (a GPU's way) and as the
    float kernels (a CPU without AVX2), on real text with LoRA on W_out or none, the lanes whole or
    split; weights too large for int32 sums (all at their bound) take the float kernels. And step16 is used:
    its logits are not those of the step at format 2's resolution."""
    steps, on = 16, ("w_out",) if rank else ()
    master = to_master((init_params(SHAPE, 3) * scale).clamp(-fixed.W_MAX, fixed.W_MAX))
    make = lambda **kw: ExactMLSTM(SHAPE, master.clone(), lanes, steps, lora=rank, lora_on=on, seed=4, **kw)  # noqa: E731
    narrow = make(step16=True)
    if parts > 1:
        split_started()
    narrow.parts = parts
    narrow.refresh()
    calls = make(step16=True, compiled=False)
    wide = make()
    with monkeypatch.context() as m:
        m.setattr(dot16, "HAVE_PMADDWD", False)
        floats = make(step16=True)
    assert narrow.fast and floats.fast and not floats.use16
    assert narrow.use16 == (dot16.HAVE_PMADDWD and scale < 1)
    nets = (narrow, calls, floats, wide)
    if rank:  # factors away from their start (B is zero there)
        side = np.random.default_rng(6).integers(-(2**26), 2**26, len(narrow.side_master)).astype(np.float64)
        for net in nets:
            net.side_master.copy_(torch.from_numpy(side))
            net.refresh_side()
    rng = np.random.default_rng(5)  # a carried state from anywhere in its range
    h0 = torch.from_numpy(rng.integers(-fixed.A, fixed.A + 1, (lanes, SHAPE.hidden)).astype(np.float64))
    for net in nets:
        net.HS[0] = h0
    tokens, prev, differs = _tokens(lanes, steps), torch.zeros(lanes, dtype=torch.long), False
    for t in range(steps):
        got = narrow.step(prev, t)
        assert torch.equal(got, calls.step(prev, t)) and torch.equal(got, floats.step(prev, t)), t
        differs |= not torch.equal(got, wide.step(prev, t))
        prev = tokens[t]
    for name in ("HS", "CS", "Z", "M", "HM", "TC"):
        assert torch.equal(getattr(narrow, name), getattr(calls, name)), name
        assert torch.equal(getattr(narrow, name), getattr(floats, name)), name
    assert float(narrow.M.remainder(2.0**fixed.M16).abs().max()) == 0  # m at multiples of 2^-6
    assert differs


@pytest.mark.parametrize("lanes,parts,rank", [(4, 1, 8), (3, 1, 4), (8, 2, 16), (5, 3, 8)])
def test_lora_on_w_out_alone_runs_compiled_as_the_torch_calls(lanes, parts, rank):
    """LoRA on W_out alone takes the compiled step (its term inside `step_kernels.forward`) and a
    backward without the pass through the steps (`backward_out_lora`): the same logits, factors'
    products and gradients as the torch calls, with factors far from their start (B is zero there),
    the lanes whole or split into runs on threads, the mask whole, ragged and TLM-weighted."""
    steps = 24
    master = to_master(init_params(SHAPE, 3))
    compiled = ExactMLSTM(SHAPE, master.clone(), lanes, steps, lora=rank, lora_on=("w_out",), seed=4)
    if parts > 1:
        split_started()
    compiled.parts = parts
    calls = ExactMLSTM(SHAPE, master.clone(), lanes, steps, lora=rank, lora_on=("w_out",), seed=4, compiled=False)
    assert compiled.fast and compiled.out_lora and not calls.fast
    rng = np.random.default_rng(8)  # A as seeded; B moved off zero (in units 2^-32, values up to 0.5)
    side = torch.from_numpy(np.round(rng.normal(size=compiled.side_master.shape) * 2.0**29))
    for net in (compiled, calls):
        net.side_master.copy_(side)
        net.refresh_side()
    tokens = _step_both(compiled, calls, lanes, steps)
    assert torch.equal(compiled.LP["w_out"], calls.LP["w_out"]) and compiled.LP["w_out"].abs().sum() > 0
    mask = torch.ones(steps, lanes, dtype=torch.float64)
    mask[-3:, 1:] = 0  # a ragged end
    for weighted in (False, True):
        if weighted:
            mask[:, 0] = 0.5 + 1 / 256  # TLM: a lane's weight, the products rounded
        compiled.backward(steps, tokens, mask, weighted=weighted)
        calls.backward(steps, tokens, mask, weighted=weighted)
        assert torch.equal(compiled.LQ["w_out"], calls.LQ["w_out"])
        assert torch.equal(compiled.side_grad, calls.side_grad) and compiled.side_grad.abs().sum() > 0


def _adapter(rule, **kw):
    theta = init_params(SHAPE, 1) * 0.5
    master = to_master(theta)
    start = master.clone()
    s = AdaptSettings(rule=rule, **kw)
    return s, master, start


@pytest.mark.parametrize("rule", ["sgd", "rms", "rms-decay"])
def test_update_rules_take_the_float_step(rule):
    """One step of each rule from the same gradient: the exact step equals the float rule's to
    the precision of its multipliers (12 significant bits, 2^-32 units)."""
    from dyncompress.network.adapt import Adapter

    s, master, start = _adapter(rule, lr=1e-3 if rule != "sgd" else 0.1, decay=1e-2, clip=0.0)
    rng = np.random.default_rng(5)
    grad_sum = torch.from_numpy(np.round(rng.normal(size=master.shape) * 2.0**16 * 40))  # summed over 256 bytes
    ms = torch.from_numpy(rng.uniform(1e-8, 1e-4, size=master.shape)).float()
    count = 256
    theta = master * 2.0**-fixed.FM
    ref = theta.clone()
    ref_ad = Adapter(s, ref, ms=ms if rule != "sgd" else None, theta0=theta.clone() + 1e-3)
    ex = ExactAdapter(s, master, ms if rule != "sgd" else None, start + 1e-3 * 2.0**fixed.FM)
    ref_ad.update(grad_sum * 2.0**-fixed.G / count)
    ex.update(grad_sum.clone(), count)
    step_ref, step_ex = ref - theta, master * 2.0**-fixed.FM - theta
    assert torch.equal(master, master.round())
    err = float((step_ex - step_ref).abs().max() / step_ref.abs().max())
    assert err < 2e-3, err


def test_the_stream_rule_follows_rmsprop():
    from dyncompress.network.adapt import Adapter

    s, master, start = _adapter("rms", lr=2e-3, clip=0.0)
    theta = master * 2.0**-fixed.FM
    ref = theta.clone()
    ref_ad, ex = Adapter(s, ref), ExactAdapter(s, master, None, start)
    rng = np.random.default_rng(6)
    for _ in range(5):
        g = torch.from_numpy(np.round(rng.normal(size=master.shape) * 2.0**16 * 2))
        ref_ad.update(g * 2.0**-fixed.G / 256)
        ex.update(g.clone(), 256)
    moved_ref, moved_ex = ref - theta, master * 2.0**-fixed.FM - theta
    assert float((moved_ex - moved_ref).norm() / moved_ref.norm()) < 0.01


@pytest.mark.parametrize("half", [0, 2000])
@pytest.mark.parametrize("lr", [3e-3, 0.7, 1e-9])
def test_the_bias_corrections_settle_without_changing_a_step(lr, half):
    """Adam's bias corrections come from beta1^t and beta2^t as exact fractions, which stop being
    multiplied once they no longer change a bit (`exact_adapt.POW_SETTLED`): every step's rate and epsilon
    equal those of the powers carried exact all the way, the fractions stay small, and a state
    loaded at step t has the powers of t steps. With a half-life H (rate_half), the rate at step t
    is that times H / (H + t), floored once."""
    s, master, start = _adapter("rms", lr=lr, beta1=0.5, beta2=0.9, eps=1e-8, rate_half=half)
    ex = ExactAdapter(s, master, None, start)
    ex.m = torch.zeros(1)  # (with momentum: c1 counts)
    p1 = p2 = Fraction(1)
    for t in range(1, 1400):  # beta2^t < 2^-64 from t = 422 on, beta1^t < 2^-1120 from t = 1121 on
        ex.steps = t
        ex._next_powers()
        p1, p2 = p1 * Fraction(0.5), p2 * Fraction(0.9)
        sqrt_c2 = Fraction(math.isqrt(int((1 - p2) * (1 << 60))), 1 << 30)
        decay = Fraction(half, half + t) if half else 1
        want_lr = float(min(math.floor(Fraction(lr) * sqrt_c2 / (1 - p1) * (1 << 32) * decay), (1 << 26) - 1))
        want_eps = float(max(1, math.floor(Fraction(1e-8) * sqrt_c2 * (1 << 28))))
        assert ex._corrections() == (want_lr, want_eps), t
    assert ex.b2_pow > p2 and ex.b2_pow.denominator.bit_length() < 30_000  # settled long before
    assert ex.b1_pow > p1 and ex.b1_pow.denominator.bit_length() < 1_200
    again = ExactAdapter(s, master, None, start)
    again.load_state_dict({"step": torch.tensor(1399), "v": torch.zeros(1), "m": torch.zeros(1)})
    assert (again.b1_pow, again.b2_pow) == (ex.b1_pow, ex.b2_pow)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.99])
def test_the_powers_kept_as_integers_are_the_fractions(beta):
    """`DyadicPower` holds beta^t as n / 2^e: the same number as the fraction multiplied t times, and
    below a bound 1 / 2^j exactly when the fraction is (0 included), around where it crosses."""
    bounds = exact_adapt.POW_SETTLED
    power, want = exact_adapt.DyadicPower(beta), Fraction(1)
    for t in range(1, 4500):
        power.step()
        want *= Fraction(beta)
        if t < 12 or t % 97 == 0 or t in (1120, 1121, 4414, 4415):
            assert power.value == want and power.complement() == ((1 << power.e) - power.n, power.e)
            assert [power.under(b) for b in bounds] == [want < b for b in bounds], t


# (rule, calibrated MS_g, knobs): the stream rule with and without momentum and decay, the
# calibrated rules, sgd
COMPILED_RULES = [
    ("rms", False, dict(beta1=0.9)),
    ("rms", False, dict(beta1=0.0)),
    ("rms-decay", False, dict(decay=1e-2)),
    ("rms", True, {}),
    ("rms-decay", True, dict(decay=1e-2)),
    ("sgd", False, dict(lr=0.1)),
    ("rms-decay", True, dict(decay=1e-2, clip=1.0)),  # the clip's filter and exact norm
    ("rms", True, dict(clip=1e6)),
]


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("rule,calibrated,kw", COMPILED_RULES)
def test_the_compiled_update_is_the_torch_calls_bit_for_bit(rule, calibrated, kw, parts):
    """On the CPU the update runs as compiled passes (`update_kernels`), whole or in runs of
    weights on threads (`split`); the torch calls they replaced still run on other devices. Both
    give the same integers (weights, statistics, roots) step after step, on gradients from tiny
    to past the bounds (weights pushed to their limit), clipped or not."""
    rng = np.random.default_rng(11)
    s, master, start = _adapter(rule, **{"lr": 2e-3, "clip": 0.0, **kw})
    ms = torch.from_numpy(np.abs(rng.normal(size=master.numel())) * 1e-5) if calibrated else None
    limit = ExactAdapter(s, master, ms, start).limit
    master[::50] = limit * torch.sign(master[::50])  # every 50th weight at its bound: steps push some past it
    compiled, calls = ExactAdapter(s, master.clone(), ms, start), ExactAdapter(s, master.clone(), ms, start)
    assert compiled.compiled
    if parts > 1:
        split_started()
    compiled.parts = parts
    calls.compiled = False  # as on a GPU
    held = []  # the largest |weight| after each step
    for step in range(8):
        scale = [2.0**4, 2.0**16, 2.0**24, 2.0**30][step % 4]
        g = torch.from_numpy(np.round(rng.standard_cauchy(master.numel()) * scale).clip(-(2.0**30), 2.0**30))
        compiled.update(g.clone(), 1 + step % 3)
        calls.update(g.clone(), 1 + step % 3)
        assert torch.equal(compiled.master, calls.master), step
        held.append(float(compiled.master.abs().max()))
        if not calibrated and rule != "sgd":
            assert torch.equal(compiled.v, calls.v) and torch.equal(compiled._rms, calls._rms), step
            assert (compiled.m is None) == (calls.m is None)
            assert compiled.m is None or torch.equal(compiled.m, calls.m)
    assert not torch.equal(compiled.master, master)  # it moved
    assert max(held) == limit  # and weights pushed past their bound were held there


def test_a_tiny_adaptation_step_still_moves_the_weights_the_matmuls_see():
    """Steps of ~1e-4 of a weight's size change the forward copy (2^-20 units) of most weights."""
    s, master, start = _adapter("sgd", lr=1.0, clip=0.0)
    net = ExactMLSTM(SHAPE, master, 2, 4)
    assert net.fast

    def seen():  # what the forward reads, in the master's order: the input table, the float32 copies, b and b_out
        parts = [net.inputs.view(-1)]
        for name, _ in SHAPE.layout()[1:]:
            parts.append(net.w_t32[name].T.reshape(-1).double() if name in net.w_t32 else net.w[name].reshape(-1))
        return torch.cat(parts)

    before = seen()
    theta = master * 2.0**-fixed.FM
    ad = ExactAdapter(s, master, None, start)
    grad = torch.round(theta * 1e-4 * 2.0**fixed.G * 256)  # a step of 1e-4 * theta
    ad.update(grad, 256)
    net.refresh()
    big = theta.abs() > 0.05
    moved = (seen() != before)[big].float().mean()
    assert moved > 0.95, moved


def test_update_keeps_weights_bounded_and_integer():
    s, master, start = _adapter("sgd", lr=1.0, clip=0.0)
    ad = ExactAdapter(s, master, None, start)
    ad.update(torch.full(master.shape, -(2.0**30)), 1)
    assert float(master.abs().max()) <= fixed.W_MAX * 2.0**fixed.FM
    assert torch.equal(master, master.round())


@pytest.mark.parametrize("rule", ["sgd", "rms-decay"])
def test_the_clip_filter_never_changes_a_step(rule):
    """The float norm only decides whether the exact norm is needed: with the filter off (every
    norm exact) each step comes out bit-identical, for gradients from far below to far above the
    clip, spread over many weights (where rounding to 14 bits moves the exact norm most) or few."""
    rng = np.random.default_rng(11)
    n = SHAPE.num_params
    count = 256
    limit = count * 2.0**fixed.G  # clip = 1: the summed gradient's norm limit, in units of 2^-16
    ms = torch.from_numpy(rng.uniform(1e-8, 1e-4, size=n)).float()
    for ratio in (0.05, 0.5, 0.79, 0.81, 0.95, 1.0, 1.05, 3.0):
        for spread in ("many", "few"):
            g = rng.normal(size=n) if spread == "many" else rng.normal(size=n) * (rng.random(n) < 1e-3)
            g = torch.from_numpy(np.round(g / np.linalg.norm(g) * limit * ratio))
            results = []
            for clear in (ExactAdapter.CLEAR, 0.0):
                s, master, start = _adapter(rule, lr=1e-3 if rule != "sgd" else 0.1, decay=1e-2, clip=1.0)
                ad = ExactAdapter(s, master, ms if rule != "sgd" else None, start + 2.0**20)
                ad.CLEAR = clear
                ad.update(g.clone(), count)
                results.append(master)
            assert torch.equal(results[0], results[1]), (ratio, spread)
            assert not torch.equal(results[0], start), (ratio, spread)


def test_the_update_refuses_more_weights_than_its_bounds_allow():
    s = AdaptSettings(rule="sgd")
    big = torch.zeros(ExactAdapter.MAX_PARAMS)
    with pytest.raises(ValueError, match="2\\^23"):
        ExactAdapter(s, big, None, big)
