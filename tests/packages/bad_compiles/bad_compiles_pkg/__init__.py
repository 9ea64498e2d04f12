"""Every entry here fails to compile in its own way: one build must report them all."""
