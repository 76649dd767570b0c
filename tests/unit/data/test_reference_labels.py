"""Reference semantic labels: reading, checking and attaching them as a label source."""

from __future__ import annotations

import json

import pytest
from tests.conftest import make_toy_instances

from chunksel.data.reference_labels import (
    EVIDENCE,
    SUPPORTS,
    attach_reference,
    load_reference,
    names_reference,
    reference_datasets,
)
from chunksel.errors import ConfigError, DataError

#: the shipped files' figures (their README): questions, pairs, evidence positives, sha256
SHIPPED = {
    "triviaqa": (295, 1475, 187, "b163fe208a9fc295c341cf0503a461e85ebc24dcaad6d0d7f2962f186f0e8f44"),
    "popqa": (200, 1000, 183, "2da1131467ff71360ab03960602504f32fd4dbeaeee1e2c4ac1d5ec3ead72742"),
    "msmarco": (200, 1000, 410, "f22f1c4b6f60f0a273773aae64104b10168682f1864436707a24253af10efcd3"),
}


def _instances(ds: str = "popqa"):
    insts = make_toy_instances(n=10)
    for i in insts:
        i.question.id = f"{ds}:{i.question.id}"
    return insts


def _write(root, insts, ds="popqa", evidence=lambda i, j: j == 1):
    (root / "semantic").mkdir(parents=True, exist_ok=True)
    rows = [{"qid": i.question.id, "pid": c.id, "evidence": "Yes" if evidence(i, j) else "No",
             "supports_reference": "No", "sample": "random"} for i in insts for j, c in enumerate(i.candidates)]
    path = root / "semantic" / f"{ds}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.data
def test_the_shipped_files_load_with_their_documented_counts(data_root):
    assert set(SHIPPED) <= set(reference_datasets(data_root))
    for ds, (questions, pairs, positives, sha) in SHIPPED.items():
        ref = load_reference(ds, data_root)
        assert (len(ref.sample), len(ref.pairs), ref.sha256) == (questions, pairs, sha)
        assert sum(ev for ev, _ in ref.pairs.values()) == positives
    assert sum(s == "answerable-stratum" for s in load_reference("triviaqa", data_root).sample.values()) == 95


def test_attach_keeps_the_labelled_questions_with_both_sources(tmp_path):
    insts = _instances()
    _write(tmp_path, insts[:4])
    ref = load_reference("popqa", tmp_path)
    kept = attach_reference(insts, ref)
    assert [i.question.id for i in kept] == [i.question.id for i in insts[:4]]
    assert [c.labels[EVIDENCE] for c in kept[0].candidates] == [0, 1, 0, 0, 0]
    assert all(c.labels[SUPPORTS] == 0 for c in kept[0].candidates)
    assert kept[0].question.meta["reference_sample"] == "random"
    assert list(kept[0].labels(EVIDENCE)) == [0, 1, 0, 0, 0]
    assert not any(EVIDENCE in c.labels for c in insts[5].candidates)


def test_bad_files_and_other_candidates_are_named(tmp_path):
    insts = _instances()
    path = _write(tmp_path, insts[:2])
    with pytest.raises(DataError, match="no reference semantic labels for 'nq'.*popqa"):
        load_reference("nq", tmp_path)
    path.write_text(path.read_text() + '{"qid": "x", "pid": "y", "evidence": "Maybe", "supports_reference": "No"}\n')
    with pytest.raises(DataError, match=r"popqa.jsonl:11: not a reference label row"):
        load_reference("popqa", tmp_path)
    _write(tmp_path, insts[:2])
    insts[0].candidates[0].id = "another-passage"  # built with another K, index or corpus
    with pytest.raises(DataError, match="'another-passage' has no reference semantic label"):
        attach_reference(insts, load_reference("popqa", tmp_path))
    with pytest.raises(DataError, match="none of these 3 questions"):
        attach_reference(insts[5:8], load_reference("popqa", tmp_path))


def test_a_label_spec_naming_them_keeps_the_labelled_questions(tmp_path, monkeypatch):
    """``--label semantic@reference`` (build_instances' label spec) evaluates on the labelled
    questions only; the dataset's own labels stay on the candidates."""
    from chunksel.build import Built, _with_label, split_stats

    monkeypatch.setenv("CHUNKSEL_DATA", str(tmp_path))
    insts = _instances()
    _write(tmp_path, insts[2:6])
    built = _with_label(Built("popqa", tmp_path, insts, {"label": "containment"}, split_stats(insts)),
                        "semantic@reference")
    assert [i.question.id for i in built.instances] == [i.question.id for i in insts[2:6]]
    assert all(i.label_source == "semantic@reference" for i in built.instances)
    assert built.config["label"] == "semantic@reference"
    assert names_reference("containment|semantic@reference") and not names_reference("semantic@local")
    with pytest.raises((ConfigError, DataError), match="no reference semantic labels for 'msmarco'"):
        _with_label(Built("msmarco", tmp_path, _instances("msmarco"), {}, {}), "semantic@reference")
