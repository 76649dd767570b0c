"""Table 1: every selector trained on each dataset's training split over the profile's
seeds, evaluated on its test and validation splits; the cost columns measured on the
(whole) study's first dataset. A ``pooled_fit`` selector (the cross-encoder) is trained
once per seed (the profile's ``pooled_seeds`` where set) on the pooled training splits of every dataset instead, and that one
model evaluated on each (the row says so). A stacked row (``anchored-ce``) reads its
members' fits (:meth:`~chunksel.study.state.Study.fit_eval_stacked`)."""

from __future__ import annotations

import time

import numpy as np

from chunksel.study.fitting import say
from chunksel.study.records import Cell, Table1Row
from chunksel.study.state import Study


def table1(study: Study) -> dict[str, Table1Row]:
    from chunksel.selectors import get_selector_class
    from chunksel.study.format import metrics_to_percent

    for name in study.selectors:
        cls = get_selector_class(name)
        seeds = study.seeds_of(name)
        pooled = cls.pooled_fit and cls.requires_fit
        stacked = cls.stacked
        if (pooled or stacked) and study.part_of:  # a bench --jobs worker: the whole study pools and stacks
            continue
        pooled_res = {s: study.fit_eval_pooled(name, s) for s in seeds} if pooled else {}
        row = Table1Row(pooled=pooled)
        for ds in study.datasets:
            t0 = time.time()
            accs, vals = [], []
            for s in seeds:
                want_cost = s == seeds[0] and ds == study.cost_dataset
                if pooled:
                    res = pooled_res[s][ds]
                elif stacked:
                    res = study.fit_eval_stacked(name, s, ds)
                    row.stack_weights.setdefault(ds, []).append(float(res["weight"]))
                else:
                    res = study.fit_eval(name, s, ds, want_cost=want_cost)
                metrics = res["metrics"]
                accs.append(100.0 * metrics["accuracy"])
                vals.append(None if res["val_accuracy"] is None else 100.0 * res["val_accuracy"])
                ans = np.asarray(res["answerable"], dtype=bool)
                study.answerable[ds] = ans
                study.hits.setdefault(name, {}).setdefault(ds, []).append(np.asarray(res["hits"], dtype=bool)[ans])
                if s == seeds[0]:
                    study.picks.setdefault(name, {})[ds] = [int(j) for j in res["picks"]]
                    study.extra.setdefault(name, {})[ds] = {
                        key: v for key, v in metrics_to_percent(metrics).items()
                        if key not in ("n", "answerable", "contested")
                    }
                    if want_cost:
                        row.set_cost(res["cost"])
            study.val_acc.setdefault(name, {})[ds] = [v for v in vals if v is not None]
            row.per_dataset[ds] = Cell.of(accs, n=int(metrics["answerable"]),
                                          val_seeds=[v for v in vals if v is not None])
            study.timings[f"table1:{name}:{ds}"] = time.time() - t0
            say(f"table 1: {name:<10} {ds:<9} {np.mean(accs):6.2f}%  ({time.time() - t0:.1f}s)")
        study.t1[name] = row
    return study.t1
