"""A neural cross-encoder reranker: the peer a RAG engineer would reach for.

No cross-encoder weights can be had here, so this one is *trained here*: a
sentence-transformers :class:`~sentence_transformers.cross_encoder.CrossEncoder`
initialised from the offline all-MiniLM-L6-v2 weights (a new one-logit head on BERT's
[CLS] pooler; ``layers`` < 6 keeps the first layers, the cheap end) and fine-tuned with
sentence-transformers' ``CrossEncoderTrainer`` on the training instances: ``listwise``
(ListNet over each question's K candidates, the retrieved negatives being hard ones) or
``pointwise`` (binary cross-entropy per pair). The epoch is chosen on validation rank-1
(answerable instances), never on test. Scores are the head's logits; ``engine=
"onnxruntime"`` runs the same network as an ONNX graph (fp32, or int8 with
``quantize=True``) through :mod:`chunksel.export.crossencoder`.

Needs ``pip install 'chunksel[crossencoder]'`` (sentence-transformers, datasets).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError
from chunksel.selectors import crossencoder_checkpoints
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.types import Instance

#: the folder the fine-tuned network is saved in, beside config.json
MODEL_DIR = "crossencoder"


def _pair_text(title: str, text: str) -> str:
    return (title + " " + text).strip()


#: retrieval-prior weights tried on validation with ``prior="auto"`` (0: the network alone)
PRIOR_WEIGHTS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)


def _has_scores(inst: Instance) -> bool:
    return all(np.isfinite(c.score) for c in inst.candidates)


def standardised(scores: np.ndarray, instances: Sequence[Instance]) -> np.ndarray:
    """Each set's scores as z-scores within the set (a ranking scale, not a probability;
    padding stays -inf)."""
    out = np.full(scores.shape, -np.inf, dtype=np.float64)
    for r, inst in enumerate(instances):
        k = len(inst.candidates)
        row = np.asarray(scores[r, :k], dtype=np.float64)
        out[r, :k] = (row - row.mean()) / (row.std() + 1e-9)
    return out


def with_prior(scores: np.ndarray, instances: Sequence[Instance], weight: float) -> np.ndarray:
    """z(network score) + ``weight`` z(retrieval score) within each set."""
    if weight == 0:
        return np.asarray(scores, dtype=np.float64)
    cos = np.full(scores.shape, 0.0)
    for r, inst in enumerate(instances):
        cos[r, : len(inst.candidates)] = [c.score for c in inst.candidates]
    return standardised(scores, instances) + weight * np.where(np.isfinite(scores), standardised(cos, instances), 0)


def rank1(scores: np.ndarray, instances: Sequence[Instance]) -> float:
    """Rank-1 accuracy (%) of ``scores`` over the answerable ``instances``."""
    hits, n = 0, 0
    for row, inst in zip(scores, instances, strict=True):
        labels = inst.labels()
        if labels.any():
            n += 1
            hits += int(labels[int(np.argmax(row[: len(labels)]))] == 1)
    return 100.0 * hits / n if n else float("nan")


class CrossEncoderSelector(Selector):
    """MiniLM-L6 cross-encoder, trained on this data.

    The defaults are the recipe the full and large profiles train (its validation record:
    docs/decisions/crossencoder-peer.md): pointwise BCE over each answerable question's
    positives and its two top-ranked negatives, one epoch, at most 6,000 questions. The
    listwise loss stays an option; on this data it stayed far below retrieval order on
    validation (37.30 against 72.57 in that record).

    Args:
        layers: transformer layers kept from MiniLM-L6 (1-6; 2 is the cheap variant).
        loss: ``"listwise"`` (ListNet over the K candidates) or ``"pointwise"`` (BCE).
        epochs: training epochs (the best one on validation is kept).
        lr: AdamW learning rate; warm-up over the first 10% of steps, then linear decay.
        batch_size: questions per step (listwise) or pairs per step (pointwise).
        max_length: word pieces per (question, chunk) pair.
        engine: ``"torch"`` or ``"onnxruntime"`` for scoring.
        quantize: with ``engine="onnxruntime"``, int8 weights (dynamic quantisation).
        model_dir: the MiniLM folder to start from (default: the packaged all-MiniLM-L6-v2).
        seed: training seed.
        label: label spec for training (None = each instance's default).
        progress: show progress bars while training.
        negatives: None: every candidate of every training question; N: answerable
            questions only, each with its positives and its N top-ranked negatives (hard
            negatives from the retriever's top-K): fewer pairs, the cheap recipe.
        max_questions: a deterministic sample (by ``seed``) of at most this many training
            questions (after ``negatives``); None: all.
        prior: a retrieval prior, ``z(network) + w z(retrieval score)`` within each set:
            ``"auto"`` chooses w among :data:`PRIOR_WEIGHTS` on validation rank-1 (0, the
            network alone, when that is best, without validation or retrieval scores); a
            number fixes it. With w > 0 the candidates' retrieval scores are read.

    A study fits it once per seed on the pooled training splits of its datasets
    (``pooled_fit``) and evaluates that one model on each dataset.
    """

    name = "crossencoder"
    display_name = "MiniLM-L6 cross-encoder (trained here)"
    family = "neural reranker"
    role = "baseline"
    query_cost = "crossencoder"
    pooled_fit = True

    def __init__(
        self,
        layers: int = 6,
        loss: str = "pointwise",
        epochs: int = 1,
        lr: float = 3e-5,
        batch_size: int = 8,
        max_length: int = 256,
        engine: str = "torch",
        quantize: bool = False,
        model_dir: str | None = None,
        seed: int = 0,
        label: str | None = None,
        progress: bool = True,
        negatives: int | None = 2,
        max_questions: int | None = 6000,
        prior: str | float = "auto",
    ) -> None:
        if loss not in ("listwise", "pointwise"):
            raise ConfigError(f"crossencoder loss must be listwise or pointwise, got {loss!r}")
        if engine not in ("torch", "onnxruntime"):
            raise ConfigError(f"crossencoder engine must be torch or onnxruntime, got {engine!r}")
        # numeric ranges (layers 1-6, counts >= 1, lr > 0): selectors.params, at construction
        self.layers = layers
        self.loss = loss
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.max_length = max_length
        self.engine = engine
        self.quantize = quantize
        self.model_dir = model_dir
        self.seed = seed
        self.label = label
        self.progress = progress
        self.negatives = negatives
        self.max_questions = max_questions
        if prior != "auto" and (isinstance(prior, bool) or not isinstance(prior, (int, float))
                                or not np.isfinite(prior) or prior < 0):
            raise ConfigError(f"crossencoder prior must be 'auto' or a weight >= 0, got {prior!r}")
        self.prior = prior

    # ---------------------------------------------------------------- the network
    def _base_dir(self) -> str:
        if self.model_dir:
            return self.model_dir
        from chunksel.retrieval.encoder import default_model_dir

        return str(default_model_dir())

    def _new_model(self, path: str, num_labels: int | None = 1) -> Any:
        import logging

        from sentence_transformers.cross_encoder import CrossEncoder

        # loading MiniLM into a classification head reports the dropped layers and the
        # new head at WARNING level: expected here, said once in the docstring instead
        level = logging.getLogger("transformers").level
        logging.getLogger("transformers").setLevel(logging.ERROR)
        try:
            return CrossEncoder(path, num_labels=num_labels, max_length=self.max_length,
                                config_kwargs={"num_hidden_layers": int(self.layers)},
                                local_files_only=True, device="cpu")
        finally:
            logging.getLogger("transformers").setLevel(level)

    # ---------------------------------------------------------------- training
    def _training_sets(self, train: Sequence[Instance]) -> list[Instance]:
        """The training questions the recipe uses: with ``negatives``, answerable ones
        with their positives and top-ranked negatives; at most ``max_questions``."""
        from dataclasses import replace

        out = list(train)
        if self.negatives is not None:
            trimmed = []
            for inst in out:
                labels = inst.labels(self.label)
                if not labels.any():
                    continue
                pos = [c for c, y in zip(inst.candidates, labels, strict=True) if y]
                neg = [c for c, y in zip(inst.candidates, labels, strict=True) if not y][: int(self.negatives)]
                trimmed.append(replace(inst, candidates=pos + neg))
            out = trimmed
        if self.max_questions is not None and len(out) > int(self.max_questions):
            rng = np.random.default_rng(self.seed)
            keep = np.sort(rng.choice(len(out), size=int(self.max_questions), replace=False))
            out = [out[int(j)] for j in keep]
        return out

    def _dataset(self, train: Sequence[Instance]) -> Any:
        from datasets import Dataset

        spec = self.label
        train = self._training_sets(train)
        if self.loss == "listwise":
            rows = {"query": [], "docs": [], "labels": []}
            for inst in train:
                labels = inst.labels(spec)
                if not labels.any():  # no positive: ListNet has no target
                    continue
                rows["query"].append(inst.question.text)
                rows["docs"].append([_pair_text(c.title, c.text) for c in inst.candidates])
                rows["labels"].append([float(x) for x in labels])
        else:
            rows = {"query": [], "doc": [], "label": []}
            for inst in train:
                for c, y in zip(inst.candidates, inst.labels(spec), strict=True):
                    rows["query"].append(inst.question.text)
                    rows["doc"].append(_pair_text(c.title, c.text))
                    rows["label"].append(float(y))
        if not (rows.get("labels") or rows.get("label")):
            raise DataError("crossencoder: no training instance has a positive candidate")
        return Dataset.from_dict(rows)

    def fit(self, train: Sequence[Instance], features: QuestionFeatures | None = None,
            val: Sequence[Instance] | None = None, *,
            checkpoint_dir: str | Path | None = None) -> CrossEncoderSelector:
        """Fine-tune on ``train``; with ``val``, choose the epoch and the retrieval prior.

        ``checkpoint_dir``: a folder the trainer saves a checkpoint in every
        :data:`~chunksel.selectors.crossencoder_checkpoints.CHECKPOINT_STEPS` steps and, when
        it chooses the epoch on validation, at each epoch's end (weights, optimiser,
        scheduler, RNG state, the epochs' validation record). A fit given a folder that holds a checkpoint of the same
        settings and training rows resumes from its newest complete one, and the result is
        the uninterrupted fit's; a checkpoint of other settings or rows is deleted, with a
        message, and training starts afresh. The folder is deleted when the fit returns.
        """
        import contextlib
        import tempfile

        import torch
        from sentence_transformers.cross_encoder import (
            CrossEncoderTrainer,
            CrossEncoderTrainingArguments,
            losses,
        )
        from transformers import TrainerCallback

        train = list(train)
        if not train:
            raise DataError("crossencoder: no training instances")
        torch.manual_seed(self.seed)
        model = self._new_model(self._base_dir())
        data = self._dataset(train)
        loss = (losses.ListNetLoss(model) if self.loss == "listwise"
                else losses.BinaryCrossEntropyLoss(model))
        val_all = list(val or [])  # the calibrator reads every validation set
        val = [v for v in val_all if v.answerable(self.label)]
        selector = self
        history: list[dict[str, float]] = []
        best: dict[str, Any] = {"rank1": -1.0, "state": None, "epoch": 0}

        run = (crossencoder_checkpoints.FitCheckpoints(checkpoint_dir, self, data)
               if checkpoint_dir is not None else None)
        if run is not None:
            run.restore(history, best)

        class _KeepBest(TrainerCallback):
            """Validation rank-1 after each epoch; the best epoch's weights are kept."""

            def on_epoch_end(self, args, state, control, **kwargs):
                epoch = int(round(state.epoch or 0))
                if not val or int(selector.epochs) == 1:  # one epoch: nothing to choose
                    best.update(epoch=epoch, state=None)
                    return
                selector.model_ = model
                r1 = rank1(selector._torch_scores(val), val)
                # a resumed fit may end an epoch its record already holds (killed between
                # the record and the checkpoint): the same weights, recorded once
                history[:] = [h for h in history if h["epoch"] < epoch]
                history.append({"epoch": epoch, "val_rank1": round(r1, 4)})
                if r1 > best["rank1"]:
                    best.update(rank1=r1, epoch=epoch,
                                state={k: v.detach().clone() for k, v in model.state_dict().items()})
                if run is not None:
                    run.record(history, best)
                    control.should_save = True  # a checkpoint at each epoch's end, after its record
                model.train()

        with contextlib.ExitStack() as stack:
            out = str(run.folder) if run is not None else stack.enter_context(
                tempfile.TemporaryDirectory(prefix="chunksel-ce-"))
            every = crossencoder_checkpoints.CHECKPOINT_STEPS
            saving = (dict(save_strategy="steps", save_steps=every, save_total_limit=2)
                      if run is not None else dict(save_strategy="no"))
            args = CrossEncoderTrainingArguments(
                output_dir=out, num_train_epochs=int(self.epochs), learning_rate=float(self.lr),
                per_device_train_batch_size=int(self.batch_size), warmup_ratio=0.1,
                seed=int(self.seed), report_to="none", logging_strategy="no",
                disable_tqdm=not self.progress, use_cpu=True, dataloader_num_workers=0, **saving,
            )
            trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss,
                                          callbacks=[_KeepBest()])
            trainer.train(resume_from_checkpoint=run.latest() if run is not None else None)
        if best["state"] is not None:
            model.load_state_dict(best["state"])
        if run is not None:
            run.remove()
        model.eval()
        self.model_ = model
        self.history_ = history
        self.best_epoch_ = int(best["epoch"])
        self._drop_runners()
        # the validation split scored once: the prior's choice, the calibrator (the base
        # class's fit wrapper) and a study's evaluation of the same sets read it
        val_scores = self._network_scores(val_all) if val_all else None
        self._fit_scores = {} if val_scores is None else {
            self._set_key(inst): row for inst, row in zip(val_all, val_scores, strict=True)}
        try:
            answerable = [j for j, inst in enumerate(val_all) if inst.answerable(self.label)]
            self.prior_weight_, self.prior_val_ = self._choose_prior(
                None if val_scores is None else val_scores[answerable], val)
            if val and not history:  # one epoch: its validation rank-1, for the record
                history.append({"epoch": self.best_epoch_, "val_rank1": round(rank1(val_scores[answerable], val), 4)})
            return super().fit(train, features, val_all)
        except BaseException:
            self._end_fit()
            raise

    def _end_fit(self) -> None:
        """After the fit and its calibration the validation sets' logits stay (a few floats a
        set, for these weights only: a new fit or a load drops them). Evaluating this model
        on the same sets reads them instead of running the network again; inside
        :func:`~chunksel.selectors.letor.memo_off` (a cost measurement, the application
        path) they are never read."""

    @staticmethod
    def _set_key(inst: Instance) -> tuple:
        return (inst.question.text, tuple((c.title, c.text) for c in inst.candidates))

    def _choose_prior(self, val_scores: np.ndarray | None, val: Sequence[Instance]) -> tuple[float, dict]:
        """The retrieval prior's weight: ``prior`` itself, or with ``"auto"`` the weight of
        :data:`PRIOR_WEIGHTS` with the best validation rank-1 (the smallest on ties; 0
        without a validation split or retrieval scores)."""
        if self.prior != "auto":
            return float(self.prior), {}
        if val_scores is None or not val or not all(_has_scores(i) for i in val):
            return 0.0, {}
        by_w = {w: rank1(with_prior(val_scores, val, w), val) for w in PRIOR_WEIGHTS}
        return max(PRIOR_WEIGHTS, key=lambda w: (by_w[w], -w)), {str(w): round(v, 4) for w, v in by_w.items()}

    # ---------------------------------------------------------------- scoring
    def n_parameters(self) -> int:
        model = getattr(self, "model_", None)
        return 0 if model is None else sum(p.numel() for p in model.parameters())

    def _pairs(self, batch: Sequence[Instance]) -> list[tuple[str, str]]:
        return [(inst.question.text, _pair_text(c.title, c.text))
                for inst in batch for c in inst.candidates]

    def _unflatten(self, flat: np.ndarray, batch: Sequence[Instance]) -> np.ndarray:
        k = max(len(i.candidates) for i in batch)
        out = np.full((len(batch), k), -np.inf)
        pos = 0
        for b, inst in enumerate(batch):
            n = len(inst.candidates)
            out[b, :n] = flat[pos:pos + n]
            pos += n
        return out

    def _torch_scores(self, batch: Sequence[Instance]) -> np.ndarray:
        import torch

        # raw logits (no sigmoid), as the ONNX graph returns: a loaded model's default
        # activation need not be the one training left in memory
        with torch.inference_mode():
            flat = self.model_.predict(self._pairs(batch), batch_size=32, show_progress_bar=False,
                                       convert_to_numpy=True, activation_fn=torch.nn.Identity())
        return self._unflatten(np.asarray(flat, dtype=np.float64).reshape(-1), batch)

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        weight = float(getattr(self, "prior_weight_", 0.0))
        if weight > 0:
            missing = [i.id for i in batch if not _has_scores(i)]
            if missing:
                raise DataError(f"crossencoder: this model adds a retrieval prior (weight {weight:g}) and needs "
                                f"the candidates' retrieval scores; none for {missing[0]!r}"
                                + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
            return with_prior(self._network_scores(batch), batch, weight)
        return self._network_scores(batch)

    def required_inputs(self) -> frozenset[str]:
        """What it reads beyond the texts: the retrieval scores when it adds a prior."""
        return frozenset({"retrieval_score"}) if float(getattr(self, "prior_weight_", 0.0)) > 0 else frozenset()

    def _network_scores(self, batch: Sequence[Instance]) -> np.ndarray:
        """The network's logits (padding -inf)."""
        from chunksel.selectors.letor import MEMO_ENABLED

        memo = getattr(self, "_fit_scores", None)  # the validation sets scored at fit time
        if memo and MEMO_ENABLED.get() and all(self._set_key(i) in memo for i in batch):
            k = max(len(i.candidates) for i in batch)
            out = np.full((len(batch), k), -np.inf)
            for b, inst in enumerate(batch):
                row = memo[self._set_key(inst)]
                out[b, : len(inst.candidates)] = row[: len(inst.candidates)]
            return out
        if self.engine == "torch":
            return self._torch_scores(batch)
        return self._unflatten(self._onnx_runner().score(self._pairs(batch)), batch)

    def _onnx_runner(self) -> Any:
        """The ONNX Runtime session for the current thread budget
        (:func:`~chunksel.threads.thread_budget`: one thread inside a cost measurement, all
        the study's threads for its bulk scoring). The graph is exported once per fit or
        load, into a temporary folder removed with the selector (or at exit)."""
        from chunksel.export.crossencoder import OnnxCrossEncoder, export_crossencoder
        from chunksel.threads import thread_budget

        threads = thread_budget()
        runners = self.__dict__.setdefault("_runners", {})
        if threads not in runners:
            graph = getattr(self, "_onnx_graph", None)
            if graph is None or not Path(graph).is_file():
                import shutil
                import tempfile
                import weakref

                tmp = tempfile.mkdtemp(prefix="chunksel-ce-onnx-")
                weakref.finalize(self, shutil.rmtree, tmp, True)
                graph = export_crossencoder(self.model_, Path(tmp) / "crossencoder.onnx", quantize=self.quantize)
                self._onnx_graph = str(graph)
            runners[threads] = OnnxCrossEncoder(graph, self.model_.tokenizer, self.max_length, threads=threads)
        return runners[threads]

    def _drop_runners(self) -> None:
        """New weights: the exported graph and its sessions (and the kept scores) go."""
        self._runners = {}
        self._onnx_graph = None
        self._fit_scores = {}

    # ---------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        return {"best_epoch": getattr(self, "best_epoch_", 0), "history": getattr(self, "history_", []),
                "prior_weight": float(getattr(self, "prior_weight_", 0.0)),
                "prior_val_rank1": getattr(self, "prior_val_", {})}

    def _save_state(self, path: Path) -> None:
        self.model_.save_pretrained(str(path / MODEL_DIR))

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        folder = path / MODEL_DIR
        if not (folder / "config.json").is_file():
            raise DataError(f"corrupt checkpoint {path}: {MODEL_DIR}/config.json is missing")
        self.model_ = self._new_model(str(folder), num_labels=None)
        self.model_.eval()
        self.best_epoch_ = int(state.get("best_epoch", 0))
        self.history_ = list(state.get("history", []))
        self.prior_weight_ = float(state.get("prior_weight", 0.0))  # older saves: no prior
        self.prior_val_ = dict(state.get("prior_val_rank1", {}))
        self._drop_runners()


