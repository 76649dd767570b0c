"""chunksel.eval: ranking metrics, paired significance tests and cost/latency figures,
used by every caller (the benchmark study, its report and plots live in
:mod:`chunksel.study`).

Importing this package needs numpy only; scipy (McNemar) is imported where used
(``chunksel[eval]``).
"""

from __future__ import annotations

from chunksel.eval.cost import (
    Cost,
    Latency,
    dir_size_bytes,
    limit_threads,
    measure_latency,
    selector_cost,
    trainable_parameters,
)
from chunksel.eval.metrics import (
    evaluate,
    mrr,
    ndcg_at_k,
    per_instance_hits,
    rank1_accuracy,
    rank_matrix,
    recall_at_k,
    subset_mask,
)
from chunksel.eval.significance import (
    bootstrap_interval,
    compare,
    mcnemar_exact,
    paired_bootstrap,
    significance_entry,
)

__all__ = [
    "Cost",
    "Latency",
    "bootstrap_interval",
    "compare",
    "dir_size_bytes",
    "evaluate",
    "limit_threads",
    "mcnemar_exact",
    "measure_latency",
    "mrr",
    "ndcg_at_k",
    "paired_bootstrap",
    "per_instance_hits",
    "rank1_accuracy",
    "rank_matrix",
    "recall_at_k",
    "selector_cost",
    "significance_entry",
    "subset_mask",
    "trainable_parameters",
]
