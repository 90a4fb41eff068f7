"""Product offers and labelled offer pairs: the readers, the TFDS builders, the loaded corpus, labels and batches."""
