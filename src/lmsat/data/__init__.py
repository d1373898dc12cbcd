"""The data the measures read: eval corpora and token samples, the hidden-state cache, EleutherAI's published evaluations."""
