from __future__ import annotations

import math

import pytest
import torch

from chunksel.nn.prototype import PrototypeMLP, cosine_scores


def expected_params(in_dim: int, hidden: int = 1024, depth: int = 3, out_dim: int = 384) -> int:
    n, prev = 0, in_dim
    for _ in range(depth):
        n += prev * hidden + hidden + 2 * hidden  # Linear + BatchNorm affine
        prev = hidden
    return n + prev * out_dim + out_dim


@pytest.mark.parametrize("in_dim", [4992, 4416])
def test_parameter_count_matches_paper_scale(in_dim):
    model = PrototypeMLP(in_dim)
    assert model.n_parameters() == expected_params(in_dim)
    assert 6.5e6 < model.n_parameters() < 8e6  # "a 7-million-parameter MLP"


def test_output_is_unit_norm_and_shaped():
    torch.manual_seed(0)
    model = PrototypeMLP(40, out_dim=12, hidden=32, depth=2).eval()
    y = model(torch.randn(7, 40))
    assert y.shape == (7, 12)
    torch.testing.assert_close(y.norm(dim=-1), torch.ones(7))


def test_layer_structure_and_kaiming_init():
    torch.manual_seed(0)
    model = PrototypeMLP(2000, out_dim=16, hidden=512, depth=3, dropout=0.05)
    kinds = [type(m).__name__ for m in model.body]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Dropout"] * 3
    first = model.body[0]
    assert torch.all(first.bias == 0)
    # Kaiming normal, fan-in, ReLU gain: std = sqrt(2 / fan_in)
    assert first.weight.std().item() == pytest.approx(math.sqrt(2 / 2000), rel=0.02)
    assert torch.all(model.body[1].weight == 1) and torch.all(model.body[1].bias == 0)
    assert model.body[3].p == 0.05


def test_fold_batchnorm_matches_eval_output():
    torch.manual_seed(0)
    model = PrototypeMLP(20, out_dim=8, hidden=16, depth=3)
    model.train()
    for _ in range(5):  # give BatchNorm non-trivial running statistics
        model(torch.randn(32, 20) * 3 + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    model.eval()
    x = torch.randn(9, 20)
    folded = model.fold_batchnorm()
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in folded.modules())
    torch.testing.assert_close(folded(x), model(x), atol=1e-5, rtol=1e-5)


def test_inference_mlp_folds_the_scaler_and_batchnorm():
    from chunksel.nn.prototype import InferenceMLP, int8_weight_only_available

    torch.manual_seed(1)
    model = PrototypeMLP(20, out_dim=8, hidden=16, depth=3)
    model.train()
    for _ in range(5):
        model(torch.randn(32, 20))
    model.eval()
    mean, scale = torch.randn(20) * 5, torch.rand(20) * 10 + 0.1
    x = torch.randn(9, 20) * scale + mean
    with torch.no_grad():
        expected = model((x - mean) / scale)
    fast = InferenceMLP(model, mean, scale, "fp32")
    torch.testing.assert_close(fast(x), expected, atol=1e-5, rtol=1e-4)
    assert fast.n_bytes() == 4 * model.n_parameters() - 4 * 2 * 3 * 16  # BN weights/biases folded away
    if int8_weight_only_available():
        q = InferenceMLP(model, mean, scale, "int8w")
        assert (q(x) - expected).abs().max() < 0.05
    with pytest.raises(ValueError, match="mode"):
        InferenceMLP(model, mean, scale, "int4")


def test_cosine_scores_renormalise_and_keep_zero_rows():
    y = torch.tensor([[1.0, 0.0]])
    e = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [0.0, 0.0]]])
    torch.testing.assert_close(cosine_scores(y, e), torch.tensor([[1.0, 0.0, 0.0]]))


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="positive sizes"):
        PrototypeMLP(0)
