"""Training objectives, one module per method; `methods.OBJECTIVES` names each by its `config.objective`."""
