"""The seed summary of the int8 accuracy benchmark (benchmarks/quantization_seeds.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "quantization_seeds.py"


@pytest.fixture(scope="module")
def qs():
    spec = importlib.util.spec_from_file_location("quantization_seeds", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(seed, drop, same, pooled_drop=0.0):
    def model(d):
        return {"all": {"fp32": {"rank1": 60.0, "n": 100},
                        "ort-int8": {"rank1": 60.0 - d, "n": 100, "drop_points": d, "same_pick": same}}}
    cmd = "quantization.py --threads 2" + (f" --seed {seed}" if seed else "")
    return {"command": cmd, "per_dataset_models": model(drop), "pooled_model": model(pooled_drop)}


def test_summary_over_seeds(qs, tmp_path):
    runs = [run(2, 0.1, 0.98), run(0, 0.7, 0.96), run(1, -0.2, 1.0)]
    out = qs.summarise(runs)
    assert out["seeds"] == [0, 1, 2]
    row = out["models"]["per_dataset_models"]["ort-int8"]
    assert row["change_points"] == [-0.7, 0.2, -0.1]  # variant - fp32, in seed order
    assert row["mean_change_points"] == pytest.approx(-0.2)
    assert row["sd_points"] == pytest.approx(0.458, abs=1e-3)
    # t(0.975, 2) = 4.303: half-width 4.303 * 0.4583 / sqrt(3) = 1.138
    assert row["mean_ci95_points"] == pytest.approx([-1.338, 0.938], abs=2e-3)
    assert row["mean_same_pick"] == pytest.approx(0.98)
    assert out["models"]["pooled_model"]["ort-int8"]["change_points"] == [0.0, 0.0, 0.0]

    for i, r in enumerate(runs):
        (tmp_path / f"quantization_{i}.json").write_text(json.dumps(r))
    assert qs.main(["--results", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "quantization_seeds.json").read_text())["seeds"] == [0, 1, 2]


def test_duplicate_seeds_are_refused(qs):
    with pytest.raises(SystemExit, match="share a seed"):
        qs.summarise([run(1, 0.1, 0.9), run(1, 0.2, 0.9)])
