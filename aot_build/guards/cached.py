"""What a ``functools.lru_cache`` helper that answers a tensor holds, checked on each call of
an entry that calls it: the trace computed the tensor afresh (Dynamo traces the function the
helper wraps, and the artifact holds what that computed), the function run as Python uses the
tensor the cache holds, which may have been changed in place or computed while the state it
reads was other. ``cache_is_current("pkg.mod:helper", *args)`` is the guard evaluators' call step: True
while the cached tensor is one found equal to what the wrapped function computes now.

The first check in a process, and each after the cache answers another tensor or the tensor
was changed in place (its version counter moved), computes the wrapped function once more and
compares; otherwise a check is the cache hit and two comparisons."""

from __future__ import annotations

from typing import Any

import torch

from ..names import import_ref

#: Per (helper, arguments): the cached tensor last found equal, and its version then. Held, so
#: that its ``id`` cannot become another tensor's.
_FOUND: dict[tuple[str, tuple[Any, ...]], tuple[torch.Tensor, int]] = {}


def cache_is_current(ref: str, *args: Any) -> bool:
    """Whether the helper at ``ref`` (``module:qualname``), called with ``args``, answers a
    tensor equal to what the function it wraps computes now (see the module docstring)."""
    helper = import_ref(ref)
    held = helper(*args)
    if not isinstance(held, torch.Tensor):
        return False
    version = _version(held)
    found = _FOUND.get((ref, args))
    if found is not None and found[0] is held and version is not None and found[1] == version:
        return True
    with torch.no_grad():
        now = helper.__wrapped__(*args)
    same = (
        isinstance(now, torch.Tensor)
        and (now.dtype, now.shape, now.device, now.layout)
        == (held.dtype, held.shape, held.device, held.layout)
        and bool(torch.equal(now, held))
    )
    if same and version is not None:
        _FOUND[(ref, args)] = (held, version)
    return same


def _version(t: torch.Tensor) -> int | None:
    """The tensor's version counter (None for an inference tensor, which has none)."""
    try:
        return int(t._version)
    except RuntimeError:
        return None
