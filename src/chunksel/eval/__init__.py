"""chunksel.eval."""
