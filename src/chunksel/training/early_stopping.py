"""Early stopping shared by every training loop: keep the best weights, count the epochs
without improvement, stop after ``patience`` of them, restore the best weights.

The loop decides what "better" means: :meth:`EarlyStopping.step` for a value to minimise
(a validation loss, with a minimum improvement ``min_delta``), :meth:`EarlyStopping.update`
for a verdict of its own (e.g. validation accuracy first, loss on ties).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from chunksel.errors import ConfigError


class EarlyStopping:
    """The best weights seen so far and the count of epochs since.

    Args:
        model: the torch module being trained.
        patience: epochs without improvement before stopping (>= 1).
        min_delta: how much :meth:`step`'s value must fall below the best to improve.
        keep_initial: the untrained weights count as the first best (restored when no
            epoch improves); False: nothing to restore until an epoch improves.
        best: the value to beat at first (:meth:`step`).

    Attributes:
        best: the best value so far (:meth:`step`).
        best_epoch: the epoch label of the last improvement (None: none yet).
        bad: epochs since the last improvement.
    """

    def __init__(self, model: Any, patience: int, *, min_delta: float = 0.0, keep_initial: bool = True,
                 best: float = math.inf) -> None:
        if isinstance(patience, bool) or patience < 1:
            raise ConfigError(f"patience must be >= 1, got {patience!r}")
        self.model, self.patience, self.min_delta = model, patience, min_delta
        self.best, self.best_epoch, self.bad = best, None, 0
        self.best_state = copy.deepcopy(model.state_dict()) if keep_initial else None

    def step(self, value: float, epoch: int) -> bool:
        """Record an epoch's ``value`` (lower is better); True when training should stop."""
        improved = value < self.best - self.min_delta
        if improved:
            self.best = value
        return self.update(improved, epoch)

    def update(self, improved: bool, epoch: int) -> bool:
        """Record an epoch judged ``improved`` by the caller (its weights become the best);
        True when training should stop."""
        if improved:
            self.bad, self.best_epoch = 0, epoch
            self.best_state = copy.deepcopy(self.model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience

    def restore(self) -> Any:
        """Load the best weights into the model (if any were kept); the model."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        return self.model


__all__ = ["EarlyStopping"]
