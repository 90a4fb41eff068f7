"""Knowledge graphs with entity descriptions: the KG-BERT file layout, the TFDS builders and the loaded graph."""
