"""Pausing Python's cyclic garbage collector while the shim builds long-lived objects.

Binding an entry makes thousands of small tuples and lists (its manifest record, guard tree
and evaluator program) that all live as long as the process. Each time enough of them
accumulate, the collector walks every tracked object, torch's included: on an entry's first
call that was 1–2.5 ms of collections that freed nothing (ResNet-18's 1,758 guard nodes,
2026-12-06). While paused, nothing is collected; the collector runs again afterwards, as
often as it would have for the objects kept.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block (a block within another changes nothing)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
