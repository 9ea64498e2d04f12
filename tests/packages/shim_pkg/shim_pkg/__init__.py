"""Package compiled in-process by tests/test_shim.py with aot_build.compile (no wheel)."""
