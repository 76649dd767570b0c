"""The bulk jobs on Ray: corpus encoding (embeddings, and chunk token vectors), question
features, LLM-judge labels.

Each driver plans shards over the work the caches do not hold yet, records the plan in
a :class:`~chunksel.bulk.manifest.ShardManifest`, runs the pending shards as a Ray Data
pipeline (:func:`chunksel.bulk.engine.run_shards`) and hands the shards to the cache the
single-process path reads:

- :func:`encode_corpus` writes ``shard_<s>.npy`` into the corpus's embedding cache folder
  (:func:`chunksel.retrieval.embeddings.embeddings_dir`), in the layout
  :func:`~chunksel.retrieval.embeddings.corpus_embeddings` reads with
  ``use_precomputed=False``; :func:`sharded_ivfpq` indexes those shards.
- :func:`encode_tokens` writes the chunks' token vectors (int8 codes) into
  :func:`tokens_dir`, which :class:`~chunksel.retrieval.tokens.TokenShards` reads.
- :func:`extract_features` writes ``h-``/``r-`` shards into the generator's
  :class:`~chunksel.features.store.FeatureStore` folder and registers them in its index.
- the LLM label jobs (the judge, the utility teacher) are in :mod:`chunksel.bulk.label_jobs`.

Shards are the single-process path's own units (4096 passages; 128 questions; pairs in
multiples of the backend batch size), computed by the same functions with the same batch
sizes, so the outputs are the same (see ``docs/distributed.md`` for what is compared
exactly and what to a float tolerance).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.bulk.engine import BulkJobError, run_shards
from chunksel.bulk.manifest import (
    ShardManifest,
    atomic_write_text,
    mark_done,
    new_run,
    read_log,
    shard_name,
    stage_input,
)
from chunksel.config import cache_root, config_hash
from chunksel.errors import ConfigError, DataError
from chunksel.types import Question


@dataclass
class JobReport:
    """What a bulk job did in this run.

    Attributes:
        kind: ``encode``, ``features`` or ``judge``.
        folder: the job's folder (manifest, done markers, log).
        shards: shards in the plan.
        computed: shards computed in this run.
        already_done: shards found finished before this run.
        rows: rows (passages, questions, pairs) computed in this run.
        seconds: wall time of the Ray pipeline in this run (actor start and model loads
            included; 0 when nothing was pending).
        workers: actors in the pool.
        summaries: the workers' per-shard summaries of this run.
    """

    kind: str
    folder: Path
    shards: int
    computed: int = 0
    already_done: int = 0
    rows: int = 0
    seconds: float = 0.0
    workers: int = 0
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "folder": str(self.folder), "shards": self.shards,
                "computed": self.computed, "already_done": self.already_done, "rows": self.rows,
                "seconds": round(self.seconds, 3), "workers": self.workers}


def run_manifest(manifest: ShardManifest, worker_cls: type, worker_kwargs: dict[str, Any], workers: int,
                 address: str | None, progress: bool, fault: dict | None, max_retries: int,
                 cpus_per_worker: float) -> JobReport:
    """Run the manifest's pending shards on ``workers`` actors of ``worker_cls``; the job's report."""
    pending = manifest.pending()
    report = JobReport(manifest.kind, manifest.folder, len(manifest), workers=workers,
                       already_done=len(manifest) - len(pending))
    if not pending:
        return report
    t0, since = time.perf_counter(), time.time()
    run = new_run(manifest.folder)
    kwargs = {"job": str(manifest.folder), "fault": fault, "run": run, **worker_kwargs}
    try:
        for summary in run_shards(worker_cls, kwargs, pending, [manifest.shards[s] for s in pending],
                                  workers=workers, address=address, progress=progress,
                                  max_retries=max_retries, cpus_per_worker=cpus_per_worker):
            report.summaries.append(summary)
            if not summary.get("skipped"):
                report.computed += 1
                report.rows += int(summary.get("rows", 0))
    except BulkJobError:
        # Ray Data stops a failed job gracefully: the other workers finish the shard in
        # hand, and one may already hold the next. End this run's token first (a shard
        # started from now on is abandoned), then wait for those started, so that a re-run
        # never computes a shard still in flight.
        new_run(manifest.folder)
        wait_for_shards_in_flight(manifest.folder, since)
        raise
    report.seconds = time.perf_counter() - t0
    return report


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process
        return True
    return True


def wait_for_shards_in_flight(folder: Path, since: float, timeout: float = 600.0) -> list[int]:
    """Block until every shard started in ``folder`` since ``since`` has ended.

    A shard has ended when the log shows its ``done``, ``fail`` or ``skip`` after its
    ``start``, or when its worker process (on this host) no longer exists.

    Returns:
        the shards still in flight when ``timeout`` seconds ran out (normally none).
    """
    import socket

    host = socket.gethostname()
    deadline = time.monotonic() + timeout
    while True:
        flying: dict[tuple[int, int], str] = {}
        for ev in read_log(folder):
            if ev.get("time", 0) < since or ev.get("shard", -1) < 0:
                continue
            key = (int(ev["shard"]), int(ev["pid"]))
            if ev["event"] == "start":
                flying[key] = ev.get("host", "")
            else:
                flying.pop(key, None)
        flying = {k: h for k, h in flying.items() if h != host or _alive(k[1])}
        if not flying or time.monotonic() > deadline:
            return sorted({s for s, _ in flying})
        time.sleep(0.25)


def chunked(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """``items`` cut into consecutive runs of at most ``size``."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def check_job_sizes(workers: int, shard_size: int) -> None:
    """Refuse fewer than one worker or a shard size below one."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if shard_size < 1:
        raise ConfigError(f"shard size must be >= 1, got {shard_size}")


# --------------------------------------------------------------------- encoding
def encode_corpus(
    corpus: Any,
    encoder: Any,
    *,
    workers: int = 2,
    address: str | None = None,
    shard_rows: int | None = None,
    progress: bool = True,
    fault: dict | None = None,
    max_retries: int = 3,
    cpus_per_worker: float = 1,
) -> JobReport:
    """Encode every passage of ``corpus`` on Ray into its embedding cache shards.

    Args:
        corpus: a :class:`~chunksel.data.corpus.Corpus`.
        encoder: the :class:`~chunksel.retrieval.encoder.Encoder` (its settings go to the
            workers; it loads no model here).
        workers: actors (each loads MiniLM once).
        address: an existing Ray cluster (default: a local instance).
        shard_rows: passages per shard (default the cache's 4096).
        progress: Ray Data progress bars.
        fault: a fault drill (:class:`~chunksel.bulk.workers.Fault`).
        max_retries: restarts of a dead worker.
        cpus_per_worker: CPUs (and torch threads) per actor.

    Returns:
        the run's :class:`JobReport`; read the embeddings with
        ``corpus_embeddings(corpus, encoder, use_precomputed=False, shard_rows=...)`` or
        index them with :func:`sharded_ivfpq`.
    """
    from chunksel.bulk.workers import EncodeWorker
    from chunksel.retrieval.embeddings import SHARD_ROWS, corpus_key, embeddings_dir

    shard_rows = shard_rows or SHARD_ROWS
    check_job_sizes(workers, shard_rows)
    folder = embeddings_dir(corpus, encoder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(corpus)
    meta = {"n_rows": n, "shard_rows": shard_rows, "model_id": encoder.model_id}
    meta_file = folder / "meta.json"
    if meta_file.is_file():
        old = json.loads(meta_file.read_text())
        if (old.get("n_rows"), old.get("shard_rows")) != (n, shard_rows):
            raise ConfigError(
                f"{folder} holds embedding shards of {old.get('shard_rows')} rows over "
                f"{old.get('n_rows')} passages; re-run with shard_rows={old.get('shard_rows')} "
                f"or delete {folder}"
            )
    atomic_write_text(meta_file, json.dumps(meta, indent=2))
    identity = {"corpus": corpus_key(corpus), "n_rows": n, "shard_rows": shard_rows,
                "model_id": encoder.model_id, "batch_size": encoder.batch_size,
                "max_seq_length": encoder.max_seq_length}
    bounds = [(lo, min(n, lo + shard_rows)) for lo in range(0, n, shard_rows)]
    job = folder / "ray-job"
    manifest = ShardManifest.open(job, "encode", identity,
                                  plan=[{"lo": lo, "hi": hi} for lo, hi in bounds])
    # a shard the single-process path already wrote is finished too
    for s in manifest.pending():
        lo, hi = bounds[s]
        file = folder / f"shard_{shard_name(s)}.npy"
        if file.is_file() and np.load(file, mmap_mode="r").shape[0] == hi - lo:
            mark_done(job, s, {"rows": hi - lo, "found": True})
    # each pending shard's texts go to its input file, one shard at a time; the driver
    # keeps the row ranges
    for s in manifest.pending():
        lo, hi = bounds[s]
        manifest.shards[s] = stage_input(job, s, {"lo": lo, "hi": hi,
                                                  "texts": [corpus.encoder_input(r) for r in range(lo, hi)]},
                                         keep=("lo", "hi"))
    kwargs = {"out": str(folder), "model_dir": str(encoder.model_dir), "device": encoder.device,
              "batch_size": encoder.batch_size, "max_seq_length": encoder.max_seq_length}
    return run_manifest(manifest, EncodeWorker, kwargs, workers, address, progress, fault, max_retries,
                        cpus_per_worker)


def tokens_dir(corpus: Any, encoder: Any) -> Path:
    """Where :func:`encode_tokens` keeps the corpus's chunk token vectors."""
    from chunksel.retrieval.embeddings import embeddings_dir

    return embeddings_dir(corpus, encoder) / "tokens"


def encode_tokens(
    corpus: Any,
    encoder: Any,
    ids: Sequence[str] | None = None,
    *,
    workers: int = 2,
    address: str | None = None,
    shard_rows: int = 1024,
    progress: bool = True,
    fault: dict | None = None,
    max_retries: int = 3,
    cpus_per_worker: float = 1,
) -> JobReport:
    """Store the token vectors of ``corpus``'s passages (all, or the passages ``ids``) as
    int8 codes, on Ray, in shards that resume: each chunk is encoded once.

    A passage's stored size is 384 bytes a token plus an 8-byte offset (about 50 KB for a
    130-token Wikipedia passage), so the usual set is the passages the retriever returns
    for a question set (its candidates), not the whole corpus.

    Args:
        corpus: a :class:`~chunksel.data.corpus.Corpus`.
        encoder: the :class:`~chunksel.retrieval.encoder.Encoder` (settings only).
        ids: the passages to store (default every passage); an unknown id is a DataError.
        workers, address, progress, fault, max_retries, cpus_per_worker: as for
            :func:`encode_corpus`.
        shard_rows: passages per shard.

    Returns:
        the run's :class:`JobReport`; read the vectors with
        ``TokenShards(tokens_dir(corpus, encoder))``.
    """
    from chunksel.bulk.workers import TokenWorker

    check_job_sizes(workers, shard_rows)
    row_of = corpus.row_of
    if ids is None:
        rows = list(range(len(corpus)))
    else:
        missing = [i for i in ids if i not in row_of]
        if missing:
            raise DataError(f"{len(missing)} passage id(s) are not in corpus {corpus.name!r} (e.g. {missing[0]!r})")
        rows = sorted({row_of[i] for i in ids})
    if not rows:
        raise DataError("encode_tokens: no passages to encode")
    folder = tokens_dir(corpus, encoder)
    identity = {"corpus": corpus.name, "n_rows": len(corpus), "rows": config_hash({"rows": rows}),
                "shard_rows": shard_rows, "model_id": encoder.model_id, "batch_size": encoder.batch_size,
                "max_seq_length": encoder.max_seq_length}
    # one job per request; a passage an earlier request stored is not encoded again
    prefix = ShardManifest.job_key("tokens", identity)[:10]
    job = folder / f"job-{prefix}"
    if not (job / "manifest.json").is_file():
        stored = {pid for f in folder.glob("tokens_*.ids.json") for pid in json.loads(f.read_text())}
        rows = [r for r in rows if corpus.passage(r).id not in stored]
    parts = [rows[lo:lo + shard_rows] for lo in range(0, len(rows), shard_rows)]
    manifest = ShardManifest.open(job, "tokens", identity, plan=[{"n": len(p)} for p in parts])
    for s in manifest.pending():
        part = parts[s]
        manifest.shards[s] = stage_input(job, s, {
            "n": len(part), "ids": [corpus.passage(r).id for r in part],
            "texts": [corpus.encoder_input(r) for r in part]}, keep=("n",))
    kwargs = {"out": str(folder), "prefix": prefix, "model_dir": str(encoder.model_dir), "device": encoder.device,
              "batch_size": encoder.batch_size, "max_seq_length": encoder.max_seq_length}
    return run_manifest(manifest, TokenWorker, kwargs, workers, address, progress, fault, max_retries,
                        cpus_per_worker)


def embedding_shard_files(corpus: Any, encoder: Any) -> list[Path]:
    """The finished embedding shards of ``corpus`` (all of them, in row order).

    Raises:
        DataError: a shard is missing (run :func:`encode_corpus` first).
    """
    from chunksel.retrieval.embeddings import embeddings_dir

    folder = embeddings_dir(corpus, encoder)
    meta_file = folder / "meta.json"
    if not meta_file.is_file():
        raise DataError(f"no embedding shards for corpus {corpus.name!r} in {folder}: encode it first")
    meta = json.loads(meta_file.read_text())
    n_shards = -(-int(meta["n_rows"]) // int(meta["shard_rows"]))
    files = [folder / f"shard_{shard_name(s)}.npy" for s in range(n_shards)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DataError(f"{len(missing)} embedding shard(s) missing in {folder} (e.g. {missing[0]}): "
                        "re-run the encoding job")
    return files


def sharded_ivfpq(corpus: Any, encoder: Any, progress: bool = True, save: bool = True,
                  **settings: Any) -> Any:
    """The IVF-PQ index of ``corpus`` built shard by shard from its embedding shards, saved
    where :func:`chunksel.retrieval.index.cached_index` looks for it (so ``build --index
    ivfpq`` reuses it)."""
    from chunksel.bulk.ivfpq import build_ivfpq_from_shards
    from chunksel.retrieval.embeddings import corpus_key
    from chunksel.retrieval.index import index_dir, requested_settings

    index = build_ivfpq_from_shards(embedding_shard_files(corpus, encoder), progress=progress, **settings)
    if save:
        folder = index_dir(corpus_key(corpus), encoder.model_id, "ivfpq",
                           requested_settings("ivfpq", **settings))
        folder.parent.mkdir(parents=True, exist_ok=True)
        index.save(folder)
    return index


# --------------------------------------------------------------------- features
def extract_features(
    questions: Sequence[Question],
    generator: str | os.PathLike | None = None,
    *,
    workers: int = 2,
    address: str | None = None,
    batch_size: int = 32,
    shard_size: int = 128,
    max_tokens: int | None = None,
    cache: str | os.PathLike | None = None,
    model_cache: str | os.PathLike | None = None,
    progress: bool = True,
    fault: dict | None = None,
    max_retries: int = 3,
    cpus_per_worker: float = 1,
) -> tuple[Any, JobReport]:
    """Extract ``h`` and ``r`` of the questions the generator's feature store lacks, on Ray.

    The driver loads only the tokenizer (for prompt hashes); each worker loads the
    generator once. Questions are taken as :meth:`FeatureStore.extract` takes them (first
    of each id; missing or stale rows), in shards of ``shard_size``.

    Args:
        questions: the questions.
        generator: a model folder or ``.gguf`` file (default SmolLM2-135M-Instruct).
        workers, address, progress, fault, max_retries, cpus_per_worker: as for
            :func:`encode_corpus`.
        batch_size, shard_size, max_tokens: as for :meth:`FeatureStore.extract`.
        cache: cache root of the feature store (default ``$CHUNKSEL_CACHE``).
        model_cache: cache root holding the generator (default ``cache``).

    Returns:
        ``(store, report)``: the :class:`FeatureStore` with the new shards registered.
    """
    from chunksel.bulk.workers import FeatureWorker
    from chunksel.features.store import FeatureStore
    from chunksel.llm import fetch
    from chunksel.llm.models import load_tokenizer
    from chunksel.llm.prompts import MAX_PROMPT_TOKENS, prompt_hash, question_prompt, template_hash

    check_job_sizes(workers, shard_size)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    root = cache_root(cache)
    mroot = cache_root(model_cache) if model_cache else root
    gen_path = Path(generator).expanduser().resolve() if generator else fetch.smollm2_gguf(mroot)
    tokenizer, gen_id = load_tokenizer(gen_path, cache=mroot)
    limit = max_tokens or MAX_PROMPT_TOKENS
    store = FeatureStore.open(gen_id, tokenizer, cache=root, max_tokens=limit)
    by_id: dict[str, Question] = {}
    for q in questions:
        by_id.setdefault(q.id, q)
    hashes = {qid: prompt_hash(question_prompt(tokenizer, q.text, limit).ids) for qid, q in by_id.items()}
    identity = {"generator_id": gen_id, "template": template_hash(tokenizer, limit),
                "max_tokens": limit, "batch_size": batch_size, "shard_size": shard_size,
                "questions": config_hash([[q, hashes[q]] for q in by_id], 16)}
    key = ShardManifest.job_key("features", identity)
    job = store.root / "jobs" / key
    plan = None
    if not (job / "manifest.json").is_file():
        todo = [q for q in by_id if q not in store or store.prompt_hash_of(q) != hashes[q]]
        plan = [{"ids": list(g), "hashes": [hashes[q] for q in g]} for g in chunked(todo, shard_size)]
    manifest = ShardManifest.open(job, "features", identity, plan=plan)
    prefix = f"j{key[:10]}"
    for s in manifest.pending():  # texts to input files; the driver keeps ids and hashes
        shard = manifest.shards[s]
        manifest.shards[s] = stage_input(job, s, {**shard, "texts": [by_id[q].text for q in shard["ids"]]},
                                         keep=("ids", "hashes"))
    kwargs = {"store": str(store.root), "prefix": prefix, "generator": str(gen_path),
              "cache": str(mroot), "batch_size": batch_size, "max_tokens": limit}
    try:
        report = run_manifest(manifest, FeatureWorker, kwargs, workers, address, progress, fault, max_retries,
                              cpus_per_worker)
    finally:
        for s in manifest.done():  # register finished shards, in plan order, even after a failure
            store.register(f"{prefix}-{shard_name(s)}", manifest.shards[s]["ids"], manifest.shards[s]["hashes"])
    return store, report


__all__ = ["JobReport", "check_job_sizes", "chunked", "embedding_shard_files", "encode_corpus", "extract_features",
           "run_manifest", "sharded_ivfpq"]
