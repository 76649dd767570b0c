"""Resumable checkpoints of a cross-encoder fit (:meth:`~chunksel.selectors.crossencoder.
CrossEncoderSelector.fit`'s ``checkpoint_dir``): the trainer saves its state every
:data:`CHECKPOINT_STEPS` steps (and at each epoch's end when
the epoch is chosen on validation), and a fit of the same settings and
training rows resumes from the newest complete checkpoint (the uninterrupted fit's
result: the trainer restores its data order and RNG state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chunksel.data.files import atomic_write_text
from chunksel.errors import ConfigError, DataError

#: a fit given ``checkpoint_dir`` saves a resumable checkpoint every this many steps
#: (a few minutes of training on two CPU threads at batch 8 and 256 tokens)
CHECKPOINT_STEPS = 200


class FitCheckpoints:
    """The resumable checkpoints of one cross-encoder fit: the trainer's
    ``checkpoint-<step>`` folders, a stamp naming the settings and training rows they
    belong to, and the finished epochs' validation record with the best epoch's weights."""

    STAMP = "chunksel-fit.json"
    RECORD = "chunksel-epochs.json"
    BEST = "chunksel-best-epoch.pt"

    def __init__(self, folder: str | Path, selector: Any, data: Any) -> None:
        import hashlib
        import json
        import shutil
        import warnings

        self.folder = Path(folder)
        params = {k: v for k, v in selector.get_params().items() if k != "progress"}
        h = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode())
        rows = data.to_dict()
        for column in sorted(rows):
            h.update(json.dumps(rows[column]).encode())
        self.fit = h.hexdigest()[:20]
        stamp = self.folder / self.STAMP
        if self.folder.is_dir() and any(self.folder.iterdir()):
            if not stamp.is_file():
                raise ConfigError(f"crossencoder checkpoint_dir {self.folder} holds files that are not a "
                                  "cross-encoder fit's checkpoints: give a new or empty folder")
            try:
                old = json.loads(stamp.read_text())["fit"]
            except (OSError, ValueError, KeyError, TypeError):
                old = None
            if old != self.fit:
                warnings.warn(f"crossencoder: the checkpoints in {self.folder} belong to other settings or "
                              "training rows: deleted, training from the start", stacklevel=3)
                shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if not stamp.is_file():
            atomic_write_text(stamp, json.dumps({"fit": self.fit, "settings": params}, default=str))

    def latest(self) -> str | None:
        """The newest complete checkpoint (its trainer state is written last), or None."""
        import json

        found = []
        for d in self.folder.glob("checkpoint-*"):
            step = d.name.removeprefix("checkpoint-")
            if d.is_dir() and step.isdigit():
                found.append((int(step), d))
        for _, d in sorted(found, reverse=True):
            try:
                json.loads((d / "trainer_state.json").read_text())
            except (OSError, ValueError):
                continue  # killed while saving: the one before it
            if any((d / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
                return str(d)
        return None

    def restore(self, history: list[dict[str, float]], best: dict[str, Any]) -> None:
        """The finished epochs' validation record, and the best epoch's weights, if any."""
        import json

        import torch

        record = self.folder / self.RECORD
        if not record.is_file():
            return
        try:
            saved = json.loads(record.read_text())
            history[:] = saved["history"]
            best.update(rank1=float(saved["best_rank1"]), epoch=int(saved["best_epoch"]), state=None)
            if saved["has_state"]:
                best["state"] = torch.load(self.folder / self.BEST, map_location="cpu", weights_only=True)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise DataError(f"corrupt cross-encoder checkpoint {self.folder}: its epoch record cannot be "
                            f"read ({exc}); delete the folder to train from the start") from exc

    def record(self, history: list[dict[str, float]], best: dict[str, Any]) -> None:
        """After an epoch: its validation record (and the best weights, when they changed)."""
        import json
        import os

        import torch

        has_state = best["state"] is not None
        if has_state and best["epoch"] == history[-1]["epoch"]:
            tmp = self.folder / f".{self.BEST}.{os.getpid()}.tmp"
            torch.save(best["state"], tmp)
            os.replace(tmp, self.folder / self.BEST)
        atomic_write_text(self.folder / self.RECORD, json.dumps({
            "history": history, "best_rank1": best["rank1"], "best_epoch": best["epoch"], "has_state": has_state}))

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
