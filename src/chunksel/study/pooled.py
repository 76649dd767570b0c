"""Pooled training: the two prototype selectors and the strongest trained baseline
trained on the union of the datasets' training splits, evaluated per dataset."""

from __future__ import annotations

from collections.abc import Sequence

from chunksel.study.fitting import evaluate_selector, make_selector, say, settings_of
from chunksel.study.profiles import FLAGSHIP, REPRODUCTION
from chunksel.study.records import PooledRow
from chunksel.study.state import Study


def pooled(study: Study, baselines: Sequence[str]) -> dict[str, PooledRow]:
    from chunksel.selectors import get_selector_class

    pooled: dict[str, PooledRow] = {}
    if len(study.datasets) < 2 or study.part_of:  # a worker: the whole study pools
        return pooled
    # a pooled_fit baseline (the cross-encoder) is pooled in Table 1 already
    trained = [n for n in baselines if get_selector_class(n).requires_fit and not get_selector_class(n).pooled_fit]
    strongest_trained = study.strongest(trained)
    pool_train = [i for ds in study.datasets for i in study.splits[ds]["train"]]
    pool_val = [i for ds in study.datasets for i in study.splits[ds]["val"]]
    for name in [n for n in (FLAGSHIP, REPRODUCTION, strongest_trained) if n and n in study.selectors]:
        key = study.memo.key(stage="pooled", data=[study.split_fp[ds] for ds in study.datasets],
                            **settings_of(name, study.seed, study.prof))
        accs = study.memo.get(key)
        if accs is None:
            sel = make_selector(name, study.seed, study.progress, study.prof)
            sel.fit(pool_train, study.features, pool_val)
            accs = study.memo.put(key, {
                ds: 100.0 * evaluate_selector(sel, study.splits[ds]["test"], study.features)[0]["accuracy"]
                for ds in study.datasets
            })
        pooled[name] = PooledRow(
            per_dataset={ds: study.t1[name].per_dataset[ds].mean for ds in study.datasets},
            pooled={ds: float(v) for ds, v in accs.items()},
        )
        say(f"pooled: {name} " + " ".join(f"{ds} {v:.2f}" for ds, v in pooled[name].pooled.items()))
    return pooled
