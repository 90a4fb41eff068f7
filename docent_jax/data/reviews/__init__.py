"""Movie-review collections: the readers and preprocessing, the TFDS builders, the loaded corpus and its pipeline."""
