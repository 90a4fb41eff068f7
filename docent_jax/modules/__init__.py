"""The Flax modules that models are built of (BERT, entity tables, scoring functions, heads) and the pretrained
weights they load. A model is `inference.protocol.Model`: a method's modules over params, configured by `config.model`."""
