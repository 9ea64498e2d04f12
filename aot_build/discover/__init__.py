"""Step 2 of the pipeline: import the package's modules and collect their ``@aot_entry``s."""

from .modules import discover_entries, list_modules

__all__ = ["discover_entries", "list_modules"]
