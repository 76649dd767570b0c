"""One record per dataset: every list of datasets the package keeps is read from the registry."""

from __future__ import annotations

from chunksel.data.datasets import BENCHMARK_DATASETS, DATASETS


def test_the_study_reports_and_statistics_read_the_registry():
    from chunksel.selectors.bm25_stats import DATASET_CORPUS
    from chunksel.study.names import DATASET_NAMES, DATASET_ORDER, dataset_label
    from chunksel.study.profiles import DATASETS as STUDY_DATASETS
    from chunksel.study.transfer import NEVER_TRAINED

    assert DATASET_ORDER == STUDY_DATASETS == BENCHMARK_DATASETS == tuple(
        n for n, s in DATASETS.items() if s.benchmark)
    assert BENCHMARK_DATASETS[:3] == ("triviaqa", "popqa", "msmarco")  # the paper's three first
    assert NEVER_TRAINED == ("wikiqa",)
    for name, spec in DATASETS.items():
        assert spec.display_name and DATASET_NAMES[name] == dataset_label(name) == spec.display_name
        assert DATASET_CORPUS[name] == (spec.stats_corpus or spec.corpus)
    assert DATASET_CORPUS["wikiqa"] == "wiki-w100" and DATASETS["wikiqa"].corpus is None


def test_no_other_module_spells_out_the_dataset_list():
    """A new dataset touches its loader and the registry only: no module lists the six names."""
    from pathlib import Path

    import chunksel

    root = Path(chunksel.__file__).resolve().parent
    spelled = '"triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa"'
    hits = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if spelled in p.read_text(encoding="utf-8")]
    assert hits == [], hits
