"""Writing a benchmark report: ``report.md`` (:mod:`.report`), its plots (:mod:`.plots`)
and ``results.json`` into one folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunksel.eval.plots import write_plots
from chunksel.eval.report import render_markdown
from chunksel.eval.results import BenchResults, as_results


def write_report(results: BenchResults | Mapping[str, Any], out_dir: str | Path, plots: bool = True) -> Path:
    """Write ``report.md``, ``results.json`` and the plots into ``out_dir``.

    Args:
        results: the typed results (a dict in their JSON layout is read and checked
            first; :mod:`chunksel.eval.results`).
        out_dir: created if missing.
        plots: draw the PNG plots (needs matplotlib, ``chunksel[eval]``).

    Returns:
        The path of ``report.md``.
    """
    results = as_results(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    if plots:
        made = {k: p.name for k, p in write_plots(results, out).items()}
    results.save(out / "results.json")
    path = out / "report.md"
    path.write_text(render_markdown(results, made), encoding="utf-8")
    return path
