"""Step 1 of the pipeline: ``@aot_entry`` marks functions for ahead-of-time compiling."""

from .entry import AotEntry, aot_entry, registered_entries

__all__ = ["AotEntry", "aot_entry", "registered_entries"]
