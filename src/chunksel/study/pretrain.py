"""The recipe of the shipped pretrained selectors (``make pretrained``,
``python -m chunksel.study.pretrain``).

1. The six benchmark datasets at the full profile's sample (3,000 questions each at most,
   K = 5, grouped splits), from the shared data. Every TREC DL topic (``msmarco:dl*``) is
   left out of training and validation: the zero-shot report evaluates on them.
2. BM25 / TF-IDF statistics: the Wikipedia passage corpus's for every dataset (the
   statistics that ship with the models, so training and use read the same ones).
3. ``lambdamart-base``: LambdaMART (the benchmark's settings) on the pooled training
   splits, early-stopped on the pooled validation splits, without and with the
   late-interaction columns (:data:`LATE_CHOICES`, MaxSim over MiniLM's token vectors:
   :mod:`chunksel.selectors.late_features`); the pooled validation rank-1 picks one, the
   one without on a tie within :data:`TIE`.
4. ``anchored-base``: the candidate block sets of :data:`ANCHORED_CANDIDATES`, each
   without and with the late columns, are trained on the pooled training splits; the
   pooled validation rank-1 picks one, the simpler on a tie within :data:`TIE` (fewer
   blocks, then no late columns). Its figures, and LambdaMART's,
   are written to ``PROVENANCE.json`` with the paired bootstrap interval and McNemar's
   p of ``anchored-base`` against ``lambdamart-base`` on the pooled validation questions:
   where the two tests do not agree that it is better, the README recommends the simpler
   model.
5. ``lambdamart-lite`` and ``anchored-lite``: the same choices among the fits without the
   late columns (``late=False``), for an application that has the chunks' embeddings but
   not their token vectors: they read embeddings and text only, so a query needs no MiniLM
   pass when the embeddings are given. Their record is ``lite_*`` in ``PROVENANCE.json``.
6. Calibration (``k="auto"``, probabilities) on the pooled validation splits, as every fit.

Nothing here reads a test split.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.pretrained import MODELS_DIR, PRETRAINED, write_manifest
from chunksel.types import Instance

#: the sample: the full profile's
LIMIT = 3000
K = 5
SPLIT = "grouped"
CORPUS = "wiki-w100"
#: id prefix of the TREC DL topics, never trained on
TREC_DL_PREFIX = "msmarco:dl"
#: the anchored block sets tried, simplest first
ANCHORED_CANDIDATES = ("letor+lambdamart", "q+letor+lambdamart")
#: without and with MiniLM MaxSim's late-interaction columns (``late=True``), simplest first
LATE_CHOICES = (False, True)
#: validation rank-1 differences at or below this are ties (the simpler set wins)
TIE = 0.002


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parent).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_pooled(limit: int | None = LIMIT, progress: bool = True, datasets: Sequence[str] | None = None,
                ) -> tuple[list[Instance], list[Instance], dict]:
    """The pooled training and validation instances and each dataset's data checksums
    (``datasets``: default the six benchmark datasets)."""
    from chunksel.build import build_instances
    from chunksel.data.datasets import BENCHMARK_DATASETS
    from chunksel.selectors.bm25_stats import corpus_checksum

    train: list[Instance] = []
    val: list[Instance] = []
    data: dict[str, Any] = {"corpus_stats": {CORPUS: corpus_checksum(CORPUS)}, "datasets": {}}
    for ds in datasets or BENCHMARK_DATASETS:
        built = build_instances(ds, k=K, limit=limit, split=SPLIT, progress=progress)
        kept = [i for i in built.instances if not i.id.startswith(TREC_DL_PREFIX)]
        tr = [i for i in kept if i.split == "train"]
        va = [i for i in kept if i.split == "val"]
        train += tr
        val += va
        data["datasets"][ds] = {
            "inputs_checksum": built.config["inputs"], "corpus": built.config["corpus"],
            "n_train": len(tr), "n_val": len(va),
            "trec_dl_left_out": len(built.instances) - len(kept),
        }
    return train, val, data


def recipe_seen_ids(dataset: str) -> set[str]:
    """The ids of ``dataset``'s questions the recipe trains or validates on (its sample,
    TREC DL topics included in the count though never trained on): what a study must not
    score the shipped models on."""
    from chunksel.build import build_instances

    built = build_instances(dataset, k=K, limit=LIMIT, split=SPLIT, progress=False)
    return {i.question.id for i in built.instances if i.split in ("train", "val")}


def no_trec_dl(instances: Sequence[Instance]) -> None:
    """Raise if any TREC DL topic is among ``instances`` (the recipe's promise)."""
    bad = [i.id for i in instances if i.id.startswith(TREC_DL_PREFIX)]
    if bad:
        raise AssertionError(f"{len(bad)} TREC DL topics in the pretrained training data (first {bad[0]})")


def validation_hits(selector: Any, val: Sequence[Instance]) -> np.ndarray:
    """Rank-1 hits on the answerable validation instances (in ``val``'s order)."""
    from chunksel.eval.metrics import per_instance_hits
    from chunksel.types import label_matrix

    scores = selector.score(list(val))
    labels = label_matrix(list(val), k=scores.shape[1])
    return per_instance_hits(scores, labels)[labels.any(axis=1)]


def validation_rank1(hits: np.ndarray, val: Sequence[Instance]) -> dict[str, float]:
    """Pooled and per-dataset rank-1 from :func:`validation_hits`."""
    names = np.array([i.question.dataset for i in val if any(i.labels())])
    out = {"pooled": float(hits.mean())}
    for ds in sorted(set(names)):
        out[ds] = float(hits[names == ds].mean())
    return out


def _versus(a: np.ndarray, b: np.ndarray) -> tuple[dict[str, float], bool]:
    """``a`` against ``b`` (validation hits): the comparison in points, and whether the
    bootstrap interval and McNemar's test agree that they differ."""
    from chunksel.eval.significance import compare, significant

    c = compare(a, b)
    scaled = {k: (100.0 * v if k in ("diff", "lo", "hi", "acc_a", "acc_b") else v) for k, v in c.items()}
    return scaled, significant(c)


def build(out: Path = MODELS_DIR, limit: int | None = LIMIT, progress: bool = True,
          candidates: Sequence[str] = ANCHORED_CANDIDATES) -> dict:
    """Train the shipped models into ``out`` (replacing what is there); returns the
    selection record."""
    from chunksel.selectors import make_selector

    t0 = time.time()
    train, val, data = load_pooled(limit, progress)
    no_trec_dl(train)
    no_trec_dl(val)
    print(f"pooled: {len(train)} training, {len(val)} validation questions", file=sys.stderr)
    fits: dict[str, Any] = {}
    hits: dict[str, np.ndarray] = {}
    record: dict[str, Any] = {"validation_rank1": {}, "fit_seconds": {}}

    def fit(key: str, name: str, **params: Any):
        t = time.time()
        sel = make_selector(name, corpus=CORPUS, progress=progress, **params)
        sel.fit(train, None, val)
        record["fit_seconds"][key] = round(time.time() - t, 1)
        hits[key] = validation_hits(sel, val)
        record["validation_rank1"][key] = validation_rank1(hits[key], val)
        print(f"{key}: validation rank-1 {record['validation_rank1'][key]['pooled']:.4f} "
              f"({record['fit_seconds'][key]} s)", file=sys.stderr)
        fits[key] = sel
        return sel

    def simplest_best(keys: Sequence[str]) -> str:  # a later (richer) key only when it gains > TIE
        best = keys[0]
        for key in keys[1:]:
            if record["validation_rank1"][key]["pooled"] - record["validation_rank1"][best]["pooled"] > TIE:
                best = key
        return best

    lm_keys = []
    for late in LATE_CHOICES:
        lm_keys.append("lambdamart" + ("[late]" if late else ""))
        fit(lm_keys[-1], "lambdamart", late=late)
    anchored_keys = []
    for late in LATE_CHOICES:
        for blocks in candidates:
            anchored_keys.append(f"anchored[{blocks}{'+late' if late else ''}]")
            fit(anchored_keys[-1], "anchored", blocks=blocks, late=late)
    lm_key, best_key = simplest_best(lm_keys), simplest_best(anchored_keys)
    # the lite pair: the same choices among the fits without the late columns
    lite_lm_key = simplest_best([k for k in lm_keys if not fits[k].late])
    lite_key = simplest_best([k for k in anchored_keys if not fits[k].late])
    record["lambdamart_late"] = fits[lm_key].late
    record["anchored_blocks"] = "+".join(fits[best_key].blocks)
    record["anchored_late"] = fits[best_key].late
    record["lite_anchored_blocks"] = "+".join(fits[lite_key].blocks)
    # anchored against lambdamart on the pooled validation questions: told apart only when
    # the bootstrap interval and McNemar's test agree
    record["anchored_vs_lambdamart"], record["validation_tells_them_apart"] = _versus(hits[best_key], hits[lm_key])
    record["lite_anchored_vs_lambdamart"], record["lite_validation_tells_them_apart"] = _versus(
        hits[lite_key], hits[lite_lm_key])
    common = {
        "commit": _commit(), "recipe": "chunksel.study.pretrain", "limit": limit, "k": K, "split": SPLIT,
        "corpus_stats": CORPUS, "data": data, "n_train": len(train), "n_val": len(val),
        "trec_dl_in_training": 0, "selection": record, "tie": TIE,
    }
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, key in (("lambdamart-base", lm_key), ("anchored-base", best_key),
                      ("lambdamart-lite", lite_lm_key), ("anchored-lite", lite_key)):
        folder = out / name
        fits[key].save(folder)
        prov = {"name": name, "description": PRETRAINED[name], "selector": fits[key].name,
                "settings": fits[key].get_params(), **common}
        (folder / "PROVENANCE.json").write_text(json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    write_manifest(out, {"commit": common["commit"], "built_seconds": round(time.time() - t0, 1)})
    return record


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chunksel.study.pretrain", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=MODELS_DIR)
    p.add_argument("--limit", type=int, default=LIMIT, help="questions per dataset (the full profile's)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    record = build(args.out, args.limit, progress=not args.quiet)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
