"""Sample project whose [tool.aot-build] table misspells a key (target for targets)."""
