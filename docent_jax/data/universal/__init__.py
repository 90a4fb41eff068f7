"""Universal representations from word to sentence: analogy sets, NLI pairs, phrase relations and FAQ retrieval."""
