"""Entries reading every kind of state a library author uses; tests/test_state_e2e.py changes
each after import, in an installed wheel: the call must then equal eager, and run compiled
again once the change is undone."""

from .kinds import Gate, reads_lazy, reads_state

__all__ = ["Gate", "reads_lazy", "reads_state"]
