"""Update rules: each one lowers the loss of the segment it learned from."""

import pytest
import torch

from dyncompress.adapt import RULES, Adapter, AdaptSettings
from dyncompress.mlstm import MLSTM, MLSTMShape, init_params

TEXT = b"the cat sat on the mat; the cat sat on the mat; " * 3


def segment_loss(net, tokens):
    """Mean nll of a segment from a fixed zero state, with gradient in net.grad."""
    net.HS[0].zero_()
    net.CS[0].zero_()
    net.feed(torch.tensor([0]))
    for t in range(len(tokens)):
        net.step(t)
        net.feed(tokens[t : t + 1])
    weight = torch.full((len(tokens), 1), 1 / len(tokens))
    return float(net.backward(len(tokens), tokens.unsqueeze(1), weight)) / len(tokens)


@pytest.mark.parametrize("rule", [r for r in RULES if r != "static"] + ["rms+ms", "rms-decay+ms"])
def test_rule_lowers_loss(rule):
    """Every adaptive rule, with stream statistics and with MS_g from 'training' text."""
    shape = MLSTMShape(hidden=32)
    tokens = torch.tensor(list(TEXT))
    theta = init_params(shape, 0)
    net = MLSTM(shape, theta, batch=1, max_steps=len(tokens))
    rule, _, with_ms = rule.partition("+")
    ms = None
    if with_ms:  # mean squared gradient over segments of other text, as `calibrate` collects it
        other = torch.tensor(list(b"a dog ran in the park, and the dog sat. "))
        ms = torch.zeros_like(theta)
        for k in range(0, len(other) - 8, 8):
            segment_loss(net, other[k : k + 8])
            ms += net.grad**2
        ms /= len(range(0, len(other) - 8, 8))
    lr = {"sgd": 0.5, "rms": 3e-3, "rms-decay": 3e-3}[rule]
    adapter = Adapter(AdaptSettings(rule=rule, lr=lr, decay=1e-3), theta, ms)
    before = segment_loss(net, tokens)
    for _ in range(20):
        segment_loss(net, tokens)
        adapter.update(theta, net.grad)
    assert segment_loss(net, tokens) < 0.8 * before


def test_static_never_changes_the_weights():
    theta = torch.arange(4.0)
    Adapter(AdaptSettings(rule="static", lr=1.0), theta).update(theta, torch.ones(4))
    assert torch.equal(theta, torch.arange(4.0))


def test_calibrated_rms_decay_is_the_papers_rule():
    """theta -= lr g / (sqrt(MS_g) + eps) + lambda * decrate * (theta0 - theta), decrate clipped at 1/lambda."""
    theta0 = torch.tensor([1.0, 2.0, 3.0, 4.0])
    ms = torch.tensor([1.0, 4.0, 0.25, 400.0])
    s = AdaptSettings(rule="rms-decay", lr=0.1, eps=1e-3, decay=0.5, clip=0)
    theta = theta0.clone()
    adapter = Adapter(s, theta, ms)
    theta += 0.5  # adapted away from the pretrained weights
    g = torch.tensor([1.0, -1.0, 2.0, 0.0])
    rms = ms.sqrt()
    decrate = (rms / rms.mean()).clamp(max=1 / 0.5)
    assert decrate[3] == 2.0  # the large-gradient parameter is clipped at 1 / lambda
    after_step = theta0 + 0.5 - 0.1 * g / (rms + 1e-3)
    expected = after_step + 0.5 * decrate * (theta0 - after_step)
    adapter.update(theta, g.clone())
    assert torch.allclose(theta, expected, atol=1e-6)


def test_sgd_is_a_plain_step():
    theta = torch.zeros(4)
    Adapter(AdaptSettings(rule="sgd", lr=0.5, clip=0), theta).update(theta, torch.tensor([1.0, -2.0, 0.0, 4.0]))
    assert torch.equal(theta, torch.tensor([-0.5, 1.0, 0.0, -2.0]))


def test_clip_bounds_the_step():
    theta = torch.zeros(2)
    Adapter(AdaptSettings(rule="sgd", lr=1.0, clip=1.0), theta).update(theta, torch.tensor([30.0, 40.0]))
    assert torch.allclose(theta, torch.tensor([-0.6, -0.8]))


def test_decay_pulls_back_toward_the_start():
    theta = torch.ones(3)
    adapter = Adapter(AdaptSettings(rule="rms-decay", lr=0.0, decay=0.1, clip=0), theta)
    theta += 1.0  # as if adapted away from the start
    adapter.update(theta, torch.tensor([1.0, 1.0, 1.0]))  # equal RMS: decrate = 1
    assert torch.allclose(theta, torch.full((3,), 1.9))


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError):
        Adapter(AdaptSettings(rule="adamw"), torch.zeros(1))
