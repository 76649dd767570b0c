"""Are two benchmark results the same figures? A programmatic check for refactors.

:func:`compare_results` walks two ``results.json`` (read through
:func:`~chunksel.study.results.load_results`, so both are in the current layout) and lists
every value that differs: every Table 1 seed value (test and validation) and count, Tables
2-3, the generator ablation, significance, pooled training, learning curves, Table 4
(answers) and Table 5 (LLM selectors), the abstention stage and the further metrics. What
a re-run cannot reproduce is left out: wall-clock and memory figures (latency, time to
first token, peak RSS, seconds per query), the run's timings, cache counters, the git
commit and the machine. Numbers are equal within ``tol`` (absolute).

Two runs of the same code that share the generator-feature cache and the same
``--jobs`` and ``--threads`` match everywhere. Across a rebuilt cache, the rows that read
the generator's features (the prototype, the flagship, ``anchored-ce`` and what derives
from them) move by a few questions a seed, because the features depend on their
extraction batch at 1e-5
(``docs/decisions/reproducible-figures.md``).

Command line::

    python -m chunksel.study.compare reports/quick/results.json /tmp/quick/results.json

prints the differences and exits 1 when there are any, 0 when the figures are identical.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: top-level sections not compared (provenance and bookkeeping, not figures)
SKIP_SECTIONS = frozenset({"config", "git_commit", "timings_s", "reused_results", "results_version"})
#: keys not compared wherever they occur: measured on the machine, not reproducible
SKIP_KEYS = frozenset({
    "p50_ms", "p95_ms", "text_p50_ms", "text_p95_ms", "ttft_ms", "ttft_ms_p50", "ttft_ms_noreuse",
    "ttft_ms_reuse", "saving_ms", "saving_pct", "peak_rss_mb", "seconds_per_query", "seconds", "cache",
    "memory",
})


def _walk(a: Any, b: Any, path: str, tol: float, out: list[str], counter: list[int]) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in list(a) + [k for k in b if k not in a]:
            if k in SKIP_KEYS:
                continue
            sub = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{sub}: only in A")
            elif k not in a:
                out.append(f"{sub}: only in B")
            else:
                _walk(a[k], b[k], sub, tol, out, counter)
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items in A, {len(b)} in B")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _walk(x, y, f"{path}[{i}]", tol, out, counter)
        return
    counter[0] += 1
    if _number(a) and _number(b):
        fa, fb = float(a), float(b)
        if (math.isnan(fa) and math.isnan(fb)) or abs(fa - fb) <= tol:
            return
        out.append(f"{path}: {a!r} != {b!r} ({fb - fa:+.6g})")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def compare_results(a: Any, b: Any, tol: float = 1e-9) -> tuple[list[str], int]:
    """The differences between two benchmark results (``BenchResults``, their JSON dict,
    or a ``results.json`` path / report folder), and the number of values compared.

    Returns:
        ``(differences, compared)``: one line per differing value (``path: A != B``), or
        per section or row present on one side only.
    """
    from chunksel.study.results import as_results, load_results

    da, db = ((load_results(x) if isinstance(x, (str, Path)) else as_results(x)).to_dict() for x in (a, b))
    out: list[str] = []
    counter = [0]
    _walk({k: v for k, v in da.items() if k not in SKIP_SECTIONS},
          {k: v for k, v in db.items() if k not in SKIP_SECTIONS}, "", tol, out, counter)
    return out, counter[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Compare two results files; exit status 1 when a figure differs, 2 on a bad file."""
    from chunksel.errors import ChunkselError

    p = argparse.ArgumentParser(prog="python -m chunksel.study.compare",
                                description="compare the figures of two benchmark results.json files")
    p.add_argument("a", help="results.json (or its report folder)")
    p.add_argument("b", help="results.json (or its report folder)")
    p.add_argument("--tol", type=float, default=1e-9, help="absolute tolerance for numbers (default 1e-9)")
    p.add_argument("--max-lines", type=int, default=200, help="differences printed at most (default 200)")
    args = p.parse_args(argv)
    try:
        diffs, compared = compare_results(args.a, args.b, tol=args.tol)
    except ChunkselError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in diffs[: args.max_lines]:
        print(line)
    if len(diffs) > args.max_lines:
        print(f"... and {len(diffs) - args.max_lines} more")
    print(f"{len(diffs)} difference(s) in {compared} compared values" if diffs
          else f"identical: {compared} values compared")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
