"""The sentence at the top of every report: which Table 1 row wins on average, by how much
over the runner-up, and where the flagship stands against the strongest baseline (chosen
on validation), each difference with a 95% interval.

The intervals come from ``results.json`` alone (per-instance hits are not stored): a
normal approximation over each dataset's answerable test instances, the two rows taken as
independent (unpaired), so they are wider than the paired intervals of the significance
table. For rows A and B averaged over D datasets with accuracies p_d and instance counts
n_d: var = sum_d (pA_d (1 - pA_d) + pB_d (1 - pB_d)) / n_d / D^2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chunksel.study.format import Results, table1_average
from chunksel.study.names import REFERENCE_SELECTORS, selector_label
from chunksel.study.records import Table1Row
from chunksel.study.results import as_results

#: the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054


def difference_interval(a: Table1Row, b: Table1Row, datasets: Sequence[str]) -> tuple[float, float] | None:
    """95% interval (percentage points) of ``a``'s average accuracy minus ``b``'s over
    ``datasets`` (unpaired normal approximation, see the module docstring); None when a
    cell or its instance count is missing."""
    var = 0.0
    for d in datasets:
        ca, cb = a.per_dataset.get(d), b.per_dataset.get(d)
        if ca is None or cb is None or ca.mean is None or cb.mean is None or not ca.n or ca.n != cb.n:
            return None
        pa, pb = ca.mean / 100.0, cb.mean / 100.0
        var += (pa * (1 - pa) + pb * (1 - pb)) / ca.n
    mean_a, _, _ = table1_average(a, datasets)
    mean_b, _, _ = table1_average(b, datasets)
    if mean_a is None or mean_b is None or not datasets:
        return None
    half = 100.0 * Z95 * math.sqrt(var) / len(datasets)
    diff = mean_a - mean_b
    return diff - half, diff + half


def _ci(iv: tuple[float, float] | None, form: str = "; {}") -> str:
    """``form`` around "95% interval [lo, hi]"; nothing without an interval."""
    return "" if iv is None else form.format(f"95% interval [{iv[0]:+.2f}, {iv[1]:+.2f}]")


def format_headline(results: Results) -> str:
    """One paragraph: the winning row on average and its margin over the runner-up, then
    the flagship against the strongest baseline; empty without two complete rows."""
    res = as_results(results)
    datasets = list(res.datasets)
    avgs = {}
    for name, row in res.table1.items():
        mean, _, complete = table1_average(row, datasets)
        if name not in REFERENCE_SELECTORS and mean is not None and complete:
            avgs[name] = mean
    if len(avgs) < 2 or not datasets:
        return ""
    ranked = sorted(avgs, key=lambda n: -avgs[n])  # stable: table order on a tie
    win, second = ranked[0], ranked[1]
    flag, sb = res.flagship, res.strongest_baseline
    who = selector_label(win) + (" (the flagship)" if win == flag else "")
    text = (f"**Headline.** Averaged over the {len(datasets)} datasets, {who} has the highest "
            f"rank-1 accuracy, {avgs[win]:.2f}%: {avgs[win] - avgs[second]:+.2f} points against the runner-up, "
            f"{selector_label(second)} ({avgs[second]:.2f}%"
            f"{_ci(difference_interval(res.table1[win], res.table1[second], datasets))}).")
    if flag in avgs and sb in avgs and flag != sb and (flag, sb) != (win, second):
        iv = difference_interval(res.table1[flag], res.table1[sb], datasets)
        if flag == win:
            text += (f" Against the strongest baseline chosen on validation, {selector_label(sb)} "
                     f"({avgs[sb]:.2f}%), it is {avgs[flag] - avgs[sb]:+.2f} points{_ci(iv, ' ({})')}.")
        else:
            text += (f" The flagship, {selector_label(flag)}, averages {avgs[flag]:.2f}%: "
                     f"{avgs[flag] - avgs[sb]:+.2f} points against the strongest baseline chosen on validation, "
                     f"{selector_label(sb)} ({avgs[sb]:.2f}%{_ci(iv)}).")
    return (text + " Intervals: normal approximation over each dataset's answerable test instances, the two "
            "rows taken as independent (wider than the paired intervals of the significance table).")
