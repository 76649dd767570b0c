"""The LLM label jobs on Ray: the judge's ``semantic`` labels and the utility teacher's
``utility`` labels.

Both plan shards over the questions (or pairs) the response cache lacks, stage each
pending shard's prompts or texts in an input file (the driver keeps only the plan), run
the shards on an actor pool (:func:`chunksel.bulk.jobs.run_manifest`), fold the workers' answers
into the driver's response cache, and then run the ordinary single-process labeller,
which finds every call cached:

- :func:`judge_instances`: workers write one response-cache record per pair into
  ``shard-<s>.jsonl``; the driver appends them to the judge's cache, then
  :func:`chunksel.labels.judge.label_instances` labels.
- :func:`utility_instances`: a worker runs :meth:`~chunksel.llm.listwise.ListwiseLLM.select`
  over its shard's questions with its own response-cache root ``cache-<s>/`` inside the
  job folder (the teacher's calls span several namespaces: generations and keep/skip
  choices); the driver merges every finished shard's cache files into its own, then
  :func:`chunksel.labels.utility.label_instances` labels. A question the worker could
  not answer (its backend failed after retries) has no cached calls: the driver's replay
  fails open on it too, with the reason, and the labels mark it unparsed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chunksel.bulk.jobs import JobReport, check_job_sizes, chunked, run_manifest
from chunksel.bulk.manifest import ShardManifest, read_done, shard_name, stage_input
from chunksel.bulk.workers import ShardWorker
from chunksel.config import cache_root, config_hash
from chunksel.errors import ConfigError, DataError
from chunksel.types import Instance


class _CachedOnly:
    """The judge as the response cache knows it (name, model id, settings), for reading
    the cache after a Ray job; asked to compute anything it raises."""

    def __init__(self, name: str, model_id: str, settings: dict[str, Any]) -> None:
        self.name, self.model_id, self._settings = name, model_id, settings

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def _missing(self, *_a: Any, **_k: Any) -> Any:
        raise DataError("a judged pair is missing from the response cache after the Ray job; "
                        "re-run the command")

    generate = choose_many = _missing


def _judge_identity(judge: str, judge_kwargs: dict[str, Any], cache: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(worker backend kwargs, namespace)`` of a judge without loading a local model."""
    from chunksel.llm.backends import get_backend

    kwargs = dict(judge_kwargs)
    if judge == "local":
        from chunksel.llm import fetch
        from chunksel.llm.models import load_tokenizer

        mcache = Path(kwargs.get("cache") or cache)
        path = kwargs.get("model_path")
        path = Path(path).expanduser().resolve() if path else fetch.smollm2_gguf(mcache)
        kwargs.update(model_path=str(path), cache=str(mcache))
        _, model_id = load_tokenizer(path, cache=mcache)
        return kwargs, {"name": "local", "model_id": model_id, "settings": {}}
    backend = get_backend(judge, **kwargs)
    return kwargs, {"name": backend.name, "model_id": backend.model_id, "settings": backend.settings()}


def judge_instances(
    instances: Sequence[Instance],
    judge: str = "local",
    judge_kwargs: dict[str, Any] | None = None,
    *,
    workers: int = 2,
    address: str | None = None,
    batch_size: int = 8,
    shard_size: int = 64,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
    fault: dict | None = None,
    max_retries: int = 3,
    cpus_per_worker: float = 1,
) -> tuple[Any, JobReport]:
    """Judge every candidate of ``instances`` on Ray (the paper's prompt), then label them.

    The pairs the judge's response cache lacks are judged by workers (each loads the
    judge once), ``batch_size`` pairs per call as :func:`label_instances` sends them;
    their records are appended to the response cache, and :func:`label_instances` then
    labels the candidates from the cache alone.

    Args:
        instances: the instances (updated in place, as by :func:`label_instances`).
        judge: backend name (``local`` or ``openai``).
        judge_kwargs: its arguments (``model_path`` and ``cache``, the model's cache
            root, for local; ``base_url`` / ``model`` for openai); the backend's
            ``batch_size`` defaults to ``batch_size``.
        workers, address, progress, fault, max_retries, cpus_per_worker: as for
            :func:`encode_corpus`.
        batch_size: pairs per backend call.
        shard_size: pairs per shard, rounded up to a multiple of ``batch_size``.

    Returns:
        ``(JudgeResult, report)``.
    """
    from chunksel.bulk.workers import JudgeWorker
    from chunksel.labels.judge import (
        JUDGE_DEFAULT,
        JUDGE_OPTIONS,
        JUDGE_PROMPT,
        judge_prompt,
        label_instances,
        pair_id,
    )
    from chunksel.llm.backends import Choice
    from chunksel.llm.cache import ResponseCache
    from chunksel.llm.cache import prompt_hash as llm_prompt_hash

    check_job_sizes(workers, shard_size)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    shard_size = -(-shard_size // batch_size) * batch_size
    root = cache_root(cache)
    kwargs = dict(judge_kwargs or {})
    if judge == "local":
        kwargs.setdefault("batch_size", batch_size)
    kwargs, ns = _judge_identity(judge, kwargs, root)
    names = _CachedOnly(ns["name"], ns["model_id"], ns["settings"])
    settings = {"options": list(JUDGE_OPTIONS), "default": JUDGE_DEFAULT}
    prompts: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for inst in instances:
        for c in inst.candidates:
            i = pair_id(inst, c)
            if i not in prompts:
                prompts[i] = judge_prompt(inst.question.text, c.text)
                hashes[i] = llm_prompt_hash(prompts[i])
    with ResponseCache.for_backend(names, task="choose", template=JUDGE_PROMPT, settings=settings,
                                   cache=root, fsync=False) as rc:
        misses = [i for i in hashes if rc.get(i, hashes[i]) is None]
        cache_file = rc.path
    identity = {"cache": str(cache_file.relative_to(root)), "batch_size": batch_size,
                "shard_size": shard_size, "pairs": config_hash([[i, hashes[i]] for i in hashes], 16)}
    key = ShardManifest.job_key("judge", identity)
    job = root / "bulk" / "judge" / key
    plan = None
    if not (job / "manifest.json").is_file():
        plan = [{"ids": list(g), "hashes": [hashes[i] for i in g]} for g in chunked(misses, shard_size)]
    manifest = ShardManifest.open(job, "judge", identity, plan=plan)
    for s in manifest.pending():  # prompts to input files; the driver keeps ids and hashes
        shard = manifest.shards[s]
        manifest.shards[s] = stage_input(job, s, {**shard, "prompts": [prompts[i] for i in shard["ids"]]},
                                         keep=("ids", "hashes"))
    del prompts
    wkw = {"backend": judge, "backend_kwargs": kwargs, "options": list(JUDGE_OPTIONS),
           "default": JUDGE_DEFAULT, "batch_size": batch_size}
    try:
        report = run_manifest(manifest, JudgeWorker, wkw, workers, address, progress, fault, max_retries,
                              cpus_per_worker)
    finally:  # hand every finished shard to the response cache, even after a failure
        with ResponseCache.for_backend(names, task="choose", template=JUDGE_PROMPT, settings=settings,
                                       cache=root) as rc:
            for s in manifest.done():
                info = read_done(job, s)
                if info.get("model_id") not in (None, ns["model_id"]) or info.get("settings", {}) != ns["settings"]:
                    raise DataError(f"shard {s} of {job} was judged by {info.get('model_id')!r} "
                                    f"with settings {info.get('settings')}, not {ns['model_id']!r}")
                for line in (job / f"shard-{shard_name(s)}.jsonl").read_text(encoding="utf-8").splitlines():
                    rec = json.loads(line)
                    if rc.get(rec["id"], rec["prompt"]) is None:
                        rc.put(rec["id"], rec["prompt"], Choice.from_dict(rec["result"]))
    result = label_instances(instances, names, batch_size=batch_size, cache=root, progress=False)
    return result, report


# ----------------------------------------------------------------------- utility teacher
class _ReplayOnly(_CachedOnly):
    """The teacher as the cache knows it; a call the Ray job left uncached is a failed
    call (:class:`~chunksel.llm.backends.BackendError`), so that question fails open."""

    def _missing(self, *_a: Any, **_k: Any) -> Any:
        from chunksel.llm.backends import BackendError

        raise BackendError("the Ray worker got no answer for this question (see the job log)")

    generate = choose_many = _missing


class UtilityWorker(ShardWorker):
    """The utility teacher: payload ``{"ids", "questions"}`` (each question
    ``[id, text, passages, passage ids, titles]``) -> the calls in ``<job>/cache-<s>/``
    (a response-cache root) and ``<job>/shard-<s>.json`` (k and fallback per question).

    Args:
        backend, backend_kwargs: as for :class:`~chunksel.bulk.workers.JudgeWorker`.
        settings: :class:`~chunksel.llm.listwise.ListwiseLLM` arguments.
    """

    kind = "utility"

    def __init__(self, job: str, backend: str, backend_kwargs: dict[str, Any], settings: dict[str, Any],
                 **kw: Any) -> None:
        self.backend_name, self.backend_kwargs, self.settings = backend, dict(backend_kwargs), dict(settings)
        super().__init__(job, **kw)

    def load(self) -> None:
        from chunksel.llm.backends import get_backend

        self.backend = get_backend(self.backend_name, **self.backend_kwargs)
        self.model_id = self.backend.model_id

    def compute(self, shard: int, payload: dict[str, Any]) -> list[Any]:
        from chunksel.llm.listwise import ListwiseLLM

        llm = ListwiseLLM(self.backend, cache=self.job / f"cache-{shard_name(shard)}", fsync=False, **self.settings)
        try:
            return llm.run_many("utility", [tuple(q) for q in payload["questions"]])
        finally:
            llm.close()

    def write(self, shard: int, payload: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        from chunksel.bulk.manifest import atomic_write_text

        out = {r.question_id: {"k": r.k, "fallback": r.fallback, "calls": r.calls} for r in results}
        atomic_write_text(self.job / f"shard-{shard_name(shard)}.json", json.dumps(out))
        return {"rows": len(results), "model_id": self.model_id, "settings": self.backend.settings(),
                "fallbacks": sum(r.fallback is not None for r in results)}


def _merge_cache(src: Path, root: Path) -> int:
    """Append the records of every response-cache file under ``src`` to the file of the
    same namespace under ``root`` (records already there are kept); returns how many."""
    from chunksel.llm.backends import Choice, Generation
    from chunksel.llm.cache import ResponseCache

    added = 0
    for path in sorted(src.rglob("*.jsonl")):
        target = root / path.relative_to(src)
        meta = path.with_name(path.stem + ".meta.json")
        with ResponseCache(path, fsync=False) as shard_cache, ResponseCache(target) as rc:
            for item, rec in shard_cache.records().items():
                if rc.get(item, rec["prompt"]) is None:
                    kind = Choice if rec["kind"] == "choice" else Generation
                    rc.put(item, rec["prompt"], kind.from_dict(rec["result"]))
                    added += 1
        tmeta = target.with_name(meta.name)
        if meta.is_file() and not tmeta.is_file():
            tmeta.write_text(meta.read_text())
    return added


def utility_instances(
    instances: Sequence[Instance],
    teacher: str = "local",
    teacher_kwargs: dict[str, Any] | None = None,
    *,
    workers: int = 2,
    address: str | None = None,
    shard_size: int = 16,
    read: str | None = None,
    window: int = 20,
    carry: int = 10,
    max_new_tokens: int = 128,
    max_passage_words: int | None = 120,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
    fault: dict | None = None,
    max_retries: int = 3,
    cpus_per_worker: float = 1,
) -> tuple[Any, JobReport]:
    """The utility teacher's labels with the questions spread over Ray workers.

    Args:
        instances: the instances (labelled in place, as by
            :func:`chunksel.labels.utility.label_instances`).
        teacher, teacher_kwargs: backend name and arguments, as for :func:`judge_instances`.
        shard_size: questions per shard.
        read, window, carry, max_new_tokens, max_passage_words: the teacher's settings
            (:class:`~chunksel.llm.listwise.ListwiseLLM`); ``read=None``: ``logprobs``
            for the local backend, else ``text``.
        workers, address, cache, progress, fault, max_retries, cpus_per_worker: as for
            :func:`judge_instances`.

    Returns:
        ``(UtilityLabels, report)``.
    """
    from chunksel.labels.utility import label_instances

    check_job_sizes(workers, shard_size)
    root = cache_root(cache)
    kwargs, ns = _judge_identity(teacher, dict(teacher_kwargs or {}), root)
    read = read or ("logprobs" if ns["name"] == "local" else "text")
    settings = {"read": read, "window": window, "carry": carry, "max_new_tokens": max_new_tokens,
                "max_passage_words": max_passage_words}
    questions = {inst.id: [inst.id, inst.question.text, [c.text for c in inst.candidates],
                           [c.id for c in inst.candidates], [c.title for c in inst.candidates]]
                 for inst in instances}
    identity = {"teacher": ns, "settings": settings, "shard_size": shard_size,
                "questions": config_hash([questions[q] for q in questions], 16)}
    job = root / "bulk" / "utility" / ShardManifest.job_key("utility", identity)
    plan = None
    if not (job / "manifest.json").is_file():
        plan = [{"ids": list(g)} for g in chunked(list(questions), shard_size)]
    manifest = ShardManifest.open(job, "utility", identity, plan=plan)
    for s in manifest.pending():  # question texts to input files; the driver keeps the ids
        manifest.shards[s] = stage_input(job, s, {"ids": manifest.shards[s]["ids"],
                                                  "questions": [questions[q] for q in manifest.shards[s]["ids"]]},
                                         keep=("ids",))
    del questions
    wkw = {"backend": teacher, "backend_kwargs": kwargs, "settings": settings}
    try:
        report = run_manifest(manifest, UtilityWorker, wkw, workers, address, progress, fault, max_retries,
                              cpus_per_worker)
    finally:  # every finished shard's calls into the driver's cache, even after a failure
        for s in manifest.done():
            info = read_done(job, s)
            if info.get("model_id") not in (None, ns["model_id"]) or info.get("settings", {}) != ns["settings"]:
                raise DataError(f"shard {s} of {job} was run by {info.get('model_id')!r} "
                                f"with settings {info.get('settings')}, not {ns['model_id']!r}")
            folder = job / f"cache-{shard_name(s)}"
            if folder.is_dir():
                _merge_cache(folder, root)
    replay = _ReplayOnly(ns["name"], ns["model_id"], ns["settings"])
    result = label_instances(instances, replay, cache=root, progress=False, **settings)
    return result, report


__all__ = ["UtilityWorker", "judge_instances", "utility_instances"]
