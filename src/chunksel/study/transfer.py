"""Transfer: leave one dataset out.

For each dataset of the study, the transfer rows (:data:`TRANSFER_ROWS`, those the study
runs) are trained on the pool of the *other* datasets' training splits (early stopping and
calibration on the pool of their validation splits) and tested on the held-out dataset's
test split: what a user gets who applies a trained selector to questions of a source it
never saw. One seed (the study's). Each row carries its test rank-1 with a bootstrap
interval per held-out dataset, and every row but LambdaMART its paired difference against
LambdaMART over all held-out test questions together.

A profile runs the stage where ``Profile.transfer`` is set (full and large), or
``chunksel bench --transfer``; it needs at least three datasets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chunksel.study.fitting import evaluate_selector, make_selector, say, settings_of
from chunksel.study.profiles import FLAGSHIP
from chunksel.study.records import TransferRow

#: the rows of the transfer table, in order (those the study runs)
TRANSFER_ROWS: tuple[str, ...] = ("retrieval", "bm25", "lambdamart", "crossencoder", FLAGSHIP, "anchored-ce")
#: the row every other is compared with
REFERENCE = "lambdamart"


def lodo_pools(splits: Mapping[str, Mapping[str, Sequence[Any]]], held_out: str) -> tuple[list, list]:
    """The training and validation pools for ``held_out``: the other datasets' training and
    validation splits (in the study's order), never an instance of ``held_out``."""
    if held_out not in splits:
        raise KeyError(f"unknown dataset {held_out!r}")
    others = [ds for ds in splits if ds != held_out]
    train = [i for ds in others for i in splits[ds]["train"]]
    val = [i for ds in others for i in splits[ds]["val"]]
    return train, val


def transfer(study: Any) -> dict[str, TransferRow]:
    """The leave-one-dataset-out rows (empty unless the profile asks and there are at
    least three datasets; a ``bench --jobs`` worker pools nothing)."""
    from chunksel.eval.significance import bootstrap_interval, paired_bootstrap

    if not getattr(study.prof, "transfer", False) or len(study.datasets) < 3 or study.part_of:
        return {}
    names = [n for n in TRANSFER_ROWS if n in study.selectors]
    hits: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}
    for held in study.datasets:
        train, val = lodo_pools(study.splits, held)
        test = study.splits[held]["test"]
        for name in names:
            key = study.memo.key(stage="transfer", held_out=held,
                                 data={ds: study.split_fp[ds] for ds in study.datasets},
                                 **settings_of(name, study.seed, study.prof))
            got = study.memo.get(key)
            if got is None:
                sel = make_selector(name, study.seed, study.progress, study.prof)
                sel.fit(train, study.features, val)
                _, h, ans, _ = evaluate_selector(sel, test, study.features, picks=True)
                got = study.memo.put(key, {"hits": np.asarray(h, dtype=float)[ans].tolist()})
            hits[name][held] = np.asarray(got["hits"], dtype=float)
            say(f"transfer: {name} held out {held}: {100 * hits[name][held].mean():.2f}")
    rows: dict[str, TransferRow] = {}
    for name in names:
        held_out, ci, n = {}, {}, {}
        for ds, h in hits[name].items():
            m, lo, hi = bootstrap_interval(h)
            held_out[ds], ci[ds], n[ds] = 100 * m, [100 * lo, 100 * hi], int(len(h))
        vs = None
        if REFERENCE in hits and name != REFERENCE:
            a = np.concatenate([hits[name][ds] for ds in study.datasets])
            b = np.concatenate([hits[REFERENCE][ds] for ds in study.datasets])
            d, lo, hi = paired_bootstrap(a, b)
            vs = [100 * d, 100 * lo, 100 * hi]
        rows[name] = TransferRow(held_out=held_out, ci=ci, answerable=n, vs_reference=vs,
                                 reference=REFERENCE if vs is not None else None)
    return rows
