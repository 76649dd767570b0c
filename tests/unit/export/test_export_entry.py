"""The export package's one entry point: the graph comes from the selector class's
declared ``onnx_graph``, not from its name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chunksel.errors import ConfigError
from chunksel.export import GRAPHS, export_selector, graph_kind
from chunksel.selectors import REGISTRY, get_selector_class


def test_every_declared_graph_has_an_exporter_and_only_declared_ones_count():
    declared = {name: getattr(get_selector_class(name), "onnx_graph", None) for name in REGISTRY}
    assert {k for k in declared.values() if k} <= set(GRAPHS)
    assert declared["prototype"] == "prototype" and declared["anchored"] == "anchored"
    assert graph_kind(SimpleNamespace(name="prototype")) is None  # a name alone is no capability
    assert graph_kind(SimpleNamespace(name="renamed", onnx_graph="anchored")) == "anchored"
    assert graph_kind(SimpleNamespace(onnx_graph="no-such-graph")) is None


def test_a_selector_without_a_graph_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"a 'bm25' selector has no ONNX graph; export needs a prototype or anchored"):
        export_selector(get_selector_class("bm25")(), tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
