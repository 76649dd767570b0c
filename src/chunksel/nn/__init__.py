"""chunksel.nn."""
