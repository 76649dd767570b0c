"""The report's generation tables: Table 4 (answers generated from each selector's
pick, EM / F1 in percent of :func:`chunksel.study.answer_table.answer_table`'s
fractions, and the prefill cost) and Table 5 (the LLM selectors on a sample of test
questions and their cost per query)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chunksel.study.format import Results, as_number, bold_best, fmt, md_table, ordered
from chunksel.study.names import DASH, REFERENCE_SELECTORS, dataset_label, selector_label
from chunksel.study.results import as_results

#: reference conditions of Table 4, in display order, and their names
ANSWER_REFERENCES: dict[str, str] = {
    "no_context": "No context", "top1": "Top-1 (retrieval)", "top5": "All top-5", "oracle": "Oracle chunk",
}


def answer_condition_label(name: str) -> str:
    return ANSWER_REFERENCES.get(name) or selector_label(name)


def _pct_interval(x: Mapping[str, Any] | None) -> str:
    if not x or x.get("mean") is None:
        return DASH
    return f"{100 * x['mean']:.1f} [{100 * x['lo']:.1f}, {100 * x['hi']:.1f}]"


def format_answers(results: Results) -> str:
    """Table 4: answer EM / F1 (%, 95% bootstrap interval) and prefill cost per condition
    (the references and each Table 1 selector's pick), one table per dataset."""
    res = as_results(results)
    parts = []
    for d in ordered(res.datasets, res.answers):
        table = res.answers[d]
        conds = table.get("conditions") or {}
        if not conds:
            continue
        # no peak-RSS column: a generation reuses memory the warm-up already made resident, so its
        # growth reads 0.0 for every answer and says nothing (results.json keeps the measurement)
        header = ["Context", "EM", "F1", "F1 (answerable)", "Prefill tokens", "TTFT ms"]
        rows = []
        for name, c in conds.items():
            ans = c.get("answerable") or {}
            rows.append([
                answer_condition_label(name), _pct_interval(c.get("em")), _pct_interval(c.get("f1")),
                _pct_interval(ans.get("f1")), fmt(c.get("prefill_tokens"), 1), fmt(c.get("ttft_ms"), 1),
            ])
        n_ans = next((c["answerable"]["questions"] for c in conds.values() if c.get("answerable")), 0)
        head = (f"**{dataset_label(d)}** ({table.get('questions')} test questions, {n_ans} with a positive "
                f"candidate; {table.get('generator')}, greedy, at most {table.get('max_new_tokens')} new tokens)")
        text = head + "\n\n" + md_table(header, rows, ["l"] + ["r"] * 5)
        idk = _format_idk(table.get("abstention") or {}, conds)
        if idk:
            text += "\n\n" + idk
        kv = table.get("kv_reuse")
        if kv:
            text += (f"\n\nKV reuse on {kv['pairs']} pairs: time to first token {fmt(kv['ttft_ms_reuse'], 1)} ms "
                     f"with the warm-up cache vs {fmt(kv['ttft_ms_noreuse'], 1)} ms prefilling the whole prompt "
                     f"({fmt(kv['saving_pct'], 1)}% saved; {fmt(kv['prefill_tokens_reuse'], 1)} vs "
                     f"{fmt(kv['prefill_tokens_full'], 1)} tokens prefilled).")
        parts.append(text)
    return "\n\n".join(parts)


def _format_idk(rows_in: Mapping[str, Any], conds: Mapping[str, Any]) -> str:
    """Table 4's "I don't know" rows: each calibrated selector answers only where
    ``k="auto"`` keeps a chunk."""
    if not rows_in:
        return ""
    rows = []
    for name, r in rows_in.items():
        plain = (conds.get(name) or {}).get("f1")
        rows.append([
            selector_label(name) + ' + "I don\'t know"', fmt(100 * r["coverage"], 1) if r.get("coverage") is not None
            else DASH, _pct_interval(r.get("f1")), _pct_interval(r.get("f1_all")), _pct_interval(plain),
            f"{r['abstained_answerable']} / {r['abstained_unanswerable']}", str(r.get("abstained_correct", DASH)),
            fmt(r.get("prefill_tokens"), 1), fmt(r.get("prefill_saved_pct"), 1),
        ])
    return ('With abstention: where the selector\'s calibrated `k="auto"` keeps no chunk, the pipeline answers '
            '"I don\'t know" and prefills nothing. F1 on the answered questions, and on all (an "I don\'t know" '
            "scores 0) beside the plain row's F1; abstentions on questions with / without a positive candidate; "
            "abstentions where the plain answer was right.\n\n"
            + md_table(["Context", "Coverage %", "F1 answered", "F1 all", "F1 without abstaining",
                        "Abstained (answerable / not)", "Abstained, answer was right", "Prefill tokens",
                        "Prefill saved %"], rows, ["l"] + ["r"] * 8))


def format_llm(results: Results) -> str:
    """Table 5: the LLM selectors on a sample of test questions, beside every Table 1
    row's pick on the same questions (rank-1 %, 95% bootstrap interval), and the LLM
    selectors' cost per query (calls, prompt tokens, seconds, repairs, k)."""
    res = as_results(results)
    parts = []
    for d in ordered(res.datasets, res.llm):
        t = res.llm[d]
        rows_in = t.get("rows") or {}
        if not rows_in:
            continue
        cost = t.get("cost") or {}
        llm_first = [n for n in rows_in if n in cost] + [n for n in rows_in if n not in cost]
        rows, vals = [], []
        for n in llm_first:
            r = rows_in[n]
            ci = r.get("ci") or [None, None]
            cell = fmt(r.get("accuracy"))
            if ci[0] is not None and as_number(r.get("accuracy")) is not None:
                cell += f" [{ci[0]:.1f}, {ci[1]:.1f}]"
            rows.append([selector_label(n), cell])
            vals.append([as_number(r.get("accuracy"))])
        acc = [r[1:] for r in rows]
        bold_best(acc, vals, [n in REFERENCE_SELECTORS for n in llm_first])
        rows = [[r[0], *a] for r, a in zip(rows, acc, strict=True)]
        text = (f"**{dataset_label(d)}** ({t.get('questions')} test questions, {t.get('answerable')} with a "
                "positive candidate)\n\n" + md_table(["Method", "Rank-1 % [95% CI]"], rows, ["l", "r"]))
        if cost:
            crow = []
            for n, c in cost.items():
                ks = ", ".join(f"{k}: {v}" for k, v in (c.get("k_distribution") or {}).items())
                crow.append([selector_label(n), fmt(c.get("calls_per_query"), 1), fmt(c.get("prompt_tokens_per_query"), 0),
                             fmt(c.get("output_tokens_per_query"), 0), fmt(c.get("seconds_per_query"), 2),
                             str(c.get("repairs", DASH)), str(c.get("empty", DASH)), str(c.get("fallbacks", DASH)),
                             ks or DASH, str(c.get("read", DASH))])
            text += "\n\n" + md_table(["LLM selector", "Calls/query", "Prompt tokens/query", "Output tokens/query",
                                      "s/query", "Repairs", "Empty", "Fallbacks", "k (count)", "Read"], crow,
                                     ["l"] + ["r"] * 8 + ["l"])
            for n in llm_first:
                e = (rows_in[n] or {}).get("empty_selection")
                if e and e.get("unanswerable_abstained") is not None and e.get("answerable_kept") is not None:
                    text += (f"\n\n{selector_label(n)} as an abstainer: it selected nothing on "
                             f"{100 * e['unanswerable_abstained']:.0f}% of the {e['unanswerable']} questions without a "
                             f"positive candidate and kept a chunk on {100 * e['answerable_kept']:.0f}% of the "
                             f"{e['answerable']} with one (compare the abstention section's calibrated selectors).")
            if any(c.get("fallbacks") for c in cost.values()):
                text += ("\n\nFallbacks: queries where the LLM call failed and the selector fell back to "
                         "retrieval order (fail-open); their rank-1 is retrieval order's.")
        parts.append(text)
    return "\n\n".join(parts)
