"""chunksel.labels: answer containment (DPR rules) and gold / qrels labels."""

from chunksel.labels.containment import SimpleTokenizer, has_answer
from chunksel.labels.gold import GoldIndex, gold_corpus_ids, label_candidates

__all__ = ["GoldIndex", "SimpleTokenizer", "gold_corpus_ids", "has_answer", "label_candidates"]
