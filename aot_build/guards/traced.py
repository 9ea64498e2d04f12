"""Python spellings of builtins that torch.compile's tracer (Dynamo 2.13) cannot follow, which
capture has it trace in their place: it follows their reads as it follows the function's own,
and guards each (:mod:`.capture`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def extreme_by_key(
    items: Iterable[Any], key: Callable[[Any], Any], largest: bool, default: Any, has_default: bool
) -> Any:
    """``max(items, key=key)`` (``largest``) or ``min(items, key=key)``, with ``default`` where
    ``has_default``: the first item whose key is largest (smallest), as the builtins answer."""
    found = False
    best = best_key = None
    for item in items:
        k = key(item)
        if not found or (k > best_key if largest else k < best_key):
            best, best_key, found = item, k, True
    if found:
        return best
    if has_default:
        return default
    raise ValueError(f"{'max' if largest else 'min'}() iterable argument is empty")
