"""Every module here fails at import in its own way: one build must report them all."""
