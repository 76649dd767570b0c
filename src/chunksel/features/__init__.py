"""chunksel.features."""
