"""The one early-stopping helper every training loop uses."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from chunksel.errors import ConfigError  # noqa: E402
from chunksel.training.early_stopping import EarlyStopping  # noqa: E402


def _set(model, value):
    with torch.no_grad():
        model.weight.fill_(value)


def test_keeps_the_best_weights_and_stops_after_patience_epochs_without_improvement():
    model = torch.nn.Linear(2, 1)
    stopper = EarlyStopping(model, patience=2, min_delta=0.1)
    stops = []
    for epoch, (weight, loss) in enumerate([(1.0, 3.0), (2.0, 2.0), (3.0, 1.95), (4.0, 2.5)], start=1):
        _set(model, weight)
        stops.append(stopper.step(loss, epoch))
    # 1.95 is not 0.1 below 2.0: no improvement; 2.5 neither: the second bad epoch stops
    assert stops == [False, False, False, True]
    assert (stopper.best, stopper.best_epoch, stopper.bad) == (2.0, 2, 2)
    stopper.restore()
    assert torch.all(model.weight == 2.0)


def test_a_verdict_of_the_callers_own_and_the_initial_weights():
    model = torch.nn.Linear(2, 1)
    _set(model, 0.5)
    stopper = EarlyStopping(model, patience=1)  # the initial weights are the first best
    _set(model, 9.0)
    assert stopper.update(False, 1) is True and stopper.best_epoch is None
    stopper.restore()
    assert torch.all(model.weight == 0.5)

    lazy = EarlyStopping(model, patience=3, keep_initial=False)  # nothing kept until an improvement
    _set(model, 7.0)
    assert lazy.update(False, 0) is False
    lazy.restore()
    assert torch.all(model.weight == 7.0)


@pytest.mark.parametrize("patience", [0, -1, True])
def test_patience_must_be_at_least_one(patience):
    with pytest.raises(ConfigError, match="patience must be >= 1"):
        EarlyStopping(torch.nn.Linear(1, 1), patience)
