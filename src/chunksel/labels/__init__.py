"""chunksel.labels."""
