from __future__ import annotations

import pytest
import torch

from chunksel.nn.duet import LocalDuet


def test_interaction_is_binary_exact_match() -> None:
    q = torch.tensor([[4, 5, 0]])
    d = torch.tensor([[5, 4, 4, 0]])
    x = LocalDuet.interaction(q, q != 0, d, d != 0)
    assert x.tolist() == [[[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]]


def test_shapes_and_parameter_count() -> None:
    m = LocalDuet(max_query_len=3, max_doc_len=4, n_filters=6, hidden=5).eval()
    q = torch.tensor([[4, 5, 0], [1, 0, 0]])
    d = torch.tensor([[5, 4, 4, 0], [1, 1, 0, 0]])
    assert m(q, q != 0, d, d != 0).shape == (2,)
    n = sum(p.numel() for p in m.parameters())
    assert n == (4 * 6 + 6) + (6 * 3 * 5 + 5) + (5 * 5 + 5) + (5 + 1)
    with pytest.raises(ValueError, match="expects"):
        m(q[:, :2], q[:, :2] != 0, d, d != 0)
