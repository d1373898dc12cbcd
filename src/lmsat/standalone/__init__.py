"""The numbers outside the workflow: one checkpoint (analyse) and a model while it trains (monitor, callback)."""
