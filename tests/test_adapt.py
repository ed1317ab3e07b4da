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


@pytest.mark.parametrize("rule", RULES)
def test_rule_lowers_loss(rule):
    shape = MLSTMShape(hidden=32)
    tokens = torch.tensor(list(TEXT))
    theta = init_params(shape, 0)
    net = MLSTM(shape, theta, batch=1, max_steps=len(tokens))
    lr = {"sgd": 0.5, "rms": 3e-3, "rms-decay": 3e-3}[rule]
    adapter = Adapter(AdaptSettings(rule=rule, lr=lr, decay=1e-3), theta)
    before = segment_loss(net, tokens)
    for _ in range(20):
        segment_loss(net, tokens)
        adapter.update(theta, net.grad)
    assert segment_loss(net, tokens) < 0.8 * before


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
