from __future__ import annotations

from dataclasses import dataclass

import pytest

from chunksel.config import cache_root, config_hash, data_root, from_dict, to_dict
from chunksel.errors import DataError


@dataclass
class Cfg:
    a: int = 1
    b: str = "x"


def test_config_round_trip_and_hash():
    cfg = Cfg(2, "y")
    assert from_dict(Cfg, to_dict(cfg)) == cfg
    assert config_hash(cfg) == config_hash({"b": "y", "a": 2})
    assert config_hash(cfg) != config_hash(Cfg())
    with pytest.raises(DataError, match="unknown Cfg settings: c"):
        from_dict(Cfg, {"a": 1, "c": 3})


def test_data_root_errors(monkeypatch, tmp_path):
    monkeypatch.delenv("CHUNKSEL_DATA", raising=False)
    with pytest.raises(DataError, match="set CHUNKSEL_DATA"):
        data_root()
    with pytest.raises(DataError, match="does not exist"):
        data_root(tmp_path / "absent")
    assert data_root(tmp_path) == tmp_path


def test_cache_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c" and (tmp_path / "c").is_dir()


def test_quiet_silences_bars_that_callers_asked_for(monkeypatch, toy_instances, capsys):
    """chunksel --quiet sets TQDM_DISABLE; a selector's own progress=True must not win."""
    import numpy as np
    from tests.conftest import TINY_PROTOTYPE

    from chunksel.config import show_progress
    from chunksel.features.base import InMemoryFeatures
    from chunksel.selectors.prototype import PrototypeSelector

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert show_progress(True) and not show_progress(False)
    rng = np.random.default_rng(0)
    feats = InMemoryFeatures([i.id for i in toy_instances], h=rng.normal(size=(len(toy_instances), 4)),
                             r=rng.normal(size=(len(toy_instances), 3)))
    settings = {**TINY_PROTOTYPE, "progress": True, "max_epochs": 2}
    PrototypeSelector(**settings).fit(toy_instances, feats)
    assert "prototype" in capsys.readouterr().err  # the bar shows when asked for
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not show_progress(True)
    PrototypeSelector(**settings).fit(toy_instances, feats)
    assert "prototype" not in capsys.readouterr().err
