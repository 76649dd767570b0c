from __future__ import annotations

import math

import pytest
import torch

from chunksel.nn.drmm import DRMM


def test_histogram_exact_bin_and_log_counts() -> None:
    torch.manual_seed(0)
    m = DRMM(50, 8, n_bins=30)
    q = torch.tensor([[5, 6, 0]])
    d = torch.tensor([[5, 5, 7, 8, 0, 0]])
    h = m.histograms(q, q != 0, d, d != 0)
    assert h.shape == (1, 3, 30)
    counts = torch.expm1(h)
    assert counts[0, 0, 29].item() == 2  # two exact matches of term 5
    assert torch.allclose(counts[0, 0].sum(), torch.tensor(4.0))  # four real doc terms
    assert counts[0, 1, 29].item() == 0 and counts[0, 1].sum().item() == 4
    assert counts[0, 2].sum().item() == 0  # padded query term
    assert h[0, 0, 29].item() == pytest.approx(math.log(3.0))


def test_gating_ignores_padded_query_terms() -> None:
    torch.manual_seed(0)
    m = DRMM(50, 8)
    d = torch.tensor([[5, 7, 8]])
    a = m(torch.tensor([[5, 6]]), torch.tensor([[True, True]]), d, d != 0)
    b = m(torch.tensor([[5, 6, 0, 0]]), torch.tensor([[True, True, False, False]]), d, d != 0)
    assert torch.allclose(a, b)
