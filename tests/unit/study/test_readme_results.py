"""The README's Results table agrees with the committed reports' results.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"

NAMES = {"LambdaMART": "lambdamart", "LambdaMART + MaxSim": "lambdamart-late", "RankSVM": "ranksvm", "BM25": "bm25",
         "MiniLM-L6 cross-encoder": "crossencoder", "retrieval order": "retrieval"}


def _rows() -> list[dict[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Results", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows.append(dict(zip(header, cells)))
    return rows


def _average(results: dict, selector: str) -> float:
    per = results["table1"][selector]["per_dataset"]
    return sum(per[d]["mean"] for d in results["datasets"]) / len(results["datasets"])


def _report_rows() -> list[tuple[str, dict[str, str]]]:
    out = []
    for row in _rows():
        m = re.match(r"\[(\w[\w-]*)\]\(reports/([\w-]+)/report\.md\)", row["Report"])
        assert m, f"README Results row without a report link: {row['Report']!r}"
        if row["Flagship (anchored)"] != "–":
            out.append((m.group(2), row))
    return out


def test_readme_lists_every_report_with_table1():
    listed = {name for name, _ in _report_rows()}
    assert {"quick", "full", "large"} <= listed


@pytest.mark.parametrize("name,row", _report_rows(), ids=[n for n, _ in _report_rows()])
def test_readme_row_matches_results_json(name, row):
    results = json.loads((ROOT / "reports" / name / "results.json").read_text())
    assert results["git_commit"].startswith(row["Code"]), (name, row["Code"])
    profile = results["config"]["profile"]
    assert row["Splits"] == profile["split"], (name, row["Splits"], profile["split"])
    assert int(row["Seeds"]) == len(profile["seeds"]), name

    def check(cell: str, selector: str) -> None:
        assert float(cell) == pytest.approx(_average(results, selector), abs=0.006), (name, selector)

    check(row["Flagship (anchored)"], results["flagship"])
    check(row["Retrieval order"], "retrieval")
    check(row["Paper prototype"], "prototype")
    label, value = row["Strongest baseline"].rsplit(" ", 1)
    assert NAMES[label] == results["strongest_baseline"], (name, label)
    check(value, results["strongest_baseline"])


def test_readme_stays_a_library_readme():
    """What it is, install, quickstart, the results table and docs: at most 120 lines (the
    results prose lives in reports/README.md)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, len(lines)
    assert (ROOT / "reports" / "README.md").is_file() and "(reports/README.md)" in README.read_text()
