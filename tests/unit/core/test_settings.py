"""The settings object: read from the environment once, options first, given to library
defaults through ``use``, never written back into the environment."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from chunksel.settings import Settings, current, use


def test_from_env_reads_the_three_variables_and_treats_empty_as_unset():
    env = {"CHUNKSEL_DATA": "/d", "CHUNKSEL_CACHE": "", "CHUNKSEL_LABEL": "semantic|gold"}
    assert Settings.from_env(env) == Settings(data_root="/d", cache_dir=None, label="semantic|gold")
    assert Settings.from_env({}) == Settings()


def test_use_scopes_the_library_defaults(tmp_path, monkeypatch):
    from chunksel.config import cache_root, data_root

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    with use(Settings(data_root=str(tmp_path), cache_dir=str(tmp_path / "mine"))):
        assert cache_root() == tmp_path / "mine" and data_root() == tmp_path
        with use(replace(current(), cache_dir=str(tmp_path / "inner"))):
            assert cache_root() == tmp_path / "inner"
        assert cache_root() == tmp_path / "mine"
    assert cache_root() == tmp_path / "env"  # back to the environment's


def test_to_args_gives_a_child_command_line_the_same_settings():
    from chunksel.cli import build_parser
    from chunksel.cli.common import setup

    s = Settings(data_root="/data", cache_dir="/cache", label="containment|gold")
    args = build_parser().parse_args(["report", "folder", *s.to_args()])
    got = setup(args)
    assert (got.data_root, got.cache_dir, got.label) == (s.data_root, s.cache_dir, s.label)
    assert Settings().to_args() == []


def test_the_command_line_passes_its_settings_down_without_the_environment(tmp_path, monkeypatch, capsys):
    """--label, --cache and --data-root reach the build as parameters and settings, and
    nothing is written into os.environ."""
    import chunksel.build

    seen = {}

    def fake_build(*_a, **kw):
        from chunksel.config import cache_root

        seen.update(label=kw.get("label"), cache=cache_root(), env=dict(os.environ))
        raise chunksel.build.ConfigError("stop here")

    monkeypatch.setattr(chunksel.build, "build_instances", fake_build)
    monkeypatch.delenv("CHUNKSEL_LABEL", raising=False)
    from chunksel.cli import main

    code = main(["train", "--selector", "bm25", "--dataset", "nq", "--out", str(tmp_path / "m"), "--label", "gold",
                 "--cache", str(tmp_path / "c"), "--data-root", str(tmp_path), "--quiet"])
    assert code == 2 and "stop here" in capsys.readouterr().err
    assert seen["label"] == "gold" and seen["cache"] == tmp_path / "c"
    assert "CHUNKSEL_LABEL" not in seen["env"] and seen["env"].get("CHUNKSEL_CACHE") != str(tmp_path / "c")
    assert "CHUNKSEL_LABEL" not in os.environ and current() == Settings.from_env()  # nothing left behind


@pytest.mark.parametrize("n", [0, -2])
def test_set_threads_refuses_fewer_than_one(n):
    from chunksel.errors import ConfigError
    from chunksel.threads import set_threads

    with pytest.raises(ConfigError, match=rf"--threads must be a whole number >= 1, got {n}"):
        set_threads(n)
    set_threads(None)  # no limit: nothing happens


def test_thread_budget_follows_the_block_limit():
    """An engine built inside ``limit_threads(n)`` reads ``n`` (the cost stage's one thread)."""
    pytest.importorskip("torch")
    from chunksel.threads import limit_threads, thread_budget

    with limit_threads(1):
        assert thread_budget() == 1
        with limit_threads(2):
            assert thread_budget() == 2
        assert thread_budget() == 1
