"""Typed benchmark results: what ``chunksel bench`` measures, as dataclasses with a version.

:func:`chunksel.study.run.run_study` builds one :class:`BenchResults`, one stage at a time;
:mod:`chunksel.study.report` and :mod:`chunksel.study.plots` read it (attributes, never raw
dict keys); :meth:`BenchResults.save` writes ``results.json`` and :func:`load_results`
reads it back (a report can be re-rendered from it: ``chunksel report``).

Units: every accuracy-like figure is in **percent** (0-100), differences in percentage
points. Answer-level figures (Table 4) keep :func:`chunksel.study.answer_table.answer_table`'s
fractions for EM / F1 and its units for cost.

JSON layout (``RESULTS_VERSION`` 2; a file without ``results_version`` is version 1, the
same layout without Table 4, and is read as such)::

    {
      "results_version": 2, "title": str, "config": {...}, "git_commit": str,
      "data_checksums": {<file or dataset>: str}, "datasets": [<dataset>, ...],
      "flagship": <selector> | null, "strongest_baseline": <selector> | null,
      "strongest_baseline_by": str, "strongest_per_dataset": {<dataset>: <selector>},
      "instance_stats": {<dataset>: {...}},
      "table1": {<selector>: {"params", "size_bytes", "p50_ms", "p95_ms", "query_cost",
                              "text_p50_ms"?, "text_p95_ms"?,   # cold, from raw text
                              "per_dataset": {<dataset>: cell}}},
      "table2": {<variant>: {<dataset>: cell}},
      "table3": {<budget %>: {"dims": int, "per_dataset": {<dataset>: cell}}},
      "generator_ablation": {"variants": {<label>: {"blocks": [...], "per_dataset": {<dataset>: cell}}},
                             "delta": {<dataset>: comparison}},
      "pooled": {<selector>: {"per_dataset": {<dataset>: %}, "pooled": {<dataset>: %}}},
      "transfer": {<selector>: {"held_out": {<dataset>: %}, "ci": {<dataset>: [lo, hi]},   # optional
                                "answerable": {<dataset>: n}, "vs_reference": [d, lo, hi] | null,
                                "reference": <selector> | null, "diff": {<dataset>: [d, lo, hi]},
                                "never_trained": [<dataset>]}},
      "significance": {<dataset>: [comparison, ...]},
      "top1_agreement": {<dataset>: {"n": int, <selector>: %}},
      "learning_curve": {<dataset>: {"usable_train": int, "sizes": [int],
                                     "per_selector": {<selector>: {<size>: %}}}},
      "answers": {<dataset>: answer_table(...) output},      # Table 4 (version 2)
      "abstention": {<dataset>: {<selector>: abstention_summary(...) + "calibrator"}},  # optional
      "semantic": {...},    # optional: rank-1 under the reference semantic labels (chunksel.study.semantic)
      "llm": {<dataset>: {"questions", "answerable", "question_ids",   # Table 5 (optional)
                          "rows": {<selector>: {"accuracy": %, "ci": [lo, hi], "n"}},
                          "cost": {<LLM selector>: {"calls_per_query", "prompt_tokens_per_query",
                                   "seconds_per_query", "repairs", "empty", "k_distribution", ...}}}},
      "extra_metrics": {<selector>: {<dataset>: {<metric>: %}}},
      "timings_s": {<stage>: s}, "reused_results": int,
    }

    cell = {"mean", "std", "seeds": [%], "n"?, "val_seeds"?: [%], "ci"?: [lo, hi]}
           (a bare number is read as one seed)
    comparison = {"a", "b", "diff", "lo", "hi", "p", "n", "n10"?, "n01"?, "acc_a"?, "acc_b"?}
"""


from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError
from chunksel.study.records import (
    BudgetRow,
    Cell,
    Comparison,
    GeneratorAblation,
    LearningCurve,
    PooledRow,
    Table1Row,
    TransferRow,
    Variant,
    _cells,
    _map,
    _num,
)

#: version of the results layout; 2 added Table 4 (``answers``)
RESULTS_VERSION = 2
#: the versions :meth:`BenchResults.from_dict` reads
READABLE_VERSIONS = (1, 2)



# ------------------------------------------------------------------ the whole
@dataclass
class BenchResults:
    """Everything one benchmark run measured (see the module docstring for the JSON)."""

    datasets: list[str]
    table1: dict[str, Table1Row]
    title: str = "chunksel benchmark report"
    config: dict[str, Any] = field(default_factory=dict)
    git_commit: str = "unknown"
    data_checksums: dict[str, Any] = field(default_factory=dict)
    flagship: str | None = None
    strongest_baseline: str | None = None
    strongest_baseline_by: str | None = None
    strongest_per_dataset: dict[str, str | None] = field(default_factory=dict)
    instance_stats: dict[str, Any] = field(default_factory=dict)
    table2: dict[str, dict[str, Cell]] = field(default_factory=dict)
    table3: dict[str, BudgetRow] = field(default_factory=dict)
    generator_ablation: GeneratorAblation | None = None
    pooled: dict[str, PooledRow] = field(default_factory=dict)
    #: selector -> leave-one-dataset-out row (chunksel.study.transfer; full and large profiles)
    transfer: dict[str, TransferRow] = field(default_factory=dict)
    significance: dict[str, list[Comparison]] = field(default_factory=dict)
    #: dataset -> {"n": test questions, <row>: % whose top-1 is the flagship's} (first seeds)
    top1_agreement: dict[str, dict[str, float]] = field(default_factory=dict)
    learning_curve: dict[str, LearningCurve] = field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    llm: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: dataset -> selector -> calibrated abstention figures (chunksel.study.abstention)
    abstention: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the semantic-label stage (chunksel.study.semantic; empty without reference labels)
    semantic: dict[str, Any] = field(default_factory=dict)
    extra_metrics: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    reused_results: int = 0
    version: int = RESULTS_VERSION

    # -------------------------------------------------------------- helpers
    @property
    def profile_name(self) -> str | None:
        """The profile's name (``quick``, ``full``, ``large``) from the config, if recorded."""
        return ((self.config or {}).get("profile") or {}).get("name")

    def profile_seeds(self, key: str) -> list[int]:
        """The profile's seeds under ``key`` (``seeds``, ``ablation_seeds``) from the config."""
        return list(((self.config or {}).get("profile") or {}).get(key) or [])

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        ga = self.generator_ablation
        return _jsonable({
            "results_version": self.version,
            "title": self.title,
            "config": self.config,
            "git_commit": self.git_commit,
            "data_checksums": self.data_checksums,
            "datasets": self.datasets,
            "flagship": self.flagship,
            "strongest_baseline": self.strongest_baseline,
            "strongest_baseline_by": self.strongest_baseline_by,
            "strongest_per_dataset": self.strongest_per_dataset,
            "instance_stats": self.instance_stats,
            "table1": {n: r.to_dict() for n, r in self.table1.items()},
            "table2": {v: {d: c.to_dict() for d, c in row.items()} for v, row in self.table2.items()},
            "table3": {b: {"dims": r.dims, "per_dataset": {d: c.to_dict() for d, c in r.per_dataset.items()}}
                       for b, r in self.table3.items()},
            "generator_ablation": {} if ga is None else {
                "variants": {k: {"blocks": v.blocks, "per_dataset": {d: c.to_dict() for d, c in v.per_dataset.items()}}
                             for k, v in ga.variants.items()},
                "delta": {d: c.to_dict() for d, c in ga.delta.items()},
                "parts": {k: {d: c.to_dict() for d, c in v.items()} for k, v in ga.parts.items()},
            },
            "pooled": {n: {"per_dataset": r.per_dataset, "pooled": r.pooled} for n, r in self.pooled.items()},
            "transfer": {n: asdict(r) for n, r in self.transfer.items()},
            "significance": {d: [c.to_dict() for c in cs] for d, cs in self.significance.items()},
            "top1_agreement": self.top1_agreement,
            "learning_curve": {d: {"usable_train": c.usable_train, "sizes": c.sizes, "per_selector": c.per_selector}
                               for d, c in self.learning_curve.items()},
            "answers": self.answers,
            "llm": self.llm,
            "abstention": self.abstention,
            "semantic": self.semantic,
            "extra_metrics": self.extra_metrics,
            "timings_s": self.timings_s,
            "reused_results": self.reused_results,
        })

    @classmethod
    def from_dict(cls, x: Mapping[str, Any]) -> BenchResults:
        """Read (and check) a results dict; raises :class:`DataError` naming what is wrong."""
        x = _map(x, "results")
        version = int(x.get("results_version", 1))
        if version not in READABLE_VERSIONS:
            raise DataError(f"results version {version} is not supported (this chunksel reads "
                            f"{', '.join(map(str, READABLE_VERSIONS))})")
        table1 = {str(n): Table1Row.from_json(r, f"table1.{n}") for n, r in _map(x.get("table1"), "table1").items()}
        table2 = {str(v): _cells(row, f"table2.{v}") for v, row in _map(x.get("table2"), "table2").items()}
        table3 = {}
        for b, r in _map(x.get("table3"), "table3").items():
            r = _map(r, f"table3.{b}")
            table3[str(b)] = BudgetRow(dims=None if r.get("dims") is None else int(r["dims"]),
                                       per_dataset=_cells(r.get("per_dataset"), f"table3.{b}.per_dataset"))
        ga_x = _map(x.get("generator_ablation"), "generator_ablation")
        ga = None
        if ga_x.get("variants"):
            ga = GeneratorAblation(
                variants={str(k): Variant(blocks=list(_map(v, k).get("blocks") or []),
                                          per_dataset=_cells(_map(v, k).get("per_dataset"), f"variant {k}"))
                          for k, v in _map(ga_x.get("variants"), "generator_ablation.variants").items()},
                delta={str(d): Comparison.from_json(c, f"generator_ablation.delta.{d}")
                       for d, c in _map(ga_x.get("delta"), "generator_ablation.delta").items()},
                parts={str(k): {str(d): Comparison.from_json(c, f"generator_ablation.parts.{k}.{d}")
                                for d, c in _map(v, f"generator_ablation.parts.{k}").items()}
                       for k, v in _map(ga_x.get("parts"), "generator_ablation.parts").items()},
            )
        pooled = {}
        for n, r in _map(x.get("pooled"), "pooled").items():
            r = _map(r, f"pooled.{n}")
            pooled[str(n)] = PooledRow(
                per_dataset={str(d): _num(v, f"pooled.{n}") for d, v in _map(r.get("per_dataset"), n).items()},
                pooled={str(d): _num(v, f"pooled.{n}") for d, v in _map(r.get("pooled"), n).items()},
            )
        transfer = {}
        for n, r in _map(x.get("transfer"), "transfer").items():
            r = _map(r, f"transfer.{n}")
            vs = r.get("vs_reference")
            transfer[str(n)] = TransferRow(
                held_out={str(d): _num(v, f"transfer.{n}") for d, v in _map(r.get("held_out"), n).items()},
                ci={str(d): [_num(b, f"transfer.{n}.ci") for b in v] for d, v in _map(r.get("ci"), n).items()},
                answerable={str(d): int(v) for d, v in _map(r.get("answerable"), n).items()},
                vs_reference=None if vs is None else [_num(b, f"transfer.{n}.vs_reference") for b in vs],
                reference=r.get("reference"),
                diff={str(d): [_num(b, f"transfer.{n}.diff") for b in v] for d, v in _map(r.get("diff"), n).items()},
                never_trained=[str(d) for d in r.get("never_trained") or []],
            )
        sig = {}
        for d, entries in _map(x.get("significance"), "significance").items():
            entries = entries if isinstance(entries, (list, tuple)) else [entries]
            sig[str(d)] = [Comparison.from_json(e, f"significance.{d}") for e in entries if isinstance(e, Mapping)]
        curves = {}
        for d, c in _map(x.get("learning_curve"), "learning_curve").items():
            c = _map(c, f"learning_curve.{d}")
            curves[str(d)] = LearningCurve(
                usable_train=int(c.get("usable_train") or 0),
                sizes=[int(s) for s in c.get("sizes") or []],
                per_selector={str(n): {str(k): _num(v, f"learning_curve.{d}.{n}") for k, v in _map(p, n).items()}
                              for n, p in _map(c.get("per_selector"), f"learning_curve.{d}").items()},
            )
        datasets = [str(d) for d in x.get("datasets") or []] or _seen_datasets(table1, table2, table3, sig, curves)
        return cls(
            datasets=datasets, table1=table1, title=str(x.get("title") or "chunksel benchmark report"),
            config=dict(_map(x.get("config"), "config")), git_commit=str(x.get("git_commit") or "unknown"),
            data_checksums=dict(_map(x.get("data_checksums"), "data_checksums")),
            flagship=x.get("flagship"), strongest_baseline=x.get("strongest_baseline"),
            strongest_baseline_by=x.get("strongest_baseline_by"),
            strongest_per_dataset=dict(_map(x.get("strongest_per_dataset"), "strongest_per_dataset")),
            instance_stats=dict(_map(x.get("instance_stats"), "instance_stats")),
            table2=table2, table3=table3, generator_ablation=ga, pooled=pooled, transfer=transfer,
            significance=sig,
            top1_agreement={str(d): dict(_map(v, f"top1_agreement.{d}"))
                            for d, v in _map(x.get("top1_agreement"), "top1_agreement").items()},
            learning_curve=curves, answers=dict(_map(x.get("answers"), "answers")),
            llm=dict(_map(x.get("llm"), "llm")),
            abstention=dict(_map(x.get("abstention"), "abstention")),
            semantic=dict(_map(x.get("semantic"), "semantic")),
            extra_metrics={str(n): {str(d): dict(_map(m, f"extra_metrics.{n}.{d}")) for d, m in _map(per, n).items()}
                           for n, per in _map(x.get("extra_metrics"), "extra_metrics").items()},
            timings_s=dict(_map(x.get("timings_s"), "timings_s")),
            reused_results=int(x.get("reused_results") or 0),
            version=RESULTS_VERSION,
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return path


def as_results(results: BenchResults | Mapping[str, Any]) -> BenchResults:
    """``results`` as :class:`BenchResults` (a dict is read with :meth:`BenchResults.from_dict`)."""
    if isinstance(results, BenchResults):
        return results
    if isinstance(results, Mapping):
        return BenchResults.from_dict(results)
    raise DataError(f"results must be BenchResults or a dict, got {type(results).__name__}")


def load_results(path: str | Path) -> BenchResults:
    """Read a ``results.json`` (a report folder or the file)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"no results file at {path}") from None
    except json.JSONDecodeError as err:
        raise DataError(f"corrupt results file {path}: {err.msg} (line {err.lineno})") from None
    return BenchResults.from_dict(data)


def _seen_datasets(table1, table2, table3, sig, curves) -> list[str]:
    from chunksel.study.names import DATASET_ORDER

    seen: set[str] = set()
    for row in table1.values():
        seen.update(row.per_dataset)
    for row in table2.values():
        seen.update(row)
    for row in table3.values():
        seen.update(row.per_dataset)
    seen.update(sig)
    seen.update(curves)
    ordered = [d for d in DATASET_ORDER if d in seen]
    return ordered + sorted(seen - set(ordered))


def _jsonable(obj: Any) -> Any:
    """JSON-ready: numpy scalars/arrays to Python, NaN/inf to None, paths to strings."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


__all__ = [
    "READABLE_VERSIONS", "RESULTS_VERSION", "BenchResults", "BudgetRow", "Cell", "Comparison",
    "GeneratorAblation", "LearningCurve", "PooledRow", "Table1Row", "Variant", "as_results", "load_results",
]
