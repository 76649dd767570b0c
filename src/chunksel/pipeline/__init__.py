"""chunksel.pipeline."""
