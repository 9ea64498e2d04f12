"""A module whose missing names come from its ``__getattr__`` (PEP 562): deprecated aliases,
lazily made constants."""

from __future__ import annotations

TABLE = {"EPS": 2.0}


def __getattr__(name: str) -> float:
    try:
        return TABLE[name]
    except KeyError:
        raise AttributeError(name) from None
