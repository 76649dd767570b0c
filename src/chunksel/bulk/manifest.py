"""Shard manifests: which shards a bulk job has, which are finished, and who did what.

A bulk job (corpus encoding, question features, LLM labels) splits its work into shards
planned once, up front, and written to ``manifest.json`` in the job's folder::

    manifest.json     {"format", "kind", "identity", "key", "shards": [payload, ...]}
    done/00003.json   written by the worker after shard 3's outputs are in place
    log.jsonl         one line per event: {"event": "start"|"done"|"skip"|"fail"|"abandon",
                      "shard", "pid", "host", "time", "seconds"}
    run               the token of the run that may compute shards now (see below)
    inputs/00003.json the inputs of pending shard 3 (texts, prompts), written by the
                      driver before the run and read by the worker that computes it

A worker writes its shard's outputs atomically (temporary name, then ``os.replace``),
then the shard's ``done`` marker (atomically too). So a worker killed at any point
leaves either no marker -- the shard is pending and the next run redoes it -- or a
finished shard that no later run touches. ``identity`` holds every setting that defines
the outputs; opening a folder whose manifest names another job or other settings is
refused (:class:`~chunksel.errors.ConfigError`) rather than mixing two jobs' shards.

Each run of a job writes a fresh token to ``run`` and hands it to its workers; a worker
logs ``start`` and only then compares its token with the file's, and abandons the shard
(logs ``abandon``, computes nothing) when they differ. A run that fails overwrites the
token first and then waits for every shard started since it began: a straggler of the
failed run (Ray Data may have handed it the next shard already) either started before
that wait looked, and is waited for, or sees the stale token. So a re-run never computes a
shard alongside a worker of an earlier run.

Shard inputs travel as files, not through Ray: the driver writes each pending shard's
texts to ``inputs/`` one shard at a time (:func:`stage_input`) and keeps only the plan
(row ranges, ids, hashes) plus the file's name; the worker reads its shard's file
(:func:`load_input`) and deletes it once the shard is done. On a cluster the job folder
lives on storage every node sees, as the outputs already do.

The log is append-only (one ``write`` per line on an ``O_APPEND`` file), so several
workers may log to it at once; it is what tests and benchmarks read to count how often
each shard was computed and when.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chunksel.config import config_hash
from chunksel.data.files import atomic_write_text  # re-exported: the jobs import it from here
from chunksel.errors import ConfigError, DataError

FORMAT = 1
MANIFEST = "manifest.json"
DONE_DIR = "done"
LOG = "log.jsonl"
RUN = "run"
INPUTS = "inputs"


def new_run(folder: str | os.PathLike) -> str:
    """Start a run of the job in ``folder``: write a fresh token to its ``run`` file and
    return it (the token a run's workers must hold to compute a shard)."""
    import uuid

    token = uuid.uuid4().hex
    atomic_write_text(Path(folder) / RUN, token)
    return token


def current_run(folder: str | os.PathLike) -> str | None:
    """The token of the job's current run (``None`` before any run)."""
    path = Path(folder) / RUN
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def shard_name(shard: int) -> str:
    """``00003`` for shard 3."""
    return f"{shard:05d}"


def done_file(folder: str | os.PathLike, shard: int) -> Path:
    """The marker that says ``shard`` of the job in ``folder`` is finished."""
    return Path(folder) / DONE_DIR / f"{shard_name(shard)}.json"


def is_done(folder: str | os.PathLike, shard: int) -> bool:
    """Whether the marker of ``shard`` exists."""
    return done_file(folder, shard).is_file()


def mark_done(folder: str | os.PathLike, shard: int, info: dict[str, Any]) -> None:
    """Write the done marker of ``shard`` (call it after the shard's outputs are written)."""
    path = done_file(folder, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"shard": shard, **info}, default=str))


def read_done(folder: str | os.PathLike, shard: int) -> dict[str, Any]:
    """The info a worker stored in the done marker of ``shard``."""
    return json.loads(done_file(folder, shard).read_text())


def stage_input(folder: str | os.PathLike, shard: int, payload: dict[str, Any],
                keep: Sequence[str] = ()) -> dict[str, Any]:
    """Write ``payload`` to the shard's input file; return what the driver keeps: the
    ``keep`` keys of the payload and ``{"input": <file name relative to folder>}``."""
    rel = f"{INPUTS}/{shard_name(shard)}.json"
    path = Path(folder) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False))
    return {**{k: payload[k] for k in keep}, "input": rel}


def load_input(folder: str | os.PathLike, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with its input file's contents merged in (as is without ``input``).

    Raises:
        DataError: the input file is missing (the driver writes it before each run).
    """
    if "input" not in payload:
        return payload
    path = Path(folder) / payload["input"]
    if not path.is_file():
        raise DataError(f"shard input {path} is missing; re-run the command (the driver writes it)")
    return {**payload, **json.loads(path.read_text(encoding="utf-8"))}


def log_event(folder: str | os.PathLike, event: str, shard: int, **info: Any) -> None:
    """Append one event line to the job's log (one ``write`` on an ``O_APPEND`` file)."""
    rec = {"event": event, "shard": shard, "pid": os.getpid(), "host": socket.gethostname(),
           "time": time.time(), **info}
    line = (json.dumps(rec, default=str) + "\n").encode()
    fd = os.open(Path(folder) / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_log(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every complete event line of the job's log, oldest first."""
    path = Path(folder) / LOG
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line torn by a kill mid-write
            continue
    return out


class ShardManifest:
    """The plan and progress of one bulk job in ``folder``.

    Use :meth:`open`; the constructor only reads an existing manifest.

    Attributes:
        folder: the job's folder.
        kind: ``"encode"``, ``"features"`` or ``"judge"``.
        identity: the settings that define the job's outputs.
        key: a short hash of ``kind`` + ``identity``.
        shards: one payload dict per shard (what a worker needs to compute it).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        try:
            meta = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise DataError(f"no readable shard manifest at {path}: {err}") from err
        if meta.get("format") != FORMAT:
            raise DataError(f"{path}: manifest format {meta.get('format')!r}, expected {FORMAT}")
        self.kind: str = meta["kind"]
        self.identity: dict[str, Any] = meta["identity"]
        self.key: str = meta["key"]
        self.shards: list[dict[str, Any]] = meta["shards"]

    @staticmethod
    def job_key(kind: str, identity: dict[str, Any]) -> str:
        """The short hash that names a job (``kind`` + ``identity``)."""
        return config_hash({"kind": kind, "identity": identity})

    @classmethod
    def open(
        cls,
        folder: str | os.PathLike,
        kind: str,
        identity: dict[str, Any],
        plan: Sequence[dict[str, Any]] | None = None,
    ) -> ShardManifest:
        """The job in ``folder``: the existing manifest if it is this job's, else a new one.

        Args:
            folder: the job's folder (created if absent).
            kind: the job kind.
            identity: every setting that defines the outputs (JSON-ready).
            plan: the shard payloads, used only when no manifest exists yet (an existing
                job keeps the plan it was started with, so a re-run redoes the same
                shards); ``None`` with no manifest is an error.

        Raises:
            ConfigError: ``folder`` holds the manifest of another job or other settings.
        """
        folder = Path(folder)
        path = folder / MANIFEST
        key = cls.job_key(kind, identity)
        if path.is_file():
            found = cls(folder)
            if found.kind != kind or found.identity != identity:
                diff = sorted(
                    k for k in set(found.identity) | set(identity)
                    if found.identity.get(k) != identity.get(k)
                )
                what = f"kind {found.kind!r}" if found.kind != kind else "settings " + ", ".join(diff)
                raise ConfigError(
                    f"{folder} holds the shards of another {kind} job (its {what} differ from "
                    f"this run's): re-run with that job's settings, or delete {folder} to start over"
                )
            return found
        if plan is None:
            raise DataError(f"no shard manifest at {path} and no plan to start one")
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "kind": kind, "key": key, "identity": identity,
                "shards": list(plan), "created": time.time()}
        atomic_write_text(path, json.dumps(meta))
        return cls(folder)

    def __len__(self) -> int:
        return len(self.shards)

    def done(self) -> list[int]:
        """Finished shards, in plan order."""
        return [s for s in range(len(self.shards)) if is_done(self.folder, s)]

    def pending(self) -> list[int]:
        """Shards still to compute (no done marker), in plan order."""
        return [s for s in range(len(self.shards)) if not is_done(self.folder, s)]

    def events(self) -> list[dict[str, Any]]:
        """The job's log (see :func:`read_log`)."""
        return read_log(self.folder)

    def computed_counts(self) -> dict[int, int]:
        """How many times each shard was computed to the end (``done`` events)."""
        counts = dict.fromkeys(range(len(self.shards)), 0)
        for ev in self.events():
            if ev.get("event") == "done":
                counts[int(ev["shard"])] = counts.get(int(ev["shard"]), 0) + 1
        return counts


__all__ = [
    "ShardManifest", "atomic_write_text", "done_file", "is_done", "load_input", "log_event", "mark_done",
    "read_done", "read_log", "shard_name", "stage_input",
]
