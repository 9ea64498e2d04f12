"""Models of a widely used library (transformers), built from small configs with random
weights (no downloads), served through @aot_entry with ids, an attention mask and
structured outputs."""
