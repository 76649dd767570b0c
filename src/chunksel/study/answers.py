"""Table 4: the generator's answers from each Table 1 selector's pick (its first seed),
beside no context and all top-K, and from the LLM selectors' picks where Table 5 covered
the question; for each calibrated selector an "I don't know" row (it abstains where
``k="auto"`` keeps no chunk) (:func:`chunksel.study.answer_table.answer_table`, KV reuse, cached answers)."""

from __future__ import annotations

import time
from typing import Any

from chunksel.study.fitting import say
from chunksel.study.state import Study


def answers(study: Study) -> dict[str, dict[str, Any]]:
    """Answers generated from each Table 1 selector's pick (its first seed) on a
    deterministic sample of each answer dataset's test questions, beside no context
    and all top-K; generations are cached (a pair is generated once across selectors
    and runs)."""
    from chunksel.study.abstention import auto_abstained
    from chunksel.study.answer_table import answer_table, sample_instances

    out: dict[str, dict[str, Any]] = {}
    dss = [d for d in study.prof.answer_datasets if d in study.datasets]
    if not dss or not study.picks:
        return out
    for ds in dss:
        t0 = time.time()
        test = study.splits[ds]["test"]
        picks = {name: [[j] for j in per[ds]] for name, per in study.picks.items() if ds in per}
        chosen = set(sample_instances(test, study.prof.answer_sample))
        for name, per in study.llm_picks.items():  # LLM selectors where Table 5 covered every question
            if ds in per and chosen <= set(per[ds]):
                picks[name] = [per[ds].get(i, [0]) for i in range(len(test))]
        abstain = {name: flags for name in study.picks if ds in study.picks[name]
                   and (flags := auto_abstained(study, name, ds)) is not None}
        table = answer_table(test, picks, sample=study.prof.answer_sample, references=("no_context", "top5"),
                             noreuse_pairs=20, seed=study.seed, progress=study.progress, keep_answers=False,
                             abstain=abstain)
        table["cache"].pop("path", None)  # machine-specific
        out[ds] = table
        study.timings[f"answers:{ds}"] = time.time() - t0
        say(f"table 4: {ds:<9} {table['questions']} questions, {table['cache']['pairs']} pairs "
             f"({table['cache']['generated']} generated, {time.time() - t0:.0f}s)")
    return out
