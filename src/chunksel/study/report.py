"""The benchmark report: ``report.md`` from typed results (:mod:`chunksel.study.results`).

:func:`write_report` takes a :class:`~chunksel.study.results.BenchResults` (or a dict in
its JSON layout, read and checked by ``BenchResults.from_dict``) and writes
``report.md``, ``results.json`` and the PNG plots (:mod:`chunksel.study.plots`). The
tables come from :mod:`.tables`, :mod:`.targets` and :mod:`.generation_tables`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunksel.study.abstention import format_abstention
from chunksel.study.format import Results, md_table
from chunksel.study.generation_tables import format_answers, format_llm
from chunksel.study.headline import format_headline
from chunksel.study.names import dataset_label, selector_label
from chunksel.study.plots import write_plots
from chunksel.study.results import BenchResults, _jsonable, as_results
from chunksel.study.semantic_tables import format_semantic
from chunksel.study.tables import (
    format_extra_metrics,
    format_generator_ablation,
    format_learning_curve,
    format_pooled,
    format_significance,
    format_table1,
    format_table2,
    format_table3,
    format_transfer,
)
from chunksel.study.targets import STACKED, format_flagship_targets


# ------------------------------------------------------------------- report
def _setup_section(res: BenchResults) -> str:
    lines = ["## Setup", ""]
    lines.append(f"- git commit: `{res.git_commit or 'unknown'}`")
    code = (res.config or {}).get("study_code")
    if code:
        lines.append(f"- study code: `{code}` (the hash of the code a study runs, which keys its memo: "
                     "reports with the same hash were computed by the same code)")
    if res.datasets:
        lines.append("- datasets: " + ", ".join(dataset_label(d) for d in res.datasets))
    if res.strongest_baseline:
        lines.append(f"- strongest baseline: {selector_label(str(res.strongest_baseline))}")
    splits = _splits_table(res)
    if splits:
        lines += ["", splits]
    if res.data_checksums:
        lines += [
            "",
            md_table(["Data", "sha256"], [[str(k), f"`{v}`"] for k, v in res.data_checksums.items()], ["l", "l"]),
        ]
    if res.config:
        lines += ["", "Config:", "", "```json", json.dumps(_jsonable(res.config), indent=2, sort_keys=True), "```"]
    return "\n".join(lines)


def _splits_table(res: BenchResults) -> str:
    """Per dataset, the split scheme and the val/test questions that share an evidence
    passage with a training question, under the question-hash split and as evaluated."""
    rows = []
    for ds, st in res.instance_stats.items():
        ov = st.get("evidence_overlap") if isinstance(st, Mapping) else None
        if not ov:
            continue
        cell = [f"{ov[w]['test']['shared']}/{ov[w]['test']['questions']} ({ov[w]['test']['shared_pct']:.1f}%)"
                for w in ("before", "after")]
        val = f"{ov['after']['val']['shared']}/{ov['after']['val']['questions']}"
        rows.append([dataset_label(ds), str(st.get("split", "question")), *cell, val])
    if not rows:
        return ""
    return ("Splits: test (and validation) questions whose evidence passage (gold passage, "
            "paragraph or positive chunk) is also a training question's, under the "
            "question-hash split and as evaluated.\n\n"
            + md_table(["Dataset", "Scheme", "Test shared, question split", "Test shared, evaluated",
                        "Val shared, evaluated"], rows, ["l", "l", "r", "r", "r"]))


def _seed_note(res: BenchResults, key: str) -> str:
    seeds = res.profile_seeds(key)
    return "seeds " + ", ".join(str(s) for s in seeds) if seeds else "one seed"


def _latency_note(res: BenchResults) -> str:
    """What Table 1's latencies time: results with the text-path column come from the
    cold cost stage (:mod:`chunksel.study.cost`); earlier ones say only what they said."""
    if not any(row.text_p50_ms is not None for row in res.table1.values()):
        return "latency: per query at batch 1, one thread."
    return ("latency: per query at batch 1, one thread, cold (every feature computed, no "
            "memo): p50/p95 from the question and its K chunks with their embeddings and "
            "retrieval scores, as a retriever hands them over, to the scores; Text p50 from "
            "raw text, the question and chunks encoded too (packaged MiniLM, no embedding "
            "cache) where the selector reads embeddings or retrieval scores. The generator's "
            "h and r (query cost warmup) are read from the feature store.")


def render_markdown(results: Results, plots: Mapping[str, str] | None = None) -> str:
    """The report text; ``plots`` maps plot kinds (see PLOT_FILES) to relative paths."""
    res = as_results(results)
    plots = plots or {}
    parts = [f"# {res.title}"]
    headline = format_headline(res)
    if headline:
        parts.append(headline)
    sections = [
        (
            "Table 1: rank-1 chunk-selection accuracy (%)",
            format_table1(res),
            "Accuracy over answerable test instances (at least one positive among the K "
            "candidates); trained selectors: mean ± std over seeds. Params: trainable "
            f"parameters the selector adds; {_latency_note(res)} Best per column in bold.",
            ["latency", "bars"],
        ),
        (
            "Under semantic evidence labels: the chunk-selection paper's yardstick",
            format_semantic(res),
            "",
            [],
        ),
        (
            "Significance against the strongest baseline",
            format_significance(res),
            "B is the dataset's strongest baseline, chosen by validation accuracy (never "
            "test). Δ = A − B in percentage points. The 95% paired bootstrap interval "
            "resamples test instances of the per-instance hit rate averaged over the "
            "trained selectors' seeds (Table 1's seeds); the exact McNemar p-value (binomial "
            "test on discordant pairs) reads each instance's majority outcome over the seeds. "
            "Both tests: A is called significantly better (or worse) only when the interval "
            "excludes 0 and McNemar's p < 0.05 both hold.",
            ["significance"],
        ),
        (
            "The flagship against its targets",
            format_flagship_targets(res),
            "Means of Table 1's seeds; the strongest baseline is chosen on validation "
            "(overall for the average, per dataset for the intervals, as in the significance "
            "table). Where a target is missed, the measured learning curves and generator "
            "ablation follow the table.",
            [],
        ),
        (
            "The stacked flagship (anchored + cross-encoder) against its targets",
            format_flagship_targets(res, STACKED) if res.flagship else "",
            "As above, for the accurate operating point: at least 2.5 points above the "
            "strongest baseline on average and significantly better on at least 2 datasets "
            "on the large profile.",
            [],
        ),
        (
            "What the flagship's parts add: with and without h and r, and its interaction term alone",
            format_generator_ablation(res),
            "Mean over Table 1's seeds; the tables below give the paired differences (with − "
            "without h, r; the whole flagship − its interaction term alone, i.e. LETOR and "
            "stacked LambdaMART without the q/E prototype and h, r) with their 95% bootstrap "
            "intervals, seeds combined as above.",
            [],
        ),
        (
            "Table 2: feature ablation of the paper prototype",
            format_table2(res),
            "Mean over the ablation seeds "
            f"({_seed_note(res, 'ablation_seeds')}). HS: question hidden state; RW: routing "
            "weights; Chunk: candidate embeddings.",
            [],
        ),
        (
            "Table 3: feature budget of the paper prototype",
            format_table3(res),
            "Share of input features kept (by gradient importance) and the dimensions left; "
            f"mean over the ablation seeds ({_seed_note(res, 'ablation_seeds')}).",
            ["budget"],
        ),
        (
            "Table 4: answers generated from the selected chunk",
            format_answers(res),
            "The generator answers from the question and the chosen chunk(s), continuing the "
            "question's warm-up KV cache; EM and token F1 (SQuAD normalisation, best alias), "
            "in %, with 95% bootstrap intervals over questions; F1 (answerable): the questions "
            "with at least one positive candidate, where the pick can matter. A selector's "
            "row uses its Table 1 fit (first seed). Prefill tokens and time to first token are "
            "means per answer.",
            ["answers"],
        ),
        (
            "Table 5: LLM selectors on a sample of test questions",
            format_llm(res),
            "Rank-1 accuracy on the sample's answerable questions (a selection's first "
            "chunk; an empty utility selection is a miss) with a 95% bootstrap interval; the "
            "Table 1 rows are their first seed's picks on the same questions. Cost per query "
            "on this machine with the local generator (LLM calls, prompt and output tokens, "
            "backend seconds; answered from the response cache on a re-run, where seconds are "
            "those of the original call). k: how many passages utility kept (dynamic k).",
            [],
        ),
        (
            "Abstention: calibrated probabilities on every test set",
            format_abstention(res.abstention, selector_label) if res.abstention else "",
            "",
            ["abstention_risk_coverage", "abstention_reliability"],
        ),
        (
            "Learning curves",
            format_learning_curve(res),
            "Test rank-1 (%) against the number of usable (contested) training instances; "
            "a smaller set is a subset of a larger one; validation and test splits whole; "
            "one seed (the largest point is Table 1's first seed).",
            ["curve"],
        ),
        ("Per-dataset vs pooled training", format_pooled(res), "", []),
        (
            "Transfer: leave one dataset out",
            format_transfer(res),
            "Each row trained on the pooled training splits of the other datasets (early stopping and "
            "calibration on their validation splits), tested on the held-out dataset's test split; one "
            "seed. Rank-1 (%) on the answerable test questions with a 95% bootstrap interval; the Δ "
            "column is the paired difference against the reference row over every held-out question of "
            "the study's datasets; a dataset never trained on (WikiQA: every row trained on all of them) "
            "comes last, outside the average and the Δ.",
            [],
        ),
        (
            "Further metrics",
            format_extra_metrics(res),
            "In percent, averaged over answerable instances (contested accuracy: instances "
            "with at least one positive and one negative candidate).",
            [],
        ),
    ]
    for heading, table, note, plot_kinds in sections:
        if not table:
            continue
        parts += [f"## {heading}", table]
        if note:
            parts.append(note)
        for kind in plot_kinds:
            if kind in plots:
                parts.append(f"![{kind}]({plots[kind]})")
    parts.append(_setup_section(res))
    return "\n\n".join(parts) + "\n"


def write_report(results: BenchResults | Mapping[str, Any], out_dir: str | Path, plots: bool = True) -> Path:
    """Write ``report.md``, ``results.json`` and the plots into ``out_dir``.

    Args:
        results: the typed results (a dict in their JSON layout is read and checked
            first; :mod:`chunksel.study.results`).
        out_dir: created if missing.
        plots: draw the PNG plots (needs matplotlib, ``chunksel[eval]``).

    Returns:
        The path of ``report.md``.
    """
    results = as_results(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    if plots:
        made = {k: p.name for k, p in write_plots(results, out).items()}
    results.save(out / "results.json")
    path = out / "report.md"
    path.write_text(render_markdown(results, made), encoding="utf-8")
    return path
