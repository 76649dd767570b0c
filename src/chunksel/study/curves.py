"""Learning curves: test rank-1 against the number of usable training instances."""

from __future__ import annotations

from chunksel.study.fitting import evaluate_selector, make_selector, say, settings_of
from chunksel.study.records import LearningCurve
from chunksel.study.state import Study


def learning_curves(study: Study) -> dict[str, LearningCurve]:
    """Test rank-1 against the number of usable (contested) training instances.

    A point of size n trains on the first n contested training instances in a fixed
    hash order (so smaller sets are subsets of larger ones); validation and test
    splits stay whole. One seed (the study's).
    """
    import hashlib

    out: dict[str, LearningCurve] = {}
    for ds in [d for d in study.prof.curve_datasets if d in study.datasets]:
        train = [i for i in study.splits[ds]["train"] if i.contested()]
        train.sort(key=lambda i: hashlib.sha256(f"curve:{i.id}".encode()).hexdigest())
        sizes = sorted({min(n, len(train)) if n else len(train) for n in study.prof.curve_sizes})
        out[ds] = LearningCurve(usable_train=len(train), sizes=sizes)
        for name in [n for n in study.prof.curve_selectors if n in study.selectors]:
            points = {}
            for n in sizes:
                if n == len(train) and name in study.t1:  # every usable instance: Table 1's fit
                    points[str(n)] = study.t1[name].per_dataset[ds].seeds[0]
                    continue
                subset = train[:n]
                key = study.memo.key(stage="curve", data=study.split_fp[ds], size=n,
                                    **settings_of(name, study.seed, study.prof))
                acc = study.memo.get(key)
                if acc is None:
                    sel = make_selector(name, study.seed, study.progress, study.prof)
                    sel.fit(subset, study.features, study.splits[ds]["val"])
                    acc = study.memo.put(
                        key, 100.0 * evaluate_selector(sel, study.splits[ds]["test"], study.features)[0]["accuracy"])
                points[str(n)] = acc
            out[ds].per_selector[name] = points
            say(f"learning curve: {ds:<9} {name:<10} " + " ".join(f"{n}:{a:.1f}" for n, a in points.items()))
    return out
