"""Training objectives, one module per method; `methods.METHODS` names each by its `config.objective`."""
