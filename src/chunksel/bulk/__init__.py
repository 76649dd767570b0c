"""Bulk jobs beyond one process: corpus encoding, question features and LLM labels as
Ray Data pipelines, written in shards with a manifest, and a FAISS IVF-PQ index filled
shard by shard.

- :mod:`chunksel.bulk.manifest`: shard plans, done markers and the event log (no Ray).
- :mod:`chunksel.bulk.engine`: the Ray Data actor-pool pipeline (Ray imported lazily;
  without it, an error names ``pip install 'chunksel[ray]'``).
- :mod:`chunksel.bulk.workers`: the shard workers (one model load per actor).
- :mod:`chunksel.bulk.jobs`: the drivers ``encode_corpus``, ``extract_features`` and
  ``sharded_ivfpq``.
- :mod:`chunksel.bulk.label_jobs`: the LLM label drivers ``judge_instances`` (the judge)
  and ``utility_instances`` (the utility teacher).
- :mod:`chunksel.bulk.ivfpq`: IVF-PQ trained on a sample, filled from shard files.

The single-process paths stay the default everywhere; see ``docs/distributed.md``.
"""
