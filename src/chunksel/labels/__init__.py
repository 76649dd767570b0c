"""chunksel.labels: answer containment (DPR rules), gold / qrels labels, and the LLM
judge's semantic labels (:mod:`chunksel.labels.judge`)."""

from chunksel.labels.containment import SimpleTokenizer, has_answer
from chunksel.labels.gold import GoldIndex, gold_corpus_ids, label_candidates
from chunksel.labels.judge import JUDGE_PROMPT, judge_prompt, label_instances

__all__ = [
    "JUDGE_PROMPT", "GoldIndex", "SimpleTokenizer", "gold_corpus_ids", "has_answer", "judge_prompt",
    "label_candidates", "label_instances",
]
