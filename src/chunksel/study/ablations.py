"""The flagship's generator ablation (with and without h and r, Table 1's seeds, paired
intervals) and the significance of the flagship and the paper prototype against each
dataset's strongest baseline, chosen on validation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksel.study.fitting import combine_hits, say
from chunksel.study.profiles import (
    AGREEMENT_ROWS,
    FLAGSHIP,
    GENERATOR_ABLATION,
    LAMBDAMART,
    PARTS_ABLATION,
    REPRODUCTION,
    STACKED,
)
from chunksel.study.records import Cell, Comparison, GeneratorAblation, Variant
from chunksel.study.state import Study


def generator_ablation(study: Study) -> GeneratorAblation:
    """The flagship with and without h and r, and its interaction term alone (Table 1's
    seeds), each against Table 1's flagship with paired intervals."""
    from chunksel.eval.significance import significance_entry
    from chunksel.selectors import get_selector_class

    default = tuple(get_selector_class(FLAGSHIP)().blocks)
    out = GeneratorAblation()
    variant_hits: dict[str, dict[str, list[np.ndarray]]] = {}
    for label, blocks in {**GENERATOR_ABLATION, **PARTS_ABLATION}.items():
        out.variants[label] = Variant(blocks=list(blocks))
        for ds in study.datasets:
            if tuple(blocks) == default and FLAGSHIP in study.hits:
                hits = study.hits[FLAGSHIP][ds]
                accs = list(study.t1[FLAGSHIP].per_dataset[ds].seeds)
                vals = list(study.t1[FLAGSHIP].per_dataset[ds].val_seeds)
            else:
                hits, accs, vals = [], [], []
                for s in study.prof.seeds:
                    res = study.fit_eval(FLAGSHIP, s, ds, stage="generator_ablation", blocks=list(blocks))
                    ans = np.asarray(res["answerable"], dtype=bool)
                    hits.append(np.asarray(res["hits"], dtype=bool)[ans])
                    accs.append(100.0 * res["metrics"]["accuracy"])
                    if res.get("val_accuracy") is not None:
                        vals.append(100.0 * res["val_accuracy"])
            variant_hits.setdefault(label, {})[ds] = hits
            out.variants[label].per_dataset[ds] = Cell.of(accs, val_seeds=vals)
        say(f"flagship ablation: {label:<13} " + " ".join(
            f"{ds} {v.mean:.2f}" for ds, v in out.variants[label].per_dataset.items()))
    with_l, without_l = list(GENERATOR_ABLATION)
    for ds in study.datasets:
        a_rate, a_major = combine_hits(variant_hits[with_l][ds])
        b_rate, b_major = combine_hits(variant_hits[without_l][ds])
        out.delta[ds] = Comparison.from_json(significance_entry(
            with_l, without_l, a_rate, b_rate, seed=study.seed, majority=(a_major, b_major)))
        for label in PARTS_ABLATION:
            b_rate, b_major = combine_hits(variant_hits[label][ds])
            out.parts.setdefault(label, {})[ds] = Comparison.from_json(significance_entry(
                with_l, label, a_rate, b_rate, seed=study.seed, majority=(a_major, b_major)))
    return out


def significance(study: Study, baselines: Sequence[str]) -> dict[str, list[Comparison]]:
    """Per dataset: the flagship, the stacked flagship and the paper prototype against the
    dataset's strongest baseline (chosen on validation), the two flagships against
    LambdaMART where it is not that baseline (a row is significantly better only against
    both: :func:`chunksel.study.targets.flagship_targets`), and the flagship against
    retrieval order."""
    from chunksel.eval.significance import significance_entry

    out: dict[str, list[Comparison]] = {}
    if not baselines:
        return out
    for ds in study.datasets:
        best = study.strongest(baselines, ds)
        pairs = [(a, best) for a in (FLAGSHIP, STACKED, REPRODUCTION) if a in study.hits]
        if LAMBDAMART in study.hits and best != LAMBDAMART:  # "significantly better" needs both
            pairs += [(a, LAMBDAMART) for a in (FLAGSHIP, STACKED) if a in study.hits]
        if FLAGSHIP in study.hits and "retrieval" in study.hits and best != "retrieval":
            pairs.append((FLAGSHIP, "retrieval"))
        entries = []
        for a, b in pairs:
            a_rate, a_major = combine_hits(study.hits[a][ds])
            b_rate, b_major = combine_hits(study.hits[b][ds])
            entries.append(Comparison.from_json(
                significance_entry(a, b, a_rate, b_rate, seed=study.seed, majority=(a_major, b_major))))
        if entries:
            out[ds] = entries
    return out


def top1_agreement(study: Study) -> dict[str, dict[str, float | int]]:
    """Per dataset: the share (%) of test questions on which the flagship's top-ranked
    candidate is the same as each of :data:`AGREEMENT_ROWS`' (first seed each), and ``n``."""
    out: dict[str, dict[str, float | int]] = {}
    if FLAGSHIP not in study.picks:
        return out
    for ds in study.datasets:
        mine = study.picks[FLAGSHIP].get(ds)
        if not mine:
            continue
        row: dict[str, float | int] = {"n": len(mine)}
        for other in AGREEMENT_ROWS:
            theirs = study.picks.get(other, {}).get(ds)
            if theirs and len(theirs) == len(mine):
                row[other] = 100.0 * float(np.mean(np.asarray(mine) == np.asarray(theirs)))
        out[ds] = row
    return out
