"""chunksel.retrieval."""
