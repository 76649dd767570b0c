"""``label --source utility --ray``: the utility teacher's questions in shards over Ray
workers (chunksel.bulk.label_jobs) against the single-process teacher, with the real
SmolLM2 on a tiny slice; shard inputs travel as files."""

from __future__ import annotations

import json

import pytest

from chunksel.bulk.manifest import ShardManifest, read_log

from .test_ray_jobs import _instances

pytestmark = pytest.mark.model


def _rows(res):
    return [(r.question_id, r.candidate_id, r.label, r.parsed) for r in res.rows]


def test_utility_labels_on_ray_match_single_process(ray_session, smollm2_gguf, tmp_path):
    import torch

    from chunksel.bulk.label_jobs import utility_instances
    from chunksel.labels.utility import label_instances
    from chunksel.llm.local import LocalBackend
    from chunksel.llm.models import load_generator

    from .conftest import REAL_CACHE

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok, gen_id = load_generator(smollm2_gguf, cache=REAL_CACHE)
        ref = label_instances(_instances(), LocalBackend(model=model, tokenizer=tok, model_id=gen_id),
                              cache=tmp_path / "single", progress=False)
    finally:
        torch.set_num_threads(threads)

    inst = _instances()
    kwargs = {"model_path": str(smollm2_gguf), "cache": str(REAL_CACHE)}
    res, report = utility_instances(inst, "local", kwargs, workers=2, shard_size=1, cache=tmp_path / "ray",
                                    progress=False)
    assert report.computed == 2 and report.rows == 2
    assert ShardManifest(report.folder).computed_counts() == {0: 1, 1: 1}
    assert res.teacher == ref.teacher and _rows(res) == _rows(ref)
    assert [r.order for r in res.runs] == [r.order for r in ref.runs]
    assert res.summary()["fallbacks"] == 0 and res.summary()["calls"] == ref.summary()["calls"]
    # the driver kept the plan only: the manifest names ids, the texts went to input
    # files that the workers deleted once their shard was done
    manifest = json.loads((report.folder / "manifest.json").read_text())
    assert manifest["shards"] == [{"ids": ["q:0"]}, {"ids": ["q:1"]}]
    assert not list((report.folder / "inputs").glob("*.json"))
    assert {e["event"] for e in read_log(report.folder)} >= {"load", "start", "done"}
    # a re-run finds every shard done and every call in the driver's response cache
    again, rep2 = utility_instances(_instances(), "local", kwargs, workers=2, shard_size=1,
                                    cache=tmp_path / "ray", progress=False)
    assert rep2.computed == 0 and rep2.already_done == 2 and _rows(again) == _rows(ref)
    assert again.summary()["cached_calls"] == again.summary()["calls"]
