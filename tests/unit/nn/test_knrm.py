from __future__ import annotations

import pytest
import torch

from chunksel.nn.knrm import KNRM, kernel_mus


def test_kernels_follow_the_paper() -> None:
    mus = kernel_mus(11)
    assert mus[0] == 1.0
    assert mus[1:] == pytest.approx([0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9])
    m = KNRM(10, 4)
    assert m.sigma[0].item() == pytest.approx(1e-3) and torch.allclose(m.sigma[1:], torch.tensor(0.1))


def test_exact_match_kernel_counts_matches() -> None:
    torch.manual_seed(0)
    m = KNRM(50, 8)
    q = torch.tensor([[3, 4, 0]])
    qm = q != 0
    d = torch.tensor([[3, 3, 9, 0, 0]])
    dm = d != 0
    phi = m.kernel_features(q, qm, d, dm)
    # term 3 matches twice: log(2) * 0.01; term 4 none: log(1e-10) * 0.01 (its exact kernel ~0)
    assert phi[0, 0].item() == pytest.approx(0.01 * (torch.log(torch.tensor(2.0)).item() + torch.log(torch.tensor(1e-10)).item()), rel=1e-4)
    # padding changes nothing
    d_pad = torch.tensor([[3, 3, 9, 0, 0, 0, 0]])
    assert torch.allclose(m.kernel_features(q, qm, d_pad, d_pad != 0), phi)
    assert m(q, qm, d, dm).shape == (1,)
