"""chunksel.data."""
