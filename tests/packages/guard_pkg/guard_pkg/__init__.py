"""State read by plain functions, for the guard tests (imported in-process, never built)."""
