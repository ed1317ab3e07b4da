"""Update rules: each one lowers the loss of the segment it learned from."""

import pytest
import torch

from dyncompress.config.settings import AdaptSettings
from dyncompress.network.adapt import ADAPTIVE, Adapter, FusedAdam, clip_grad_
from dyncompress.network.mlstm import MLSTM, MLSTMShape, init_params

TEXT = b"the cat sat on the mat; the cat sat on the mat; " * 3


def segment_loss(net, tokens):
    """Mean nll of a segment from a fixed zero state, with gradient in net.grad."""
    net.reset_state()
    inputs = torch.cat([torch.tensor([0]), tokens[:-1]])
    for t in range(len(tokens)):
        net.step(inputs[t : t + 1], t)
    weight = torch.full((len(tokens), 1), 1 / len(tokens))
    return float(net.backward(len(tokens), tokens.unsqueeze(1), weight)) / len(tokens)


@pytest.mark.parametrize("rule", [*ADAPTIVE, "rms+ms", "rms-decay+ms"])
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
        adapter.update(net.grad)
    assert segment_loss(net, tokens) < 0.8 * before


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
    adapter.update(g.clone())
    assert torch.allclose(theta, expected, atol=1e-6)


def test_sgd_is_a_plain_step():
    theta = torch.zeros(4)
    Adapter(AdaptSettings(rule="sgd", lr=0.5, clip=0), theta).update(torch.tensor([1.0, -2.0, 0.0, 4.0]))
    assert torch.equal(theta, torch.tensor([-0.5, 1.0, 0.0, -2.0]))


def test_clip_bounds_the_step():
    theta = torch.zeros(2)
    Adapter(AdaptSettings(rule="sgd", lr=1.0, clip=1.0), theta).update(torch.tensor([30.0, 40.0]))
    assert torch.allclose(theta, torch.tensor([-0.6, -0.8]))


def test_clip_scales_down_only():
    assert torch.allclose(clip_grad_(torch.tensor([3.0, 4.0]), 1.0), torch.tensor([0.6, 0.8]))
    assert torch.equal(clip_grad_(torch.tensor([0.3, 0.4]), 1.0), torch.tensor([0.3, 0.4]))  # within the bound
    assert torch.equal(clip_grad_(torch.tensor([30.0, 40.0]), 0.0), torch.tensor([30.0, 40.0]))  # 0: off


def test_decay_pulls_back_toward_the_start():
    theta = torch.ones(3)
    adapter = Adapter(AdaptSettings(rule="rms-decay", lr=0.0, decay=0.1, clip=0), theta)
    theta += 1.0  # as if adapted away from the start
    adapter.update(torch.tensor([1.0, 1.0, 1.0]))  # equal RMS: decrate = 1
    assert torch.allclose(theta, torch.full((3,), 1.9))


def test_unknown_rule_is_refused_and_static_gets_no_adapter():
    with pytest.raises(ValueError, match="unknown rule"):
        AdaptSettings(rule="adamw")
    with pytest.raises(ValueError, match="no adaptation"):
        Adapter(AdaptSettings(rule="static"), torch.zeros(1))


def test_stream_statistics_save_restore_and_reset():
    """Online rms keeps Adam's moments: restoring them continues exactly; reset forgets them."""
    s = AdaptSettings(rule="rms", lr=0.1, clip=0)
    theta = torch.zeros(3)
    adapter = Adapter(s, theta)
    adapter.update(torch.tensor([1.0, -2.0, 3.0]))
    saved, theta_saved = adapter.state_dict(), theta.clone()
    assert saved and "exp_avg_sq" in saved
    adapter.update(torch.tensor([0.5, 0.5, 0.5]))
    after = theta.clone()
    theta.copy_(theta_saved)
    adapter.load_state_dict(saved)
    adapter.update(torch.tensor([0.5, 0.5, 0.5]))
    assert torch.equal(theta, after)
    adapter.reset()
    assert adapter.state_dict() == {}
    theta.zero_()
    adapter.update(torch.tensor([1.0, -2.0, 3.0]))
    assert torch.equal(theta, theta_saved)  # the first step again, from fresh statistics


@pytest.mark.parametrize("beta1", [0.0, 0.9])
def test_fused_adam_is_the_optimizers_kernel_bit_for_bit(beta1):
    """Online rms runs torch's fused Adam kernel without the optimizer object (whose construction
    imports torch._dynamo): the same bits as `torch.optim.Adam(fused=True)`, step after step."""
    gen = torch.Generator().manual_seed(0)
    ours = torch.randn(1000, generator=gen)
    theirs = ours.clone()
    s = AdaptSettings(rule="rms", lr=3e-3, beta1=beta1, beta2=0.99, eps=1e-8)
    fused = FusedAdam(ours, s.lr, (beta1, s.beta2), s.eps)
    reference = torch.optim.Adam([theirs], lr=s.lr, betas=(beta1, s.beta2), eps=s.eps, fused=True)
    for _ in range(5):
        grad = torch.randn(1000, generator=gen) * 1e-3
        fused.step(grad.clone())
        theirs.grad = grad.clone()
        reference.step()
        assert torch.equal(ours, theirs)
    assert torch.equal(fused.state["exp_avg_sq"], reference.state[theirs]["exp_avg_sq"])
