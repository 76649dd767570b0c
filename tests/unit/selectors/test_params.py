"""Selector settings are checked against the constructor: names and kinds."""

from __future__ import annotations

import json

import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.selectors import REGISTRY, get_selector_class, load_selector, make_selector
from chunksel.selectors.params import coerce_params, param_kinds


def test_kinds_come_from_the_annotations():
    kinds = param_kinds(get_selector_class("prototype"))
    assert kinds["k"] == ["int"] and kinds["budget"] == ["float", "none"]
    assert kinds["blocks"] == ["str", "seq_str"] and kinds["progress"] == ["bool"]


def test_command_line_text_is_coerced_per_setting():
    cls = get_selector_class("prototype")
    got = coerce_params(cls, {"max_epochs": "3", "lr": "1e-3", "budget": "null", "progress": "false",
                              "blocks": "hs+chunk", "label": "containment|gold", "device": "0", "k": "4.0"},
                        "--param", text=True)
    assert got == {"max_epochs": 3, "lr": 1e-3, "budget": None, "progress": False, "blocks": "hs+chunk",
                   "label": "containment|gold", "device": "0", "k": 4}
    assert coerce_params(cls, {"blocks": '["hs", "chunk"]'}, "--param", text=True) == {"blocks": ["hs", "chunk"]}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"bogus": "1"}, r"--param: unknown parameter 'bogus' for selector 'prototype'; known: k, blocks"),
        ({"max_epoch": "3"}, r"unknown parameter 'max_epoch' .*did you mean 'max_epochs'"),
        ({"max_epochs": "lots"}, r"--param: parameter 'max_epochs' of selector 'prototype' expects an integer, got 'lots'"),
        ({"budget": "ten"}, r"parameter 'budget' .* expects a number or null, got 'ten'"),
        ({"progress": "maybe"}, r"parameter 'progress' .* expects true or false"),
        ({"k": "2.5"}, r"parameter 'k' .* expects an integer, got '2.5'"),
    ],
)
def test_bad_settings_name_the_parameter(params, message):
    with pytest.raises(ConfigError, match=message):
        coerce_params(get_selector_class("prototype"), params, "--param", text=True)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_selector_default_settings_pass_unchanged(name):
    cls = get_selector_class(name)
    params = json.loads(json.dumps(cls().get_params(), default=list))  # as config.json holds them
    assert coerce_params(cls, params, "config.json") == params


def test_saved_config_with_unknown_or_null_params_is_one_clear_error(tmp_path):
    make_selector("random", seed=3).save(tmp_path / "r")
    cfg_path = tmp_path / "r" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["params"] = {"seed": 3, "bogus": 1}
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match=r"config\.json: unknown parameter 'bogus' for selector 'random'; known: seed"):
        load_selector(tmp_path / "r")
    cfg["params"] = None
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match=r"config\.json: the settings of selector 'random' must be a JSON object, got null"):
        load_selector(tmp_path / "r")
    cfg["params"] = {"seed": "three"}
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match=r"config\.json: parameter 'seed' of selector 'random' expects an integer"):
        load_selector(tmp_path / "r")
    cfg["params"] = {"seed": 3.0}  # a whole number written as a float still loads
    cfg_path.write_text(json.dumps(cfg))
    assert load_selector(tmp_path / "r").seed == 3


@pytest.mark.parametrize(("name", "params", "message"), [
    ("prototype", {"max_epochs": -5}, r"'max_epochs' of selector 'prototype' must be a whole number >= 1, got -5"),
    ("prototype", {"lr": float("nan")}, r"'lr' of selector 'prototype' must be a finite number > 0, got nan"),
    ("prototype", {"batch_size": 0}, r"'batch_size' .* >= 1, got 0"),
    ("prototype", {"dropout": 2}, r"'dropout' .* in \[0, 1\), got 2"),
    ("lambdamart", {"n_estimators": 0}, r"'n_estimators' of selector 'lambdamart' .* >= 1, got 0"),
    ("lambdamart", {"learning_rate": -1}, r"'learning_rate' .* > 0, got -1"),
    ("lambdamart", {"num_leaves": 1}, r"'num_leaves' .* >= 2"),
    ("anchored", {"tau": float("inf")}, r"'tau' .* got inf"),
    ("bm25", {"b": 1.5}, r"'b' of selector 'bm25' must be a finite number in \[0, 1\]"),
    ("sras", {"gamma": -0.1}, r"'gamma'"),
    ("duet", {"weight_decay": -1e-3}, r"'weight_decay'"),
    ("random", {"seed": -1}, r"'seed'"),
    ("rankgpt", {"window": 0}, r"'window'"),
])
def test_out_of_range_settings_fail_at_construction(name, params, message):
    with pytest.raises(ConfigError, match=message):
        make_selector(name, **params)


def test_out_of_range_text_params_fail_before_any_work():
    """The --param path: coerced, then the constructor refuses the value."""
    cls = get_selector_class("prototype")
    params = coerce_params(cls, {"max_epochs": "-5"}, "--param", text=True)
    with pytest.raises(ConfigError, match="max_epochs"):
        cls(**params)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_selector_default_settings_are_in_range(name):
    from chunksel.selectors.params import check_ranges

    sel = get_selector_class(name)()
    check_ranges(name, sel.get_params())


def test_saved_weights_get_the_umask_mode_not_0600(tmp_path, toy_instances):
    import os

    import numpy as np

    pytest.importorskip("torch")
    from chunksel.features.base import InMemoryFeatures

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", hidden=8, max_epochs=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    sel.save(tmp_path / "m")
    mask = os.umask(0)
    os.umask(mask)
    for f in (tmp_path / "m").rglob("*"):
        if f.is_file():
            assert f.stat().st_mode & 0o777 == 0o666 & ~mask, f
