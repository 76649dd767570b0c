"""The three bulk jobs on a local Ray instance against the single-process path.

Real models on a handful of items: all-MiniLM-L6-v2 (encoding), SmolLM2-135M-Instruct
(features, judge). Each job's outputs are compared with the single-process path's: a
shard is computed by the same function on the same inputs with the same batch sizes, and
every process runs one thread; features and judge labels match exactly, embeddings to
1e-6 (a float32 GEMM's last bits can differ between processes). Fault drills kill or fail
a worker midway; the manifest's log then shows that every shard was computed to the end
exactly once.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from chunksel.bulk.manifest import ShardManifest, read_log
from chunksel.types import Candidate, Instance, Question

pytestmark = pytest.mark.model

PASSAGES = [
    ("Hamlet", "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601."),
    ("Canberra", "Canberra is the capital city of Australia, founded following the federation of the colonies."),
    ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Mahalangur Himal."),
    ("Python", "Python is a high-level, general-purpose programming language emphasising readability."),
    ("Photosynthesis", "Photosynthesis is a process used by plants to convert light energy into chemical energy."),
    ("Danube", "The Danube is the second-longest river in Europe, after the Volga."),
    ("Marie Curie", "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity."),
    ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest in the Solar System."),
    ("Tokyo", "Tokyo is the capital of Japan and one of the most populous cities in the world."),
    ("Insulin", "Insulin is a peptide hormone produced by beta cells of the pancreatic islets."),
    ("Beethoven", "Ludwig van Beethoven was a German composer and pianist of the Classical period."),
    ("", "A short passage without a title."),
    ("Sahara", "The Sahara is a desert spanning North Africa; it is the largest hot desert in the world."),
]
QUESTIONS = ["Who wrote Hamlet?", "What is the capital of Australia?", "How tall is Mount Everest?",
             "Which river is the second longest in Europe?", "Who discovered radioactivity?",
             "What is the largest planet?", "What does insulin do?"]


def _corpus():
    from chunksel.data.corpus import Corpus

    return Corpus([f"t:{i}" for i in range(len(PASSAGES))], [t for _, t in PASSAGES],
                  [h for h, _ in PASSAGES], name="bulk-test")


def _done_once(folder) -> None:
    counts = ShardManifest(folder).computed_counts()
    assert counts and set(counts.values()) == {1}, counts


def test_encoding_matches_single_process_and_resumes(ray_session, one_thread, tmp_path, monkeypatch):
    from chunksel.bulk.engine import BulkJobError
    from chunksel.bulk.jobs import encode_corpus, sharded_ivfpq
    from chunksel.errors import ConfigError
    from chunksel.retrieval.embeddings import corpus_embeddings, embeddings_dir
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.index import build_index, cached_index

    corpus, encoder = _corpus(), Encoder(batch_size=4)
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "single"))
    ref = corpus_embeddings(corpus, encoder, use_precomputed=False, shard_rows=4, progress=False)

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "ray"))
    fault = {"shard": 2, "mode": "raise", "once": str(tmp_path / "fault-fired")}
    with pytest.raises(BulkJobError, match="shard 2 failed on purpose"):
        encode_corpus(corpus, encoder, workers=2, shard_rows=4, progress=False, fault=fault)
    job = embeddings_dir(corpus, encoder) / "ray-job"
    first = ShardManifest(job)
    assert 2 in first.pending() and len(first) == 4
    stamps = {s: os.stat(job.parent / f"shard_{s:05d}.npy").st_mtime_ns for s in first.done()}

    # the re-run may use another pool size: workers are not part of the job's identity
    report = encode_corpus(corpus, encoder, workers=1, shard_rows=4, progress=False, fault=fault)
    assert report.already_done == len(stamps) and report.computed == 4 - len(stamps)
    assert {s: os.stat(job.parent / f"shard_{s:05d}.npy").st_mtime_ns for s in stamps} == stamps
    _done_once(job)
    assert [e["shard"] for e in read_log(job) if e["event"] == "start"].count(2) == 2  # failed, then redone
    got = corpus_embeddings(corpus, encoder, use_precomputed=False, shard_rows=4, progress=False)
    # the same function on the same batches, one thread everywhere; the last bits of a float32
    # GEMM can still differ between processes (BLAS picks kernels by buffer alignment), which
    # moved 1e-7 of a unit-norm vector in 1 of about 6 runs on a loaded machine
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    assert encode_corpus(corpus, encoder, workers=2, shard_rows=4, progress=False).computed == 0
    with pytest.raises(ConfigError, match="shard_rows=4"):
        encode_corpus(corpus, encoder, workers=2, shard_rows=5, progress=False)

    # the index filled from the shards is the one cached_index would build from the array
    settings = dict(nlist=2, m=8, nbits=2, train_sample=10, nprobe=2, seed=0)
    index = sharded_ivfpq(corpus, encoder, progress=False, **settings)
    reuse = cached_index(got, "unused", encoder.model_id, kind="ivfpq", progress=False, **settings)
    assert reuse.ntotal == len(corpus)
    whole = build_index(got, kind="ivfpq", progress=False, **settings)
    q = encoder.encode(QUESTIONS, progress=False)
    np.testing.assert_array_equal(index.search(q, 5)[1], whole.search(q, 5)[1])


def test_features_match_single_process_with_a_killed_worker(ray_session, smollm2_gguf, tmp_path, monkeypatch):
    import torch

    from chunksel.bulk.jobs import extract_features
    from chunksel.features.store import FeatureStore
    from chunksel.llm.models import load_generator

    from .conftest import REAL_CACHE

    questions = [Question(id=f"q:{i}", text=t, answers=[]) for i, t in enumerate(QUESTIONS)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok, gen_id = load_generator(smollm2_gguf, cache=REAL_CACHE)
        single = FeatureStore.open(gen_id, tok, cache=tmp_path / "single")
        assert single.extract(questions, model, tok, batch_size=2, shard_size=2, progress=False) == 7
    finally:
        torch.set_num_threads(threads)
    ref = single.lookup([q.id for q in questions])

    fault = {"shard": 1, "mode": "exit", "once": str(tmp_path / "fault-fired")}
    store, report = extract_features(questions, smollm2_gguf, workers=1, batch_size=2, shard_size=2,
                                     cache=tmp_path / "ray", model_cache=REAL_CACHE, progress=False,
                                     fault=fault)
    assert (tmp_path / "fault-fired").is_file() and report.computed == 4 and report.rows == 7
    _done_once(report.folder)
    starts = [e["shard"] for e in read_log(report.folder) if e["event"] == "start"]
    assert starts.count(1) == 2  # killed after computing, restarted by Ray, redone once
    reopened = FeatureStore.open(gen_id, tok, cache=tmp_path / "ray")
    got = reopened.lookup([q.id for q in questions])
    for name in ("h", "r"):
        np.testing.assert_array_equal(got[name], ref[name])
    assert [reopened.prompt_hash_of(q.id) for q in questions] == [single.prompt_hash_of(q.id) for q in questions]
    # nothing left to do: no Ray job at all
    _, again = extract_features(questions, smollm2_gguf, workers=2, batch_size=2, shard_size=2,
                                cache=tmp_path / "ray", model_cache=REAL_CACHE, progress=False)
    assert again.computed == 0 and again.seconds == 0


def _instances():
    out = []
    for i, (q, rows) in enumerate([(QUESTIONS[0], [0, 3, 4]), (QUESTIONS[1], [1, 8, 12])]):
        cands = [Candidate(id=f"t:{r}", text=PASSAGES[r][1], title=PASSAGES[r][0], score=1.0 - j / 10,
                           rank=j) for j, r in enumerate(rows)]
        out.append(Instance(question=Question(id=f"q:{i}", text=q, answers=[]), candidates=cands))
    return out


def test_judge_labels_match_single_process(ray_session, smollm2_gguf, tmp_path):
    import torch

    from chunksel.bulk.label_jobs import judge_instances
    from chunksel.labels.judge import label_instances
    from chunksel.llm.local import LocalBackend
    from chunksel.llm.models import load_generator

    from .conftest import REAL_CACHE

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok, gen_id = load_generator(smollm2_gguf, cache=REAL_CACHE)
        backend = LocalBackend(model=model, tokenizer=tok, model_id=gen_id, batch_size=2)
        ref = label_instances(_instances(), backend, batch_size=2, cache=tmp_path / "single", progress=False)
    finally:
        torch.set_num_threads(threads)

    inst = _instances()
    res, report = judge_instances(inst, "local", {"model_path": str(smollm2_gguf), "cache": str(REAL_CACHE)},
                                  workers=2, batch_size=2, shard_size=2, cache=tmp_path / "ray", progress=False)
    assert report.computed == 3 and report.rows == 6
    _done_once(report.folder)
    assert res.judge == ref.judge and res.key == ref.key
    assert [(r.question_id, r.candidate_id, r.label, r.p_yes, r.parsed) for r in res.rows] == [
        (r.question_id, r.candidate_id, r.label, r.p_yes, r.parsed) for r in ref.rows]
    assert [c.labels["semantic"] for i in inst for c in i.candidates] == [r.label for r in ref.rows]
    # the ordinary path now finds every pair in the response cache
    again = label_instances(_instances(), backend, batch_size=2, cache=tmp_path / "ray", progress=False)
    assert again.stats["hits"] == 6 and again.stats["misses"] == 0


@pytest.mark.slow  # about 80 s; benchmarks/maxsim_cost.py runs the same job on real candidates
def test_token_job_stores_each_chunk_once(ray_session, one_thread, tmp_path, monkeypatch):
    """The shards' protocol (resume, fault drills) is run_manifest's, tested above."""
    from chunksel.bulk.jobs import encode_tokens, tokens_dir
    from chunksel.errors import DataError
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.tokens import TokenShards, chunk_codes
    from chunksel.selectors import make_selector

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    corpus, encoder = _corpus(), Encoder(batch_size=4)
    first = [f"t:{i}" for i in range(0, 9)]
    report = encode_tokens(corpus, encoder, first, workers=2, shard_rows=3, progress=False)
    assert report.computed == 3 and report.rows == 9
    folder = tokens_dir(corpus, encoder)
    _done_once(next(folder.glob("job-*")))
    shards = TokenShards(folder)
    ref = chunk_codes(encoder, [corpus.encoder_input(i) for i in range(len(corpus))])
    for pid, got in zip(first, shards.get(first), strict=True):
        want = ref[int(pid[2:])]
        # the same function on the same texts; a code may move by one where a float's last bit does
        assert got.shape == want.shape and np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert shards.bytes_per_chunk == (shards.n_tokens * 384 + 3 * 8 * 4) / 9  # codes + offsets, 3 shards
    # a wider request encodes only what is not stored yet; the same request again, nothing
    again = encode_tokens(corpus, encoder, [f"t:{i}" for i in range(len(corpus))], workers=1, shard_rows=3,
                          progress=False)
    assert again.rows == len(corpus) - 9
    assert encode_tokens(corpus, encoder, first, workers=1, shard_rows=3, progress=False).computed == 0
    assert len(TokenShards(folder)) == len(corpus)
    with pytest.raises(DataError, match="not in corpus"):
        encode_tokens(corpus, encoder, ["t:0", "nope"], workers=1, progress=False)

    # the maxsim selector reads them by passage id and encodes only the question
    inst = Instance(Question("q", QUESTIONS[0]), [Candidate(f"t:{i}", PASSAGES[i][1], title=PASSAGES[i][0], rank=i)
                                                  for i in range(5)])
    sel = make_selector("maxsim", tokens=str(folder), batch_size=4)
    assert np.allclose(sel.score([inst]), make_selector("maxsim", batch_size=4).score([inst]), atol=2e-3)
    assert sel.encoder().n_encoded == 1
