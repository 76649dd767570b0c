"""Table 5: the LLM selectors on a deterministic sample of test questions, beside every
Table 1 row's pick on the same questions, with their cost per query."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from chunksel.study.fitting import make_selector, say, sum_repairs
from chunksel.study.state import Study


def llm_table(study: Study) -> dict[str, dict[str, Any]]:
    """The LLM selectors on a deterministic sample of each Table 5 dataset's test
    questions: rank-1 accuracy on the sample's answerable questions beside every
    Table 1 row's pick on the same questions, and the cost per query. LLM calls go
    through the response cache, so a re-run reads them back."""
    from chunksel.errors import MissingExtraError
    from chunksel.eval.significance import bootstrap_interval
    from chunksel.selectors.base import REGISTRY
    from chunksel.study.answer_table import sample_instances

    out: dict[str, dict[str, Any]] = {}
    dss = [d for d in study.prof.llm_datasets if d in study.datasets]
    sels = {}
    for n in [n for n in study.prof.llm_selectors if n in REGISTRY] if dss else []:
        try:
            sels[n] = make_selector(n, study.seed, study.progress, study.prof)
        except (MissingExtraError, ImportError):
            continue  # not installed: no row
    names = list(sels)
    if not names:
        return out
    shared = None
    for ds in dss:
        t0 = time.time()
        test = study.splits[ds]["test"]
        idx = sample_instances(test, study.prof.llm_sample)
        batch = [test[i] for i in idx]
        answerable = [n for n, inst in enumerate(batch) if inst.answerable()]
        rows: dict[str, Any] = {}

        def row(hits: list[bool], answerable: list[int] = answerable) -> dict[str, Any]:
            acc = [float(hits[n]) for n in answerable]
            mean, lo, hi = (bootstrap_interval(np.asarray(acc), n_resamples=10_000, seed=study.seed)
                            if acc else (float("nan"),) * 3)
            return {"accuracy": 100 * mean, "ci": [100 * lo, 100 * hi], "n": len(acc)}

        for name, per in study.picks.items():
            if ds in per:
                rows[name] = row([bool(inst.labels()[per[ds][i]] > 0) if inst.candidates else False
                                  for i, inst in zip(idx, batch)])
        cost: dict[str, Any] = {}
        for name, sel in sels.items():
            if shared is not None and hasattr(sel, "use_backend"):
                sel.use_backend(shared)  # one local model for both selectors
            sel.fit([], study.features)
            if hasattr(sel, "select_dynamic"):
                chosen = [s.indices for s in sel.select_dynamic(batch)]
            else:
                chosen = [s.indices for s in sel.select(batch, study.features, k=1)]
            if shared is None and hasattr(sel, "llm"):
                shared = getattr(sel, "_backend", None)
            study.llm_picks.setdefault(name, {})[ds] = dict(zip(idx, [list(c) for c in chosen], strict=True))
            first = [c[0] if c else None for c in chosen]
            rows[name] = row([j is not None and bool(inst.labels()[j] > 0) for j, inst in zip(first, batch)])
            if hasattr(sel, "select_dynamic"):  # an empty selection is its abstention (#30's baseline)
                rows[name]["empty_selection"] = empty_selection(chosen, [inst.answerable() for inst in batch])
            runs = [getattr(sel, "runs_", {}).get(inst.id) for inst in batch]
            runs = [r for r in runs if r is not None]
            if runs:
                ks: dict[str, int] = {}
                for r in runs:
                    ks[str(r.k)] = ks.get(str(r.k), 0) + 1
                cost[name] = {
                    "queries": len(runs),
                    "calls_per_query": float(np.mean([r.calls for r in runs])),
                    "prompt_tokens_per_query": float(np.mean([r.prompt_tokens for r in runs])),
                    "output_tokens_per_query": float(np.mean([r.output_tokens for r in runs])),
                    "seconds_per_query": float(np.mean([r.seconds for r in runs])),
                    "repairs": int(sum(r.repairs.total() for r in runs)),
                    "repairs_by_kind": sum_repairs(runs),
                    "empty": int(sum(bool(getattr(r, "empty", False)) for r in runs)),
                    "fallbacks": int(sum(getattr(r, "fallback", None) is not None for r in runs)),
                    "k_distribution": dict(sorted(ks.items(), key=lambda kv: int(kv[0]))),
                    "read": runs[0].read,
                }
        out[ds] = {"questions": len(batch), "answerable": len(answerable), "rows": rows, "cost": cost,
                   "question_ids": [inst.id for inst in batch]}
        study.timings[f"llm:{ds}"] = time.time() - t0
        say(f"table 5: {ds:<9} " + " ".join(f"{n} {rows[n]['accuracy']:.1f}" for n in names)
             + f" ({len(batch)} questions, {time.time() - t0:.0f}s)")
    return out


def empty_selection(chosen: list[list[int]], answerable: list[bool]) -> dict[str, Any]:
    """An LLM selector with dynamic k as an abstainer: how often it selected nothing on
    the questions without a positive candidate, and kept something on those with one."""
    una = [len(c) == 0 for c, a in zip(chosen, answerable, strict=True) if not a]
    ans = [len(c) > 0 for c, a in zip(chosen, answerable, strict=True) if a]
    return {"unanswerable": len(una), "answerable": len(ans),
            "unanswerable_abstained": round(float(np.mean(una)), 4) if una else None,
            "answerable_kept": round(float(np.mean(ans)), 4) if ans else None}
