"""Cost figures: directory size, latency helper plumbing, parameter counting (no timing
assertions: speed figures come from benchmarks/)."""

from __future__ import annotations

import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.eval.cost import (
    Cost,
    Latency,
    dir_size_bytes,
    limit_threads,
    measure_latency,
    selector_cost,
    trainable_parameters,
)


def test_dir_size_bytes_exact(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_bytes(b"{}" * 21)
    (tmp_path / "link").symlink_to(tmp_path / "a.bin")  # not followed
    assert dir_size_bytes(tmp_path) == 142
    assert dir_size_bytes(tmp_path / "a.bin") == 100
    with pytest.raises(DataError):
        dir_size_bytes(tmp_path / "missing")


def test_measure_latency_calls_and_percentiles():
    calls = []
    lat = measure_latency(calls.append, ["q1", "q2", "q3"], repeats=4, warmup=2)
    assert isinstance(lat, Latency)
    assert calls == ["q1", "q2"] + ["q1", "q2", "q3"] * 4  # warm-up, then timed passes
    p50, p95 = lat
    assert 0.0 <= p50 <= p95
    with pytest.raises(DataError):
        measure_latency(calls.append, [])
    with pytest.raises(ConfigError):
        measure_latency(calls.append, [1], repeats=0)


def test_cost_validates_query_cost():
    c = Cost(params=10, size_bytes=20, p50_ms=1.0, p95_ms=2.0, query_cost="warmup")
    assert c.to_dict() == {
        "params": 10, "size_bytes": 20, "p50_ms": 1.0, "p95_ms": 2.0, "query_cost": "warmup"
    }
    with pytest.raises(ConfigError):
        Cost(params=0, size_bytes=0, p50_ms=0.0, p95_ms=0.0, query_cost="gpu")


def test_every_registered_selector_declares_a_known_query_cost():
    pytest.importorskip("torch")  # importing every selector class needs the training extras
    from chunksel.eval.cost import QUERY_COSTS
    from chunksel.selectors import REGISTRY, get_selector_class

    assert {n: get_selector_class(n).query_cost for n in REGISTRY
            if get_selector_class(n).query_cost not in QUERY_COSTS} == {}


def test_trainable_parameters_torch_and_selectors():
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(3, 2)  # 3*2 + 2
    assert trainable_parameters(lin) == 8
    frozen = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    for p in frozen[0].parameters():
        p.requires_grad_(False)
    assert trainable_parameters(frozen) == 3

    class FakeSelector:  # learned modules live in attributes ending in "_"
        def __init__(self):
            self.hidden = 5  # a setting, not learned
            self.model_ = torch.nn.Linear(3, 2)
            self.head_ = torch.nn.Linear(2, 1)

    assert trainable_parameters(FakeSelector()) == 11

    class Declared:
        def n_parameters(self) -> int:
            return 42

    assert trainable_parameters(Declared()) == 42


def test_selector_cost_on_retrieval_baseline(toy_instances, tmp_path):
    from chunksel.selectors.simple import RetrievalSelector

    sel = RetrievalSelector()
    cost = selector_cost(sel, toy_instances[:4], repeats=1, warmup=1, save_dir=tmp_path / "sel")
    assert cost.params == 0
    assert cost.query_cost == "none"
    assert cost.size_bytes == dir_size_bytes(tmp_path / "sel") > 0
    assert 0.0 <= cost.p50_ms <= cost.p95_ms
    assert cost.text_p50_ms is None and "text_p50_ms" not in cost.to_dict()


def test_selector_cost_times_a_second_path(toy_instances, tmp_path):
    from chunksel.selectors.simple import RetrievalSelector

    calls = []
    cost = selector_cost(RetrievalSelector(), toy_instances[:3], repeats=2, warmup=1,
                         text_path=calls.append, text_inputs=["a", "b"], text_repeats=3)
    assert calls == ["a"] + ["a", "b"] * 3  # warm-up, then its own passes
    assert 0.0 <= cost.text_p50_ms <= cost.text_p95_ms
    assert list(cost.to_dict()) == ["params", "size_bytes", "p50_ms", "p95_ms", "query_cost",
                                    "text_p50_ms", "text_p95_ms"]


def test_limit_threads_sets_and_restores_torch_threads():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with limit_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError):
        with limit_threads(0):
            pass
