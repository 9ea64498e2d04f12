"""Follow an :class:`~aot_build.manifest.ObjPath` to the object it names, and (build side)
put another object there for the duration of a trace.

The shim generates straight-line code for the same steps (``load/checks.py``); this is the
slow, general form, used for building and for explaining a failed check.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from .manifest import ObjPath

_TABLES = {"param": "_parameters", "buffer": "_buffers", "child": "_modules"}


class PathError(LookupError):
    """The path does not lead anywhere now; the message says which step failed."""


def _dict(obj: Any) -> dict[str, Any]:
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError as exc:
        raise PathError(f"{type(obj).__name__} object has no instance attributes") from exc
    return d  # type: ignore[no-any-return]


def root_object(path: ObjPath, self_obj: Any = None) -> Any:
    if path.root[0] == "self":
        return self_obj
    module = sys.modules.get(path.root[1])
    if module is None:
        try:
            module = importlib.import_module(path.root[1])
        except Exception as exc:
            raise PathError(f"cannot import {path.root[1]}: {type(exc).__name__}: {exc}") from exc
    return module


def container(obj: Any, kind: str, key: Any) -> Any:
    """The mapping (or sequence) that holds step ``(kind, key)`` of ``obj``."""
    if kind == "attr":
        return _dict(obj)
    if kind in _TABLES:
        table = _dict(obj).get(_TABLES[kind])
        if not isinstance(table, dict):
            raise PathError(f"{type(obj).__name__} object is not an nn.Module")
        return table
    if kind == "item":
        return obj
    raise PathError(f"step {kind!r} reads through getattr, not a container")


def step(obj: Any, kind: str, key: Any) -> Any:
    try:
        if kind == "getattr":
            return getattr(obj, key)
        return container(obj, kind, key)[key]
    except PathError:
        raise
    except Exception as exc:
        raise PathError(f"no {key!r} ({type(exc).__name__})") from exc


def resolve(path: ObjPath, self_obj: Any = None, upto: int | None = None) -> Any:
    """The object at ``path`` (its first ``upto`` steps); PathError names the step."""
    obj = root_object(path, self_obj)
    if path.root[0] == "global":
        try:
            obj = _dict(obj)[path.root[2]]
        except KeyError as exc:
            raise PathError(f"{path.root[1]} has no global {path.root[2]!r}") from exc
    steps = path.steps if upto is None else path.steps[:upto]
    for i, (kind, key) in enumerate(steps):
        try:
            obj = step(obj, kind, key)
        except PathError as exc:
            partial = ObjPath(path.root, path.steps[:i])
            raise PathError(f"{partial.label()}: {exc}") from exc
    return obj


def assign(path: ObjPath, value: Any, self_obj: Any = None) -> Callable[[], None]:
    """Put ``value`` at ``path``; returns the function that puts the old value back."""
    if not path.steps:
        if path.root[0] == "self":
            raise PathError("cannot replace the instance itself")
        holder: Any = _dict(root_object(path))
        key: Any = path.root[2]
    else:
        kind, key = path.steps[-1]
        holder = container(resolve(path, self_obj, upto=len(path.steps) - 1), kind, key)
        if isinstance(holder, tuple):
            raise PathError(f"{path.label()} is inside a tuple, which cannot be changed")
    old = holder[key]
    holder[key] = value

    def restore() -> None:
        holder[key] = old

    return restore
