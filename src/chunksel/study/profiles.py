"""The benchmark profiles (``quick``, ``full``, ``large``), the study's dataset order,
its flagship and reproduction rows, the ablation variants and the default selector list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chunksel.data.datasets import BENCHMARK_DATASETS

#: Table 1's dataset order: the paper's three first
DATASETS: tuple[str, ...] = BENCHMARK_DATASETS  # the dataset registry's, in its order
#: the roles of the selectors a study runs by default (see :func:`default_selectors`)
DEFAULT_ROLES: tuple[str, ...] = ("baseline", "reference", "reproduction", "flagship")
#: SRAS's PPO rewards come from generated answers (about a second each on two cores): the
#: profiles run a reduced, stated PPO budget on top of its supervised warm-up
SRAS_QUICK = {"ppo_epochs": 1, "max_questions": 16}
SRAS_FULL = {"ppo_epochs": 2, "max_questions": 64}
#: the cross-encoder peer (MiniLM-L6, trained here; one pooled model per seed, Table 1's
#: pooled_fit): pointwise BCE, 6 layers, a retrieval prior weighted on validation, scored
#: through ONNX Runtime (fp32). Training is its cost (about 0.25 s a pair on one thread),
#: so the quick profile trains a short one (600 answerable questions, each with its
#: positives and its top-ranked negative, 128 word pieces, learning rate 1e-4 chosen on
#: validation by benchmarks/crossencoder_quick_recipe.py: about 4 minutes, keeping `make
#: bench` under 25 min); full and large train the recipe of
#: benchmarks/crossencoder_pooled.py (positives and the two top-ranked negatives of each
#: answerable training question, 256 word pieces)
CE_QUICK = {"loss": "pointwise", "epochs": 1, "lr": 1e-4, "negatives": 1, "max_questions": 600,
            "max_length": 128, "engine": "onnxruntime"}
CE_FULL = {"loss": "pointwise", "epochs": 1, "negatives": 2, "max_questions": 6000, "max_length": 256,
           "engine": "onnxruntime"}
#: full and large train one pooled cross-encoder (seed 0), not one per seed: its 6,000
#: questions take about 1.2-1.9 h on two cores, three of them would break the profiles' time
#: bounds; every seed's stacked row reads that model (the row has no spread over seeds)
CE_POOLED_SEEDS = (0,)
#: the flagship scores through its exported fp32 graph in ONNX Runtime (the torch scorer's
#: scores to float rounding; at batch 1 with three members about 1 ms less,
#: benchmarks/anchored_latency.py); it trains in torch. It reads MiniLM MaxSim's
#: late-interaction columns (chosen on validation: benchmarks/late_rankers.py,
#: docs/decisions/maxsim-features.md), as do anchored-ce's base and every ablation row
ANCHORED_SETTINGS = {"engine": "onnxruntime", "late": True}
#: Table 4's sample: generation is the cost (about 6 distinct (question, context) pairs a
#: question, 3-7 s each on one thread), so the quick profile answers 8 test questions of
#: TriviaQA and NQ (about 6 min cold, keeping `make bench` under 25 min) and the full and
#: large profiles 20 of each dataset
ANSWER_SAMPLE_QUICK = 8
ANSWER_SAMPLE_FULL = 20
#: Table 5 (the LLM selectors, tens of seconds a query on one thread with the local
#: SmolLM2): the utility-selection paper's datasets with gold evidence, NQ and HotpotQA;
#: the quick profile runs 4 NQ test questions, the full and large profiles 20 of each
LLM_DATASETS = ("nq", "hotpotqa")
LLM_SAMPLE_QUICK = 4
#: the flagship (retrieval-anchored prototype) and the paper's configuration (reproduction)
FLAGSHIP = "anchored"
#: the flagship's accurate operating point: the cross-encoder's score stacked on it
STACKED = "anchored-ce"
REPRODUCTION = "prototype"
#: the ranker the flagship is read against beside the validation-picked peer: a dataset is
#: "significantly better" only against both (chunksel.study.targets)
LAMBDAMART = "lambdamart"
#: the rows whose top-1 the flagship's is compared with (chunksel.study.ablations.top1_agreement)
AGREEMENT_ROWS = (LAMBDAMART, "lambdamart-late")
#: the flagship's generator ablation: its blocks with and without h and r
GENERATOR_ABLATION: dict[str, tuple[str, ...]] = {
    "with h, r": ("hs", "rw", "q", "chunk", "letor", "lambdamart"),
    "without h, r": ("q", "chunk", "letor", "lambdamart"),
}
#: the flagship's further variants, each compared with Table 1's (paired intervals)
PARTS_ABLATION: dict[str, tuple[str, ...]] = {
    "interaction term alone": ("letor", "lambdamart"),  # no q/E prototype, no h, r
}
ABLATIONS: dict[str, tuple[str, ...]] = {
    "HS": ("hs",),
    "RW": ("rw",),
    "Chunk": ("chunk",),
    "HS+RW": ("hs", "rw"),
    "HS+Chunk": ("hs", "chunk"),
    "RW+Chunk": ("rw", "chunk"),
    "HS+RW+Chunk": ("hs", "rw", "chunk"),
}


@dataclass(frozen=True)
class Profile:
    """A benchmark profile.

    Attributes:
        limit: questions per dataset (a deterministic sample keeping the splits); None:
            every question.
        seeds: seeds for the trained selectors of Table 1 (and the generator ablation).
        pooled_seeds: seeds of a ``pooled_fit`` selector's models (the cross-encoder's
            pooled training); empty: ``seeds``. A stacked row of seed ``s`` reads the pooled
            model of ``s`` where it is one of them, else that of the first.
        budgets: feature budgets (% of the input) for Table 3.
        latency_queries: test instances timed at batch 1 per selector.
        k: candidates per question.
        ablation_seeds: seeds of Tables 2 and 3 (the paper prototype's ablations); empty:
            no Tables 2 and 3.
        curve_datasets: datasets of the learning curves (empty: none).
        curve_sizes: usable training instances per curve point (None: all).
        curve_selectors: the selectors on the learning curves.
        answer_datasets: datasets of Table 4 (answers; empty: no Table 4).
        answer_sample: test questions per Table 4 dataset (a deterministic sample).
        llm_datasets: datasets of Table 5 (LLM selectors; empty: none).
        llm_sample: test questions per Table 5 dataset (the same deterministic order as
            Table 4's, so Table 4's questions are among them when it is not smaller).
        llm_selectors: the LLM selectors of Table 5 (run only where registered and installed).
        overrides: selector name -> settings replacing its defaults (e.g. small models
            in tests).
        split: the split scheme (:data:`chunksel.build.SPLIT_SCHEMES`): ``grouped`` (the
            default: no validation or test question shares an evidence passage with a
            training question, :mod:`chunksel.data.grouped_splits`) or ``question`` (a
            hash of each question's text; the reports before grouped splits).
        pretrained: shipped pretrained models (:mod:`chunksel.pretrained`) the semantic-label
            stage ranks beside Table 1's rows, loaded by name and never trained here.
    """

    name: str
    limit: int | None
    seeds: tuple[int, ...]
    budgets: tuple[int, ...]
    latency_queries: int = 100
    k: int = 5
    ablation_seeds: tuple[int, ...] = (0,)
    pooled_seeds: tuple[int, ...] = ()
    curve_datasets: tuple[str, ...] = ()
    curve_sizes: tuple[int | None, ...] = ()
    curve_selectors: tuple[str, ...] = (REPRODUCTION, FLAGSHIP, "lambdamart")
    answer_datasets: tuple[str, ...] = ()
    answer_sample: int | None = None
    llm_datasets: tuple[str, ...] = ()
    llm_sample: int | None = None
    llm_selectors: tuple[str, ...] = ("rankgpt", "utility")
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    split: str = "grouped"
    transfer: bool = False
    pretrained: tuple[str, ...] = ()


#: the shipped models the three profiles' semantic-label stage ranks (chunksel.pretrained):
#: the late pair and the embeddings-only lite pair
PRETRAINED_ROWS = ("anchored-base", "lambdamart-base", "anchored-lite", "lambdamart-lite")

PROFILES = {
    # Table 3's budgets as on the full profile: ten points on 36-98 test questions a
    # dataset added nothing five do not show, and cost 3.6 minutes of the cold quick run
    "quick": Profile("quick", limit=500, seeds=(0,), budgets=(10, 30, 50, 70, 100),
                     latency_queries=50,
                     overrides={"sras": SRAS_QUICK, "crossencoder": CE_QUICK, "anchored": ANCHORED_SETTINGS},
                    answer_datasets=("triviaqa", "nq"), answer_sample=ANSWER_SAMPLE_QUICK,
                    llm_datasets=("nq",), llm_sample=LLM_SAMPLE_QUICK, pretrained=PRETRAINED_ROWS),
    "full": Profile("full", limit=3000, seeds=(0, 1, 2), pooled_seeds=CE_POOLED_SEEDS,
                    budgets=(10, 30, 50, 70, 100),
                    ablation_seeds=(0, 1, 2), curve_datasets=("triviaqa", "nq"),
                    curve_sizes=(250, 500, 1000, None),
                    overrides={"sras": SRAS_FULL, "crossencoder": CE_FULL, "anchored": ANCHORED_SETTINGS},
                    answer_datasets=DATASETS, answer_sample=ANSWER_SAMPLE_FULL,
                    llm_datasets=LLM_DATASETS, llm_sample=ANSWER_SAMPLE_FULL, transfer=True,
                    pretrained=PRETRAINED_ROWS),
    "large": Profile("large", limit=None, seeds=(0, 1, 2), pooled_seeds=CE_POOLED_SEEDS, budgets=(),
                     ablation_seeds=(),
                     curve_datasets=("triviaqa", "nq"), curve_sizes=(500, 1000, 2000, 4000, None),
                     overrides={"sras": SRAS_FULL, "crossencoder": CE_FULL, "anchored": ANCHORED_SETTINGS},
                     answer_datasets=DATASETS,
                     answer_sample=ANSWER_SAMPLE_FULL, llm_datasets=LLM_DATASETS,
                     llm_sample=ANSWER_SAMPLE_FULL, transfer=True, pretrained=PRETRAINED_ROWS),
}


def default_selectors() -> list[str]:
    """Registered selectors whose role is in :data:`DEFAULT_ROLES`, in registry order
    (a selector whose extra is not installed is left out)."""
    from chunksel.errors import MissingExtraError
    from chunksel.selectors.base import REGISTRY, get_selector_class

    out = []
    for name in REGISTRY:
        try:
            if get_selector_class(name).role in DEFAULT_ROLES:
                out.append(name)
        except (MissingExtraError, ImportError):
            continue
    return out
