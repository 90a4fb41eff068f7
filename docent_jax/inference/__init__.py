"""Using trained runs: search over their vectors."""
