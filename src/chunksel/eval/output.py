"""Writing a benchmark report: ``report.md`` (:mod:`.report`), its plots (:mod:`.plots`)
and ``results.json`` into one folder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunksel.errors import DataError
from chunksel.eval.plots import write_plots
from chunksel.eval.report import _jsonable, render_markdown


def write_report(results: Mapping[str, Any], out_dir: str | Path, plots: bool = True) -> Path:
    """Write ``report.md``, ``results.json`` and the plots into ``out_dir``.

    Args:
        results: the results dict (schema in the module docstring).
        out_dir: created if missing.
        plots: draw the PNG plots (needs matplotlib, ``chunksel[eval]``).

    Returns:
        The path of ``report.md``.
    """
    if not isinstance(results, Mapping):
        raise DataError(f"results must be a dict, got {type(results).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    if plots:
        made = {k: p.name for k, p in write_plots(results, out).items()}
    (out / "results.json").write_text(
        json.dumps(_jsonable(results), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    path = out / "report.md"
    path.write_text(render_markdown(results, made), encoding="utf-8")
    return path
