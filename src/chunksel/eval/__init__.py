"""chunksel.eval: ranking metrics, paired significance tests, cost figures, the report.

Importing this package needs numpy only; scipy (McNemar) and matplotlib (plots) are
imported where used (``chunksel[eval]``).
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
from chunksel.eval.output import write_report
from chunksel.eval.report import (
    format_table1,
    metrics_to_percent,
    seed_cell,
    significance_entry,
    strongest_baseline,
)
from chunksel.eval.significance import (
    bootstrap_interval,
    compare,
    mcnemar_exact,
    paired_bootstrap,
)

__all__ = [
    "Cost",
    "Latency",
    "bootstrap_interval",
    "compare",
    "dir_size_bytes",
    "evaluate",
    "format_table1",
    "limit_threads",
    "mcnemar_exact",
    "measure_latency",
    "metrics_to_percent",
    "mrr",
    "ndcg_at_k",
    "paired_bootstrap",
    "per_instance_hits",
    "rank1_accuracy",
    "rank_matrix",
    "recall_at_k",
    "seed_cell",
    "selector_cost",
    "significance_entry",
    "strongest_baseline",
    "subset_mask",
    "trainable_parameters",
    "write_report",
]
