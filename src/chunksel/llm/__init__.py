"""chunksel.llm."""
