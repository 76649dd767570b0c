"""chunksel.training."""
