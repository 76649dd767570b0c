"""The paper prototype's comparisons: Table 2 (feature-block ablations) and Table 3 (the
feature-budget curve), mean over the profile's ablation seeds."""

from __future__ import annotations

from chunksel.study.fitting import evaluate_selector, say, settings_of
from chunksel.study.profiles import ABLATIONS, REPRODUCTION
from chunksel.study.records import BudgetRow, Cell
from chunksel.study.state import Study


def table2(study: Study) -> dict[str, dict[str, Cell]]:
    """The paper prototype's feature-block ablations, mean over the ablation seeds."""
    table2: dict[str, dict[str, Cell]] = {}
    if not study.prof.ablation_seeds:
        return table2
    for label, blocks in ABLATIONS.items():
        table2[label] = {}
        for ds in study.datasets:
            accs = [100.0 * study.fit_eval(REPRODUCTION, s, ds, stage="table2", blocks=list(blocks))
                    ["metrics"]["accuracy"] for s in study.prof.ablation_seeds]
            table2[label][ds] = Cell.of(accs)
        say(f"table 2: {label:<12} " + " ".join(f"{ds} {v.mean:.2f}" for ds, v in table2[label].items()))
    return table2

def table3(study) -> dict[str, BudgetRow]:
    """The paper prototype's feature-budget curve, mean over the ablation seeds."""
    from chunksel.study.budgets import run_budgets

    table3: dict[str, BudgetRow] = {}
    if not study.prof.ablation_seeds or not study.prof.budgets:
        return table3
    for ds in study.datasets:
        sp = study.splits[ds]
        per_budget: dict[str, list[float]] = {}
        for s in study.prof.ablation_seeds:
            settings = {"seed": s, "progress": study.progress, **study.prof.overrides.get(REPRODUCTION, {})}
            key = study.memo.key(stage="table3", data=study.split_fp[ds], budgets=list(study.prof.budgets),
                                **settings_of(REPRODUCTION, s, study.prof))
            points = study.memo.get(key)
            if points is None:
                points = study.memo.put(key, [
                    {"budget": res.budget, "dims": res.dims,
                     "acc": 100.0 * evaluate_selector(res.selector, sp["test"], study.features)[0]["accuracy"]}
                    for res in run_budgets(sp["train"], study.features, sp["val"], budgets=study.prof.budgets,
                                           **settings)
                ])
            for p in points:
                b = str(int(p["budget"]))
                table3.setdefault(b, BudgetRow(dims=int(p["dims"])))
                per_budget.setdefault(b, []).append(p["acc"])
        for b, accs in per_budget.items():
            table3[b].per_dataset[ds] = Cell.of(accs)
        say(f"table 3: {ds:<9} " + " ".join(f"{b}%:{e.per_dataset[ds].mean:.1f}" for b, e in table3.items()))
    return table3
