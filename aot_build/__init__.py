"""aot_build: ship torch code precompiled inside your wheel.

Decorate functions with :func:`aot_entry`; building the wheel compiles them ahead of time
and importing the installed package runs the compiled code, with no compiler and no warm-up.
"""

from .decorate import AotEntry, aot_entry

__version__ = "0.4.0"

__all__ = ["AotEntry", "__version__", "aot_entry"]
