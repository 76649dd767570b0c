"""The cost columns of Table 1: trainable parameters, saved size and batch-1 latency on
one torch thread (:func:`chunksel.eval.cost.selector_cost`)."""

from __future__ import annotations


def measure_cost(selector, batch, features, n: int) -> dict:
    """Parameters, saved size and batch-1 latency on one torch thread."""
    import torch

    from chunksel.eval.cost import selector_cost

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return selector_cost(selector, batch[:n], features, repeats=3, warmup=3).to_dict()
    finally:
        torch.set_num_threads(prev)
