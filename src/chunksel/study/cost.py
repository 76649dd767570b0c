"""The cost columns of Table 1: trainable parameters, saved size and batch-1 latency on
one thread (:func:`chunksel.eval.cost.selector_cost`)."""

from __future__ import annotations


def measure_cost(selector, batch, features, n: int) -> dict:
    """Parameters, saved size and batch-1 latency, all on one thread."""
    from chunksel.eval.cost import selector_cost
    from chunksel.threads import limit_threads

    with limit_threads(1):
        return selector_cost(selector, batch[:n], features, repeats=3, warmup=3).to_dict()
