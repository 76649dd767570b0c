"""The semantic-label stage: every Table 1 row ranked under the reference semantic evidence
labels (:mod:`chunksel.data.reference_labels`, the chunk-selection paper's yardstick),
beside the dataset's own labels on the same questions.

It runs after every fit and reads only what the fits recorded: each seed's top-ranked
candidate per test question (Table 1's picks) and, for calibrated rows, the first seed's
per-set probability and ``k="auto"`` choice (:func:`chunksel.study.abstention.abstention_of`).
The reference labels reach no fit, calibration, stacking weight or model choice: they
are read here, into arrays of this module, and never put on the study's instances.

Per dataset with a reference file, on its labelled questions that fall in the profile's
test split (a profile sampling fewer questions keeps fewer), for the random sample alone
and for all labelled questions (TriviaQA adds a stratum with a containment positive):

- **rank-1** under the semantic labels (over the questions with a semantic positive) and
  under the dataset's own labels (over those with an own positive), mean ± std over the
  row's seeds;
- **significance** against the dataset's strongest baseline chosen on validation and
  against LambdaMART: paired bootstrap 95% interval of the seed-averaged hit rate and
  exact McNemar on the seeds' majority (a row is significantly better only when both
  agree);
- **agreement** per chunk of the own labels, and of answer containment, with the
  reference (agreement, Cohen's kappa, the own positives the reference rejects, the
  reference positives the own labels miss);
- **abstention**: set AUROC and ``k="auto"`` chunks and recall of each calibrated row
  when "answerable" means that a semantic positive exists.

A profile's ``pretrained`` models (:mod:`chunksel.pretrained`, e.g. ``anchored-base``) join
the rows as a user gets them: loaded by name, never trained on the profile, scored on the
labelled test questions. They were trained on the recipe's own splits
(:mod:`chunksel.study.pretrain`: the full profile's sample), so the stage first checks that
no labelled question was among their training or validation questions, and leaves a model
out of a dataset where one was (saying how many).

:func:`semantic` computes ``results["semantic"]``; :mod:`chunksel.study.semantic_tables`
renders it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.study.fitting import combine_hits, say

#: the label source the stage reads
LABEL = "semantic@reference"
#: the question subsets reported (``random``: the random sample alone)
SUBSETS = ("random", "all")
#: the second comparison every row gets (the issue's significance rule)
SECOND_PEER = "lambdamart"


def semantic(study: Any, baselines: Sequence[str], root: Any = None) -> dict[str, Any]:
    """``results["semantic"]`` for ``study`` (after Table 1); ``{}`` when no dataset of the
    study has reference labels (or the data root has none)."""
    from chunksel.data.reference_labels import load_reference, reference_datasets
    from chunksel.errors import DataError

    try:
        have = set(reference_datasets(root))
    except DataError:  # no data root configured, or none there: nothing to read
        return {}
    datasets = [ds for ds in study.datasets if ds in have]
    if not datasets or study.part_of:
        return {}
    rows = [n for n in study.selectors if n in study.t1]
    shipped = list(getattr(study.prof, "pretrained", ()))
    peer = study.strongest(baselines)
    out: dict[str, Any] = {"label": LABEL, "files": {}, "datasets": {}, "peer": peer,
                           "peer_by": "validation rank-1 accuracy under the datasets' own labels (mean over datasets "
                                      "and seeds)",
                           "second_peer": SECOND_PEER if SECOND_PEER in rows and SECOND_PEER != peer else None}
    diffs: dict[tuple[str, str], dict[str, Any]] = {}  # per-question differences from the peer (not reported)
    for ds in datasets:
        ref = load_reference(ds, root)
        test = study.splits[ds]["test"]
        elsewhere = sum(i.question.id in ref.sample for sp in ("train", "val") for i in study.splits[ds][sp])
        out["files"][ds] = {"sha256": ref.sha256, "questions": len(ref.sample), "pairs": len(ref.pairs)}
        idx = [j for j, inst in enumerate(test) if inst.question.id in ref.sample]
        if not idx:
            say(f"semantic: {ds}: none of its {len(ref.sample)} labelled questions is in this profile's test split")
            continue
        picks = {n: _picks(study, n, ds) for n in rows}
        ab = {n: _per_set(study, n, ds) for n in rows}
        entry: dict[str, Any] = {"labelled": {"test": len(idx), "train_or_val": elsewhere,
                                              "not_sampled": len(ref.sample) - len(idx) - elsewhere},
                                 "subsets": {}}
        if shipped:
            from chunksel.study.pretrain import recipe_seen_ids

            seen = recipe_seen_ids(ds)
            entry["pretrained_seen"] = sum(test[j].question.id in seen for j in idx)
            for name, (p, a) in pretrained_rows(shipped, test, idx, seen).items():
                picks[name], ab[name] = p, a
        for sub in SUBSETS:
            keep = [j for j in idx if sub == "all" or ref.sample[test[j].question.id] == "random"]
            if keep:
                entry["subsets"][sub] = _subset(test, keep, ref, picks, ab, out["peer"], out["second_peer"],
                                                study.seed, diffs.setdefault((ds, sub), {}))
        out["datasets"][ds] = entry
        say(f"semantic: {ds}: {len(idx)} labelled test questions ({elsewhere} in training or validation)")
    out["average"] = {sub: _average(out, diffs, sub, rows + shipped, study.seed) for sub in SUBSETS}
    if shipped:
        out["pretrained"] = shipped
    return out


def pretrained_rows(names: Sequence[str], test: Sequence[Any], idx: Sequence[int], seen: set[str],
                    ) -> dict[str, tuple[list[np.ndarray], dict[str, Any] | None]]:
    """Each shipped model's picks (one "seed") and per-set abstention lists over ``test``,
    filled at the labelled positions ``idx`` (-1 / None elsewhere, never read); ``{}`` when
    any labelled question is in ``seen`` (the recipe's training and validation ids)."""
    from chunksel.pretrained import pretrained_dir
    from chunksel.selectors.base import load_selector
    from chunksel.selectors.bm25_stats import use_saved_corpus
    from chunksel.study.abstention import abstention_of
    from chunksel.study.fitting import evaluate_selector

    n = sum(test[j].question.id in seen for j in idx)
    if n:
        say(f"semantic: the pretrained rows left out: {n} labelled questions were among their training or "
            "validation questions")
        return {}
    sub = [test[j] for j in idx]
    out = {}
    for name in names:
        sel = load_selector(name)
        use_saved_corpus(sel, pretrained_dir(name))  # the statistics shipped with it, as ChunkSelector.load
        scores = sel.score(sub, None)
        got = evaluate_selector(sel, sub, None, picks=True, scores=scores)[3]
        picks = np.full(len(test), -1, dtype=int)
        picks[list(idx)] = got
        per_set = None
        if sel.calibrator_ is not None:
            ps = abstention_of(sel, sub, None, scores=scores)["per_set"]
            per_set = {key: [None] * len(test) for key in ps}
            for key, vals in ps.items():
                for j, v in zip(idx, vals, strict=True):
                    per_set[key][j] = v
        out[name] = ([picks], per_set)
    return out


def _picks(study: Any, name: str, ds: str) -> list[np.ndarray]:
    """Each seed's top-ranked candidate per test question of ``ds`` (Table 1's fits)."""
    out = []
    for s in study.seeds_of(name):
        res = study.table1_result(name, s, ds)
        if res is not None:
            out.append(np.asarray(res["picks"], dtype=int))
    return out


def _per_set(study: Any, name: str, ds: str) -> dict[str, Any] | None:
    """The first seed's per-test-set abstention lists (None: not calibrated)."""
    res = study.table1_result(name, study.seeds_of(name)[0], ds)
    ab = (res or {}).get("abstention") or {}
    return ab.get("per_set")


def _labels(test: Sequence[Any], keep: Sequence[int], ref: Any) -> tuple[list[np.ndarray], list[np.ndarray], list]:
    """Per kept question: its reference evidence labels, its own labels, and its
    containment labels (None where the dataset has no containment label on a candidate)."""
    sem = [np.asarray(ref.matrix(test[j]), dtype=int) for j in keep]
    own = [test[j].labels().astype(int) for j in keep]
    cont = [np.asarray([c.labels["containment"] for c in test[j].candidates], dtype=int)
            if all("containment" in c.labels for c in test[j].candidates) else None for j in keep]
    return sem, own, cont


def _hits(picks: list[np.ndarray], keep: Sequence[int], labels: list[np.ndarray], mask: np.ndarray) -> list[np.ndarray]:
    """Per seed: 0/1 rank-1 hits on the kept questions where ``mask`` holds."""
    sub = [k for k, m in zip(keep, mask, strict=True) if m]
    labs = [lab for lab, m in zip(labels, mask, strict=True) if m]
    return [np.array([lab[p[j]] >= 1 for j, lab in zip(sub, labs, strict=True)], dtype=bool) for p in picks]


def _subset(test, keep, ref, picks, ab, peer, second, seed, diffs) -> dict[str, Any]:
    from chunksel.study.records import Cell

    sem, own, cont = _labels(test, keep, ref)
    ans = {"semantic": np.array([s.any() for s in sem]), "own": np.array([o.any() for o in own])}
    labs = {"semantic": sem, "own": own}
    hits = {lab: {n: _hits(p, keep, labs[lab], ans[lab]) for n, p in picks.items() if p}
            for lab in ("semantic", "own")}
    rows = {}
    for n in picks:
        if not picks[n]:
            continue
        rows[n] = {lab: Cell.of([100.0 * h.mean() if len(h) else float("nan") for h in hits[lab][n]],
                                n=int(ans[lab].sum())).to_dict() for lab in ("semantic", "own")}
    out: dict[str, Any] = {
        "questions": len(keep),
        "answerable": {lab: int(a.sum()) for lab, a in ans.items()},
        "rows": rows,
        "agreement": _agreement(sem, own, cont),
        "abstention": {n: _abstention(a, keep, sem) for n, a in ab.items() if a is not None},
    }
    for key, b in (("vs_peer", peer), ("vs_second", second)):
        if b is None or b not in hits["semantic"]:
            continue
        out[key] = {}
        for lab in ("semantic", "own"):
            out[key][lab] = {}
            for n in hits[lab]:
                if n != b and ans[lab].any():
                    out[key][lab][n], d = _compare(n, b, hits[lab][n], hits[lab][b], seed)
                    if key == "vs_peer":
                        diffs.setdefault(lab, {})[n] = d
    return out


def _compare(a: str, b: str, ha: list[np.ndarray], hb: list[np.ndarray], seed: int) -> tuple[dict, np.ndarray]:
    """The significance entry of ``a`` against ``b`` (``significant``: the interval excludes 0
    and McNemar's p < 0.05) and the per-question differences of the seed-averaged hits."""
    from chunksel.eval.significance import significance_entry, significant

    a_rate, a_major = combine_hits(ha)
    b_rate, b_major = combine_hits(hb)
    c = significance_entry(a, b, a_rate, b_rate, seed=seed, majority=(a_major, b_major))
    c["significant"] = significant(c)
    return c, a_rate - b_rate


def _agreement(sem: list[np.ndarray], own: list[np.ndarray], cont: list) -> dict[str, Any]:
    """Per chunk: the own labels and containment against the reference."""
    out = {"own": _agree(np.concatenate(own), np.concatenate(sem))}
    have = [j for j, c in enumerate(cont) if c is not None]
    if have:
        out["containment"] = _agree(np.concatenate([cont[j] for j in have]), np.concatenate([sem[j] for j in have]))
        out["containment"]["questions"] = len(have)
    return out


def _agree(x: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    from sklearn.metrics import cohen_kappa_score

    x, ref = (np.asarray(v) >= 1 for v in (x, ref))
    kappa = cohen_kappa_score(ref, x, labels=[False, True]) if len(set(x) | set(ref)) > 1 else float("nan")
    return {"pairs": int(len(x)), "agreement": float((x == ref).mean()), "kappa": float(kappa),
            "positives": int(x.sum()), "reference_positives": int(ref.sum()),
            "rejected": int((x & ~ref).sum()), "missed": int((~x & ref).sum())}


def _abstention(per_set: dict[str, Any], keep: Sequence[int], sem: list[np.ndarray]) -> dict[str, Any]:
    """Set AUROC and k="auto" / k=2 chunks and recall on the kept questions, answerable
    meaning a semantic positive among the K."""
    from sklearn.metrics import roc_auc_score

    y = np.array([s.any() for s in sem])
    p = np.asarray([per_set["set_p"][j] for j in keep], dtype=np.float64)
    auto = [per_set["kept_auto"][j] for j in keep]
    top2 = [per_set["top2"][j] for j in keep]

    def recall(chosen: list[list[int]]) -> float | None:
        got = [bool(any(s[c] >= 1 for c in ch)) for ch, s, a in zip(chosen, sem, y, strict=True) if a]
        return float(np.mean(got)) if got else None

    return {"n_sets": int(len(y)), "answerable": int(y.sum()),
            "auroc": float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else None,
            "auto": {"mean_kept": float(np.mean([len(a) for a in auto])), "evidence_recall": recall(auto),
                     "abstained_answerable": float(np.mean([not a for a, yy in zip(auto, y, strict=True) if yy]))
                     if y.any() else None},
            "k2": {"mean_kept": float(np.mean([len(t) for t in top2])), "evidence_recall": recall(top2)}}


def _average(out: dict[str, Any], diffs: dict[tuple[str, str], dict[str, Any]], sub: str, rows: Sequence[str],
             seed: int, n_resamples: int = 10_000) -> dict[str, Any]:
    """The plain mean over the datasets of each row's rank-1 (both label sets), and its
    difference from the peer with a 95% interval: each dataset's questions resampled on
    their own, the per-dataset mean differences averaged."""
    subs = {ds: e["subsets"][sub] for ds, e in out["datasets"].items() if sub in e["subsets"]}
    if not subs:
        return {}
    res: dict[str, Any] = {"datasets": list(subs), "rows": {}, "vs_peer": {}}
    for n in rows:
        cells = {lab: [s["rows"].get(n, {}).get(lab, {}).get("mean") for s in subs.values()]
                 for lab in ("semantic", "own")}
        res["rows"][n] = {lab: (float(np.mean(v)) if v and all(x is not None and np.isfinite(x) for x in v)
                                else None) for lab, v in cells.items()}
    peer = out["peer"]
    draws: dict[tuple[int, int], np.ndarray] = {}  # one set of resamples per label set and dataset

    def resample(li: int, di: int, n: int) -> np.ndarray:
        # the same draws for every row (common random numbers), so a row's interval does
        # not depend on which other rows the study has
        if (li, di) not in draws:
            draws[li, di] = np.random.default_rng([seed, li, di]).integers(0, n, (n_resamples, n))
        return draws[li, di]

    for li, lab in enumerate(("semantic", "own")):
        res["vs_peer"][lab] = {}
        for n in rows:
            per = [diffs.get((ds, sub), {}).get(lab, {}).get(n) for ds in subs]
            if n == peer or any(d is None or not len(d) for d in per):
                continue
            boots = np.zeros(n_resamples)
            for di, d in enumerate(per):
                boots += d[resample(li, di, len(d))].mean(axis=1)
            boots = 100.0 * boots / len(per)
            res["vs_peer"][lab][n] = {"diff": 100.0 * float(np.mean([np.mean(d) for d in per])),
                                      "lo": float(np.quantile(boots, 0.025)), "hi": float(np.quantile(boots, 0.975))}
    res["peer"] = peer
    return res
