"""State read by functions, for the recorder and check tests (imported in-process)."""
