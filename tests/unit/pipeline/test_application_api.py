"""ChunkSelector for every registered selector after save/load, provenance, corpus
statistics that travel with a save, batches, and more chunks than K.

No real model loads: a fake 8-dim encoder and a tiny random Llama (for the warm-up) stand
in for MiniLM and SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import make_toy_instances
from tests.doubles import FakeEncoder

from chunksel.errors import ConfigError, DataError, UnscoredChunksWarning
from chunksel.selectors import REGISTRY, get_selector_class

pytest.importorskip("torch")

SMALL: dict[str, dict] = {
    "lambdamart": {"n_estimators": 20, "min_child_samples": 1, "early_stopping_rounds": 5},
    "knrm": {"embedding_init": "random", "embedding_dim": 8, "max_doc_len": 16, "max_epochs": 2},
    "drmm": {"embedding_init": "random", "embedding_dim": 8, "max_doc_len": 16, "max_epochs": 2},
    "duet": {"n_filters": 8, "hidden": 8, "max_query_len": 8, "max_doc_len": 16, "max_epochs": 2},
    "prototype": {"hidden": 16, "max_epochs": 2, "batch_size": 8},
    "anchored": {"hidden": 16, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8},
    "crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4},
    "anchored-ce": {"base_params": {"hidden": 16, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8},
                    "member_params": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4}},
    # the LLM selectors on the model-free scripted backend (tests/doubles.py)
    "rankgpt": {"backend": "scripted"},
    "utility": {"backend": "scripted"},
}
QUESTION = "what is the golf answer"
CHUNKS = ["unrelated alpha text", "the golf answer is here", "unrelated bravo text", "unrelated echo text"]


@pytest.fixture(scope="module")
def tiny_generator():
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "features"))
    from tiny import tiny_llama, tiny_tokenizer

    return tiny_llama(seed=1), tiny_tokenizer(), "tiny-llama-test"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_generator):
    """Every registered selector fitted on toy data and saved; the corpus TSV it read is
    deleted afterwards, so BM25 statistics can only come from the save."""
    from chunksel.features.base import InMemoryFeatures
    from chunksel.features.extract import extract_features

    root = tmp_path_factory.mktemp("app")
    insts = make_toy_instances(n=30, dim=8, seed=2)
    corpus = root / "corpus.tsv"
    lines = ["id\ttext\ttitle\tsource"] + [f"{c.id}\t{c.text}\t\ttoy" for i in insts for c in i.candidates]
    corpus.write_text("\n".join(lines + ["x:1\tsome other passage\t\ttoy"]) + "\n", encoding="utf-8")
    model, tok, gen_id = tiny_generator
    got = extract_features(model, tok, [i.question for i in insts], batch_size=32, progress=False)
    feats = InMemoryFeatures([i.id for i in insts], h=got["h"], r=got["r"])
    feats.generator_id = gen_id
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    from chunksel import ChunkSelector

    out = {}
    for name in REGISTRY:
        cls = get_selector_class(name)
        params = set(cls._param_names())
        kw = {k: v for k, v in SMALL.get(name, {}).items() if k in params}
        if "corpus" in params:
            kw["corpus"] = str(corpus)
        if "base_params" in params:  # the stacked selector's base reads it
            kw["base_params"] = {**kw["base_params"], "corpus": str(corpus)}
        if "progress" in params:
            kw["progress"] = False
        sel = cls(**kw).fit(train, feats, val)
        sel.save(root / name)
        # scores of the selector in memory, while its corpus file exists
        ref = ChunkSelector(sel, encoder=FakeEncoder(), generator=tiny_generator).select(QUESTION, CHUNKS, k=2)
        out[name] = (ref.all_scores, root / name)
    corpus.unlink()
    return out


def _load(path, tiny_generator, **kw):
    from chunksel import ChunkSelector

    kw.setdefault("encoder", FakeEncoder())
    return ChunkSelector.load(path, generator=tiny_generator, **kw)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_selector_through_chunkselector_after_save_load(name, trained, tiny_generator, one_thread):
    ref, path = trained[name]
    cs = _load(path, tiny_generator)
    res = cs.select(QUESTION, CHUNKS, k=2)
    assert res.selector == name and len(res.selected) == 2
    assert len(set(res.indices)) == 2 and [c.rank for c in res.selected] == [1, 2]
    assert res.chunks == [CHUNKS[i] for i in res.indices]
    assert res.scores == sorted(res.scores, reverse=True) and res.scores[0] == max(s for s in res.all_scores)
    doc = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert doc["selected"][0]["index"] == res.indices[0] and len(doc["all_scores"]) == len(CHUNKS)
    # the saved selector scores as the one in memory (BM25 statistics from the save)
    np.testing.assert_allclose(res.all_scores, ref, rtol=1e-5, atol=1e-6)
    # the provenance is in config.json
    prov = json.loads((path / "config.json").read_text())["provenance"]
    assert prov["chunksel_version"] and prov["data_fingerprint"] and prov["datasets"] == ["toy"]
    if "warmup" in cs.inputs:
        assert prov["generator_id"] == "tiny-llama-test" and res.timings["warmup"] > 0
    if "corpus_stats" in cs.inputs:
        assert cs.corpus.startswith("bundled:") and list(prov["corpus_stats"].values())[0]["file"] in \
            json.loads((path / "config.json").read_text())["checksums"]


def test_only_the_parts_a_selector_reads_are_run(trained, tiny_generator):
    from chunksel import ChunkSelector

    enc = FakeEncoder()
    cs = ChunkSelector.load(trained["bm25"][1], encoder=enc, generator="/nonexistent/generator")
    cs.select(QUESTION, CHUNKS)
    assert enc.n_encoded == 0 and cs._generator is None and cs.inputs == {"corpus_stats"}
    cs = ChunkSelector.load(trained["knrm"][1], encoder=enc)
    assert cs.inputs == frozenset() and cs.select(QUESTION, CHUNKS).indices
    assert enc.n_encoded == 0
    cs = ChunkSelector.load(trained["lambdamart"][1], encoder=enc)  # retrieval score = q . e
    cs.select(QUESTION, CHUNKS)
    assert enc.n_encoded == len(CHUNKS) + 1
    cs.select(QUESTION, CHUNKS, chunk_scores=[0.9, 0.8, 0.7, 0.6])  # the caller's scores: no encoding
    assert enc.n_encoded == len(CHUNKS) + 1


def test_more_chunks_than_k(trained, tiny_generator):
    cs = _load(trained["anchored"][1], tiny_generator)
    chunks = CHUNKS + ["unrelated hotel text", "the golf answer again", "more golf"]
    with pytest.warns(UnscoredChunksWarning, match="2 of 7 chunks were not scored: .*K=5"):
        res = cs.select(QUESTION, chunks, k=7)
    assert res.n_scored == 5 and res.all_scores[5:] == [None, None] and len(res.selected) == 5
    assert max(res.indices) < 5
    json.dumps(res.to_dict(), allow_nan=False)
    # a selector without a fixed K scores every chunk, without a warning
    cs = _load(trained["lambdamart"][1], tiny_generator)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscoredChunksWarning)
        res = cs.select(QUESTION, chunks, k=10)
    assert res.n_scored == 7 and len(res.selected) == 7 and None not in res.all_scores


def test_batch_equals_one_by_one(trained, tiny_generator):
    cs = _load(trained["prototype"][1], tiny_generator)
    qs = [QUESTION, "what is the alpha answer", "echo?"]
    lists = [CHUNKS, CHUNKS[::-1], CHUNKS[:2]]
    batch = cs.select_batch(qs, lists, k=2)
    for q, ch, b in zip(qs, lists, batch, strict=True):
        one = cs.select(q, ch, k=2)
        assert one.indices == b.indices
        np.testing.assert_allclose(one.all_scores, b.all_scores, rtol=1e-4, atol=1e-5)
    # the caller's own warm-up features give the same scores
    warm = cs.warm_up(QUESTION)
    again = cs.select(QUESTION, CHUNKS, k=2, features={"h": warm.h, "r": warm.r})
    np.testing.assert_allclose(again.all_scores, batch[0].all_scores, rtol=1e-4, atol=1e-5)


def test_answer_generates_from_the_warm_up_cache(trained, tiny_generator):
    cs = _load(trained["lambdamart"][1], tiny_generator)  # no warm-up for selection, one for generation
    text, sel = cs.answer(QUESTION, CHUNKS, max_new_tokens=4)
    assert isinstance(text, str) and sel.indices and sel.timings["generate"] > 0 and sel.timings["warmup"] > 0


def test_provenance_mismatch_is_an_error(trained, tiny_generator, tmp_path):
    from chunksel import ChunkSelector

    path = trained["prototype"][1]
    with pytest.raises(DataError, match="trained on generator 'tiny-llama-test', but 'other-gen' is loaded"):
        ChunkSelector.load(path, encoder=FakeEncoder(), generator=(None, None, "other-gen"))
    cfg = json.loads((trained["anchored"][1] / "config.json").read_text())
    cfg["provenance"]["encoder_id"] = "all-MiniLM-L6-v2-0123456789-L256"
    import shutil

    shutil.copytree(trained["anchored"][1], tmp_path / "a")
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError, match="trained with encoder 'all-MiniLM-L6-v2-0123456789-L256', but encoder "
                                        "'fake-encoder-8'"):
        ChunkSelector.load(tmp_path / "a", encoder=FakeEncoder(), generator=tiny_generator)


def test_user_corpus_instead_of_the_saved_statistics(trained, tiny_generator, tmp_path):
    saved = _load(trained["bm25"][1], tiny_generator).select(QUESTION, CHUNKS, k=4)
    own = tmp_path / "mine.jsonl"
    own.write_text("".join(json.dumps({"id": i, "text": f"golf golf golf passage {i}"}) + "\n" for i in range(5)))
    cs = _load(trained["bm25"][1], tiny_generator, corpus=own)
    assert cs.corpus.endswith(".tsv") and not cs.corpus.startswith("bundled:")
    mine = cs.select(QUESTION, CHUNKS, k=4)
    assert mine.all_scores != saved.all_scores  # "golf" is common in the user's corpus: lower idf
    with pytest.raises(ConfigError, match="reads no corpus statistics"):
        _load(trained["knrm"][1], tiny_generator, corpus=own)


def test_bad_inputs(trained, tiny_generator):
    cs = _load(trained["anchored"][1], tiny_generator)
    with pytest.raises(ConfigError, match="k must be >= 1"):
        cs.select(QUESTION, CHUNKS, k=0)
    with pytest.raises(DataError, match="empty question"):
        cs.select("  ", CHUNKS)
    with pytest.raises(DataError, match="no candidate chunks"):
        cs.select(QUESTION, [])
    with pytest.raises(DataError, match="4 chunks but 3 embeddings"):
        cs.select(QUESTION, CHUNKS, chunk_embeddings=np.ones((3, 8)))
    with pytest.raises(DataError, match="reads the chunks' text"):
        cs.select(QUESTION, chunk_embeddings=np.ones((3, 8)))


def test_wrong_dimensions_and_a_string_of_chunks_name_the_argument(trained, tiny_generator):
    cs = _load(trained["anchored"][1], tiny_generator)
    with pytest.raises(DataError, match=r"chunk_embeddings has shape \(4, 5\), but the anchored selector reads "
                       r"8-dimensional embeddings: expected \(4, 8\)") as err:
        cs.select(QUESTION, CHUNKS, chunk_embeddings=np.ones((4, 5)))
    assert err.value.field == "chunk_embeddings"
    with pytest.raises(DataError, match=r"question_embedding has shape \(5,\).*expected \(8,\)") as err:
        cs.select(QUESTION, CHUNKS, chunk_embeddings=np.ones((4, 8)), question_embedding=np.ones(5))
    assert err.value.field == "question_embedding"
    with pytest.raises(DataError, match=r"question_embedding must have shape \(d,\), got \(2, 8\)"):
        cs.select(QUESTION, CHUNKS, question_embedding=np.ones((2, 8)))
    with pytest.raises(DataError, match="chunks must be a list of strings, got one string") as err:
        cs.select(QUESTION, "a string")
    assert err.value.field == "chunks"
    with pytest.raises(DataError, match="questions must be a list"):
        cs.select_batch("a question", [CHUNKS])
    with pytest.raises(DataError, match=r"chunk_scores\[1\] is not a finite number"):
        cs.select(QUESTION, CHUNKS, chunk_scores=[0.1, float("nan"), 0.2, 0.3])


def test_embeddings_given_encode_nothing_and_raw_chunks_go_through_the_cache(trained, tiny_generator):
    from chunksel.retrieval.chunk_cache import EmbeddingCache

    enc = FakeEncoder()
    cs = _load(trained["anchored"][1], tiny_generator, encoder=enc)
    cache = cs.embedding_cache
    assert isinstance(cache, EmbeddingCache)
    first = cs.select(QUESTION, CHUNKS, k=2)
    assert enc.n_encoded == len(CHUNKS) + 1
    again = cs.select("another question about golf", CHUNKS, k=2)
    assert enc.n_encoded == len(CHUNKS) + 2  # warm cache: the question alone
    assert cache.hits == len(CHUNKS)
    given = cs.select(QUESTION, CHUNKS, k=2, chunk_embeddings=enc.encode(CHUNKS),
                      question_embedding=enc.encode([QUESTION])[0])
    assert enc.n_encoded == len(CHUNKS) * 2 + 3  # the two encode calls above, nothing in select
    np.testing.assert_allclose(given.all_scores, first.all_scores, rtol=1e-5, atol=1e-6)
    assert again.selected
    uncached = _load(trained["anchored"][1], tiny_generator, encoder=FakeEncoder(), embedding_cache=False)
    np.testing.assert_allclose(uncached.select(QUESTION, CHUNKS, k=2).all_scores, first.all_scores,
                               rtol=1e-5, atol=1e-6)


def test_deadline_is_checked_before_each_stage(trained, tiny_generator):
    import time

    from chunksel.errors import DeadlineExceeded

    enc = FakeEncoder()
    cs = _load(trained["anchored"][1], tiny_generator, encoder=enc)
    with pytest.raises(DeadlineExceeded, match="before the encode stage") as err:
        cs.select(QUESTION, CHUNKS, deadline=time.monotonic() - 0.001)
    assert err.value.stage == "encode" and enc.n_encoded == 0

    class SlowEncoder(FakeEncoder):
        def encode(self, texts, progress=False):
            time.sleep(0.3)
            return super().encode(texts, progress)

    slow = _load(trained["anchored"][1], tiny_generator, encoder=SlowEncoder())
    with pytest.raises(DeadlineExceeded, match="before the warmup stage"):
        slow.select(QUESTION, CHUNKS, deadline=time.monotonic() + 0.1)
    bm25 = _load(trained["bm25"][1], tiny_generator)
    with pytest.raises(DeadlineExceeded, match="before the score stage"):
        bm25.select(QUESTION, CHUNKS, deadline=time.monotonic() - 0.001)
    assert bm25.select(QUESTION, CHUNKS, deadline=time.monotonic() + 60).selected


def test_import_chunksel_stays_light():
    code = ("import sys, chunksel; assert 'torch' not in sys.modules; "
            "assert 'chunksel.pipeline.chunk_selector' not in sys.modules; "
            "from chunksel import ChunkSelector; assert 'torch' not in sys.modules; print(ChunkSelector.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ChunkSelector"


def test_the_application_path_keeps_no_letor_memo(trained, tiny_generator):
    from chunksel.selectors import letor

    letor._MEMO.clear()
    _load(trained["lambdamart"][1], tiny_generator).select(QUESTION, CHUNKS + ["a fresh chunk"], k=1)
    assert not letor._MEMO and letor.MEMO_ENABLED.get()


def test_concurrent_selects_with_one_generator_agree_with_sequential_ones(trained, tiny_generator):
    """The warm-up hooks live on the shared model: concurrent passes must not mix."""
    from concurrent.futures import ThreadPoolExecutor

    cs = _load(trained["prototype"][1], tiny_generator)
    qs = [f"what is the {w} answer, please?" * (1 + i % 3) for i, w in enumerate(
        ["alpha", "bravo", "golf", "echo", "delta", "hotel", "foxtrot", "charlie"])]
    want = [cs.select(q, CHUNKS, k=4).all_scores for q in qs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda q: cs.select(q, CHUNKS, k=4).all_scores, qs * 2))
    for w, g in zip(want * 2, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
