from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny torch models train ~10x faster on one thread on a shared 2-core machine."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
