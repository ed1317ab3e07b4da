"""The network: the hand-written backward against autograd on the equations of docs/METHOD.md."""

import torch

from dyncompress.network.mlstm import MLSTM, MLSTMShape, init_params, unflatten


def reference_nll(shape, theta, inputs, targets, weight, h0, c0):
    """The mLSTM equations written plainly, differentiated by autograd."""
    w = unflatten(shape, theta)
    H = shape.hidden
    h, c, total = h0, c0, 0
    for t in range(inputs.shape[0]):
        mx, x = w["w_in"][inputs[t]].split([H, 4 * H], dim=1)
        m = mx * (h @ w["w_mh"])
        z = x + m @ w["w_m"] + w["b"]
        i, f, o, u = z.split(H, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
        h = torch.sigmoid(o) * torch.tanh(c)
        logp = torch.log_softmax(h @ w["w_out"] + w["b_out"], dim=1)
        total = total - (logp.gather(1, targets[t].unsqueeze(1)).squeeze(1) * weight[t]).sum()
    return total


def test_backward_matches_autograd():
    torch.manual_seed(0)
    shape = MLSTMShape(hidden=24)
    theta = init_params(shape, seed=3).double()
    B, T = 5, 7
    text = torch.randint(0, 256, (T + 1, B))
    weight = torch.rand(T, B, dtype=torch.float64)
    weight[-2:, 3:] = 0  # padded lanes at the end of a block

    net = MLSTM(shape, theta, batch=B, max_steps=T)
    h0, c0 = torch.randn(B, 24, dtype=torch.float64), torch.randn(B, 24, dtype=torch.float64)
    net.set_state(h0, c0)  # a state carried from an earlier segment
    for t in range(T):
        net.step(text[t], t)
    nll = net.backward(T, text[1:], weight)

    ref_theta = theta.clone().requires_grad_()
    ref = reference_nll(shape, ref_theta, text[:-1], text[1:], weight, h0, c0)
    ref.backward()
    assert torch.allclose(net.grad, ref_theta.grad, rtol=1e-9, atol=1e-12)
    plain = reference_nll(shape, theta, text[:-1], text[1:], (weight > 0).double(), h0, c0)
    assert torch.allclose(nll, plain)


def test_step_probabilities_and_carry():
    shape = MLSTMShape(hidden=16)
    net = MLSTM(shape, init_params(shape, 0), batch=3, max_steps=4)
    p = net.step(torch.tensor([1, 2, 3]), 0).clone()
    assert p.shape == (3, 256)
    assert torch.allclose(p.sum(1), torch.ones(3))
    net.carry(1)
    h, c = (x.clone() for x in net.state)
    assert h.abs().sum() > 0 and c.abs().sum() > 0  # the step's state, now the next segment's start
    assert not torch.equal(net.step(torch.tensor([1, 2, 3]), 0), p)  # same input, carried state: new output
    net.reset_state()
    assert torch.equal(net.step(torch.tensor([1, 2, 3]), 0), p)  # zero state again: the first output


def test_init_is_seeded():
    shape = MLSTMShape(hidden=16)
    assert torch.equal(init_params(shape, 7), init_params(shape, 7))
    assert not torch.equal(init_params(shape, 7), init_params(shape, 8))
    assert init_params(shape, 0).numel() == shape.num_params


def test_a_widened_network_computes_what_the_small_one_did_and_its_new_units_learn():
    """`widen`: 16 units made 24 give the same next-byte probabilities over real text; after one
    gradient step the paths from the new units to the output, zero at the start, are not."""
    from conftest import corpus
    from dyncompress.network.mlstm import widen

    small = MLSTMShape(16)
    theta = init_params(small, seed=3) + 0.1 * torch.randn(small.num_params, generator=torch.Generator().manual_seed(1))
    big = widen(small, theta, 24, seed=0)
    assert big.shape == (MLSTMShape(24).num_params,)
    text = torch.tensor(list(corpus("alice29.txt")[:201]), dtype=torch.long).view(-1, 1).repeat(1, 2)
    a, b = MLSTM(small, theta, 2, 200), MLSTM(MLSTMShape(24), big, 2, 200)
    for t in range(200):
        assert torch.allclose(a.step(text[t], t), b.step(text[t], t), rtol=0, atol=1e-6), t
    weight = torch.full((200, 2), 1 / 400)
    assert torch.allclose(a.backward(200, text[1:], weight), b.backward(200, text[1:], weight), atol=1e-4)
    new_out = unflatten(MLSTMShape(24), b.grad)["w_out"][16:]
    assert unflatten(MLSTMShape(24), big)["w_out"][16:].abs().max() == 0 and new_out.abs().max() > 1e-6
    assert not torch.equal(big, widen(small, theta, 24, seed=1))  # the new units are the seed's
